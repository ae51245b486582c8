"""The cubin (ELF) reader: kernels, registers, shared memory, stack, and the ptxas -v log parser.

Most tests build small synthetic ELF files so they need no CUDA toolkit; the last ones cross-check
the reader against real NVRTC output when NVRTC is available.
"""

from __future__ import annotations

import struct

import pytest

from tilewright.toolchain.cubin import (
    CubinFormatError,
    list_cubin_kernels,
    parse_ptxas_log,
    read_cubin_resources,
)

# ---------------------------------------------------------------- a tiny ELF64 writer

SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS, SHT_CUDA_INFO = 1, 2, 3, 8, 0x70000000


def _eiattr_sval(attr: int, payload: bytes) -> bytes:
    return struct.pack("<BBH", 0x04, attr, len(payload)) + payload


def _eiattr_hval(attr: int, value: int) -> bytes:
    return struct.pack("<BBH", 0x03, attr, value)


def _strtab(names):
    blob = b"\0"
    offsets = {}
    for n in names:
        offsets[n] = len(blob)
        blob += n.encode() + b"\0"
    return blob, offsets


def make_elf(sections, symbols):
    """sections: list of (name, type, data_or_size, info); symbols: list of (name, st_info, st_other, shndx).

    Section indices start at 1 in the order given (index 0 is the null section); the string tables and
    the symbol table are appended after them.
    """
    sec_names = [s[0] for s in sections] + [".shstrtab", ".strtab", ".symtab"]
    shstr, shoff = _strtab(sec_names)
    strtab, stroff = _strtab([s[0] for s in symbols])
    symtab = b"\0" * 24  # null symbol
    for name, info, other, shndx in symbols:
        symtab += struct.pack("<IBBHQQ", stroff[name], info, other, shndx, 0, 0)

    n_user = len(sections)
    all_secs = [
        *sections,
        (".shstrtab", SHT_STRTAB, shstr, 0),
        (".strtab", SHT_STRTAB, strtab, 0),
        (".symtab", SHT_SYMTAB, symtab, 0),
    ]
    body = b""
    headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    data_start = 64
    for name, sh_type, data, info in all_secs:
        if sh_type == SHT_NOBITS:
            offset, size = data_start + len(body), data
        else:
            offset, size = data_start + len(body), len(data)
            body += data
            body += b"\0" * (-len(body) % 8)
        link = 0
        if sh_type == SHT_SYMTAB:
            link = n_user + 2  # .strtab
        entsize = 24 if sh_type == SHT_SYMTAB else 0
        headers.append(struct.pack("<IIQQQQIIQQ", shoff[name], sh_type, 0, 0, offset, size, link, info, 8, entsize))
    e_shoff = data_start + len(body)
    e_shnum = len(headers)
    e_shstrndx = n_user + 1
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33, 7]) + b"\0" * 7
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, e_shoff, 0x5A05A, 64, 0, 0, 64, e_shnum, e_shstrndx)
    return ehdr + body + b"".join(headers)


GLOBAL_FUNC = 0x12  # STB_GLOBAL << 4 | STT_FUNC
LOCAL_FUNC = 0x02
ENTRY = 0x10  # STO_CUDA_ENTRY


