"""``kernel.export(path)``: a standalone PyTorch extension, the classic way.

Writes into ``path``: the generated kernel source (``kernel.cu`` or ``kernel.hip``), a C++
launcher that checks the tensors and launches the kernel on PyTorch's current stream, and
``build.py`` which builds and loads both with ``torch.utils.cpp_extension.load`` (nvcc on CUDA;
hipcc on ROCm, linking ``-L$ROCM_PATH/lib -lamdhip64``).  The result needs no tilewright at run time.
"""

from __future__ import annotations

import os

from ..binding.shape_exprs import is_shape_expr
from ..codegen.base import Printer
from ..errors import TilewrightError
from ..ir import tile as t
from ..ir.expr import Var

_TORCH_SCALAR = {"float32": "double", "float64": "double", "int32": "int64_t", "int64": "int64_t", "bool": "bool"}
_ATEN_DTYPE = {"float16": "at::kHalf", "bfloat16": "at::kBFloat16", "float32": "at::kFloat", "float64": "at::kDouble",
               "int8": "at::kChar", "uint8": "at::kByte", "int16": "at::kShort", "int32": "at::kInt",
               "int64": "at::kLong", "bool": "at::kBool"}


class _GridPrinter(Printer):
    """Prints grid expressions in host C++ (dyn sizes and scalar parameters are local variables)."""

    def ctype(self, dtype: str) -> str:
        return {"int32": "int64_t", "int64": "int64_t", "float32": "double", "float64": "double"}.get(dtype, "int64_t")

    def prelude(self) -> str:
        return ""

    def binop(self, e, prec: int) -> str:
        # sizes on the host are non-negative: plain C division and remainder are floor semantics
        if e.op in ("//", "%"):
            return f"({self.expr(e.a)} {'/' if e.op == '//' else '%'} {self.expr(e.b)})"
        return super().binop(e, prec)

    def minmax(self, op: str, e) -> str:
        return f"std::{op}<int64_t>({self.expr(e.a)}, {self.expr(e.b)})"


def export_kernel(kernel, path: str) -> str:
    if kernel.backend == "interpret" or not kernel.source:
        raise TilewrightError("export needs a kernel compiled for a GPU target (cuda or hip), not the interpreter")
    if kernel._tma is not None:
        raise TilewrightError("export does not write the host-side TMA descriptor setup yet; compile the kernel "
                              "with pass_configs={'tw.disable_tma': True} to export it (its copies then use cp.async)")
    exprs = [f"{p.name} dimension {d} ({s})" for p in kernel.func.params if isinstance(p, t.Buffer)
             for d, s in enumerate(p.shape) if is_shape_expr(s)]
    if exprs:  # the generated launcher binds sizes from plain dimensions only
        raise TilewrightError(f"export does not write the host-side binding of dimensions declared as expressions "
                              f"yet: {', '.join(exprs)}; give such a dimension its own T.dynamic name to export")
    os.makedirs(path, exist_ok=True)
    hip = kernel.target.is_hip
    src_name = "kernel.hip" if hip else "kernel.cu"
    with open(os.path.join(path, src_name), "w") as f:
        f.write(kernel.source)
    with open(os.path.join(path, "launcher.cpp" if hip else "launcher.cu"), "w") as f:
        f.write(_launcher(kernel, src_name, hip))
    with open(os.path.join(path, "build.py"), "w") as f:
        f.write(_build_script(kernel, hip))
    return path


