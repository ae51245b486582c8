"""The differential fuzzer: random kernels from templates, run on the tile interpreter, on the
emulator for several targets and on the local GPU, each against a float64 reference.

``python -m tilewright.fuzz --cases 500 --seed 1`` runs cases and prints a table; failing cases are
shrunk and saved as standalone repro scripts (``--out``).  ``fuzz(...)`` is the same from Python.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import CompileError
from .runner import ACCEPTABLE, run_case
from .shrink import shrink, write_repro
from .templates import TEMPLATES

DEFAULT_BACKENDS = ("interpret", "emulator:sm_90a", "emulator:gfx942", "emulator:gfx1100")


@dataclass
class Report:
    cases: int = 0
    runs: int = 0
    counts: Counter = field(default_factory=Counter)  # (template, backend, status) -> n
    findings: list = field(default_factory=list)  # (template, backend, status, detail, params, repro path)
    seconds: float = 0.0

    def table(self) -> str:
        statuses = ("ok", "refused", "skipped", "wrong", "internal", "crash")
        lines = ["| template | backend | " + " | ".join(statuses) + " |", "|---|---|" + "---|" * len(statuses)]
        keys = sorted({(t, b) for t, b, _ in self.counts})
        for t, b in keys:
            lines.append(f"| {t} | {b} | " + " | ".join(str(self.counts[(t, b, s)]) for s in statuses) + " |")
        total = {s: sum(n for (_, _, st), n in self.counts.items() if st == s) for s in statuses}
        lines.append("| all | all | " + " | ".join(str(total[s]) for s in statuses) + " |")
        return "\n".join(lines)


def fuzz(cases: int, seed: int = 0, backends=DEFAULT_BACKENDS, templates=None, out_dir: str | None = None,
         shrink_budget: int = 30, log=None, round_robin: bool = False, time_limit: float = 0) -> Report:
    """Run ``cases`` random cases; ``round_robin`` takes the templates in turn (every template at
    least once when ``cases >= len(templates)``) instead of drawing one at random.  With
    ``time_limit`` (seconds) no new case starts after that long, so a bounded run still reports what
    it did instead of being killed with nothing to show."""
    rng = np.random.default_rng(seed)
    names = list(templates or TEMPLATES)
    report = Report()
    t0 = time.perf_counter()
    for n in range(cases):
        if time_limit and time.perf_counter() - t0 > time_limit:
            if log:
                log(f"time limit of {time_limit:.0f} s reached after {n} of {cases} cases")
            break
        name = names[n % len(names)] if round_robin else names[int(rng.integers(len(names)))]
        tpl = TEMPLATES[name]
        params = dict(tpl.draw(rng), seed=int(rng.integers(2**31)))
        report.cases += 1
        try:
            case = tpl.make(params)
        except CompileError as e:  # refused as it was written, before any backend
            for backend in backends:
                report.runs += 1
                report.counts[(name, backend, "refused")] += 1
            if log:
                log(f"case {n}: refused at definition ({name}): {str(e).strip().splitlines()[0]}")
            continue
        for backend in backends:
            outcome = run_case(case, backend)
            report.runs += 1
            report.counts[(name, backend, outcome.status)] += 1
            if outcome.status in ACCEPTABLE:
                continue
            small = shrink(name, params, backend, outcome.status, shrink_budget) if shrink_budget else params
            path = write_repro(out_dir, name, small, backend, outcome.status, outcome.detail) if out_dir else ""
            report.findings.append((name, backend, outcome.status, outcome.detail, small, path))
            if log:
                log(f"case {n}: {outcome.status} on {backend} ({name}): {outcome.detail} {path}")
    report.seconds = time.perf_counter() - t0
    return report
