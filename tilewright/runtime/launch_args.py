"""Kernel-argument packing shared by the CUDA and HIP launch layers (pure ctypes/struct, loads no
vendor library).

A launch takes a ``void*[]`` whose entries point at each argument's bytes.  ``ArgPacker`` lays out
one signature once (natural alignment, as the kernel ABI expects) and keeps a per-thread buffer,
so a launch only packs values: the launch calls copy the values before returning, which makes
reusing the buffer safe for the next launch of the same thread but not for a concurrent one.
"""

from __future__ import annotations

import ctypes
import struct
import threading

from ..errors import ArgumentError

# our argument type names -> (struct code, size in bytes)
ARG_TYPES: dict[str, tuple[str, int]] = {
    "ptr": ("Q", 8),
    "i32": ("i", 4),
    "u32": ("I", 4),
    "i64": ("q", 8),
    "u64": ("Q", 8),
    "f32": ("f", 4),
    "f64": ("d", 8),
    "tmap": ("128s", 128),  # a TMA descriptor (CUtensorMap), passed by value
}


class ArgPacker:
    __slots__ = ("_tls", "arg_types", "offsets", "size", "struct")

    def __init__(self, arg_types: tuple[str, ...]):
        fmt, offsets, pos = ["<"], [], 0
        for t in arg_types:
            try:
                code, size = ARG_TYPES[t]
            except (KeyError, TypeError):
                raise ArgumentError(f"unknown kernel argument type {t!r}; use one of {', '.join(ARG_TYPES)}") from None
            pad = -pos % size  # natural alignment
            if pad:
                fmt.append(f"{pad}x")
            pos += pad
            offsets.append(pos)
            fmt.append(code)
            pos += size
        self.arg_types = tuple(arg_types)
        self.struct = struct.Struct("".join(fmt))
        self.offsets = tuple(offsets)
        self.size = pos
        self._tls = threading.local()

    def _buffers(self):
        data = (ctypes.c_uint64 * max((self.size + 7) // 8, 1))()  # 8-byte aligned storage
        base = ctypes.addressof(data)
        ptrs = (ctypes.c_void_p * max(len(self.offsets), 1))(*[base + off for off in self.offsets])
        bufs = (memoryview(data).cast("B"), ctypes.addressof(ptrs), ptrs, data)
        self._tls.bufs = bufs
        return bufs

    def _pack(self, values):
        if len(values) != len(self.arg_types):
            raise ArgumentError(f"kernel takes {len(self.arg_types)} argument(s) {self.arg_types}, got {len(values)}")
        try:
            bufs = self._tls.bufs
        except AttributeError:
            bufs = self._buffers()
        try:
            self.struct.pack_into(bufs[0], 0, *values)
        except struct.error as exc:
            raise self._explain(values, exc) from None
        return bufs

    def pack_address(self, values) -> int:
        """Pack ``values``; returns the address of the ``void*[]`` (for cuLaunchKernel)."""
        return self._pack(values)[1]

    def pack_array(self, values):
        """Pack ``values``; returns the ``void*[]`` ctypes array (for hipModuleLaunchKernel)."""
        return self._pack(values)[2]

    def _explain(self, values, exc) -> ArgumentError:
        for i, (t, v) in enumerate(zip(self.arg_types, values)):
            try:
                struct.pack("<" + ARG_TYPES[t][0], v)
            except struct.error as e:
                return ArgumentError(f"kernel argument {i} ({t}) cannot take {v!r}: {e}")
        return ArgumentError(f"cannot pack kernel arguments {values!r} as {self.arg_types}: {exc}")


class FixedArgs:
    """One launch's argument buffer, packed once with every value (``packer``'s layout), for a
    caller that launches it again and again changing only the leading pointers (``write_lead``:
    one ``struct.pack_into`` of ``n_lead`` 8-byte values) and, when they change, 128-byte values
    such as TMA descriptors (``write``).  Its own buffer, not the packer's per-thread one: the
    caller keeps it to one thread (a concurrent launch of the same buffer would send the other
    thread's pointers).  ``make`` returns None where the leading values are not 8-byte pointer
    slots at the start of the buffer."""

    __slots__ = ("_data", "_ptrs", "address", "array", "data_address", "lead", "mv", "n_lead", "offsets", "size",
                 "values")

    @classmethod
    def make(cls, packer: ArgPacker, values, n_lead: int):
        if len(values) != len(packer.arg_types) or n_lead > len(values):
            return None
        if any(packer.arg_types[i] != "ptr" or packer.offsets[i] != 8 * i for i in range(n_lead)):
            return None
        return cls(packer, values, n_lead)

    def __init__(self, packer: ArgPacker, values, n_lead: int):
        self._data = (ctypes.c_uint64 * max((packer.size + 7) // 8, 1))()  # 8-byte aligned storage
        base = ctypes.addressof(self._data)
        self._ptrs = (ctypes.c_void_p * max(len(packer.offsets), 1))(*[base + off for off in packer.offsets])
        self.mv = memoryview(self._data).cast("B")
        self.address, self.array = ctypes.addressof(self._ptrs), self._ptrs
        self.data_address, self.n_lead = base, n_lead  # (the leading pointers' slots: a compiled launcher's)
        self.size = packer.size  # (the packed bytes: a launch that passes them as cuLaunchKernel's `extra`)
        self.offsets = packer.offsets
        self.values = list(values)  # what the buffer holds (for a caller that must launch them otherwise)
        try:
            packer.struct.pack_into(self.mv, 0, *values)
        except struct.error as exc:
            raise packer._explain(values, exc) from None
        self.lead = struct.Struct(f"<{n_lead}Q")

    def write_lead(self, ptrs) -> None:
        """The leading pointers of the next launch (``n_lead`` of them; the caller keeps to that)."""
        self.lead.pack_into(self.mv, 0, *ptrs)

    def write(self, index: int, raw: bytes) -> None:
        """Argument ``index`` (a 128-byte value: a TMA descriptor) of the next launch."""
        off = self.offsets[index]
        self.mv[off:off + len(raw)] = raw
        self.values[index] = raw
