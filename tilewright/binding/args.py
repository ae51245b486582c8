"""The one argument binder of a kernel call, for every backend (GPU, emulator, tile interpreter).

Every tensor argument is checked against its parameter: what it is (``describe_arg``), dtype,
number of dimensions, each static dimension, consistent values for symbolic dimensions
(``T.dynamic``: non-negative, below 2**31; dimensions declared as expressions such as ``n * 4``:
``shape_exprs``), device, row-major contiguity, 16-byte alignment on
GPUs (vector accesses assume it) and, for a parameter the kernel writes, that it is writable.
Scalars are checked against their dtype (an int parameter takes an int that fits, not a bool or a
float).  Every error is an ``ArgumentError`` that names the kernel and the parameter and says what
was expected and what was given -- the same text whichever backend runs the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from ..ir import tile as t
from ..ir.expr import Var
from .packed import is_packed_storage, logical_arg, storage_note
from .shape_exprs import is_shape_expr, resolve_shape_exprs
from .tensor_args import TensorArg, describe_arg

_INT32_MAX = 2**31 - 1


@dataclass
class BoundArgs:
    tensors: list  # TensorArg per buffer param (None for scalars)
    values: list  # per param: TensorArg or Python scalar
    dyn: dict  # dyn Var -> int


def bind_arguments(params: list, dyn_vars: list, args: list, *, kernel_name: str, device_type: str | None,
                   require_alignment: int = 16, dyn: dict | None = None, host_arrays: bool = False) -> BoundArgs:
    """Check ``args`` against ``params``.  ``device_type``: None (any device, one for all), "gpu"
    (refuse host memory) or a device type all tensors must be on.  ``dyn``: symbolic sizes given
    explicitly (keys: Vars or their names).  ``host_arrays``: the CPU backends, which take NumPy
    arrays only."""
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise ArgumentError(f"{kernel_name} takes {len(params)} arguments ({names}); {len(args)} were given")
    bound_dyn = given_dyn(kernel_name, dyn_vars, dyn)
    values, tensors, addresses = [], [], []
    device = None
    for p, a in zip(params, args):
        if isinstance(p, t.Buffer) and p.attrs.get("pointer_sizes") is not None and _is_address(a):
            if host_arrays or device_type not in (None, "gpu"):
                raise ArgumentError(f"{kernel_name}: argument {p.name} is an address ({int(a):#x}); the CPU backends "
                                    "address only the arrays they are given: pass the tensor itself")
            addresses.append((len(values), p, int(a)))  # sized once the scalars are bound (below)
            values.append(None)
            tensors.append(None)
            continue
        if isinstance(p, t.Buffer) and a is None:
            ta = _null_tensor(p, kernel_name)  # an optional tensor the kernel never touches: a null pointer
            values.append(ta)
            tensors.append(ta)
            continue
        if isinstance(p, t.Buffer):
            ta = describe_param(p, a, kernel_name, host_arrays)
            packed = is_packed_storage(p.dtype, ta)
            if packed:  # 4-bit elements, two per byte: check the logical tensor
                ta = logical_arg(p, ta, kernel_name)
            try:
                check_tensor(p, ta, bound_dyn, kernel_name, require_alignment)
            except ArgumentError as e:
                if not packed:
                    raise
                raise ArgumentError(f"{e} {storage_note(p)}") from None
            dev = (ta.device_type, ta.device_index)
            if device_type == "gpu" and ta.device_type == "cpu":
                raise ArgumentError(f"{kernel_name}: argument {p.name} is on the CPU; this kernel runs on the GPU. "
                                    "Move it with .cuda(), or compile with target='interpret' to run on the CPU")
            if device_type not in (None, "gpu") and ta.device_type != device_type:
                raise ArgumentError(f"{kernel_name}: argument {p.name} is on {ta.device_type}, but this kernel runs on "
                                    f"{device_type}; move it with .to(...) first")
            if device is None:
                device = dev
            elif dev != device:
                raise ArgumentError(f"{kernel_name}: argument {p.name} is on {dev[0]}:{dev[1]} but earlier arguments "
                                    f"are on {device[0]}:{device[1]}; put all tensors on one device")
            values.append(ta)
            tensors.append(ta)
        else:
            values.append(check_scalar(p, a, kernel_name))
            tensors.append(None)
    for i, p, addr in addresses:
        values[i] = tensors[i] = _address_arg(p, addr, params, values, bound_dyn, kernel_name, require_alignment)
    resolve_shape_exprs(params, values, bound_dyn, kernel_name, _dim_value)
    missing = [v.name for v in dyn_vars if v not in bound_dyn]
    if missing:
        raise ArgumentError(f"{kernel_name}: could not infer dynamic dimension(s) {missing} from the arguments")
    return BoundArgs(tensors, values, bound_dyn)


def _is_address(a) -> bool:
    import numpy as np

    return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))


def _address_arg(p: t.Buffer, addr: int, params: list, values: list, dyn: dict, kname: str,
                 align: int) -> TensorArg:
    """A raw device address for a ``T.make_tensor`` pointer parameter (frontend/pointer_params.py): its
    sizes come from the scalar arguments they were declared with.  Only the GPU takes one, and nothing
    can check that the memory there is this large; the tensor itself is checked."""
    if addr <= 0 or addr >= 2**64:
        raise ArgumentError(f"{kname}: argument {p.name} is the address {addr:#x}, which is not a device address")
    if addr % align:
        raise ArgumentError(f"{kname}: argument {p.name} (address {addr:#x}) is not {align}-byte aligned")
    shape = []
    for d, want in enumerate(p.shape):
        if isinstance(want, Var):
            scalar = p.attrs["pointer_sizes"].get(want)
            value = next(v for q, v in zip(params, values) if q is scalar) if scalar is not None else dyn.get(want)
            if value is None:
                raise ArgumentError(f"{kname}: argument {p.name} is an address, so dimension {d} ({want.name}) "
                                    "cannot be read from it; pass the tensor itself")
            if dyn.setdefault(want, int(value)) != int(value):
                raise ArgumentError(f"{kname}: size {want.name} of {p.name} is {value}, but was already bound to "
                                    f"{dyn[want]}")
            shape.append(int(value))
        else:
            shape.append(int(want))
    strides = t.row_major_strides(tuple(shape))
    return TensorArg(addr, tuple(shape), tuple(int(s) for s in strides), p.dtype, "none", -1)


def _null_tensor(p: t.Buffer, kernel_name: str) -> TensorArg:
    """``None`` for tensor parameter ``p``: accepted where the kernel never reads or writes ``p`` (TileLang's
    optional tensors, passed as a null pointer), refused where it does."""
    if p.attrs.get("used", True):
        where = f" (declared at line {p.loc.lineno})" if getattr(p, "loc", None) is not None else ""
        raise ArgumentError(f"{kernel_name}: argument {p.name} is None, but the kernel reads or writes {p.name}"
                            f"{where}; pass a tensor of shape {_shape_text(p.shape)} and dtype {p.dtype}")
    return TensorArg(0, (0,) * p.ndim, (1,) * p.ndim, p.dtype, "none", 0)


def given_dyn(kernel_name: str, dyn_vars, dyn: dict | None) -> dict:
    """Explicitly given symbolic sizes as a Var -> int dict: known names, ints, 0 <= size < 2**31."""
    out: dict = {}
    by_name = {v.name: v for v in dyn_vars}
    for k, v in (dyn or {}).items():
        var = by_name.get(k) if isinstance(k, str) else k
        if var is None or all(var is not d for d in dyn_vars):
            raise ArgumentError(f"{kernel_name}: {k!r} is not a symbolic dimension of the kernel "
                                f"(those are: {', '.join(by_name) or 'none'})")
        out[var] = _dim_value(kernel_name, var, v, "given in dyn")
    return out


def _dim_value(kernel_name: str, var: Var, v, where: str) -> int:
    import numpy as np

    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ArgumentError(f"{kernel_name}: the symbolic dimension {var.name} ({where}) must be an int, got {v!r}")
    v = int(v)
    if v < 0:
        raise ArgumentError(f"{kernel_name}: the symbolic dimension {var.name} ({where}) is {v}; sizes cannot be "
                            "negative")
    if v > _INT32_MAX and var.dtype != "int64":
        raise ArgumentError(f"{kernel_name}: the symbolic dimension {var.name}={v} ({where}) does not fit in int32; "
                            f"declare it {var.name} = T.dynamic({var.name!r}, 'int64') for sizes of 2**31 or more")
    return v


def describe_param(p: t.Buffer, a, kernel_name: str, host_arrays: bool = False) -> TensorArg:
    """``describe_arg`` whose errors name the parameter."""
    if isinstance(a, TensorArg):
        ta = a
    else:
        try:
            ta = describe_arg(a)
        except ArgumentError as e:
            raise ArgumentError(f"{kernel_name}: argument {p.name}: {e}") from None
    if host_arrays and ta.device_type != "cpu":
        raise ArgumentError(f"{kernel_name}: argument {p.name} is on {ta.device_type}:{ta.device_index}; the CPU "
                            "backends take CPU tensors or NumPy arrays")
    if host_arrays and type(ta.obj).__module__ != "numpy":
        raise ArgumentError(f"{kernel_name}: argument {p.name} must be a NumPy array here, got "
                            f"{type(ta.obj).__name__}; call a compiled kernel (tilewright.compile) to pass CPU "
                            "torch tensors")
    return ta


def check_tensor(p: t.Buffer, ta: TensorArg, dyn: dict, kname: str, align: int) -> None:
    """``ta`` fits buffer parameter ``p``; binds (in ``dyn``) the symbolic sizes its shape fixes."""
    if ta.dtype != p.dtype:
        raise ArgumentError(f"{kname}: argument {p.name} has dtype {ta.dtype}, expected {p.dtype}")
    if len(ta.shape) != p.ndim:
        raise ArgumentError(f"{kname}: argument {p.name} has {len(ta.shape)} dimensions {tuple(ta.shape)}, expected "
                            f"{p.ndim} {_shape_text(p.shape)}")
    for d, (want, got) in enumerate(zip(p.shape, ta.shape)):
        if isinstance(want, Var):
            if want in dyn and dyn[want] != got:
                raise ArgumentError(f"{kname}: argument {p.name} dimension {d} is {got}, but the dynamic size "
                                    f"{want.name} was already bound to {dyn[want]}")
            dyn[want] = _dim_value(kname, want, got, f"dimension {d} of argument {p.name}")
        elif is_shape_expr(want):
            continue  # n * 4: checked once every plain dimension is bound (resolve_shape_exprs)
        elif want != got:
            raise ArgumentError(f"{kname}: argument {p.name} has shape {tuple(ta.shape)}, expected "
                                f"{_shape_text(p.shape)} (dimension {d} is {got}, expected {want})")
    if p.attrs.get("explicit_strides"):  # T.Tensor(strides=...): the argument must have exactly those strides
        wrong = t.stride_mismatch(p, tuple(ta.strides), dyn)
        if wrong:
            raise ArgumentError(f"{kname}: argument {p.name} {wrong}")
    elif ta.numel and not ta.is_contiguous():
        raise ArgumentError(f"{kname}: argument {p.name} is not contiguous (strides {tuple(ta.strides)} in elements); "
                            "pass a contiguous tensor, e.g. x.contiguous() or np.ascontiguousarray(x)")
    if ta.readonly and p.attrs.get("written", False):
        raise ArgumentError(f"{kname}: argument {p.name} is read-only, but the kernel writes it; pass a writable "
                            "array (e.g. a copy)")
    if ta.device_type != "cpu" and ta.ptr % align and ta.numel:
        raise ArgumentError(f"{kname}: argument {p.name} is not {align}-byte aligned (address {ta.ptr:#x}); "
                            "kernels use "
                            "vector accesses, so pass a tensor with an aligned start (e.g. x.clone())")


def check_scalar(p: Var, a, kname: str):
    """The Python value (int, float or bool) of scalar argument ``a`` for parameter ``p``."""
    import numpy as np

    from ..ir import dtype as dt

    if hasattr(a, "item") and callable(a.item) and getattr(a, "ndim", None) == 0:
        a = a.item()  # 0-d arrays and tensors, NumPy scalars
    is_bool = isinstance(a, (bool, np.bool_))
    if p.dtype == "bool":
        if not (is_bool or isinstance(a, (int, np.integer)) and a in (0, 1)):
            raise ArgumentError(f"{kname}: scalar argument {p.name} expects a bool, got {a!r}")
        return bool(a)
    if is_bool:
        raise ArgumentError(f"{kname}: scalar argument {p.name} expects {p.dtype}, got a bool")
    if dt.is_float(p.dtype):
        if not isinstance(a, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"{kname}: scalar argument {p.name} expects a number ({p.dtype}), got "
                                f"{type(a).__name__}")
        return float(a)
    if dt.is_int(p.dtype):
        if not isinstance(a, (int, np.integer)):
            raise ArgumentError(f"{kname}: scalar argument {p.name} expects an int ({p.dtype}), got {a!r}")
        a = int(a)
        info_min, info_max = dt.min_value(p.dtype), dt.max_value(p.dtype)
        if not info_min <= a <= info_max:
            raise ArgumentError(f"{kname}: scalar argument {p.name}={a} does not fit in {p.dtype}")
        return a
    raise ArgumentError(f"{kname}: unsupported scalar parameter type {p.dtype}")


def _shape_text(shape) -> str:
    return "(" + ", ".join(s.name if isinstance(s, Var) else str(s) for s in shape) + ")"
