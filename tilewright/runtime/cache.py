"""The on-disk kernel cache.

An entry is a folder ``ROOT/<key[:2]>/<key>`` named by the SHA-256 of (canonical IR text, target,
options, toolchain version, a hash of the compiler's own source files) holding

* ``code.bin``    the code object (cubin / AMD ELF),
* ``source.txt``  the generated CUDA/HIP source,
* ``meta.json``   a small record (kernel name, launch facts, resource usage; see :data:`REQUIRED_META`),
* ``sums.json``   the SHA-256 and size of each of the three files above.

The cache never trusts what it reads: an entry whose files are missing, truncated, altered (a
checksum differs) or whose record lacks a field is a miss; it is moved out of the way and the caller
compiles afresh and stores a new entry in its place.

Concurrency: an entry is written into a private temporary folder under ``ROOT/.tmp`` and renamed into
place, so readers never see half an entry and of several concurrent writers one wins (the others
delete their copies).  A bad entry is removed by renaming it into ``ROOT/.tmp`` first (one atomic
step, so two processes cannot both act on it) and deleting it there.  Temporary folders left by a
writer that was killed are deleted by the next store once they are older than :data:`STALE_SECONDS`
(no writer takes that long, so a live writer's folder is never touched).

A read-only or full cache folder never breaks compilation: failures to write are ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time

from .. import config

# The fields of meta.json a cached kernel cannot do without, with their types (JITKernel._cache_meta
# writes them); "tensor_maps" is optional.
REQUIRED_META = {"kernel_name": str, "num_threads": int, "shared_bytes": int, "resources": dict, "toolchain": str}
OPTIONAL_META = {"tensor_maps": list}

# A temporary folder older than this is the leftover of a killed writer.
STALE_SECONDS = 15 * 60

_FILES = ("code.bin", "source.txt", "meta.json")
_SUMS = "sums.json"
_TMP = ".tmp"


def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\x00")
    return h.hexdigest()


def _root() -> str:
    return config.get("cache_dir")


def _entry_dir(key: str) -> str:
    return os.path.join(_root(), key[:2], key)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load(key: str) -> dict | None:
    """The cached record of ``key`` (meta fields plus ``code_object`` and ``source``), or None on a miss.

    A present but bad entry (see the module docstring) counts as a miss and is removed."""
    if config.get("disable_cache"):
        return None
    d = _entry_dir(key)
    if not os.path.isdir(d):
        return None
    entry = _read_entry(d)
    if entry is None:
        discard(key)
    else:
        with contextlib.suppress(OSError):
            os.utime(d)  # recently used: the size cap evicts the least recently used entries first
    return entry


def _read_entry(d: str) -> dict | None:
    try:
        with open(os.path.join(d, _SUMS), "rb") as f:
            sums = json.loads(f.read())
        data = {}
        for name in _FILES:
            with open(os.path.join(d, name), "rb") as f:
                data[name] = f.read()
        if not isinstance(sums, dict):
            return None
        for name in _FILES:
            want = sums.get(name)
            if not isinstance(want, dict) or want.get("size") != len(data[name]):
                return None
            if want.get("sha256") != _digest(data[name]):
                return None
        meta = json.loads(data["meta.json"].decode("utf-8"))
        source = data["source.txt"].decode("utf-8")
    except (OSError, ValueError):  # missing file, bad JSON, bad UTF-8 (UnicodeDecodeError is a ValueError)
        return None
    if not _valid_meta(meta):
        return None
    meta["code_object"] = data["code.bin"]
    meta["source"] = source
    return meta


def _valid_meta(meta) -> bool:
    if not isinstance(meta, dict):
        return False
    for name, kind in REQUIRED_META.items():
        value = meta.get(name)
        # bool is an int to isinstance, never a valid count here
        if not isinstance(value, kind) or isinstance(value, bool):
            return False
    for name, kind in OPTIONAL_META.items():
        if name in meta and not isinstance(meta[name], kind):
            return False
    return True


def discard(key: str) -> None:
    """Remove the entry of ``key`` (a bad one, so that the next store can write a good one, or the
    least recently used one over the size cap)."""
    d = _entry_dir(key)
    try:
        grave = tempfile.mkdtemp(prefix="bad-", dir=_tmp_root())
    except OSError:
        return  # a read-only cache
    try:
        # one rename takes it away atomically; a concurrent reader then simply misses
        os.rename(d, os.path.join(grave, "entry"))
    except OSError:
        pass  # already gone: another process discarded or replaced it
    finally:
        shutil.rmtree(grave, ignore_errors=True)


def store(key: str, meta: dict, code_object: bytes, source: str) -> None:
    """Write the entry of ``key``; an existing good entry is kept, an existing bad one replaced."""
    if config.get("disable_cache"):
        return
    final = _entry_dir(key)
    try:
        tmp_root = _tmp_root()
        clean_stale(shard=os.path.dirname(final))
        if os.path.isdir(final) and _read_entry(final) is not None:
            return
        data = {
            "code.bin": bytes(code_object),
            "source.txt": source.encode("utf-8"),
            "meta.json": json.dumps(meta, sort_keys=True).encode("utf-8"),
        }
        sums = {name: {"sha256": _digest(b), "size": len(b)} for name, b in data.items()}
        tmp = tempfile.mkdtemp(prefix="new-", dir=tmp_root)
        try:
            for name, b in data.items():
                _write(os.path.join(tmp, name), b)
            # the checksums last: a folder without them is never taken for an entry
            _write(os.path.join(tmp, _SUMS), json.dumps(sums, sort_keys=True).encode())
            os.makedirs(os.path.dirname(final), exist_ok=True)
            if not _publish(tmp, final, key):
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError:
        pass  # a read-only or full cache folder must not break compilation
    limit = config.get("cache_max_mb")
    if limit and limit > 0:
        enforce_size_cap(int(limit) * 2**20)


def enforce_size_cap(max_bytes: int) -> int:
    """Remove the least recently used entries until the kernel entries take at most ``max_bytes``
    (``TILEWRIGHT_CACHE_MAX_MB``); returns how many were removed.  Tuning results are not counted."""
    root = _root()
    entries = []
    try:
        shards = [s for s in os.listdir(root) if len(s) == 2 and os.path.isdir(os.path.join(root, s))]
    except OSError:
        return 0
    for shard in shards:
        for key in os.listdir(os.path.join(root, shard)):
            d = os.path.join(root, shard, key)
            try:
                size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
                entries.append((os.path.getmtime(d), size, key))
            except OSError:
                continue  # removed by another process meanwhile
    total = sum(e[1] for e in entries)
    removed = 0
    for _, size, key in sorted(entries):
        if total <= max_bytes:
            break
        discard(key)
        total -= size
        removed += 1
    return removed


def _publish(tmp: str, final: str, key: str) -> bool:
    """Rename ``tmp`` to ``final``; True when it is now there.  Renaming a folder onto an existing,
    non-empty one fails, so a concurrent writer that got there first wins and we keep its entry --
    unless that one is bad, which is discarded and the rename tried once more."""
    for _ in range(2):
        try:
            os.rename(tmp, final)
            return True
        except OSError:
            if not os.path.isdir(final) or _read_entry(final) is not None:
                return False
            discard(key)
    return False


def _write(path: str, data: bytes) -> None:
    # no fsync: an entry torn by a power loss fails its checksums and is replaced
    with open(path, "wb") as f:
        f.write(data)


def _tmp_root() -> str:
    path = os.path.join(_root(), _TMP)
    os.makedirs(path, exist_ok=True)
    return path


def clean_stale(max_age: float = STALE_SECONDS, shard: str | None = None) -> int:
    """Delete the temporary folders of writers that died mid-write (older than ``max_age`` seconds);
    returns how many were deleted.  With ``shard`` (a ``ROOT/xx`` folder) also the ``.tmp-*`` folders
    that earlier versions of this module wrote beside the entries."""
    now = time.time()
    paths = []
    tmp_root = os.path.join(_root(), _TMP)
    for folder, prefix in ((tmp_root, ""), (shard, ".tmp-")):
        try:
            paths += [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(prefix)] if folder else []
        except OSError:
            continue
    removed = 0
    for path in paths:
        try:
            if now - os.lstat(path).st_mtime < max_age:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed += 1
        except OSError:
            continue  # another process removed it first
    return removed


def clear() -> None:
    shutil.rmtree(_root(), ignore_errors=True)
