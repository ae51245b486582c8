"""``tilewright`` command line: ``tilewright info`` (target and toolchains found on this machine),
``tilewright demo`` (the README's demo), ``tilewright source FILE.py:BUILDER ARGS... --target T``
(print the generated CUDA/HIP source of a kernel builder)."""

from __future__ import annotations

import argparse
import importlib.util
import sys


def _info() -> int:
    import tilewright
    from tilewright.target.base import Target

    print(f"tilewright {tilewright.__version__}")
    print(f"detected target: {Target.current()}")
    try:
        from tilewright.toolchain.nvrtc import nvrtc_version

        print(f"CUDA compiler: {nvrtc_version()} (pip wheels)")
    except Exception as e:  # noqa: BLE001 - report what is missing, keep going
        print(f"CUDA compiler: not available ({str(e).splitlines()[0]})")
    try:
        from tilewright.toolchain.hip import find_hip_compiler

        print(f"HIP compiler: {find_hip_compiler().description}")
    except Exception as e:  # noqa: BLE001
        print(f"HIP compiler: not available ({str(e).splitlines()[0]})")
    return 0


def _source(spec: str, args: list[str], target: str) -> int:
    import tilewright

    path, _, name = spec.partition(":")
    mod_spec = importlib.util.spec_from_file_location("tw_user_module", path)
    if mod_spec is None or not name:
        print("expected FILE.py:BUILDER", file=sys.stderr)
        return 2
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    builder = getattr(mod, name)
    values = [int(a) if a.lstrip("-").isdigit() else a for a in args]
    # a @tilewright.jit builder gives its prim_func through get_tir; a plain builder returns it
    func = builder.get_tir(*values) if hasattr(builder, "get_tir") else builder(*values)
    kernel = tilewright.compile(func, target=target, execution_backend=None if target.startswith("cuda") else
                                "emulator")
    print(kernel.get_kernel_source())
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tilewright", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="show the detected target and the toolchains found")
    sub.add_parser("demo", help="compile and run the demo kernels")
    s = sub.add_parser("source", help="print the generated source of a kernel builder")
    s.add_argument("spec", help="FILE.py:BUILDER (a function returning a @T.prim_func)")
    s.add_argument("args", nargs="*", help="integer / string arguments for the builder")
    s.add_argument("--target", default="cuda -arch=sm_90a")
    a = p.parse_args(argv)
    if a.cmd == "info":
        return _info()
    if a.cmd == "demo":
        from tilewright.demo import main as demo_main

        return demo_main()
    return _source(a.spec, a.args, a.target)


if __name__ == "__main__":
    sys.exit(main())
