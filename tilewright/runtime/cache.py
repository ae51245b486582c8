"""The on-disk kernel cache.

An entry is a folder named by the SHA-256 of (canonical IR text, target, options, toolchain
version, a hash of the compiler's own source files) holding the generated source, the code object and a small JSON
record (kernel name, launch facts, resource usage).  Entries are written to a temporary folder and
renamed into place, so concurrent processes never see half an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

from .. import config


def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\x00")
    return h.hexdigest()


def _root() -> str:
    return config.get("cache_dir")


def load(key: str) -> dict | None:
    if config.get("disable_cache"):
        return None
    d = os.path.join(_root(), key[:2], key)
    meta_path = os.path.join(d, "meta.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(os.path.join(d, "code.bin"), "rb") as f:
            meta["code_object"] = f.read()
        with open(os.path.join(d, "source.txt")) as f:
            meta["source"] = f.read()
        return meta
    except (OSError, ValueError):
        return None


def store(key: str, meta: dict, code_object: bytes, source: str) -> None:
    if config.get("disable_cache"):
        return
    root = _root()
    final = os.path.join(root, key[:2], key)
    if os.path.isdir(final):
        return
    try:
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(final))
        with open(os.path.join(tmp, "code.bin"), "wb") as f:
            f.write(code_object)
        with open(os.path.join(tmp, "source.txt"), "w") as f:
            f.write(source)
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
        try:
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another process won the race
    except OSError:
        pass  # a read-only or full cache folder must not break compilation


def clear() -> None:
    shutil.rmtree(_root(), ignore_errors=True)
