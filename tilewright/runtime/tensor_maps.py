"""TMA descriptors (``CUtensorMap``) for the kernels that load through the tensor memory
accelerator: one per ``TensorMap`` of the kernel, encoded on the host from the argument bound to
its parameter and passed by value (128 bytes) after the other kernel arguments.

Encoding needs the CUDA driver (``cuTensorMapEncodeTiled``) but no GPU work; the 128 bytes are
cached per (argument address, shape), so a launch with the same tensors costs a dict lookup.
"""

from __future__ import annotations

import ctypes

from ..errors import ArgumentError
from ..ir import dtype as dt
from ..ir.analysis import eval_expr

TENSOR_MAP_BYTES = 128
_CACHE_LIMIT = 4096

# tilewright dtype -> CUtensorMapDataType member name (fp8 and other byte types move as bytes)
_DATA_TYPES = {
    "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
    "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64", "int16": "UINT16",
    "uint16": "UINT16", "int8": "UINT8", "uint8": "UINT8", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8",
}
_SWIZZLES = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
# pass config tw.tma_l2_promotion (bytes) -> CUtensorMapL2promotion member name: how much of a line around each
# box row a TMA load brings into L2 (0: none).  128 unless set: the descriptors' setting before the option existed
L2_PROMOTIONS = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}
L2_PROMOTION_OPTION = "tw.tma_l2_promotion"


class TensorMapSpec:
    """What a kernel needs encoded: parameter index, its dtype, box (outermost first), swizzle, L2 promotion."""

    __slots__ = ("box", "dtype", "l2_promotion", "param_index", "swizzle")

    def __init__(self, param_index: int, dtype: str, box, swizzle: int, l2_promotion: int = 128):
        self.param_index, self.dtype, self.box, self.swizzle = int(param_index), dtype, tuple(box), int(swizzle)
        self.l2_promotion = int(l2_promotion)

    def to_json(self) -> list:
        # (the fifth entry only when it is not the default: records written before it existed read the same)
        tail = [self.l2_promotion] if self.l2_promotion != 128 else []
        return [self.param_index, self.dtype, list(self.box), self.swizzle, *tail]

    @classmethod
    def from_json(cls, v) -> TensorMapSpec:
        return cls(v[0], v[1], v[2], v[3], v[4] if len(v) > 4 else 128)


def l2_promotion_of(options: dict) -> int:
    """The ``tw.tma_l2_promotion`` pass config (0, 64, 128 or 256 bytes; 128 when unset); another value is a
    ``CompileValueError``."""
    from ..errors import CompileValueError

    v = options.get(L2_PROMOTION_OPTION, 128)
    if isinstance(v, bool) or v not in L2_PROMOTIONS:
        raise CompileValueError(f"pass_configs {L2_PROMOTION_OPTION!r} must be one of "
                                f"{', '.join(str(x) for x in L2_PROMOTIONS)} (bytes), got {v!r}")
    return int(v)


def specs_of(thread_kernel, l2_promotion: int = 128) -> list[TensorMapSpec]:
    # by identity: list.index compares with ==, which on a scalar parameter (an Expr) builds an expression
    where = {id(p): i for i, p in enumerate(thread_kernel.params)}
    return [TensorMapSpec(where[id(tm.param)], tm.param.dtype, tm.box, tm.swizzle, l2_promotion)
            for tm in thread_kernel.tensor_maps]


