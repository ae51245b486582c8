"""Our ELF readers (``toolchain/cubin.py``, ``toolchain/amdgpu_elf.py``) against pyelftools on real
code objects: same facts, time per read, import time.  No GPU needed (NVRTC for the cubins, clang for
the AMD code objects).  ``python bench/elf_readers.py`` with pyelftools installed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgpack  # noqa: E402
from elftools.elf.elffile import ELFFile  # noqa: E402
from elftools.elf.sections import NoteSection, SymbolTableSection  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402
from tilewright.toolchain import amdgpu_elf, cubin  # noqa: E402


def elftools_amd_metadata(data: bytes) -> dict:
    for sec in ELFFile(io.BytesIO(data)).iter_sections():
        if isinstance(sec, NoteSection):
            for note in sec.iter_notes():
                if note["n_name"] == "AMDGPU" and note["n_type"] in (32, "NT_AMDGPU_METADATA"):
                    return msgpack.unpackb(bytes(note["n_descdata"]), raw=False, strict_map_key=False)
    raise ValueError("no AMDGPU metadata note")


def elftools_cubin(data: bytes, kernel: str) -> tuple:
    elf = ELFFile(io.BytesIO(data))
    symtab = next(s for s in elf.iter_sections() if isinstance(s, SymbolTableSection))
    names = [s.name for s in symtab.iter_symbols()]
    shared = elf.get_section_by_name(f".nv.shared.{kernel}")
    info = elf.get_section_by_name(".nv.info").data()
    return names.index(kernel), len(names), shared["sh_size"] if shared else 0, info


def best_us(fn, n=200) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def import_ms(module: str) -> float:
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True)
    line = [ln for ln in r.stderr.splitlines() if ln.rstrip().endswith(" " + module)][-1]
    return int(line.split("|")[1]) / 1e3


def main() -> None:
    rows = ["| code object | same facts | ours (us) | pyelftools (us) |", "|---|---|---|---|"]
    for target in ("cuda -arch=sm_90a", "cuda -arch=sm_80"):
        k = tilewright.compile(matmul(256, 256, 256, 128, 128, 32), target=target)
        data, name = k.get_code_object(), k.kernel_name
        elf = cubin._Elf(data)
        sym = next(s for s in elf.symbols if s.name == name)
        ours = (sym.index, len(elf.symbols), elf.by_name[f".nv.shared.{name}"].size,
                elf.section_bytes(elf.by_name[".nv.info"]))
        rows.append(f"| {k.target.arch} cubin | {ours == elftools_cubin(data, name)} | "
                    f"{best_us(lambda: cubin.read_cubin_resources(data, name)):.0f} | "
                    f"{best_us(lambda: elftools_cubin(data, name)):.0f} |")
    for arch in ("gfx942", "gfx90a", "gfx1100"):
        k = tilewright.compile(matmul(256, 256, 256, 64, 64, 32), target=f"hip -arch={arch}",
                               execution_backend="emulator")
        data = k.get_code_object()
        same = amdgpu_elf.read_metadata(data) == elftools_amd_metadata(data)
        rows.append(f"| {arch} code object | {same} | {best_us(lambda: amdgpu_elf.read_metadata(data)):.0f} | "
                    f"{best_us(lambda: elftools_amd_metadata(data)):.0f} |")
    rows.append("")
    rows.append(f"import time: elftools.elf.elffile {import_ms('elftools.elf.elffile'):.0f} ms, "
                f"msgpack {import_ms('msgpack'):.0f} ms")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
