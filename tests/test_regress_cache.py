"""Regression tests of issue 11, item 10: the disk cache must not trust its contents, and AMD code
objects must be reproducible.

* a corrupt ``code.bin``, a truncated ``meta.json``, a record with missing fields: a miss, and the
  entry is replaced by a good one (before: served forever / ``KeyError`` on every compile);
* temporary folders of a killed writer are deleted once stale;
* concurrent writers and readers never see half an entry;
* two compiles of the same HIP source for gfx942 in different folders give identical bytes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time

import pytest

import tilewright
from tilewright import compiler
from tilewright.errors import ToolchainError
from tilewright.kernels import matmul
from tilewright.runtime import cache

KEY = "ab" + "0" * 62
META = {"kernel_name": "k", "num_threads": 128, "shared_bytes": 4096, "toolchain": "test 1.0",
        "resources": {"k": {"registers": 40, "spills": 0}}, "tensor_maps": []}
CODE = bytes(range(256)) * 8
SOURCE = 'extern "C" __global__ void k() {}\n'


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEWRIGHT_DISABLE_CACHE", raising=False)
    return tmp_path / "cache"


def _entry(root, key=KEY):
    return root / key[:2] / key


def _assert_good(entry):
    assert entry is not None
    assert entry["code_object"] == CODE and entry["source"] == SOURCE
    assert {k: entry[k] for k in META} == META


def test_store_then_load_round_trips(cache_dir):
    assert cache.load(KEY) is None
    cache.store(KEY, META, CODE, SOURCE)
    _assert_good(cache.load(KEY))
    assert sorted(os.listdir(_entry(cache_dir))) == ["code.bin", "meta.json", "source.txt", "sums.json"]


def _flip_byte(path, offset=100):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip code.bin", "truncate code.bin", "truncate meta.json", "bad utf-8 source",
                                    "drop kernel_name", "drop sums.json", "drop code.bin", "garbage sums.json"])
def test_a_damaged_entry_is_a_miss_and_is_replaced(cache_dir, damage):
    cache.store(KEY, META, CODE, SOURCE)
    d = _entry(cache_dir)
    if damage == "flip code.bin":
        _flip_byte(d / "code.bin")
    elif damage == "truncate code.bin":
        (d / "code.bin").write_bytes(CODE[:1000])
    elif damage == "truncate meta.json":
        (d / "meta.json").write_bytes((d / "meta.json").read_bytes()[:20])
    elif damage == "bad utf-8 source":
        (d / "source.txt").write_bytes(b"\xff\xfe" + SOURCE.encode()[2:])
    elif damage == "drop kernel_name":
        meta = json.loads((d / "meta.json").read_text())
        del meta["kernel_name"]
        (d / "meta.json").write_text(json.dumps(meta))
    elif damage == "drop sums.json":
        (d / "sums.json").unlink()
    elif damage == "drop code.bin":
        (d / "code.bin").unlink()
    else:
        (d / "sums.json").write_text("[1, 2")
    assert cache.load(KEY) is None
    assert not d.exists(), "a bad entry must be removed so that a good one can take its place"
    cache.store(KEY, META, CODE, SOURCE)
    _assert_good(cache.load(KEY))


@pytest.mark.parametrize("missing", ["kernel_name", "num_threads", "shared_bytes", "resources", "toolchain"])
def test_a_record_with_missing_fields_is_a_miss_even_with_matching_checksums(cache_dir, missing):
    """A record that is intact but incomplete (e.g. written by a buggy writer) must not reach the
    kernel (before: KeyError on every later compile)."""
    meta = {k: v for k, v in META.items() if k != missing}
    cache.store(KEY, meta, CODE, SOURCE)
    assert (_entry(cache_dir) / "sums.json").exists()
    assert cache.load(KEY) is None
    cache.store(KEY, META, CODE, SOURCE)
    _assert_good(cache.load(KEY))


def test_a_wrongly_typed_field_is_a_miss(cache_dir):
    cache.store(KEY, dict(META, num_threads="128"), CODE, SOURCE)
    assert cache.load(KEY) is None
    cache.store(KEY, dict(META, num_threads=True), CODE, SOURCE)
    assert cache.load(KEY) is None


def test_store_replaces_a_bad_entry_that_nobody_loaded(cache_dir):
    cache.store(KEY, META, CODE, SOURCE)
    _flip_byte(_entry(cache_dir) / "code.bin")
    cache.store(KEY, META, CODE, SOURCE)
    _assert_good(cache.load(KEY))


def test_store_keeps_a_good_entry(cache_dir):
    cache.store(KEY, META, CODE, SOURCE)
    before = os.stat(_entry(cache_dir) / "code.bin").st_ino
    cache.store(KEY, META, b"other", SOURCE)
    assert os.stat(_entry(cache_dir) / "code.bin").st_ino == before
    _assert_good(cache.load(KEY))


def _age(path, seconds):
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_stale_temporary_folders_are_deleted(cache_dir):
    """A writer killed mid-write leaves its temporary folder; the next store deletes it once it is
    stale, and leaves young ones (a live writer's) alone."""
    cache.store(KEY, META, CODE, SOURCE)
    tmp = cache_dir / ".tmp"
    stale, young = tmp / "new-killed", tmp / "new-live"
    for folder in (stale, young):
        folder.mkdir()
        (folder / "code.bin").write_bytes(CODE[:10])
    _age(stale, cache.STALE_SECONDS + 60)
    legacy = cache_dir / "cd" / ".tmp-oldwriter"  # where earlier versions wrote, beside the entries
    legacy.mkdir(parents=True)
    (legacy / "meta.json").write_text("{")
    _age(legacy, cache.STALE_SECONDS + 60)
    cache.store("cd" + "1" * 62, META, CODE, SOURCE)
    assert not stale.exists() and not legacy.exists()
    assert young.exists()
    assert sorted(os.listdir(tmp)) == ["new-live"]  # nothing of the stores themselves is left behind
    _assert_good(cache.load("cd" + "1" * 62))


def test_a_read_only_or_missing_cache_folder_does_not_break_anything(cache_dir, monkeypatch):
    blocker = cache_dir.parent / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(blocker / "cache"))
    cache.store(KEY, META, CODE, SOURCE)  # cannot create the folder: silently not cached
    assert cache.load(KEY) is None