def _simple_cubin(*, regs=40, frame=0, min_stack=0, max_stack=None, shared=4096, reserved=False, cap=None,
                  regs_in_text_info=None):  # fmt: skip
    """Two kernels (`k` at symbol index 1, `other` at 2) and one device function (`dev` at 3)."""
    info = _eiattr_sval(0x2F, struct.pack("<II", 1, regs))  # REGCOUNT
    info += _eiattr_sval(0x2F, struct.pack("<II", 2, 12))
    info += _eiattr_sval(0x11, struct.pack("<II", 1, frame))  # FRAME_SIZE
    info += _eiattr_sval(0x12, struct.pack("<II", 1, min_stack))  # MIN_STACK_SIZE
    if max_stack is not None:
        info += _eiattr_sval(0x23, struct.pack("<II", 1, max_stack))  # MAX_STACK_SIZE
    per_k = _eiattr_hval(0x1B, 255) + struct.pack("<BBH", 0x01, 0x2A, 0)  # MAXREG_COUNT, an NVAL record
    sections = [
        (".nv.info", SHT_CUDA_INFO, info, 0),
        (".nv.info.k", SHT_CUDA_INFO, per_k, 0),
        (".text.k", SHT_PROGBITS, b"\0" * 32, (regs_in_text_info or 0) << 24 | 1),
        (".text.other", SHT_PROGBITS, b"\0" * 32, 2),
        (".nv.shared.k", SHT_NOBITS, shared + (1024 if reserved else 0), 0),
    ]
    if reserved:
        sections.append((".nv.shared.reserved.0", SHT_NOBITS, 0, 0))
    symbols = [("k", GLOBAL_FUNC, ENTRY, 3), ("other", GLOBAL_FUNC, ENTRY, 4), ("dev", LOCAL_FUNC, 0, 4)]
    if cap is not None:
        symbols.append((".nv.reservedSmem.cap", 0x21, 0, 0))
    data = make_elf(sections, symbols)
    if cap is not None:
        data = _set_symbol_value(data, ".nv.reservedSmem.cap", cap)
    return data


def _set_symbol_value(data: bytes, name: str, value: int) -> bytes:
    # Patch st_value of a symbol in the cubin built above (the writer leaves values at 0).
    from tilewright.toolchain.cubin import _Elf

    elf = _Elf(data)
    symtab = next(s for s in elf.sections if s.type == SHT_SYMTAB)
    sym = next(s for s in elf.symbols if s.name == name)
    pos = symtab.offset + sym.index * 24 + 8
    return data[:pos] + struct.pack("<Q", value) + data[pos + 8 :]


# ---------------------------------------------------------------- synthetic cubins
def test_lists_only_entry_points():
    assert list_cubin_kernels(_simple_cubin()) == ["k", "other"]


def test_registers_shared_and_stack():
    res = read_cubin_resources(_simple_cubin(regs=40, frame=16, min_stack=48, shared=4096), "k")
    assert res == {
        "registers": 40,
        "shared_bytes": 4096,
        "local_bytes": 48,
        "spills": 0,
        "spill_stores": 0,
        "spill_loads": 0,
    }
    other = read_cubin_resources(_simple_cubin(), "other")
    assert other["registers"] == 12 and other["shared_bytes"] == 0 and other["local_bytes"] == 0


def test_max_stack_size_counts_as_local():
    assert read_cubin_resources(_simple_cubin(frame=8, max_stack=200), "k")["local_bytes"] == 200


def test_sm90_reserved_shared_window_is_not_counted():
    # From sm_90 on, .nv.shared.<kernel> includes the driver's reserved 1 KiB window.
    assert read_cubin_resources(_simple_cubin(shared=4096, reserved=True), "k")["shared_bytes"] == 4096
    assert read_cubin_resources(_simple_cubin(shared=0, reserved=True), "k")["shared_bytes"] == 0
    # sm_100+ state the window size.
    res = read_cubin_resources(_simple_cubin(shared=4096, reserved=True, cap=1024), "k")
    assert res["shared_bytes"] == 4096


def test_register_count_falls_back_to_text_section_info():
    # Older toolchains put the count in bits 24..31 of .text.<kernel>'s sh_info.
    res = read_cubin_resources(_simple_cubin(regs=0, regs_in_text_info=72), "k")
    assert res["registers"] == 72


def test_unknown_kernel_and_garbage():
    with pytest.raises(KeyError, match="nope"):
        read_cubin_resources(_simple_cubin(), "nope")
    with pytest.raises(CubinFormatError):
        list_cubin_kernels(b"not an elf at all, clearly not" * 3)
    with pytest.raises(CubinFormatError):
        list_cubin_kernels(_simple_cubin()[:100])  # section headers cut off