class TensorMapEncoder:
    """Encodes a kernel's descriptors for one launch's arguments."""

    def __init__(self, specs: list[TensorMapSpec], params: list, kernel_name: str):
        self.specs = specs
        self.params = params
        self.kernel_name = kernel_name
        self._cache: dict = {}
        # tensors of static shape: the address alone identifies a descriptor (the common case,
        # kept to a dict lookup per launch)
        self._static = all(isinstance(x, int) for sp in specs for x in params[sp.param_index].shape)

    def encode(self, values: list, dyn: dict, dyn_items: tuple | None = None) -> list[bytes]:
        """The descriptors of a launch; ``dyn_items``: ``tuple(dyn.items())`` when the caller keeps it."""
        if self._static:
            key = tuple(values[sp.param_index] for sp in self.specs)
            hit = self._cache.get(key)
            if hit is not None:
                return hit
            hit = [self._one(sp, values, dyn) for sp in self.specs]
            self._remember(key, hit)
            return hit
        # symbolic shapes: the addresses and the sizes of this launch identify the descriptors (one
        # lookup per launch instead of evaluating every shape expression)
        launch_key = (tuple(values[sp.param_index] for sp in self.specs),
                      tuple(dyn.items()) if dyn_items is None else dyn_items)
        hit = self._cache.get(launch_key)
        if hit is not None:
            return hit
        out = []
        for spec in self.specs:
            p = self.params[spec.param_index]
            shape = tuple(int(eval_expr(x, dyn)) for x in p.shape)
            key = (spec.param_index, values[spec.param_index], shape)
            raw = self._cache.get(key)
            if raw is None:
                raw = self._one(spec, values, dyn)
                self._remember(key, raw)
            out.append(raw)
        self._remember(launch_key, out)
        return out

    def _remember(self, key, value) -> None:
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = value

    def _one(self, spec: TensorMapSpec, values: list, dyn: dict) -> bytes:
        p = self.params[spec.param_index]
        shape = tuple(int(eval_expr(x, dyn)) for x in p.shape)
        strides = tuple(int(eval_expr(x, dyn)) for x in p.strides)
        return self._encode(spec, p.name, values[spec.param_index], shape, strides)

    def _encode(self, spec: TensorMapSpec, name: str, ptr: int, shape, strides) -> bytes:
        esize = dt.nbytes(spec.dtype)
        where = f"{self.kernel_name}: argument {name!r}"
        if ptr % 16:
            raise ArgumentError(f"{where} starts at an address that is not 16-byte aligned; its tile loads go "
                                "through the tensor memory accelerator, which needs that. Pass a tensor that "
                                "starts on a 16-byte boundary, or compile with pass_configs={'tw.disable_tma': True}")
        bad = [s for s in strides[:-1] if (s * esize) % 16]
        if strides[-1] != 1 or bad:
            raise ArgumentError(f"{where} has strides {strides} (elements); TMA needs a unit last stride and the "
                                "others multiples of 16 bytes. Pass a contiguous tensor, or compile with "
                                "pass_configs={'tw.disable_tma': True}")
        if any(d <= 0 for d in shape):
            return bytes(TENSOR_MAP_BYTES)  # an empty tensor: the kernel has no tiles to load
        return _encode_tiled(spec, ptr, shape, strides, where)


def _encode_tiled(spec: TensorMapSpec, ptr: int, shape, strides, where: str) -> bytes:
    from cuda.bindings import driver as cu

    esize = dt.nbytes(spec.dtype)
    rank = len(shape)
    dtype = getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DATA_TYPES[spec.dtype])
    swizzle = getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + _SWIZZLES[spec.swizzle])
    # the driver lists dimensions innermost first; strides (bytes) of all but the innermost
    dims = [cu.cuuint64_t(d) for d in reversed(shape)]
    gstrides = [cu.cuuint64_t(s * esize) for s in reversed(strides[:-1])]
    box = [cu.cuuint32_t(b) for b in reversed(spec.box)]
    ones = [cu.cuuint32_t(1)] * rank
    err, tmap = cu.cuTensorMapEncodeTiled(
        dtype, rank, ptr, dims, gstrides, box, ones, cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle, getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + L2_PROMOTIONS[spec.l2_promotion]),
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise ArgumentError(f"{where}: cuTensorMapEncodeTiled failed ({err.name}) for shape {shape}, strides "
                            f"{strides}, box {spec.box}, swizzle {spec.swizzle}B")
    return ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)
