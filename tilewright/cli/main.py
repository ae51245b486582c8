"""``tilewright`` command line.

    tilewright doctor                      what this machine has; the command for each missing piece
    tilewright info                        detected target and toolchains, in two lines
    tilewright compile FILE.py[:BUILDER ARGS...] --target hip --arch gfx942 -o OUT
                                           code object + source + resource report per kernel
    tilewright source FILE.py[:BUILDER ARGS...] --target T
                                           print the generated CUDA / HIP source
    tilewright tune FILE.py:FUNC ARGS...   autotune an @autotune function, print the candidates
    tilewright profile FILE.py:BUILDER ARGS... --target T [--flops N] [--plot PNG] [--trace JSON]
                                           time a kernel: resources, occupancy, TFLOP/s and GB/s vs the roof
    tilewright bench [--ops matmul,...] [--plot PNG] [--roofline PNG] [--json [FILE]] [--trace JSON]
                                           the library ops against PyTorch on this machine
    tilewright cache info|clear            the on-disk kernel and tuning cache
    tilewright demo                        the README's demo
    tilewright --version

Logging goes through the ``logging`` module (logger ``tilewright``); ``TILEWRIGHT_LOG`` sets its
level (debug, info, warning).
"""

from __future__ import annotations

import argparse
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
        print(f"CUDA compiler: not available ({str(e).splitlines()[0]}); run 'tilewright doctor' for the fix")
    try:
        from tilewright.toolchain.hip import find_hip_compiler

        print(f"HIP compiler: {find_hip_compiler().description}")
    except Exception as e:  # noqa: BLE001
        print(f"HIP compiler: not available ({str(e).splitlines()[0]}); run 'tilewright doctor' for the fix")
    return 0


def _parser() -> argparse.ArgumentParser:
    import tilewright

    p = argparse.ArgumentParser(prog="tilewright", description="tile-level GPU kernels for NVIDIA and AMD",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--version", action="version", version=f"tilewright {tilewright.__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("doctor", help="check drivers, GPUs, toolchains, PyTorch and the cache; say what to install")
    sub.add_parser("info", help="show the detected target and the toolchains found")
    sub.add_parser("demo", help="compile and run the demo kernels")
    for name, helptext in (("compile", "write code objects, sources and resource reports"),
                           ("source", "print the generated source of a kernel")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("spec", help="FILE.py (its module-level prim_funcs) or FILE.py:BUILDER")
        s.add_argument("args", nargs="*", help="arguments for the builder (ints, floats, strings)")
        s.add_argument("--target", default="cuda" if name == "compile" else "cuda -arch=sm_90a",
                       help="cuda, hip, or a full target string such as 'hip -arch=gfx942'")
        s.add_argument("--arch", default=None, help="sm_80, sm_90a, gfx90a, gfx942, gfx1100, ...")
        if name == "compile":
            s.add_argument("-o", "--output", default=".", help="folder for the outputs (default: here)")
    tn = sub.add_parser("tune", help="autotune an @tilewright.autotune function for some arguments")
    tn.add_argument("spec", help="FILE.py:FUNC")
    tn.add_argument("args", nargs="*", help="arguments for FUNC (ints, floats, strings)")
    pr = sub.add_parser("profile", help="time a kernel and report resources, occupancy and rates vs the roof")
    pr.add_argument("spec", help="FILE.py (its module-level prim_funcs) or FILE.py:BUILDER")
    pr.add_argument("args", nargs="*", help="arguments for the builder (ints, floats, strings)")
    pr.add_argument("--target", default="auto", help="auto (the local GPU, else the CPU interpreter), cuda, hip, "
                                                     "interpret, or a full target string")
    pr.add_argument("--arch", default=None, help="sm_80, sm_90a, gfx90a, gfx942, gfx1100, ...")
    pr.add_argument("--flops", type=float, default=None, help="floating-point operations per call")
    pr.add_argument("--bytes", type=float, default=None,
                    help="bytes moved per call (default: every argument tensor once)")
    pr.add_argument("--device", default=None, help="whose roof to compare with, e.g. H200, MI300X (default: local)")
    pr.add_argument("--rep", type=float, default=100, help="measurement budget in ms (default 100)")
    _outputs(pr)
    b = sub.add_parser("bench", help="the library ops (tilewright.ops) against PyTorch on this machine")
    b.add_argument("--ops", default="", help="comma-separated subset of matmul,attention,softmax,rms_norm,layer_norm")
    b.add_argument("--dtype", default="float16", help="float16 (default) or bfloat16")
    b.add_argument("--device", default=None, help="cuda or cpu (default: cuda when torch sees a GPU)")
    b.add_argument("--warmup", type=float, default=25, help="warm-up budget per case in ms (default 25)")
    b.add_argument("--rep", type=float, default=100, help="measurement budget per case in ms (default 100)")
    b.add_argument("--roofline", default=None, metavar="PNG", help="write a roofline chart of every case")
    _outputs(b)
    c = sub.add_parser("cache", help="the on-disk kernel and tuning cache")
    c.add_argument("action", choices=["info", "clear"])
    return p


def _outputs(p) -> None:
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the results as JSON to FILE (no FILE: print JSON instead of the table)")
    p.add_argument("--plot", default=None, metavar="PNG", help="write a chart (needs matplotlib: tilewright[plot])")
    p.add_argument("--trace", default=None, metavar="JSON", help="write every timed call as a Perfetto/Chrome trace")


def main(argv=None) -> int:
    from tilewright.errors import TilewrightError

    from .commands import (
        UsageError,
        cache_command,
        compile_command,
        profile_command,
        source_command,
        tune_command,
        user_error_text,
    )

    a = _parser().parse_args(argv)
    try:
        if a.cmd == "doctor":
            from .doctor import run_doctor

            return run_doctor()
        if a.cmd == "info":
            return _info()
        if a.cmd == "demo":
            from tilewright.demo import main as demo_main

            return demo_main()
        if a.cmd == "compile":
            return compile_command(a.spec, a.args, a.target, a.arch, a.output)
        if a.cmd == "source":
            return source_command(a.spec, a.args, a.target, a.arch)
        if a.cmd == "tune":
            return tune_command(a.spec, a.args)
        if a.cmd == "profile":
            return profile_command(a.spec, a.args, a.target, a.arch, flops=a.flops, nbytes=a.bytes, device=a.device,
                                   rep=a.rep, json_out=a.json, plot=a.plot, trace=a.trace)
        if a.cmd == "bench":
            from .bench import bench_command

            return bench_command(a.ops, a.dtype, a.device, a.json, a.plot, a.trace, a.warmup, a.rep, a.roofline)
        return cache_command(a.action)
    except UsageError as e:
        print(f"tilewright {a.cmd}: {e}", file=sys.stderr)
        return 2
    except TilewrightError as e:
        print(user_error_text(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