def _writer(root: str, rounds: int, bad: list) -> None:
    os.environ["TILEWRIGHT_CACHE_DIR"] = root
    for i in range(rounds):
        key = KEY[:-1] + str(i % 3)
        entry = cache.load(key)
        if entry is not None and (entry["code_object"] != CODE or entry["source"] != SOURCE):
            bad.append(key)
        if i % 5 == 0:  # now and then damage an entry, as a crash or a disk error would
            path = os.path.join(root, key[:2], key, "code.bin")
            try:
                with open(path, "r+b") as f:
                    f.write(b"\0\0\0\0")
            except OSError:
                pass
        cache.store(key, META, CODE, SOURCE)


def test_concurrent_writers_and_readers_never_see_a_bad_entry(cache_dir):
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        bad = manager.list()
        procs = [ctx.Process(target=_writer, args=(str(cache_dir), 40, bad)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * 4
        assert list(bad) == []
    for i in range(3):
        cache.store(KEY[:-1] + str(i), META, CODE, SOURCE)
        _assert_good(cache.load(KEY[:-1] + str(i)))
    assert not os.listdir(cache_dir / ".tmp")


# ------------------------------------------------------------------ through tilewright.compile
def _device_target() -> str | None:
    """A target whose code objects this machine can make without a GPU: NVRTC, else an AMD clang."""
    try:
        from tilewright.toolchain.nvrtc import nvrtc_version

        nvrtc_version()
        return "cuda -arch=sm_80"
    except Exception:  # noqa: BLE001 - no NVRTC wheel
        pass
    try:
        from tilewright.toolchain.hip import find_hip_compiler

        find_hip_compiler()
        return "hip -arch=gfx942"
    except ToolchainError:
        return None


@pytest.fixture
def fresh_memo():
    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()
    yield
    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()


@pytest.mark.parametrize("damage", ["corrupt code.bin", "truncate meta.json", "meta.json without kernel_name"])
def test_compile_recovers_from_a_damaged_entry(cache_dir, monkeypatch, fresh_memo, damage):
    target = _device_target()
    if target is None:
        pytest.skip("neither NVRTC nor an AMD clang is installed: no device code objects to cache")
    func = matmul(64, 64, 64, 64, 64, 32)
    k1 = tilewright.compile(func, target=target)
    entries = [e for e in cache_dir.glob("??/*") if e.is_dir()]
    assert len(entries) == 1
    d = entries[0]
    if damage == "corrupt code.bin":
        _flip_byte(d / "code.bin", offset=len(k1.get_code_object()) // 2)
    elif damage == "truncate meta.json":
        (d / "meta.json").write_bytes((d / "meta.json").read_bytes()[:-7])
    else:
        meta = json.loads((d / "meta.json").read_text())
        del meta["kernel_name"]
        (d / "meta.json").write_text(json.dumps(meta))

    calls = []
    real = compiler.fill_code_object

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(compiler, "fill_code_object", counting)
    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()
    k2 = tilewright.compile(func, target=target)
    assert calls == [1], "a damaged entry must be compiled afresh"
    assert k2.get_code_object() == k1.get_code_object() and k2.kernel_name == k1.kernel_name

    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()
    k3 = tilewright.compile(func, target=target)  # the entry was replaced by a good one
    assert calls == [1] and k3.get_code_object() == k1.get_code_object()
    assert k3.resource_usage == k1.resource_usage


# ------------------------------------------------------------------ reproducible AMD code objects
def test_gfx942_code_objects_are_reproducible(tmp_path, monkeypatch):
    clang = shutil.which("clang-19")
    if clang is None or shutil.which("ld.lld-19") is None:
        pytest.skip("clang-19 / lld-19 not installed (apt install clang-19 lld-19)")
    from tilewright.toolchain.hip import compile_hip

    monkeypatch.setenv("TILEWRIGHT_HIP_COMPILER", clang)
    k = tilewright.compile(matmul(128, 128, 64, 64, 64, 32), target="hip -arch=gfx942",
                           execution_backend="emulator")
    source = k.get_kernel_source()
    objects = [compile_hip(source, "gfx942", [k.kernel_name]).code_object for _ in range(2)]  # fresh temp folders
    objects += [compile_hip(source, "gfx942", [k.kernel_name], dump_dir=str(tmp_path / d)).code_object
                for d in ("one", "two/deeper")]
    assert objects[0][:4] == b"\x7fELF"
    assert all(o == objects[0] for o in objects[1:]), "code objects differ between compiles of the same source"
    # ... and different sources still get different compilation-unit ids
    other = compile_hip(source + "\n// another unit\n", "gfx942", [k.kernel_name]).code_object
    assert other != objects[0]


def test_compile_recovers_from_a_record_the_kernel_cannot_use(cache_dir, monkeypatch, fresh_memo):
    """An intact entry (checksums right) whose record the kernel cannot take, e.g. a malformed tensor-map
    list: a miss, compiled and stored again -- never an exception on every later compile."""
    target = _device_target()
    if target is None:
        pytest.skip("neither NVRTC nor an AMD clang is installed: no device code objects to cache")
    func = matmul(64, 64, 64, 64, 64, 32)
    k1 = tilewright.compile(func, target=target)
    (key,) = [e.name for e in cache_dir.glob("??/*") if e.is_dir()]
    entry = cache.load(key)
    meta = {k: v for k, v in entry.items() if k not in ("code_object", "source")}
    cache.discard(key)
    cache.store(key, dict(meta, tensor_maps=[[0]]), entry["code_object"], entry["source"])
    assert cache.load(key) is not None
    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()
    k2 = tilewright.compile(func, target=target)
    assert k2.get_code_object() == k1.get_code_object()
    assert cache.load(key)["tensor_maps"] == meta["tensor_maps"]  # replaced by a good record


def test_size_cap_evicts_the_least_recently_used_entries(tmp_path, monkeypatch):
    import time as _time

    from tilewright.runtime import cache

    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEWRIGHT_CACHE_MAX_MB", "0")  # no cap while filling
    keys = [cache.cache_key(f"kernel {i}") for i in range(4)]
    for i, k in enumerate(keys):
        cache.store(k, {"kernel_name": f"k{i}", "num_threads": 32, "shared_bytes": 0, "resources": {},
                        "toolchain": "t"}, bytes(10_000), "src")
        old = _time.time() - 100 + i  # k0 oldest ... k3 newest
        os.utime(cache._entry_dir(k), (old, old))
    assert cache.load(keys[0]) is not None  # a hit makes k0 the most recently used
    removed = cache.enforce_size_cap(2 * 10_500)
    assert removed == 2
    assert cache.load(keys[1]) is None and cache.load(keys[2]) is None
    assert cache.load(keys[0]) is not None and cache.load(keys[3]) is not None
