"""Device compilers: NVRTC for CUDA, and the cubin reader used to report resource usage."""
