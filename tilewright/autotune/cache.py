"""The tuning cache: the outcome of a tuning run on disk, so that the next run costs a lookup.

An entry is a JSON file under ``<cache dir>/tuning/`` named by a hash of everything that decides
the outcome: the builder (module, name and source text), the arguments it was called with, the
configurations, the compile options and target, the device it was timed on, and the compiler's
fingerprint (a changed compiler re-tunes).  Entries are written atomically (temporary file +
rename), and an entry that cannot be read or lacks a field is a miss, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import tempfile

from .. import config


def tuning_dir() -> str:
    return os.path.join(config.get("cache_dir"), "tuning")


def builder_identity(fn) -> str:
    """Module, qualified name and source text of a builder (its bytecode when there is no source)."""
    target = getattr(fn, "__wrapped__", fn)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        text = repr(code.co_code) if code is not None else repr(target)
    return f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', '')}:{text}"


def normalize(value):
    """A JSON-able, order-stable form of tuning-key values (tensors by dtype and shape)."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return ["tensor", str(value.dtype), list(value.shape)]
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return sorted([str(k), normalize(v)] for k, v in value.items())
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


def key_of(parts: dict) -> str:
    return hashlib.sha256(json.dumps(normalize(parts), sort_keys=True).encode()).hexdigest()[:32]


REQUIRED = ("best_config", "best_latency_ms", "rows")


def load(key: str) -> dict | None:
    path = os.path.join(tuning_dir(), key + ".json")
    try:
        with open(path) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or any(k not in entry for k in REQUIRED):
        return None
    return entry


def store(key: str, entry: dict) -> None:
    folder = tuning_dir()
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f, indent=1, default=repr)
        os.replace(tmp, os.path.join(folder, key + ".json"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
