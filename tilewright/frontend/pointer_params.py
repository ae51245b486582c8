"""``T.make_tensor(ptr, shape, dtype)`` / ``T.match_buffer(ptr, shape, dtype)`` on a ``T.ptr`` parameter:
the parameter becomes a tensor parameter (language/strided.py says what the user sees).

While the body is read, the call records the new buffer for the pointer parameter and returns it (the
body uses it under the name it is assigned to); when the function is complete, ``replace_pointer_params``
puts the buffer where the pointer was in the parameter list.  A shape entry that is a scalar parameter
becomes a symbolic size named ``<pointer>_<scalar>``, bound from the tensor by the argument binder, and a
host assumption ``size == scalar`` makes every call check that the two agree.  The buffer's
``attrs["pointer_sizes"]`` (symbolic size -> scalar parameter) lets a GPU call pass a raw address
instead of the tensor, as TileLang's pointer calls do (binding/args.py).

Inside the kernel, the same call on an address value (a pointer table entry) makes a tensor at that
address instead (frontend/address_tensors.py).
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from .builder import Builder, error


def bind_pointer_param(b: Builder, ptr, shape, dtype, strides, what: str) -> t.Buffer:
    if b.kernel is not None or len(b.blocks) != 1:
        from .address_tensors import tensor_at_address

        return tensor_at_address(b, ptr, shape, dtype, strides, what)
    if not (isinstance(ptr, E.Var) and ptr.kind == "param" and ptr.dtype == "int64"):
        raise error(f"{what}(ptr, shape, dtype) takes a T.ptr parameter of the function, got {ptr!r}",
                    hint="declare the parameter as `a_ptr: T.ptr` and call the kernel with the tensor")
    bound = b.__dict__.setdefault("pointer_params", {})
    if ptr in bound:
        raise error(f"{what}: the pointer parameter {ptr.name} is already bound to a tensor ({bound[ptr].name})",
                    hint="bind each pointer parameter once and reuse the tensor")
    if strides is not None:
        raise error(f"{what}(..., strides=...) is not supported", hint="declare the parameter as "
                    "T.Tensor(shape, dtype, strides=...) instead")
    shape = (shape,) if isinstance(shape, (int, E.Expr)) else tuple(shape)
    try:
        dtype = dt.canon(dtype)
    except ValueError as e:
        raise error(str(e)) from None
    dims, new_dyn, sizes = [], [], {}
    assumes = b.__dict__.setdefault("host_assumes", [])
    for s in shape:
        if isinstance(s, E.Const):
            s = s.value
        if isinstance(s, int) and not isinstance(s, bool) and s > 0:
            dims.append(s)
        elif isinstance(s, E.Var) and s.kind == "dyn":
            dims.append(s)
            new_dyn.append(s)
        elif isinstance(s, E.Var) and s.kind == "param" and dt.is_int(s.dtype):
            size = E.Var(f"{ptr.name}_{s.name}", "int32", kind="dyn")
            dims.append(size)
            new_dyn.append(size)
            assumes.append(E.binary("==", size, E.cast("int32", s)))
            sizes[size] = s
        else:
            raise error(f"{what}: shape entry {s!r} of {ptr.name} must be a positive int, a T.dynamic size or an "
                        "integer scalar parameter", hint="give the dimension its own scalar parameter or "
                        "T.dynamic name")
    buf = t.Buffer(ptr.name, dims, dtype, "global", loc=b.loc)
    buf.attrs["pointer_sizes"] = sizes  # a raw address for it takes these sizes from the scalars (binding/args.py)
    bound[ptr] = buf
    b.__dict__.setdefault("pointer_dyn", []).extend(new_dyn)
    return buf


def replace_pointer_params(b: Builder, params: list, dyn_vars: list) -> tuple:
    """The parameter list with each bound pointer replaced by its tensor, and the symbolic sizes."""
    bound = b.__dict__.get("pointer_params")
    if not bound:
        return params, dyn_vars
    params = [bound.get(p, p) if isinstance(p, E.Var) else p for p in params]
    dyn_vars = list(dyn_vars)
    for v in b.__dict__.get("pointer_dyn", []):
        if all(v is not d for d in dyn_vars):
            dyn_vars.append(v)
    return params, dyn_vars


__all__ = ["bind_pointer_param", "replace_pointer_params"]
