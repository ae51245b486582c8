"""``python -m tilewright.fuzz --cases N [--seed S] [--backends a,b] [--gpu] [--out DIR]``."""

from __future__ import annotations

import argparse
import sys

from . import DEFAULT_BACKENDS, fuzz
from .templates import TEMPLATES


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tilewright.fuzz", description=__doc__)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS),
                   help="comma-separated: interpret, emulator:<arch> (sm_80, sm_90a, gfx90a, gfx942, gfx1100), gpu")
    p.add_argument("--gpu", action="store_true", help="also run every case on the local GPU")
    p.add_argument("--templates", default="",
                   help=f"comma-separated subset of {', '.join(TEMPLATES)}; 'new' = those of templates_new.py, "
                   "'s8' = those of templates_s8.py, "
                   "'s9' = those of templates_s9.py, 'ops' = those of ops_cases.py, "
                   "'s10' = those of templates_s10.py and ops_cases_s10.py, 's11' = those of ops_cases_s11.py")
    p.add_argument("--out", default="fuzz-findings", help="folder for shrunk repro scripts")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--time-limit", type=float, default=0, help="start no new case after this many seconds")
    p.add_argument("--round-robin", action="store_true", help="take the templates in turn instead of at random")
    a = p.parse_args(argv)
    backends = [b for b in a.backends.split(",") if b] + (["gpu"] if a.gpu else [])
    from .ops_cases import OPS
    from .ops_cases_s10 import OPS_S10
    from .ops_cases_s11 import OPS_S11
    from .templates_new import NEW
    from .templates_s8 import S8
    from .templates_s9 import S9
    from .templates_s10 import S10

    groups = {"new": [x.name for x in NEW], "s8": [x.name for x in S8], "s9": [x.name for x in S9],
              "ops": [x.name for x in OPS],
              "s10": [x.name for x in S10 + OPS_S10], "s11": [x.name for x in OPS_S11]}
    names = [t for t in a.templates.split(",") if t]
    templates = [n for t in names for n in groups.get(t, [t])] or None
    unknown = [t for t in templates or () if t not in TEMPLATES]
    if unknown:
        p.error(f"unknown templates {unknown}; choose from {', '.join(TEMPLATES)}")
    report = fuzz(a.cases, a.seed, backends, templates, a.out, 0 if a.no_shrink else 30,
                  log=lambda s: print(s, flush=True), time_limit=a.time_limit, round_robin=a.round_robin)
    print(report.table())
    print(f"{report.cases} cases, {report.runs} runs, {len(report.findings)} findings in {report.seconds:.0f} s")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
