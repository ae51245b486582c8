"""Host addresses of the CPU backends: what memory a ``T.make_tensor`` on an address value (a pointer table
entry, frontend/address_tensors.py) means when the tile interpreter or the emulator runs the kernel.

A GPU kernel dereferences such an address unchecked.  On the CPU, an address is turned into a NumPy view
only when the whole tensor lies inside one array this call knows:

- the arrays of the call's own arguments;
- the arrays and tensors given to ``tilewright.pointer_table`` (which builds the int64 table of their
  addresses and remembers them for as long as they live);
- live PyTorch CPU tensors (a table built with ``torch.tensor([x.data_ptr() for x in xs])``, as TileLang's
  tests do, works unchanged).

Anything else — an address inside no known array, a tensor that runs past the end of the array it starts
in, an address not aligned to its elements — is an ``AddressError`` naming the tensor and the address,
never a read or write of memory the process does not own through a known object.
"""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np

from ..errors import TilewrightError
from ..ir import dtype as dt

_registered: list = []  # weak references to the arrays / tensors given to pointer_table


class AddressError(TilewrightError):
    """An address a kernel made a tensor at does not resolve to memory the CPU backends know."""


def _bytes_of(obj):
    """(base address, 1-D uint8 NumPy view of obj's memory) of a C-contiguous array or CPU tensor, else None."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous or obj.size == 0:
            return None
        return obj.ctypes.data, obj.reshape(-1).view(np.uint8)
    mod = type(obj).__module__
    if mod.startswith("torch") and hasattr(obj, "data_ptr"):
        try:
            if obj.device.type != "cpu" or not obj.is_contiguous() or obj.numel() == 0:
                return None
            flat = obj.detach().reshape(-1)
            import torch

            return obj.data_ptr(), flat.view(torch.uint8).numpy()
        except (RuntimeError, TypeError, ValueError, AttributeError):
            return None
    return None


def pointer_table(arrays) -> np.ndarray:
    """The int64 addresses of ``arrays`` (C-contiguous NumPy arrays or CPU torch tensors), as a kernel's
    ``T.Tensor([n], T.ptr)`` pointer table for the CPU backends, which resolve those addresses back to the
    arrays while they live.  (For a GPU call, build the table on the GPU from the tensors' ``data_ptr()``.)"""
    out = []
    for a in arrays:
        got = _bytes_of(a)
        if got is None:
            raise TypeError(f"pointer_table takes C-contiguous, non-empty NumPy arrays or CPU torch tensors, got "
                            f"{type(a).__name__}")
        try:
            _registered.append(weakref.ref(a))
        except TypeError:
            _registered.append(lambda a=a: a)  # not weakly referenceable: kept alive
        out.append(got[0])
    _registered[:] = [r for r in _registered if r() is not None]
    return np.asarray(out, dtype=np.int64)


class AddressBook:
    """The arrays one call knows (see the module docstring), searched in that order."""

    def __init__(self, arrays):
        self._args = list(arrays)
        self._torch_scanned = False
        self._spans: list = []  # (start, end, uint8 view)
        self._add(self._args)
        self._add(r() for r in _registered)

    def _add(self, objs) -> None:
        for o in objs:
            got = None if o is None else _bytes_of(o)
            if got is not None:
                self._spans.append((got[0], got[0] + got[1].size, got[1]))

    def _find(self, address: int, need: int):
        fit = None
        for start, end, view in self._spans:
            if start <= address < end or (need == 0 and address == start):
                if address + need <= end:
                    return view[address - start:address - start + need], None
                fit = (start, end)
        return None, fit

    def resolve(self, address: int, shape, strides, dtype: str, name: str) -> np.ndarray:
        """The 1-D span (of ``dtype`` elements, from ``address``) that tensor ``name`` of ``shape`` and
        element ``strides`` covers; an AddressError if no known array holds all of it."""
        npdt = dt.to_numpy(dtype)
        size = npdt.itemsize
        count = 0 if any(int(n) == 0 for n in shape) else 1 + sum((int(n) - 1) * int(s) for n, s in zip(shape, strides))
        need = count * size
        what = f"tensor {name} ({'x'.join(str(int(n)) for n in shape) or 'scalar'} {dtype}, {need} bytes)"
        if address % size:
            raise AddressError(f"T.make_tensor: the address {address:#x} of {what} is not aligned to its {size}-byte "
                               "elements")
        view, fit = self._find(address, need)
        if view is None and fit is None and not self._torch_scanned:
            self._torch_scanned = True  # a table of data_ptr() values: look at the live CPU tensors once
            try:
                import torch
            except ImportError:
                torch = None
            if torch is not None:
                with warnings.catch_warnings():  # some module objects warn when their type is inspected
                    warnings.simplefilter("ignore")
                    self._add(o for o in gc.get_objects() if issubclass(type(o), torch.Tensor))
            view, fit = self._find(address, need)
        if view is None and fit is not None:
            raise AddressError(f"T.make_tensor: {what} at address {address:#x} runs past the end of the array it "
                               f"starts in ({fit[1] - address} bytes left of {fit[1] - fit[0]}); the shape given to "
                               "T.make_tensor is larger than the memory behind the address")
        if view is None:
            raise AddressError(f"T.make_tensor: the address {address:#x} of {what} is inside no array this call "
                               "knows (its arguments, arrays given to tilewright.pointer_table, live torch CPU "
                               "tensors); on the CPU a pointer table entry must point into one of them")
        return view.view(npdt)


def strided_view(span: np.ndarray, shape, strides) -> np.ndarray:
    """The tensor of ``shape`` and element ``strides`` over ``span`` (which ``AddressBook.resolve`` sized)."""
    shape = tuple(int(n) for n in shape)
    if any(n == 0 for n in shape):
        return np.zeros(shape, span.dtype)
    return np.lib.stride_tricks.as_strided(span, shape, tuple(int(s) * span.itemsize for s in strides))


__all__ = ["AddressBook", "AddressError", "pointer_table", "strided_view"]
