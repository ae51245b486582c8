"""Many fuzz cases at once: ``python bench/fuzz_many.py --jobs 16 --cases 10000 [--gpu] [--seed 1000]``
runs ``python -m tilewright.fuzz`` in ``--jobs`` processes (different seeds, the cases split between
them), adds up their tables and saves the total under bench/results/ (with date, machine and
commit).  Meant for the device machine's many cores; the same works anywhere."""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATUSES = ("ok", "refused", "wrong", "internal", "crash")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--backends", default="")
    p.add_argument("--templates", default="", help="passed to each worker (e.g. 'new')")
    p.add_argument("--out", default=os.path.join(ROOT, "fuzz-findings"))
    p.add_argument("--time-limit", type=float, default=0, help="stop the workers after this many seconds")
    a = p.parse_args()
    per = [a.cases // a.jobs + (1 if i < a.cases % a.jobs else 0) for i in range(a.jobs)]
    procs = []
    t0 = time.time()
    for i, n in enumerate(per):
        cmd = [sys.executable, "-m", "tilewright.fuzz", "--cases", str(n), "--seed", str(a.seed + i), "--no-shrink",
               "--out", os.path.join(a.out, f"job{i}")]
        if a.backends:
            cmd += ["--backends", a.backends]
        if a.templates:
            cmd += ["--templates", a.templates]
        if a.gpu:
            cmd.append("--gpu")
        if a.time_limit:  # the worker stops starting cases in time to print its table before the kill
            cmd += ["--time-limit", str(max(1.0, a.time_limit - 30))]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1, a.time_limit - (time.time() - t0)) if a.time_limit else None)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out += "\n(stopped at the time limit: its table was not printed)"
        outputs.append(out)
    counts: Counter = Counter()
    cases = runs = 0
    findings = []
    for out in outputs:
        for line in out.splitlines():
            m = re.match(r"\| (\w+) \| ([\w:.]+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", line)
            if m and m.group(1) != "all":
                for s, n in zip(STATUSES, m.groups()[2:]):
                    counts[(m.group(1), m.group(2), s)] += int(n)
            m = re.match(r"(\d+) cases, (\d+) runs", line)
            if m:
                cases += int(m.group(1))
                runs += int(m.group(2))
            if line.startswith("case "):
                findings.append(line)
    rows = [f"{cases} cases, {runs} runs, {len(findings)} findings, {a.jobs} processes, {time.time() - t0:.0f} s"
            + (f", templates: {a.templates}" if a.templates else ""), "",
            "| template | backend | " + " | ".join(STATUSES) + " |", "|---|---|" + "---|" * len(STATUSES)]
    for t, b in sorted({(t, b) for t, b, _ in counts}):
        rows.append(f"| {t} | {b} | " + " | ".join(str(counts[(t, b, s)]) for s in STATUSES) + " |")
    totals = [sum(n for (_, _, st), n in counts.items() if st == s) for s in STATUSES]
    rows.append("| all | all | " + " | ".join(map(str, totals)) + " |")
    rows += ["", *findings[:50]]
    print("\n".join(rows))
    _save(rows)
    return 1 if findings else 0


def _save(rows) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from common import save

        print("saved", save("fuzz", rows))
    except Exception:  # noqa: BLE001 - no torch / no GPU here: keep the table on stdout only
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d-%H%M")
        print(f"(not saved: no GPU name to file it under; {stamp})")


if __name__ == "__main__":
    sys.exit(main())
