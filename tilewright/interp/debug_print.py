"""Output of ``T.print`` (language/debug.py) in the tile interpreter and the emulator: one line per
printing thread, ``<msg>: block (x, y, z) thread t: <value>`` (a message-only print has no value)."""

from __future__ import annotations

import sys

import numpy as np

PRINT_PREFIX = "debug_print:"


def parse(name: str) -> tuple[bool, str]:
    """(has a value, message) of a ``debug_print:<kind>:<msg>`` call name."""
    kind, _, msg = name[len(PRINT_PREFIX):].partition(":")
    return kind == "value", msg


def _text(v) -> str:
    v = np.asarray(v)
    if v.dtype.kind == "f" or v.dtype.name in ("bfloat16",) or v.dtype.name.startswith("float8"):
        return f"{float(v):f}"
    if v.dtype.kind == "b":
        return str(int(bool(v)))
    return str(int(v))


def emit(msg: str, has_value: bool, block, thread, value) -> None:
    block = [int(b) for b in block] + [0] * (3 - len(block))
    where = f"block ({', '.join(str(b) for b in block)}) thread {thread}"
    line = f"{msg}: {where}: {_text(value)}" if has_value else f"{msg}: {where}"
    sys.stdout.write(line + "\n")
