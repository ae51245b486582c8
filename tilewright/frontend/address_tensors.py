"""``T.make_tensor(address, shape, dtype[, strides])`` inside a kernel: a global tensor whose base address is
a value the kernel computes, typically an entry of a pointer table (``T.make_tensor(a_ptrs[g], (M, K),
"float16")`` with ``a_ptrs: T.Tensor([G], T.ptr)``, an int64 tensor of ``data_ptr()`` values), as in TileLang.

The call emits ``Alloc(buffer, init=address)`` with a ``global`` buffer: the address is read once, where the
call stands (a later change of the table or of the variables it reads does not move the tensor), and the
tensor is in scope for the statements that follow.  ``buffer.attrs["address"]`` marks it; lowering makes
it a ``GlobalDecl`` (a typed pointer in CUDA/HIP; an address resolved to a host array by the CPU backends,
interp/host_addresses.py).  Its shape entries are ints or integer expressions of the kernel (scalar
parameters, symbolic sizes, values computed before the call); its strides default to row-major.

Unchecked, as in TileLang: nothing on the host knows which tensor an address points to, so its extent,
dtype and lifetime are the program's promise.  A tensor larger than the memory behind the address reads
and writes past it on a GPU; the CPU interpreter and emulator refuse an address whose extent is not inside
one known array (an error, never a wild access).
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from .builder import Builder, error


def _dim(s, what: str, name: str):
    if isinstance(s, E.Const):
        s = s.value
    if isinstance(s, bool) or isinstance(s, float):
        raise error(f"{what}: shape or stride entry {s!r} of {name} must be an integer")
    if isinstance(s, int):
        if s < 0:
            raise error(f"{what}: shape or stride entry {s} of {name} is negative")
        return s
    if isinstance(s, E.Expr) and dt.is_int(s.dtype):
        return s
    raise error(f"{what}: shape or stride entry {s!r} of {name} must be an int or an integer expression",
                hint="compute the size as an integer (// for division)")


def tensor_at_address(b: Builder, address, shape, dtype, strides, what: str) -> t.Buffer:
    """The tensor at ``address`` (an integer expression of the kernel), declared where the call stands."""
    if b.kernel is None:
        raise error(f"{what} on an address value is allowed inside a T.Kernel only",
                    hint="call it inside `with T.Kernel(...)`, after the address is known")
    if b.parallel_depth:
        raise error(f"{what} on an address inside T.Parallel is not supported: the tensor would be declared once per "
                    "iteration", hint="make the tensor before the T.Parallel loop (one address per block or loop "
                    "iteration of a T.serial loop)")
    if isinstance(address, t.Buffer):
        raise error(f"{what}: the address is the buffer {address.name}; give one entry (e.g. {address.name}[i])",
                    hint="a pointer table is indexed: T.make_tensor(ptrs[i], shape, dtype)")
    if not isinstance(address, E.Expr) or not dt.is_int(address.dtype) or dt.bits(address.dtype) != 64:
        got = getattr(address, "dtype", type(address).__name__)
        raise error(f"{what}(address, shape, dtype) takes a 64-bit integer address (a T.ptr / int64 value), "
                    f"got {address!r} ({got})", hint="read the address from a T.Tensor([n], T.ptr) pointer table")
    try:
        dtype = dt.canon(dtype)
    except ValueError as e:
        raise error(str(e)) from None
    if dt.is_subbyte(dtype):
        raise error(f"{what} at an address: {dtype} packs two elements per byte and is not supported here",
                    hint="make the tensor uint8 and unpack the values in the kernel")
    shape = (shape,) if isinstance(shape, (int, E.Expr)) else tuple(shape)
    name = b.fresh("tensor")
    dims = tuple(_dim(s, what, name) for s in shape)
    if strides is not None:
        strides = (strides,) if isinstance(strides, (int, E.Expr)) else tuple(strides)
        if len(strides) != len(dims):
            raise error(f"{what}: {len(strides)} strides for a {len(dims)}-dimensional shape")
        strides = tuple(_dim(s, what, name) for s in strides)
    buf = t.Buffer(name, dims, dtype, "global", strides=strides, loc=b.loc)
    buf.attrs["auto_name"] = True
    buf.attrs["address"] = True  # base address read at its Alloc (see the module docstring)
    if strides is not None:
        buf.attrs["explicit_strides"] = True
    b.emit(t.Alloc(buf, E.cast("int64", address), loc=b.loc))
    return buf


__all__ = ["tensor_at_address"]