# ---------------------------------------------------------------- ptxas -v log
PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90a'
ptxas info    : Function properties for spill
ptxas         .     144 bytes stack frame, 144 bytes spill stores, 136 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 144 bytes cumulative stack size
ptxas info    : Compile time = 129.408 ms
ptxas info    : Compiling entry function 'local' for 'sm_90a'
ptxas info    : Function properties for local
ptxas         .     256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 384 bytes cumulative stack size
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'smem' for 'sm_80'
ptxas info    : Function properties for smem
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 1 barriers, 4224 bytes smem, 360 bytes cmem[0]
"""


def test_parse_ptxas_log():
    facts = parse_ptxas_log(PTXAS_LOG)
    assert facts["spill"] == {
        "local_bytes": 144,
        "spill_stores": 144,
        "spill_loads": 136,
        "registers": 255,
        "shared_bytes": 0,
    }
    assert facts["local"]["local_bytes"] == 384  # cumulative stack includes the non-inlined helper
    assert facts["_Z6helperPfi"] == {"local_bytes": 128, "spill_stores": 0, "spill_loads": 0}
    assert facts["smem"]["shared_bytes"] == 4224 and facts["smem"]["registers"] == 16
    assert parse_ptxas_log("") == {}


def test_log_merges_into_resources():
    log = """\
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 360 bytes cmem[0]
"""
    res = read_cubin_resources(_simple_cubin(regs=40, frame=8, shared=4096), "k", log)
    assert res["spill_stores"] == 8 and res["spill_loads"] == 4 and res["spills"] == 12
    assert res["registers"] == 40 and res["shared_bytes"] == 4096 and res["local_bytes"] == 8


# ---------------------------------------------------------------- real cubins
REAL_SOURCE = r"""
__device__ __noinline__ float helper(const float* p, int i) {
  float a[16];
  for (int j = 0; j < 16; ++j) a[j] = p[j * i];
  return a[i & 15];
}
extern "C" __global__ void with_smem(float* x) {
  __shared__ float buf[1024];
  __shared__ double buf2[16];
  buf[threadIdx.x] = x[threadIdx.x];
  buf2[threadIdx.x & 15] = 1.0;
  __syncthreads();
  x[threadIdx.x] = buf[1023 - threadIdx.x] + (float)buf2[3];
}
extern "C" __global__ void with_stack(float* x, int k) {
  float a[64];
  for (int i = 0; i < 64; ++i) a[i] = x[i * k];
  x[threadIdx.x] = a[k & 63] + helper(x, k);
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_real_cubin_without_log_matches_ptxas(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from tilewright.errors import ToolchainError
    from tilewright.toolchain.nvrtc import compile_cuda, supported_archs

    try:
        if int(arch[3:6].rstrip("a")) not in supported_archs():
            pytest.skip(f"this NVRTC cannot build {arch}")
        binary = compile_cuda(REAL_SOURCE, arch, ["with_smem", "with_stack"])
    except ToolchainError as exc:
        pytest.skip(f"NVRTC is not usable here: {exc}")
    assert set(list_cubin_kernels(binary.cubin)) == {"with_smem", "with_stack"}  # not the __device__ helper
    logged = parse_ptxas_log(binary.log)
    for name in ("with_smem", "with_stack"):
        from_elf = read_cubin_resources(binary.cubin, name)  # the ELF alone
        assert from_elf["registers"] == logged[name]["registers"] > 0
        assert from_elf["shared_bytes"] == logged[name]["shared_bytes"]
        assert from_elf["local_bytes"] == logged[name]["local_bytes"]
        assert binary.resources[name] == from_elf  # no spills here, so the log adds nothing
    assert binary.resources["with_smem"]["shared_bytes"] == 1024 * 4 + 16 * 8
    assert binary.resources["with_stack"]["local_bytes"] >= 64 * 4
