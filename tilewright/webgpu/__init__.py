"""TileLang's ``tilelang.webgpu`` package: ``tilewright.webgpu.language`` is the language as seen from WebGPU."""
