"""Targets: parsing, AMD facts, local-GPU detection (hermetic: fake sysfs/procfs, no torch, no
libcuda) and lane-layout sanity checks for every matrix instruction record."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from tilewright.errors import TargetError
from tilewright.target import amd, detect, matrix_amd
from tilewright.target.base import Target
from tilewright.target.matrix import MatrixInstr
from tilewright.target.nvidia import nvidia_target

AMD_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201")


@pytest.fixture(autouse=True)
def _fresh_detection(monkeypatch):
    """No test sees another's cached detection, the caller's TILEWRIGHT_TARGET, or a real torch."""
    monkeypatch.delenv(detect.ENV_VAR, raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    detect.clear_cache()
    yield
    detect.clear_cache()


# ============================================================================== parsing


def test_parse_hip_arch():
    t = Target.parse("hip -arch=gfx942")
    assert (t.kind, t.arch, t.vendor) == ("hip", "gfx942", "amd")
    assert t.is_hip and not t.is_cuda
    assert t.warp_size == 64
    assert str(t) == "hip -arch=gfx942"
    assert t.has("mfma") and t.has("fp8")


@pytest.mark.parametrize("spec", ["rocm -arch=gfx90a", "amd --mcpu=gfx90a", "HIP -march=GFX90A"])
def test_parse_spellings(spec):
    t = Target.parse(spec)
    assert (t.kind, t.arch) == ("hip", "gfx90a")


def test_parse_rocm_without_arch_uses_detection(monkeypatch):
    monkeypatch.setattr(detect, "detect_amd_arch", lambda: "gfx1100")
    t = Target.parse("rocm")
    assert (t.kind, t.arch, t.warp_size) == ("hip", "gfx1100", 32)


def test_parse_rocm_without_arch_and_no_gpu(monkeypatch):
    monkeypatch.setattr(detect, "detect_amd_arch", lambda: None)
    with pytest.raises(TargetError, match="names no AMD architecture"):
        Target.parse("rocm")


@pytest.mark.parametrize(
    "spec, arch",
    [
        ({"kind": "hip", "arch": "gfx950"}, "gfx950"),
        ({"target": "rocm", "mcpu": "gfx1201"}, "gfx1201"),
        ({"kind": "amd", "arch": "gfx1102", "opt_level": 3}, "gfx1102"),
    ],
)
def test_parse_dict(spec, arch):
    t = Target.parse(spec)
    assert (t.kind, t.arch) == ("hip", arch)
    if "opt_level" in spec:
        assert dict(t.options)["opt_level"] == "3"


def test_parse_target_id_suffix_is_kept_as_option():
    t = Target.parse("hip -arch=gfx90a:sramecc+:xnack-")
    assert t.arch == "gfx90a"
    assert dict(t.options)["target_features"] == "sramecc+:xnack-"


@pytest.mark.parametrize("arch", ["gfx1030", "gfx9999", "sm_90", "banana"])
def test_unknown_amd_arch(arch):
    with pytest.raises(TargetError) as info:
        Target.parse(f"hip -arch={arch}")
    msg = str(info.value)
    assert arch in msg
    for known in AMD_ARCHS:  # the error lists every supported architecture
        assert known in msg


def test_unknown_arch_hints():
    with pytest.raises(TargetError, match="use gfx942"):
        amd.amd_target("gfx940")
    with pytest.raises(TargetError, match="MI100"):
        amd.amd_target("gfx908")


def test_dict_without_kind():
    with pytest.raises(TargetError, match="needs a 'kind'"):
        Target.parse({"arch": "gfx942"})


# ============================================================================== AMD facts


@pytest.mark.parametrize("arch", AMD_ARCHS)
def test_amd_facts_consistent(arch):
    t = amd.amd_target(arch)
    cdna = arch.startswith("gfx9")
    assert t.warp_size == (64 if cdna else 32)
    assert t.registers_per_thread == (512 if cdna else 256)
    assert t.num_simds == (4 if cdna else 2)
    assert t.max_threads_per_block == 1024
    assert t.has("mfma" if cdna else "wmma")
    assert t.matrix_instrs, "every supported AMD arch has matrix instructions"
    for mi in t.matrix_instrs:
        assert mi.vendor == "amd"
        assert mi.group_size == t.warp_size
        assert mi.mnemonic.startswith("__builtin_amdgcn_")
    assert amd.min_llvm_version(t) >= 13
    assert bool(t.async_copy) == cdna


def test_amd_specific_numbers():
    assert amd.amd_target("gfx90a").max_shared_bytes == 64 * 1024
    assert amd.amd_target("gfx942").max_shared_bytes == 64 * 1024
    assert amd.amd_target("gfx950").max_shared_bytes == 160 * 1024
    assert amd.amd_target("gfx1201").max_shared_bytes == 64 * 1024
    assert amd.amd_target("gfx942").register_file_per_sm == 512 * 64 * 4
    assert amd.amd_target("gfx1100").register_file_per_sm == 1536 * 32 * 2
    assert amd.amd_target("gfx1102").register_file_per_sm == 1024 * 32 * 2  # no 1.5x VGPR file
    assert amd.lds_dma_widths(amd.amd_target("gfx942")) == (1, 2, 4)
    assert amd.lds_dma_widths(amd.amd_target("gfx950")) == (1, 2, 4, 12, 16)
    assert amd.lds_dma_widths(amd.amd_target("gfx1100")) == ()
    assert amd.min_llvm_version(amd.amd_target("gfx950")) == 20


def test_fp8_flavours_per_arch():
    gfx942, gfx950, gfx1201 = (amd.amd_target(a) for a in ("gfx942", "gfx950", "gfx1201"))
    fnuz, ocp = "float8_e4m3fnuz", "float8_e4m3fn"
    assert gfx942.matrix_instr_for(fnuz, fnuz, "float32")
    assert not gfx942.matrix_instr_for(ocp, ocp, "float32")
    assert gfx950.matrix_instr_for(ocp, ocp, "float32")
    assert not gfx950.matrix_instr_for(fnuz, fnuz, "float32")
    assert gfx1201.matrix_instr_for(ocp, ocp, "float32")
    assert not amd.amd_target("gfx1100").matrix_instr_for(ocp, ocp, "float32")


def test_preferred_instruction_order():
    f16 = ("float16", "float16", "float32")
    assert [mi.k for mi in amd.amd_target("gfx950").matrix_instr_for(*f16)][:2] == [16, 32]  # double rate first
    assert amd.amd_target("gfx942").matrix_instr_for(*f16)[0].m == 32
    int8 = ("int8", "int8", "int32")
    assert {mi.k for mi in amd.amd_target("gfx90a").matrix_instr_for(*int8)} == {8, 16}
    assert {mi.k for mi in amd.amd_target("gfx942").matrix_instr_for(*int8)} == {16, 32}


# ============================================================================== detection


def _fake_sysfs(tmp_path, versions):
    """A KFD topology with a CPU node 0 and one GPU node per gfx_target_version."""
    nodes = tmp_path / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for i, v in enumerate([0, *versions]):
        node = nodes / str(i)
        node.mkdir(parents=True)
        (node / "properties").write_text(
            f"cpu_cores_count {16 if v == 0 else 0}\nsimd_count 0\ngfx_target_version {v}\nvendor_id 4098\n"
        )
    return str(tmp_path / "sys")


def _empty_dir(tmp_path, name):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    return str(d)


def _detect(tmp_path, sys_root=None, env=None, **kw):
    kw.setdefault("use_torch", False)
    kw.setdefault("load_driver", False)
    return detect.detect_target(
        env=env or {},
        sys_root=sys_root or _empty_dir(tmp_path, "nosys"),
        proc_root=_empty_dir(tmp_path, "proc"),
        dev_root=_empty_dir(tmp_path, "dev"),
        **kw,
    )


@pytest.mark.parametrize(
    "version, arch",
    [
        (90010, "gfx90a"),
        (90012, "gfx90c"),
        (90402, "gfx942"),
        (90500, "gfx950"),
        (110000, "gfx1100"),
        (110001, "gfx1101"),
        (110002, "gfx1102"),
        (120000, "gfx1200"),
        (120001, "gfx1201"),
        (100300, "gfx1030"),
    ],
)
def test_decode_gfx_target_version(version, arch):
    assert detect.decode_gfx_target_version(version) == arch


def test_decode_rejects_cpu_and_junk():
    assert detect.decode_gfx_target_version(0) is None
    assert detect.decode_gfx_target_version(91700) is None  # minor 17 has no hex digit


@pytest.mark.parametrize("version, arch", [(90402, "gfx942"), (90010, "gfx90a"), (110000, "gfx1100")])
def test_detect_amd_from_sysfs(tmp_path, version, arch):
    t = _detect(tmp_path, sys_root=_fake_sysfs(tmp_path, [version]))
    assert (t.kind, t.arch) == ("hip", arch)
    assert detect.detect_amd_arch(sys_root=_fake_sysfs(tmp_path / "again", [version]), use_torch=False) == arch


def test_detect_first_gpu_node_wins(tmp_path):
    t = _detect(tmp_path, sys_root=_fake_sysfs(tmp_path, [120001, 90402]))
    assert t.arch == "gfx1201"


def test_detect_no_gpu_is_interpret(tmp_path):
    t = _detect(tmp_path)
    assert t.is_interpret and t.vendor == "cpu"


def test_detect_unsupported_gpu_warns_and_interprets(tmp_path):
    with pytest.warns(UserWarning, match="gfx1030"):
        t = _detect(tmp_path, sys_root=_fake_sysfs(tmp_path, [100300]))
    assert t.is_interpret


def test_env_var_wins(tmp_path):
    sysfs = _fake_sysfs(tmp_path, [90402])
    t = _detect(tmp_path, sys_root=sysfs, env={detect.ENV_VAR: "hip -arch=gfx950"})
    assert t.arch == "gfx950"
    t = _detect(tmp_path, sys_root=sysfs, env={detect.ENV_VAR: "interpret"})
    assert t.is_interpret
    t = _detect(tmp_path, sys_root=sysfs, env={detect.ENV_VAR: "auto"})  # "auto" means: detect
    assert t.arch == "gfx942"


def test_env_var_bad_value(tmp_path):
    with pytest.raises(TargetError, match="TILEWRIGHT_TARGET"):
        _detect(tmp_path, env={detect.ENV_VAR: "hip -arch=gfx1"})


def test_env_var_through_target_parse_auto(monkeypatch):
    monkeypatch.setenv(detect.ENV_VAR, "hip -arch=gfx1201")
    assert Target.parse("auto").arch == "gfx1201"
    assert Target.current().arch == "gfx1201"


def test_detect_target_is_cached(monkeypatch):
    calls = []

    def fake(*args):
        calls.append(args)
        return Target.parse("interpret")

    monkeypatch.setattr(detect, "_detect", fake)
    assert detect.detect_target() is detect.detect_target()
    assert len(calls) == 1
    detect.clear_cache()
    detect.detect_target()
    assert len(calls) == 2


def test_no_cuda_library_on_amd_machine(tmp_path, monkeypatch):
    def boom():
        raise AssertionError("libcuda must not be loaded on an AMD machine")

    monkeypatch.setattr(detect, "_cuda_driver_cc", boom)
    # KFD present but no usable GPU node: still an AMD machine, so no CUDA probe
    sysfs = _fake_sysfs(tmp_path, [])
    t = _detect(tmp_path, sys_root=sysfs, load_driver=True)
    assert t.is_interpret
    assert (
        detect.detect_cuda_arch(sys_root=sysfs, proc_root=str(tmp_path), dev_root=str(tmp_path), use_torch=False)
        is None
    )


def test_detect_nvidia(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia" / "gpus" / "0000:01:00.0").mkdir(parents=True)
    common = {
        "env": {},
        "sys_root": _empty_dir(tmp_path, "sys"),
        "proc_root": str(proc),
        "dev_root": _empty_dir(tmp_path, "dev"),
        "use_torch": False,
    }
    monkeypatch.setattr(detect, "_cuda_driver_cc", lambda: (8, 9))
    assert detect.detect_target(**common).arch == "sm_89"
    monkeypatch.setattr(detect, "_cuda_driver_cc", lambda: (9, 0))
    assert detect.detect_target(**common).arch == "sm_90a"
    # driver present but cuda-python missing: the conservative sm_80
    monkeypatch.setattr(detect, "_cuda_driver_cc", lambda: None)
    assert detect.detect_target(**common).arch == "sm_80"


def _fake_torch(hip=None, cuda=None, props=None, available=True):
    cuda_mod = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: 1 if available else 0,
        get_device_properties=lambda i: props,
    )
    return types.SimpleNamespace(version=types.SimpleNamespace(hip=hip, cuda=cuda), cuda=cuda_mod)


def test_detect_from_imported_torch_rocm(tmp_path, monkeypatch):
    props = types.SimpleNamespace(gcnArchName="gfx90a:sramecc+:xnack-", major=9, minor=0)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(hip="6.2.41133", props=props))
    t = _detect(tmp_path, use_torch=True)
    assert (t.kind, t.arch) == ("hip", "gfx90a")
    assert detect.detect_amd_arch(sys_root=_empty_dir(tmp_path, "s2")) == "gfx90a"


@pytest.mark.parametrize("cc, arch", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 6), "sm_86")])
def test_detect_from_imported_torch_cuda(tmp_path, monkeypatch, cc, arch):
    props = types.SimpleNamespace(major=cc[0], minor=cc[1])
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(cuda="12.4", props=props))
    t = _detect(tmp_path, use_torch=True)
    assert (t.kind, t.arch) == ("cuda", arch)


def test_torch_without_gpu_falls_through_to_sysfs(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(cuda="12.4", available=False))
    t = _detect(tmp_path, sys_root=_fake_sysfs(tmp_path, [90402]), use_torch=True)
    assert t.arch == "gfx942"


def test_torch_is_never_imported(tmp_path):
    _detect(tmp_path, use_torch=True)
    assert "torch" not in sys.modules


# ============================================================================== matrix layouts


def _all_instrs() -> list[MatrixInstr]:
    seen: dict[str, MatrixInstr] = {}
    targets = [amd.amd_target(a) for a in AMD_ARCHS] + [nvidia_target(a) for a in ("sm_80", "sm_90a")]
    for t in targets:
        for mi in t.matrix_instrs:
            seen.setdefault(mi.name, mi)
    for mi in matrix_amd.all_amd_matrix_instrs():
        seen.setdefault(mi.name, mi)
    return list(seen.values())


ALL_INSTRS = _all_instrs()


def _evaluate(fn, group_size, elems):
    lane = np.arange(group_size).reshape(-1, 1)
    e = np.arange(elems).reshape(1, -1)
    rows, cols = np.broadcast_arrays(*fn(lane, e))
    return rows.ravel(), cols.ravel()


def _coverage(fn, group_size, elems, nrows, ncols):
    rows, cols = _evaluate(fn, group_size, elems)
    assert rows.min() >= 0 and cols.min() >= 0
    assert rows.max() < nrows and cols.max() < ncols
    counts = np.zeros((nrows, ncols), dtype=np.int64)
    np.add.at(counts, (rows, cols), 1)
    return counts


def _replication(mi: MatrixInstr) -> int:
    return int(mi.extra_dict().get("replication", 1))


@pytest.mark.parametrize("mi", ALL_INSTRS, ids=lambda mi: mi.name)
def test_c_layout_covers_tile_exactly_once(mi):
    assert mi.c_elems * mi.group_size == mi.m * mi.n
    counts = _coverage(mi.c_index, mi.group_size, mi.c_elems, mi.m, mi.n)
    assert (counts == 1).all(), f"{mi.name}: C elements held {counts.min()}..{counts.max()} times"


@pytest.mark.parametrize("mi", ALL_INSTRS, ids=lambda mi: mi.name)
def test_a_layout_covers_tile(mi):
    rep = _replication(mi)
    assert mi.a_elems * mi.group_size == mi.m * mi.k * rep
    counts = _coverage(mi.a_index, mi.group_size, mi.a_elems, mi.m, mi.k)
    assert (counts >= 1).all(), f"{mi.name}: some A element is held by no lane"
    assert (counts == rep).all(), f"{mi.name}: A elements held {counts.min()}..{counts.max()} times, want {rep}"


@pytest.mark.parametrize("mi", ALL_INSTRS, ids=lambda mi: mi.name)
def test_b_layout_covers_tile(mi):
    rep = _replication(mi)
    assert mi.b_elems * mi.group_size == mi.k * mi.n * rep
    counts = _coverage(mi.b_index, mi.group_size, mi.b_elems, mi.k, mi.n)
    assert (counts >= 1).all(), f"{mi.name}: some B element is held by no lane"
    assert (counts == rep).all(), f"{mi.name}: B elements held {counts.min()}..{counts.max()} times, want {rep}"


def test_gfx11_replicates_across_half_waves():
    for mi in amd.amd_target("gfx1100").matrix_instrs:
        lane = np.arange(16).reshape(-1, 1)
        e = np.arange(mi.a_elems).reshape(1, -1)
        assert all(
            (np.asarray(x) == np.asarray(y)).all() for x, y in zip(mi.a_index(lane, e), mi.a_index(lane + 16, e))
        )
        assert all(
            (np.asarray(x) == np.asarray(y)).all() for x, y in zip(mi.b_index(lane, e), mi.b_index(lane + 16, e))
        )


class _Sym:
    """A stand-in for an IR expression: supports only + - * // % (no bool, no comparisons, no int())."""

    def __init__(self, fn):
        self.fn = fn

    @staticmethod
    def lift(x):
        return x if isinstance(x, _Sym) else _Sym(lambda env, v=x: v)

    def _bin(self, other, op, reflected=False):
        o = _Sym.lift(other)
        if reflected:
            return _Sym(lambda env: op(o.fn(env), self.fn(env)))
        return _Sym(lambda env: op(self.fn(env), o.fn(env)))

    def __add__(self, o):
        return self._bin(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._bin(o, lambda a, b: a + b, True)

    def __sub__(self, o):
        return self._bin(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: a - b, True)

    def __mul__(self, o):
        return self._bin(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._bin(o, lambda a, b: a * b, True)

    def __floordiv__(self, o):
        return self._bin(o, lambda a, b: a // b)

    def __rfloordiv__(self, o):
        return self._bin(o, lambda a, b: a // b, True)

    def __mod__(self, o):
        return self._bin(o, lambda a, b: a % b)

    def __rmod__(self, o):
        return self._bin(o, lambda a, b: a % b, True)

    def __bool__(self):
        raise TypeError("layout functions must not branch on the lane")

    def __index__(self):
        raise TypeError("layout functions must not need a Python int")


@pytest.mark.parametrize("mi", ALL_INSTRS, ids=lambda mi: mi.name)
def test_layouts_work_on_expressions(mi):
    lane = _Sym(lambda env: env["lane"])
    e_sym = _Sym(lambda env: env["e"])
    for fn, elems in ((mi.a_index, mi.a_elems), (mi.b_index, mi.b_elems), (mi.c_index, mi.c_elems)):
        for use_sym_e in (False, True):
            for e in range(elems):
                out = fn(lane, e_sym if use_sym_e else e)
                for ln in (0, 1, mi.group_size // 2 + 3, mi.group_size - 1):
                    got = tuple(_Sym.lift(x).fn({"lane": ln, "e": e}) for x in out)
                    assert got == tuple(int(x) for x in fn(ln, e))


# Spot values read off the AMD Matrix Instruction Calculator (``-m -r REG -l LANE``); element e of a
# lane is register e // per_reg, bit field e % per_reg.
@pytest.mark.parametrize(
    "instr, which, lane, e, want",
    [
        (matrix_amd.mfma_f32_16x16x16_f16(), "a", 17, 2, (1, 6)),  # gfx942 v1{17}.[15:0] = A[1][6]
        (matrix_amd.mfma_f32_32x32x8_f16(), "c", 33, 5, (13, 1)),  # gfx942 v5{33} = D[13][1]
        (matrix_amd.mfma_i32_32x32x8_i8(), "b", 40, 2, (6, 8)),  # gfx90a v0{40}.[23:16] = B[6][8]
        (matrix_amd.mfma_f32_16x16x32_fp8(), "a", 50, 4, (2, 28)),  # gfx942 v1{50}.[7:0] = A[2][28]
        (matrix_amd.wmma_f32_16x16x16_f16_gfx11(), "c", 21, 3, (7, 5)),  # gfx1100 v3{21} = D[7][5]
        (matrix_amd.wmma_f32_16x16x16_f16_gfx11(), "a", 27, 10, (11, 10)),  # gfx1100 v5{27}.[15:0] = A[11][10]
        (matrix_amd.wmma_f32_16x16x16_f16_gfx12(), "a", 19, 4, (3, 12)),  # gfx1201 v2{19}.[15:0] = A[3][12]
        (matrix_amd.wmma_i32_16x16x16_iu8_gfx12(), "b", 30, 6, (14, 14)),  # gfx1201 v1{30}.[23:16] = B[14][14]
    ],
)
def test_layout_spot_values(instr, which, lane, e, want):
    fn = {"a": instr.a_index, "b": instr.b_index, "c": instr.c_index}[which]
    assert tuple(int(x) for x in fn(lane, e)) == want


@pytest.mark.parametrize("mi", matrix_amd.all_amd_matrix_instrs(), ids=lambda mi: mi.name)
def test_amd_builtin_operand_types(mi):
    x = mi.extra_dict()
    for key in ("a_vec", "b_vec", "c_vec"):
        assert x[key] in matrix_amd.AMD_VECTOR_CTYPES
    a_count = matrix_amd.AMD_VECTOR_CTYPES[x["a_vec"]][1]
    assert a_count * x["ab_elems_per_scalar"] == mi.a_elems  # the vector holds exactly the lane's A elements
    assert matrix_amd.AMD_VECTOR_CTYPES[x["c_vec"]][1] == mi.c_elems
    assert int(x["min_llvm"]) >= 13
    if mi.name.startswith("mfma"):
        assert (x["cbsz"], x["abid"], x["blgp"]) == (0, 0, 0)
        assert x["arg_order"] == "a,b,c,cbsz,abid,blgp"