def _launcher(kernel, src_name: str, hip: bool) -> str:
    func = kernel.func
    gp = _GridPrinter.__new__(_GridPrinter)
    gp.names, gp.used, gp.lines, gp.special = {}, set(), [], {}
    args, checks, kargs = [], [], []
    dyn_seen = set()
    for p in func.params:
        if isinstance(p, t.Buffer):
            name = gp.name(p, p.name)
            args.append(f"torch::Tensor {name}")
            checks.append(f'TORCH_CHECK({name}.is_cuda() && {name}.is_contiguous(), "{p.name} must be a contiguous '
                          f'GPU tensor");')
            checks.append(f'TORCH_CHECK({name}.scalar_type() == {_ATEN_DTYPE[p.dtype]}, "{p.name} must be '
                          f'{p.dtype}");')
            checks.append(f'TORCH_CHECK({name}.dim() == {p.ndim}, "{p.name} must have {p.ndim} dimensions");')
            for d, s in enumerate(p.shape):
                if isinstance(s, Var):
                    dn = gp.name(s, s.name)
                    if s not in dyn_seen:
                        dyn_seen.add(s)
                        checks.append(f"const int64_t {dn} = {name}.size({d});")
                    else:
                        checks.append(f'TORCH_CHECK({name}.size({d}) == {dn}, "{p.name} dim {d} must be {s.name}");')
                else:
                    checks.append(f'TORCH_CHECK({name}.size({d}) == {s}, "{p.name} dim {d} must be {s}");')
            kargs.append(f"({gp_ctype(p.dtype, hip)}*){name}.data_ptr()")
        else:
            name = gp.name(p, p.name)
            args.append(f"{_TORCH_SCALAR.get(p.dtype, 'double')} {name}")
            kargs.append(f"({gp_scalar(p.dtype)}){name}")
    for v in func.dyn_vars:
        kargs.append(f"(int){gp.name(v, v.name)}")
    grid = [gp.expr(g) for g in kernel.spec.grid]
    grid += ["1"] * (3 - len(grid))
    stream = "at::cuda::getCurrentCUDAStream()"
    set_smem = ("hipFuncSetAttribute((const void*){k}, hipFuncAttributeMaxDynamicSharedMemorySize, {s});" if hip
                else "cudaFuncSetAttribute({k}, cudaFuncAttributeMaxDynamicSharedMemorySize, {s});")
    include = "#include <hip/hip_runtime.h>\n#include <ATen/hip/HIPContext.h>\n" if hip else \
        "#include <cuda_runtime.h>\n#include <ATen/cuda/CUDAContext.h>\n"
    if hip:
        stream = "at::hip::getCurrentHIPStreamMasqueradingAsCUDA()"
    body = "\n  ".join(checks)
    return f"""// launcher generated by tilewright for {kernel.target}
#include <torch/extension.h>
{include}#include "{src_name}"

void run({', '.join(args)}) {{
  {body}
  const dim3 grid({', '.join(grid)});
  const dim3 block({kernel.num_threads});
  const int smem = {kernel.shared_bytes};
  if (smem > 48 * 1024) {{ {set_smem.format(k=kernel.kernel_name, s='smem')} }}
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  {kernel.kernel_name}<<<grid, block, smem, {stream}>>>({', '.join(kargs)});
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
  m.def("run", &run, "{func.name} (generated by tilewright)");
}}
"""


def gp_ctype(dtype: str, hip: bool) -> str:
    if hip:
        from ..codegen.hip import HipPrinter

        return HipPrinter.ctype(None, dtype)
    from ..codegen.cuda import _CTYPES

    return _CTYPES[dtype]


def gp_scalar(dtype: str) -> str:
    return {"float32": "float", "float64": "double", "int32": "int", "int64": "long long", "bool": "bool"}.get(
        dtype, "float")


def _build_script(kernel, hip: bool) -> str:
    arch = kernel.target.arch
    if hip:
        flags = f'extra_cflags=["-O3", "--offload-arch={arch}"], ' \
                f'extra_cuda_cflags=["-O3", "--offload-arch={arch}"],\n' \
                '        extra_ldflags=[f"-L{os.environ.get(\'ROCM_PATH\', \'/opt/rocm\')}/lib", "-lamdhip64"],'
        src = "launcher.cpp"
    else:
        gencode = arch.replace("sm_", "")
        # PyTorch's build defines __CUDA_NO_HALF_OPERATORS__ and friends; the generated kernel uses
        # the half/bfloat16 operators and conversions, so undo them (nvcc applies -U after -D)
        flags = ('extra_cuda_cflags=["-O3", "-std=c++17", '
                 f'"-gencode=arch=compute_{gencode},code=sm_{gencode}",\n'
                 '            "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",\n'
                 '            "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"],')
        src = "launcher.cu"
    return f'''"""Build and load the exported tilewright kernel as a PyTorch extension.

    import build; ext = build.load(); ext.run(*tensors_and_scalars)
"""

import os

from torch.utils.cpp_extension import load as _load

HERE = os.path.dirname(os.path.abspath(__file__))


def load(verbose=False):
    return _load(
        name="tw_{kernel.func.name}",
        sources=[os.path.join(HERE, "{src}")],
        extra_include_paths=[HERE],
        {flags}
        verbose=verbose,
    )


if __name__ == "__main__":
    load(verbose=True)
    print("built")
'''
