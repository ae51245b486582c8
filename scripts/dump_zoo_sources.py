"""Dump the generated CUDA/HIP of every program the tests build from tests/zoo.py and tests/programs.py,
and of tilewright.kernels, for sm_90a, sm_80, gfx942 and gfx1100: one file per program and target.

Run it from the repository root before and after a compiler change and diff the two folders:
    PYTHONPATH=$PWD python scripts/dump_zoo_sources.py /tmp/before   # ... change ...
    PYTHONPATH=$PWD python scripts/dump_zoo_sources.py /tmp/after && diff -r /tmp/before /tmp/after
"""
import hashlib
import os
import re
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import numpy as np  # noqa: E402
import programs  # noqa: E402
import zoo  # noqa: E402

import tilewright  # noqa: E402,F401
import tilewright.language as T  # noqa: E402
from tilewright import kernels  # noqa: E402
from tilewright.backends import backend_for  # noqa: E402
from tilewright.compiler import _verify  # noqa: E402
from tilewright.passes.pipeline import PassContext, run_pipeline  # noqa: E402
from tilewright.target import Target  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def calls(prefix):
    found = set()
    for fn in sorted(os.listdir("tests")):
        if not fn.endswith(".py"):
            continue
        src = open(os.path.join("tests", fn)).read()
        for m in re.finditer(re.escape(prefix) + r"\.\w+\(", src):
            i, depth = m.end(), 1
            while i < len(src) and depth:
                depth += {"(": 1, ")": -1}.get(src[i], 0)
                i += 1
            found.add(re.sub(r"\s+", " ", src[m.start():i]))
    return sorted(found)


progs = []
env = {"zoo": zoo, "programs": programs, "T": T, "np": np, "kernels": kernels}
for expr in calls("zoo") + calls("programs") + calls("kernels"):
    try:
        f = eval(expr, env)
    except Exception:
        continue
    if hasattr(f, "body"):
        progs.append((expr, f))
for name in dir(programs):
    fn = getattr(programs, name)
    if callable(fn) and getattr(fn, "__module__", "") == "programs" and not name.startswith("_"):
        try:
            f = fn()
        except Exception:
            continue
        if hasattr(f, "body"):
            progs.append((f"programs.{name}()", f))
progs += [("kernels.matmul(256,256,256)", kernels.matmul(256, 256, 256)),
          ("kernels.matmul(512,512,512,num_stages=3)", kernels.matmul(512, 512, 512, num_stages=3)),
          ("kernels.softmax(64,1024)", kernels.softmax(64, 1024)),
          ("kernels.rms_norm(64,1024)", kernels.rms_norm(64, 1024)),
          ("kernels.flash_attention(1,2,256,64)", kernels.flash_attention(1, 2, 256, 64)),
          ("kernels.flash_attention(1,2,256,64,True)", kernels.flash_attention(1, 2, 256, 64, True))]
ok = err = 0
for expr, f in progs:
    key = hashlib.sha1(expr.encode()).hexdigest()[:10]
    for tgt in ("cuda -arch=sm_90a", "cuda -arch=sm_80", "hip -arch=gfx942", "hip -arch=gfx1100"):
        target = Target.parse(tgt)
        name = f"{key}_{tgt.split('=')[1]}"
        try:
            _verify(f)
            src = backend_for(target).print_source(run_pipeline(f, PassContext(target, {"optimize_level": 2})))
            ok += 1
        except Exception as e:
            src = "ERROR " + type(e).__name__ + ": " + str(e).splitlines()[0] if str(e) else type(e).__name__
            err += 1
        with open(os.path.join(out, name + ".txt"), "w") as fh:
            fh.write(f"// {expr} {tgt}\n" + src)
print(len(progs), "programs", ok, "sources", err, "errors")
