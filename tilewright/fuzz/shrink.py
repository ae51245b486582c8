"""Shrinking a failing case and writing it as a standalone repro script.

Shrinking tries, one parameter at a time, smaller values (sizes halved or set to small
representatives, flags switched off, pipeline depths lowered) and keeps a change when the case
still fails on the same backend with the same outcome class.  The result is written as a Python
script that rebuilds exactly that case and prints the outcome on that backend.
"""

from __future__ import annotations

import os

from .runner import run_case
from .templates import TEMPLATES

_SMALLER_INTS = (1, 2, 3, 7, 8, 13, 16, 31, 32, 33, 64)


def _candidates(key, value):
    if isinstance(value, bool):
        return [False] if value else []
    if isinstance(value, int) and key != "seed":
        return sorted({v for v in (value // 2, *_SMALLER_INTS) if 0 <= v < value}, reverse=True)
    return []


def shrink(template: str, params: dict, backend: str, status: str, budget: int = 40) -> dict:
    """Smaller params that still give ``status`` on ``backend`` (at most ``budget`` re-runs)."""
    tpl = TEMPLATES[template]
    best = dict(params)
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        for key in list(best):
            for value in _candidates(key, best[key]):
                if tries >= budget:
                    break
                trial = dict(best, **{key: value})
                tries += 1
                try:
                    outcome = run_case(tpl.make(trial), backend)
                except Exception:  # noqa: BLE001 - a parameter combination the template cannot build
                    continue
                if outcome.status == status:
                    best, changed = trial, True
                    break
    return best


REPRO = '''"""Fuzz finding: {status} on {backend} ({template}).
{detail}
Run: python {name}"""

from tilewright.fuzz.runner import run_case
from tilewright.fuzz.templates import TEMPLATES

params = {params!r}
case = TEMPLATES[{template!r}].make(params)
print(case.func.script() if case.func is not None else "(an op-level case: ops_cases.py)")
outcome = run_case(case, {backend!r})
print(outcome.status, outcome.detail)
raise SystemExit(0 if outcome.status in ("ok", "refused", "skipped") else 1)
'''


def write_repro(folder: str, template: str, params: dict, backend: str, status: str, detail: str) -> str:
    os.makedirs(folder, exist_ok=True)
    safe_backend = backend.replace(":", "_")
    name = f"repro_{template}_{safe_backend}_{status}_{params.get('seed', 0)}.py"
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(REPRO.format(status=status, backend=backend, template=template, detail=detail, name=name,
                             params=params))
    return path
