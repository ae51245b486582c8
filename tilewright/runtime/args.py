"""Argument checking and binding for a kernel call, before anything is launched.

Every tensor argument is checked against its parameter: dtype, number of dimensions, each static
dimension, consistent values for symbolic dimensions (``T.dynamic``), device, row-major
contiguity and 16-byte alignment (vector accesses assume it).  Errors name the parameter and say
what was expected and what was given.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from ..ir import tile as t
from ..ir.expr import Var
from .tensor_args import TensorArg, describe_arg


@dataclass
class BoundArgs:
    tensors: list  # TensorArg per buffer param (None for scalars)
    values: list  # per param: TensorArg or Python scalar
    dyn: dict  # dyn Var -> int


def bind_arguments(params: list, dyn_vars: list, args: list, *, kernel_name: str, device_type: str | None,
                   require_alignment: int = 16) -> BoundArgs:
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise ArgumentError(f"{kernel_name} takes {len(params)} arguments ({names}); {len(args)} were given")
    dyn: dict = {}
    values, tensors = [], []
    device = None
    for p, a in zip(params, args):
        if isinstance(p, t.Buffer):
            ta = a if isinstance(a, TensorArg) else describe_arg(a)
            _check_tensor(p, ta, dyn, kernel_name, require_alignment)
            dev = (ta.device_type, ta.device_index)
            if device_type is not None and ta.device_type != device_type:
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
            values.append(_check_scalar(p, a, kernel_name))
            tensors.append(None)
    missing = [v.name for v in dyn_vars if v not in dyn]
    if missing:
        raise ArgumentError(f"{kernel_name}: could not infer dynamic dimension(s) {missing} from the arguments")
    return BoundArgs(tensors, values, dyn)


def _check_tensor(p: t.Buffer, ta: TensorArg, dyn: dict, kname: str, align: int) -> None:
    if ta.dtype != p.dtype:
        raise ArgumentError(f"{kname}: argument {p.name} has dtype {ta.dtype}, expected {p.dtype}")
    if len(ta.shape) != p.ndim:
        raise ArgumentError(f"{kname}: argument {p.name} has {len(ta.shape)} dimensions {tuple(ta.shape)}, expected "
                            f"{p.ndim} {_shape_text(p.shape)}")
    for d, (want, got) in enumerate(zip(p.shape, ta.shape)):
        if isinstance(want, Var):
            if want in dyn and dyn[want] != got:
                raise ArgumentError(f"{kname}: argument {p.name} dimension {d} is {got}, but the dynamic size "
                                    f"{want.name} was already bound to {dyn[want]} by an earlier argument")
            if got >= 2**31:
                raise ArgumentError(f"{kname}: dimension {want.name}={got} does not fit in int32")
            dyn[want] = int(got)
        elif want != got:
            raise ArgumentError(f"{kname}: argument {p.name} has shape {tuple(ta.shape)}, expected "
                                f"{_shape_text(p.shape)} (dimension {d} is {got}, expected {want})")
    if p.attrs.get("explicit_strides"):  # T.Tensor(strides=...): the argument must have exactly those strides
        wrong = t.stride_mismatch(p, tuple(ta.strides), dyn)
        if wrong:
            raise ArgumentError(f"{kname}: argument {p.name} {wrong}")
    elif ta.numel and not ta.is_contiguous():
        raise ArgumentError(f"{kname}: argument {p.name} is not contiguous (strides {tuple(ta.strides)} in elements); "
                            "pass a contiguous tensor, e.g. x.contiguous()")
    if ta.device_type != "cpu" and ta.ptr % align and ta.numel:
        raise ArgumentError(f"{kname}: argument {p.name} is not {align}-byte aligned (address {ta.ptr:#x}); "
                            "kernels use "
                            "vector accesses, so pass a tensor with an aligned start (e.g. x.clone())")


def _check_scalar(p: Var, a, kname: str):
    from ..ir import dtype as dt

    if hasattr(a, "item") and callable(a.item) and getattr(a, "ndim", 0) == 0:
        a = a.item()
    if isinstance(a, bool) and p.dtype != "bool":
        raise ArgumentError(f"{kname}: scalar argument {p.name} expects {p.dtype}, got a bool")
    if dt.is_float(p.dtype):
        if not isinstance(a, (int, float)):
            raise ArgumentError(f"{kname}: scalar argument {p.name} expects a number ({p.dtype}), got "
                                f"{type(a).__name__}")
        return float(a)
    if dt.is_int(p.dtype):
        if not isinstance(a, int) or isinstance(a, bool):
            raise ArgumentError(f"{kname}: scalar argument {p.name} expects an int ({p.dtype}), got {a!r}")
        info_min, info_max = dt.min_value(p.dtype), dt.max_value(p.dtype)
        if not info_min <= a <= info_max:
            raise ArgumentError(f"{kname}: scalar argument {p.name}={a} does not fit in {p.dtype}")
        return int(a)
    if p.dtype == "bool":
        return bool(a)
    raise ArgumentError(f"{kname}: unsupported scalar parameter type {p.dtype}")


def _shape_text(shape) -> str:
    return "(" + ", ".join(s.name if isinstance(s, Var) else str(s) for s in shape) + ")"
