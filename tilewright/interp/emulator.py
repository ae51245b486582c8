"""CPU emulator of lowered thread IR: ``run_thread_kernel(kernel, args)`` executes a ``ThreadKernel``
with NumPy exactly as the GPU would, so every target's lowering (NVIDIA mma.sync, AMD MFMA and WMMA)
can be checked against a reference without the hardware.

Execution model.  Every thread of every block is a *lane*; values are NumPy arrays of shape ``[L]``
(``L = blocks in the batch x threads per block``; lane ``b * num_threads + t`` is thread ``t`` of the
batch's block ``b``) or NumPy scalars when every lane has the same value.  Blocks run in batches of at
most ``MAX_LANES`` lanes; the grid is linearised x fastest.  All lanes run in lockstep: control flow
that differs between lanes is executed under an active-lane mask.  The IR tree is compiled once per
kernel into nested Python closures (cached), then run per batch.

Guarantees:

* Arithmetic follows the node dtypes: each result is rounded to its dtype (float16 / bfloat16 / fp8
  through NumPy and ``ml_dtypes``); math calls on 16-bit floats compute in float32 and round, as the
  printers' ``half(expf((float)x))`` does.  Integer ``//`` and ``%`` floor; float ``%`` is ``fmod``.
  Float -> int casts truncate and saturate (NaN -> 0), as ``cvt.rzi.sat`` does.  Float ``min``/``max``
  propagate NaN (stricter than ``fminf``: uninitialised registers stay visible).  An integer division
  by zero, or a negative operand of a ``//`` / ``%`` that the printers emit as C's truncating operator
  (because analysis claims both sides non-negative), raises ``EmulatorError`` (checked where the
  operands vary within a batch: loop-dependent index math).
* Registers (``LocalDecl``) start as NaN (floats), the dtype's minimum (ints) or True (bool); shared
  memory starts as 0xFF bytes (NaN in every float view).  Reading what was never written shows.
* Memory safety: an *active* lane (under the statement's mask, and under the taken side of a
  ``Select`` / ``and`` / ``or``) that reads or writes outside its buffer raises
  ``EmulatorOutOfBoundsError`` naming the buffer, the block, the thread and the statement.  Shared
  buffers are bounded by their own declared size, so overlapping buffers are caught too.  Vector
  accesses (``VecCopy``, ``AsyncCopy``, ``LoadMatrix`` rows) must be aligned to their width
  (``MisalignedAccessError``); global arrays are assumed 256-byte aligned.
* Collective operations: ``Barrier``, ``LoadMatrix``, ``MatrixMultiply`` and ``Shuffle`` may not run
  under control flow that splits a block (barrier) or a warp / wave (the others), and a shuffle may not
  read a lane that is not executing it (``DivergenceError``).
* ``MatrixMultiply`` gathers each warp's / wave's A, B and C from the lanes' registers through the
  instruction's ``a_index`` / ``b_index`` / ``c_index`` (checked to cover the matrices), computes
  ``D = A @ B + C`` in float32 (int64 then int32 for integer instructions) and scatters D.  Replicated
  operands (gfx11 WMMA) must hold identical values in every replica.
* ``AsyncCopy`` is deferred: copies are buffered per commit group and land in shared memory at the
  ``AsyncWait`` that retires their group, so a missing or too-weak wait reads stale data.
* ``TmaLoad`` (block-level) reads its box when issued, zero-filling what lies outside the tensor,
  and arrives on its mbarrier; the bytes land at the first ``MbarrierWait`` that sees the phase
  complete.  A wait on a phase that too few loads arrive on (the GPU would hang), more arrivals
  than the barrier's count, a TMA destination that is not 128-byte aligned, and a TMA load over
  bytes accessed since the last barrier are errors.
* With ``check_races=True``: per block, a shared-memory access raises ``RaceError`` when another
  thread changed the same byte since the last barrier (read-after-write, write-after-write), when a
  thread changes a byte another thread read since the last barrier (write-after-read), when one
  statement's lanes store different values to one byte, or when a byte is accessed while an async
  copy to it is still pending.  Writes that leave a byte's value unchanged are benign and ignored.
  For global memory, one statement's lanes storing different values to one element is a race.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.analysis import is_nonnegative
from ..ir.printer import expr_str, print_stmt
from ..ir.thread_printer import thread_stmt_lines
from ..ir.visitor import walk, walk_expr
from .bind import bind_host_call, strided_span
from .tile import InterpError, OutOfBoundsError

__all__ = [
    "DivergenceError",
    "EmulatorError",
    "EmulatorOutOfBoundsError",
    "MisalignedAccessError",
    "RaceError",
    "run_thread_kernel",
]

MAX_LANES = 1 << 16  # lanes per batch: bounds the memory of per-lane values
_MAX_SMEM_BATCH = 64 << 20  # bytes of shared memory per batch (and 8 MiB when tracking races)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


class EmulatorError(InterpError):
    """The lowered kernel does something whose result on a GPU is undefined (or the IR is malformed)."""


class EmulatorOutOfBoundsError(EmulatorError, OutOfBoundsError):
    """An active lane reads or writes outside a buffer."""


class MisalignedAccessError(EmulatorError):
    """A vector access is not aligned to its width."""


class _AsyncGroup(list):
    """One committed group of async copies, with the lanes that committed it (None: all)."""

    mask = None


class RaceError(EmulatorError):
    """Two threads of a block touch the same shared memory without a barrier between them."""


class DivergenceError(EmulatorError):
    """A collective operation (barrier, shuffle, ldmatrix, matrix instruction) runs under divergence."""


# --------------------------------------------------------------------------------------------
# entry point


def run_thread_kernel(kernel: th.ThreadKernel, args: list, *, dyn: dict | None = None,
                      check_races: bool = False) -> None:
    """Execute ``kernel`` on ``args`` (NumPy arrays for buffer parameters, C-contiguous, written in
    place; Python scalars for scalar parameters).  ``dyn`` maps ``kernel.dyn_vars`` (or their names)
    to ints; missing ones are read from the argument shapes.  ``check_races`` enables the shared
    memory race detector (slower)."""
    prog = _program(kernel)
    globals_, scalars = _bind_args(kernel, list(args), dyn)
    with np.errstate(all="ignore"):  # inactive lanes may divide by zero or overflow; ignored
        grid = prog.eval_grid(scalars)
        nblocks = grid[0] * grid[1] * grid[2]
        T = kernel.num_threads
        S = kernel.shared_bytes
        per_batch = max(1, MAX_LANES // T)
        if S:
            per_batch = max(1, min(per_batch, (_MAX_SMEM_BATCH >> (3 if check_races else 0)) // S))
        if _block_dependent_loops(kernel):
            # loop bounds that differ between blocks (causal attention's trip count) would make the
            # lanes of a multi-block batch diverge around barriers and async-copy waits: one block
            # per batch keeps every loop uniform
            per_batch = 1
        for first in range(0, nblocks, per_batch):
            nb = min(per_batch, nblocks - first)
            st = _State(prog, kernel, grid, first, nb, globals_, scalars, check_races)
            prog.body(st)


def _block_dependent_loops(kernel) -> bool:
    from ..ir import tile as t
    from ..ir.visitor import free_vars, walk

    found = [False]

    def f(st):
        if isinstance(st, t.For):
            for v in free_vars(st.start) | free_vars(st.extent):
                if v.kind not in ("dyn", "param"):
                    found[0] = True

    walk(kernel.body, f)
    return found[0]


_PROGRAMS: dict = {}


def _program(kernel: th.ThreadKernel) -> _Program:
    """The compiled program of ``kernel``, cached for the kernel object's lifetime (a kernel is
    treated as immutable: passes build new ones)."""
    key = id(kernel)
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[0]() is kernel:
        return hit[1]
    prog = _Program(kernel)
    _PROGRAMS[key] = (weakref.ref(kernel), prog)
    weakref.finalize(kernel, _PROGRAMS.pop, key, None)
    return prog


def _bind_args(kernel: th.ThreadKernel, args: list, dyn: dict | None):
    # the binder of every backend (binding.args), so a call is refused here exactly as elsewhere
    bufs, values, dyn_vals = bind_host_call(kernel.attrs.get("source_func") or kernel.name, kernel.params,
                                            kernel.dyn_vars, args, dyn)
    globals_ = {p: strided_span(a) if p.attrs.get("explicit_strides") else a.reshape(-1)  # strided: own strides
                for p, a in bufs.items()}
    scalars = {p: dt.to_numpy(p.dtype).type(v) for p, v in values.items()}
    for v in kernel.dyn_vars:
        scalars[v] = dt.to_numpy(v.dtype).type(dyn_vals[v])
    return globals_, scalars


# --------------------------------------------------------------------------------------------
# runtime state of one batch of blocks


class _State:
    """What the compiled closures see.  ``mask`` is None (every lane of the batch active) or a bool
    array ``[L]`` with at least one lane set.

    ``regs[slot]`` is a local buffer as a list of per-register values (an array ``[L]`` or a scalar
    when all lanes agree).  Values are never modified in place, so a value read from a register (or
    bound by a ``LetStmt``) stays valid after the register is overwritten, and uniform values such as
    cleared accumulators cost nothing until lanes diverge."""

    __slots__ = (
        "L",
        "S",
        "T",
        "async_groups",
        "async_open",
        "mbar",
        "block",
        "cache",
        "first",
        "glob",
        "grid",
        "lane",
        "mask",
        "memo",
        "nb",
        "races",
        "regs",
        "sbase",
        "smem",
        "sviews",
        "tid",
        "vars",
    )

    def __init__(self, prog: _Program, kernel, grid, first: int, nb: int, globals_: dict, scalars: dict,
                 check_races: bool):
        T = kernel.num_threads
        self.T, self.S, self.nb, self.first, self.grid = T, kernel.shared_bytes, nb, first, grid
        self.L = L = nb * T
        self.lane = np.arange(L)
        self.tid = (self.lane % T).astype(np.int32)
        self.block = self.lane // T  # block of each lane within the batch
        self.vars = [None] * prog.nvars
        self.regs = [None] * prog.nregs
        self.cache = [None] * prog.ncache
        self.memo: dict = {}
        self.mask = None
        for v, slot in prog.var_slots.items():
            if v in scalars:
                self.vars[slot] = scalars[v]
        self.vars[prog.var_slots[kernel.thread_var]] = self.tid
        lin = self.block + first
        gx, gy = grid[0], grid[1]
        coords = (lin % gx, (lin // gx) % gy, lin // (gx * gy))
        for d, bv in enumerate(kernel.block_vars):
            if bv in prog.var_slots:
                self.vars[prog.var_slots[bv]] = coords[d].astype(dt.to_numpy(bv.dtype))
        self.glob = [globals_[p] for p in prog.global_params]
        if self.S:
            self.smem = np.full(nb * self.S, 0xFF, np.uint8)
            self.sviews = {d: self.smem.view(d) for d in prog.shared_dtypes}
            self.sbase = [self.block * (self.S // sz) + off // sz for off, sz in prog.shared_places]
        else:
            self.smem = None
        self.async_open: list = []
        self.async_groups: list = []
        self.mbar: dict = {}
        self.races = _Races(self) if check_races and self.S else None

    def where(self, lane: int) -> str:
        b = self.first + lane // self.T
        gx, gy = self.grid[0], self.grid[1]
        return f"block ({b % gx}, {(b // gx) % gy}, {b // (gx * gy)}) thread {lane % self.T}"


# --------------------------------------------------------------------------------------------
# small helpers


def _fix(v, nd: np.dtype):
    """``v`` as a NumPy value of dtype ``nd`` (scalars stay scalars)."""
    if isinstance(v, np.ndarray):
        return v if v.dtype == nd else v.astype(nd)
    if isinstance(v, np.generic) and v.dtype == nd:
        return v
    return nd.type(v)


def _and(m, c):
    """Lanes in mask ``m`` (None = all) where the bool array ``c`` holds."""
    return c if m is None else (m & c)


def _norm_mask(m):
    """None when every lane is set, else ``m``."""
    return None if m.all() else m


def _rows(vals: list, L: int, nd: np.dtype) -> np.ndarray:
    """Stack register values (arrays or scalars) into ``[len(vals), L]``."""
    out = np.empty((len(vals), L), nd)
    for i, v in enumerate(vals):
        out[i] = v
    return out


def _poison(nd: np.dtype):
    if nd.kind == "f" or nd.kind == "V" or nd.name.startswith(("bfloat16", "float8")):
        return nd.type(float("nan"))
    if nd.kind == "b":
        return np.bool_(True)
    return nd.type(np.iinfo(nd).min)


def _is_float_np(nd: np.dtype) -> bool:
    return nd.kind == "f" or nd.name.startswith(("bfloat16", "float8"))


def _stmt_text(s) -> str:
    try:
        if isinstance(s, t.BufferStore):
            text = f"{s.buffer.name}[{expr_str(s.indices[0])}] = {expr_str(s.value)}"
        elif isinstance(s, (t.IfThenElse, t.For, t.LetStmt)):
            text = print_stmt(s).splitlines()[0]
        else:
            text = thread_stmt_lines(s)[0]
    except Exception:  # noqa: BLE001 - the message is a courtesy; never fail on it
        text = type(s).__name__
    return text if len(text) < 400 else text[:400] + " ..."


class _Where:
    """Where an error happened: the statement (text and source location)."""

    __slots__ = ("_text", "loc", "stmt")

    def __init__(self, stmt):
        self.stmt = stmt
        self.loc = getattr(stmt, "loc", None)
        self._text = None

    def text(self) -> str:
        if self._text is None:
            self._text = _stmt_text(self.stmt)
        return self._text

    def error(self, cls, message: str):
        return cls(f"{message}\n  in: {self.text()}", self.loc)


def _first(mask_arr) -> int:
    return int(np.flatnonzero(mask_arr)[0])


def _check_range(st: _State, idx, lo_ok: int, hi_ok: int, need, what: str, where: _Where):
    """Check ``lo_ok <= idx <= hi_ok`` for the lanes in ``need`` (None: all lanes of the statement's
    mask); return ``idx`` made safe to index with for every lane (out-of-range inactive lanes are
    clamped)."""
    if not isinstance(idx, np.ndarray):
        if lo_ok <= idx <= hi_ok:
            return idx
        if need is None or need.any():
            lane = 0 if need is None else _first(need)
            raise where.error(EmulatorOutOfBoundsError, f"{st.where(lane)}: {what} index {int(idx)} is out of "
                                                        f"bounds (valid: {lo_ok}..{hi_ok})")
        return np.clip(idx, lo_ok, max(hi_ok, lo_ok))
    if idx.size == 0:
        return idx
    if idx.min() >= lo_ok and idx.max() <= hi_ok:
        return idx
    bad = (idx < lo_ok) | (idx > hi_ok)
    if need is not None:
        bad &= need
    if bad.any():
        lane = _first(bad)
        raise where.error(EmulatorOutOfBoundsError, f"{st.where(lane)}: {what} index {int(idx[lane])} is out of "
                                                    f"bounds (valid: {lo_ok}..{hi_ok})")
    return np.clip(idx, lo_ok, max(hi_ok, lo_ok))


def _check_align(st: _State, byte_addr, nbytes: int, need, what: str, where: _Where):
    if nbytes <= 1:
        return
    bad = np.asarray(byte_addr) % nbytes != 0
    if bad.ndim == 0:
        if bad and (need is None or need.any()):
            raise where.error(MisalignedAccessError, f"{what}: {nbytes}-byte access at byte offset "
                                                     f"{int(byte_addr)} is not {nbytes}-byte aligned")
        return
    if need is not None:
        bad &= need
    if bad.any():
        lane = _first(bad)
        raise where.error(MisalignedAccessError, f"{st.where(lane)}: {what}: {nbytes}-byte access at byte offset "
                                                 f"{int(byte_addr[lane])} is not {nbytes}-byte aligned")


# --------------------------------------------------------------------------------------------
# math


def _erf(x):
    from scipy.special import erf

    return erf(x)


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + x.dtype.type(0.5)), x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_MATH: dict[str, Callable] = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x), "log": np.log,
    "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": _sigmoid, "sin": np.sin, "cos": np.cos, "tan": np.tan, "erf": _erf, "floor": np.floor,
    "ceil": np.ceil, "round": _round_half_away, "trunc": np.trunc, "fabs": np.abs, "abs": np.abs,
    "pow": np.power, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "log1p": np.log1p,
    "expm1": np.expm1, "fmod": np.fmod,
}


def _fma(a, b, c):
    # fmaf rounds once: the float64 product of two float32 values is exact
    return np.asarray(a, np.float64) * b + c


def _trunc_div(a, b):
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype) if isinstance(q, np.ndarray) else (q + 1 if fix else q)


def _check_division(st, a, b, need, assumed_nonneg: bool, op: str, where):
    """Integer division by zero, or by/of a negative value where the printers assume none, is an error."""
    bad = b == 0
    if assumed_nonneg:
        bad = bad | (a < 0) | (b < 0)
    if isinstance(bad, np.ndarray):
        if need is not None:
            bad = bad & need
        if not bad.any():
            return
        lane = _first(bad)
        av, bv = np.broadcast_to(a, bad.shape)[lane], np.broadcast_to(b, bad.shape)[lane]
        who = st.where(lane)
    else:
        if not bad or (need is not None and not need.any()):
            return
        av, bv, who = a, b, "every thread"
    why = "division by zero" if bv == 0 else "the printers emit C's truncating operator here, assuming operands >= 0"
    raise where.error(EmulatorError, f"{who}: integer {int(av)} {op} {int(bv)}: {why}")


def _check_int32(st, r, need, e, where):
    """A 32-bit signed result ``r`` (computed in int64) that leaves int32 on a lane that uses it is
    an error: the generated code would overflow there (an element offset past 2^31, say)."""
    bad = (r < -(2**31)) | (r > 2**31 - 1)
    if not bad.any():
        return
    if bad.ndim:
        if need is not None:
            bad = bad & need
        if not bad.any():
            return
        lane = _first(bad)
        val, who = int(np.broadcast_to(r, bad.shape)[lane]), st.where(lane)
    else:
        if need is not None and not need.any():
            return
        val, who = int(r), "every thread"
    raise where.error(EmulatorError, f"{who}: 32-bit integer overflow: {e} is {val} here, which a C int cannot "
                                     f"hold (the generated code computes it in 32 bits)")


def _float_to_int(x, nd: np.dtype):
    info = np.iinfo(nd)
    x = np.nan_to_num(np.trunc(np.asarray(x, np.float64)), nan=0.0)
    r = np.clip(x, info.min, info.max).astype(nd)
    return r if r.ndim else nd.type(r)


# --------------------------------------------------------------------------------------------
# compilation


class _Program:
    """A ``ThreadKernel`` compiled to closures."""

    def __init__(self, kernel: th.ThreadKernel):
        self.k = kernel
        self.var_slots: dict = {}
        self.nvars = 0
        self.nregs = 0
        self.ncache = 0
        self.cache_keys: dict = {}
        self.reg_slots: dict = {}
        self.global_params = [p for p in kernel.params if isinstance(p, t.Buffer)]
        self.global_index = {p: i for i, p in enumerate(self.global_params)}
        self.shared: dict = {}  # Buffer -> (place index, byte offset, np dtype)
        self.shared_places: list = []
        self.shared_dtypes: set = set()
        self.invariant_vars: set = set()
        self.let_count: dict = {}
        for p in kernel.params:
            if isinstance(p, E.Var):
                self._var(p)
        for v in kernel.dyn_vars:
            self._var(v)
        self._var(kernel.thread_var)
        for bv in kernel.block_vars:
            self._var(bv)
        # thread index, block indices, scalar parameters and symbolic dims do not change during a
        # batch: expressions over them alone are evaluated once per batch (see _cached)
        self.invariant_vars.update(self.var_slots)

        def pre(s):
            if isinstance(s, t.LetStmt):
                self.let_count[s.var] = self.let_count.get(s.var, 0) + 1
            elif isinstance(s, th.SharedDecl):
                self._declare_shared(s)

        walk(kernel.body, pre)
        self.body = self.stmt(kernel.body)
        self._grid = [self.expr(E.as_expr(g), None)[0] for g in kernel.grid]

    # ---------------------------------------------------------------- slots
    def _var(self, v) -> int:
        slot = self.var_slots.get(v)
        if slot is None:
            slot = self.var_slots[v] = self.nvars
            self.nvars += 1
        return slot

    def _reg(self, b) -> int:
        slot = self.reg_slots.get(b)
        if slot is None:
            slot = self.reg_slots[b] = self.nregs
            self.nregs += 1
        return slot

    def _declare_shared(self, s: th.SharedDecl) -> None:
        b = s.buffer
        nd = dt.to_numpy(b.dtype)
        sz = nd.itemsize
        n = b.shape[0]
        if s.offset % sz:
            raise EmulatorError(f"shared buffer {b.name} at byte offset {s.offset} is not aligned to its "
                                f"{sz}-byte elements", s.loc)
        if s.offset + n * sz > self.k.shared_bytes:
            raise EmulatorError(f"shared buffer {b.name} ({n} x {b.dtype} at byte {s.offset}) extends past the "
                                f"kernel's {self.k.shared_bytes} bytes of shared memory", s.loc)
        prev = self.shared.get(b)
        if prev is not None and prev[1] != s.offset:
            raise EmulatorError(f"shared buffer {b.name} is declared at two offsets", s.loc)
        self.shared[b] = (len(self.shared_places), s.offset, nd)
        self.shared_places.append((s.offset, sz))
        self.shared_dtypes.add(nd)

    def eval_grid(self, scalars: dict) -> tuple:
        class _G:  # the grid expressions read only scalar parameters and symbolic dims
            pass

        g = _G()
        g.vars = [None] * self.nvars
        for v, slot in self.var_slots.items():
            if v in scalars:
                g.vars[slot] = scalars[v]
        g.cache = [None] * self.ncache
        g.mask = None
        out = [int(f(g, None)) for f in self._grid]
        return tuple(out + [1] * (3 - len(out)))

    # ---------------------------------------------------------------- expressions
    # An expression compiles to ``f(st, need) -> value`` where ``need`` is the mask of lanes whose
    # value is used (None: the statement's active lanes): loads check bounds only for those lanes.
    # ``expr`` returns (closure, invariant, structural key); invariant means it depends only on
    # values fixed for a batch, and ``_cached`` then evaluates it once per batch.

    def cexpr(self, e, where: _Where | None):
        f, inv, key = self.expr(E.as_expr(e), where)
        return self._cached(f, inv, key)

    def _cached(self, f, inv, key):
        if not inv or key is None or key[0] in ("c", "v"):
            return f
        slot = self.cache_keys.get(key)
        if slot is None:
            slot = self.cache_keys[key] = self.ncache
            self.ncache += 1

        def cached(st, need):
            v = st.cache[slot]
            if v is None:
                v = st.cache[slot] = f(st, need)
            return v

        return cached

    def expr(self, e, where):
        nd = dt.to_numpy(e.dtype)
        if isinstance(e, E.Const):
            v = nd.type(e.value)
            return (lambda st, need: v), True, ("c", e.dtype, e.value)
        if isinstance(e, E.Var):
            if e not in self.var_slots:
                raise EmulatorError(f"variable {e.name} is used but never bound")
            slot = self.var_slots[e]
            return (lambda st, need: st.vars[slot]), e in self.invariant_vars, ("v", slot)
        if isinstance(e, E.Load):
            return self.load(e, where), False, None
        if isinstance(e, E.BinOp):
            return self.binop(e, nd, where)
        if isinstance(e, E.UnOp):
            fa, inv, ka = self.expr(e.a, where)
            fa = self._cached(fa, inv, ka) if not inv else fa
            ufunc = {"neg": np.negative, "not": np.logical_not, "bitnot": np.invert}[e.op]

            def unop(st, need):
                return _fix(ufunc(fa(st, need)), nd)

            return unop, inv, (e.op, e.dtype, ka)
        if isinstance(e, E.Cast):
            return self.cast(e, nd, where)
        if isinstance(e, E.Select):
            return self.select(e, nd, where)
        if isinstance(e, E.Call):
            return self.call(e, nd, where)
        if isinstance(e, E.Shuffle):
            return self.shuffle(e, where), False, None
        raise EmulatorError(f"the emulator cannot evaluate {type(e).__name__}")

    def _children(self, es, where):
        parts = [self.expr(x, where) for x in es]
        inv = all(p[1] for p in parts)
        keys = tuple(p[2] for p in parts)
        if any(k is None for k in keys):
            keys = None
        fs = [p[0] if inv else self._cached(*p) for p in parts]
        return fs, inv, keys

    def binop(self, e: E.BinOp, nd, where):
        op = e.op
        (fa, fb), inv, keys = self._children((e.a, e.b), where)
        key = None if keys is None else (op, e.dtype) + keys
        wd = dt.to_numpy(e.a.dtype)
        is_float = _is_float_np(wd)
        if op in ("and", "or"):
            lazy = _has_effects(e.b)
            is_and = op == "and"

            def logical(st, need):
                a = fa(st, need)
                if not isinstance(a, np.ndarray):
                    if bool(a) != is_and:  # short circuit, as C does
                        return np.bool_(not is_and)
                    return np.bool_(bool(fb(st, need)))
                # the right side runs only where the left does not decide (C short-circuit)
                b = fb(st, _and(need, a if is_and else ~a) if lazy else need)
                return np.logical_and(a, b) if is_and else np.logical_or(a, b)

            return logical, inv, key
        if op in ("min", "max"):
            fn = np.minimum if op == "min" else np.maximum  # NaN-propagating on purpose
        elif op == "/":
            fn = np.true_divide if is_float else _trunc_div
        elif op == "//":
            fn = (lambda a, b: np.floor(np.true_divide(a, b))) if is_float else np.floor_divide
        elif op == "%":
            fn = np.fmod if is_float else np.remainder
        else:
            fn = _BINOPS[op]

        if op in ("/", "//", "%") and not is_float and not inv and where is not None:
            # the printers emit C's truncating '/' and '%' when analysis proves both sides
            # non-negative: check that assumption (and division by zero) on the lanes that need it
            assumed = dt.is_signed_int(e.dtype) and is_nonnegative(e.a) and is_nonnegative(e.b)

            def checked_division(st, need):
                a, b = fa(st, need), fb(st, need)
                _check_division(st, a, b, need, assumed, op, where)
                return _fix(fn(a, b), nd)

            return checked_division, inv, key

        if e.dtype == "int32" and op in ("+", "-", "*") and where is not None:
            # the generated code computes this in a 32-bit int: evaluate exactly (64 bits) and refuse
            # a result that int would not hold, on the lanes that use it
            def checked_int32(st, need):
                r = fn(np.asarray(fa(st, need), np.int64), np.asarray(fb(st, need), np.int64))
                _check_int32(st, r, need, e, where)
                return _fix(r, nd)

            return checked_int32, inv, key

        def binary(st, need):
            return _fix(fn(fa(st, need), fb(st, need)), nd)

        return binary, inv, key

    def cast(self, e: E.Cast, nd, where):
        fa, inv, ka = self.expr(e.a, where)
        fa = fa if inv else self._cached(fa, inv, ka)
        src = dt.to_numpy(e.a.dtype)
        key = None if ka is None else ("cast", e.dtype, ka)
        if _is_float_np(src) and nd.kind in "iu":
            def to_int(st, need):
                return _float_to_int(fa(st, need), nd)

            return to_int, inv, key
        if nd.kind == "b":
            def to_bool(st, need):
                v = fa(st, need)
                return v != 0 if isinstance(v, np.ndarray) else np.bool_(v != 0)

            return to_bool, inv, key

        def conv(st, need):
            return _fix(fa(st, need), nd)

        return conv, inv, key

    def select(self, e: E.Select, nd, where):
        (fc, fa, fb), inv, keys = self._children((e.cond, e.a, e.b), where)
        key = None if keys is None else ("sel", e.dtype) + keys
        lazy_a, lazy_b = _has_effects(e.a), _has_effects(e.b)

        def sel(st, need):
            c = fc(st, need)
            if not isinstance(c, np.ndarray):
                return _fix(fa(st, need) if c else fb(st, need), nd)
            # each side is needed only where it is chosen (C's ?: evaluates one side)
            a = fa(st, _and(need, c)) if lazy_a else fa(st, need)
            b = fb(st, _and(need, ~c)) if lazy_b else fb(st, need)
            return _fix(np.where(c, a, b), nd)

        return sel, inv, key

    def call(self, e: E.Call, nd, where):
        name = e.name
        fs, inv, keys = self._children(e.args, where)
        key = None if keys is None else ("call", name, e.dtype) + keys
        if name in ("isnan", "isinf"):
            fn = np.isnan if name == "isnan" else np.isinf
            f0 = fs[0]

            def test(st, need):
                return fn(np.asarray(f0(st, need), np.float32))

            return test, inv, key
        if name in ("min", "max"):
            fn2 = np.minimum if name == "min" else np.maximum
            fa, fb = fs

            def mm(st, need):
                return _fix(fn2(fa(st, need), fb(st, need)), nd)

            return mm, inv, key
        if name == "abs" and not _is_float_np(nd):
            f0 = fs[0]

            def iabs(st, need):
                return _fix(np.abs(f0(st, need)), nd)

            return iabs, inv, key
        if name == "fma":
            math_fn = _fma
        elif name in _MATH:
            math_fn = _MATH[name]
        else:
            raise EmulatorError(f"the emulator does not know the math function {name!r}")
        work = _F64 if nd == _F64 else _F32  # 16-bit and 8-bit floats compute in float32, then round

        def mathcall(st, need):
            args = [_fix(f(st, need), work) for f in fs]
            return _fix(_fix(math_fn(*args), work), nd)

        return mathcall, inv, key

    def shuffle(self, e: E.Shuffle, where):
        fv = self.cexpr(e.value, where)
        xor, width = int(e.mask), int(e.width)
        memo_key = ("shfl", xor, width)

        def shfl(st, need):
            v = fv(st, need)
            if not isinstance(v, np.ndarray):
                return v
            src = st.memo.get(memo_key)
            if src is None:
                tid = st.tid
                s = tid ^ xor
                ok = (s // width == tid // width) & (s < st.T)
                src = st.memo[memo_key] = st.lane - tid + np.where(ok, s, tid)
            if st.mask is not None:
                bad = ~st.mask[src]
                if need is not None:
                    bad &= need
                else:
                    bad &= st.mask
                if bad.any():
                    lane = _first(bad)
                    raise where.error(DivergenceError, f"{st.where(lane)}: shuffle reads lane "
                                                       f"{int(src[lane]) % st.T}, which is not executing it")
            return v[src]

        return shfl

    # ---------------------------------------------------------------- memory
    def load(self, e: E.Load, where):
        b = e.buffer
        fi = self.cexpr(e.indices[0], where)
        if b.scope == "local":
            return self._load_local(b, fi, e.indices[0], where)
        if b.scope == "shared":
            place, _, nd = self._shared_of(b, where)
            n = b.shape[0]
            what = f"load of shared {b.name}"
            sz = nd.itemsize

            def load_shared(st, need):
                idx = _check_range(st, fi(st, need), 0, n - 1, need, what, where)
                pos = st.sbase[place] + idx
                if st.races is not None:
                    st.races.access(pos, sz, need, where, b.name, None)
                return st.sviews[nd][pos]

            return load_shared
        if b.scope == "global":
            gi = self._global_of(b, where)
            what = f"load of global {b.name}"

            def load_global(st, need):
                arr = st.glob[gi]
                idx = _check_range(st, fi(st, need), 0, arr.size - 1, need, what, where)
                return arr[idx]

            return load_global
        raise EmulatorError(f"cannot load from a {b.scope} buffer ({b.name}) in thread IR")

    def _load_local(self, b, fi, idx_expr, where):
        slot = self._reg(b)
        n = b.shape[0]
        c = E.const_value(idx_expr)
        if c is not None:
            c = int(c)
            if not 0 <= c < n:
                def bad_reg(st, need):
                    raise where.error(EmulatorOutOfBoundsError, f"register {b.name}[{c}] is out of bounds "
                                                                f"({n} registers)")

                return bad_reg

            def load_reg(st, need):
                return st.regs[slot][c]

            return load_reg
        nd = dt.to_numpy(b.dtype)

        def load_reg_dyn(st, need):
            idx = _check_range(st, fi(st, need), 0, n - 1, need, f"register {b.name}", where)
            rows = _rows(st.regs[slot], st.L, nd)
            return rows[idx, st.lane] if isinstance(idx, np.ndarray) else rows[int(idx)]

        return load_reg_dyn

    def _shared_of(self, b, where):
        if b not in self.shared:
            raise (where.error(EmulatorError, f"shared buffer {b.name} has no SharedDecl") if where
                   else EmulatorError(f"shared buffer {b.name} has no SharedDecl"))
        return self.shared[b]

    def _global_of(self, b, where) -> int:
        if b not in self.global_index:
            raise EmulatorError(f"global buffer {b.name} is not a kernel parameter")
        return self.global_index[b]

    def _mem(self, b, where):
        """(kind, ...) description of a memory (global/shared) buffer for vector accesses."""
        if b.scope == "shared":
            place, off, nd = self._shared_of(b, where)
            return _SharedMem(b, place, off, nd)
        if b.scope == "global":
            return _GlobalMem(b, self._global_of(b, where))
        raise EmulatorError(f"buffer {b.name} of scope {b.scope} is not memory")

    # ---------------------------------------------------------------- statements
    def stmt(self, s) -> Callable | None:
        if s is None:
            return None
        if isinstance(s, t.SeqStmt):
            fs = tuple(f for f in (self.stmt(x) for x in s.stmts) if f is not None)
            if not fs:
                return None
            if len(fs) == 1:
                return fs[0]

            def seq(st):
                for f in fs:
                    f(st)

            return seq
        if isinstance(s, th.LocalDecl):
            return self.local_decl(s)
        if isinstance(s, (th.SharedDecl, th.Comment)):
            return None
        if isinstance(s, t.LetStmt):
            return self.let(s)
        if isinstance(s, t.BufferStore):
            return self.store(s)
        if isinstance(s, t.IfThenElse):
            return self.if_then_else(s)
        if isinstance(s, t.For):
            return self.for_loop(s)
        if isinstance(s, th.VecCopy):
            return self.vec_copy(s)
        if isinstance(s, th.Barrier):
            return self.barrier(s)
        if isinstance(s, th.NamedBarrier):
            return self.named_barrier(s)
        if isinstance(s, th.AsyncCopy):
            return self.async_copy(s)
        if isinstance(s, th.AsyncCommit):
            return self.async_commit(s)
        if isinstance(s, th.AsyncWait):
            return self.async_wait(s)
        if isinstance(s, th.LoadMatrix):
            return self.load_matrix(s)
        if isinstance(s, th.MatrixMultiply):
            return self.matrix_multiply(s)
        if isinstance(s, th.AtomicRMW):
            return self.atomic(s)
        if isinstance(s, th.MbarrierInit):
            return self.mbarrier_init(s)
        if isinstance(s, th.TmaLoad):
            return self.tma_load(s)
        if isinstance(s, th.MbarrierWait):
            return self.mbarrier_wait(s)
        raise EmulatorError(f"the emulator cannot execute {type(s).__name__} (not a thread IR statement)",
                            getattr(s, "loc", None))

    def local_decl(self, s: th.LocalDecl):
        b = s.buffer
        slot = self._reg(b)
        nd = dt.to_numpy(b.dtype)
        n = b.shape[0]
        init = _poison(nd) if s.init is None else nd.type(E.const_value(s.init) if isinstance(s.init, E.Expr)
                                                           else s.init)

        def decl(st):
            # a declaration inside a loop starts fresh each iteration: stale values would hide bugs
            st.regs[slot] = [init] * n

        return decl

    def let(self, s: t.LetStmt):
        where = _Where(s)
        fv, inv, key = self.expr(s.value, where)
        if inv and self.let_count.get(s.var, 0) == 1:
            self.invariant_vars.add(s.var)
        fv = self._cached(fv, inv, key)
        slot = self._var(s.var)
        nd = dt.to_numpy(s.var.dtype)

        def let(st):
            st.vars[slot] = _fix(fv(st, st.mask), nd)

        return let

    def store(self, s: t.BufferStore):
        where = _Where(s)
        b = s.buffer
        nd = dt.to_numpy(b.dtype)
        fv = self.cexpr(s.value, where)
        fi = self.cexpr(s.indices[0], where)
        if b.scope == "local":
            slot = self._reg(b)
            n = b.shape[0]
            c = E.const_value(s.indices[0])
            if c is not None:
                c = int(c)
                if not 0 <= c < n:
                    raise where.error(EmulatorOutOfBoundsError, f"register {b.name}[{c}] is out of bounds "
                                                                f"({n} registers)")

                def store_reg(st):
                    v = _fix(fv(st, st.mask), nd)
                    regs = st.regs[slot]
                    m = st.mask
                    regs[c] = v if m is None else np.where(m, v, regs[c])

                return store_reg

            def store_reg_dyn(st):
                m = st.mask
                v = _fix(fv(st, m), nd)
                idx = _check_range(st, fi(st, m), 0, n - 1, m, f"register {b.name}", where)
                regs = st.regs[slot]
                idx = np.broadcast_to(idx, (st.L,))
                act = np.ones(st.L, bool) if m is None else m
                for r in np.unique(idx[act]):
                    sel = act & (idx == r)
                    regs[r] = np.where(sel, v, regs[r])

            return store_reg_dyn
        mem = self._mem(b, where)
        what = f"store to {b.scope} {b.name}"

        def store_mem(st):
            m = st.mask
            v = _fix(fv(st, m), nd)
            idx = fi(st, m)
            mem.write(st, idx, v, m, None, what, where)

        return store_mem

    def if_then_else(self, s: t.IfThenElse):
        where = _Where(s)
        fc = self.cexpr(s.cond, where)
        ft = self.stmt(s.then_body)
        fe = self.stmt(s.else_body)

        def branch(st):
            outer = st.mask
            c = fc(st, outer)
            if not isinstance(c, np.ndarray):
                if c:
                    if ft is not None:
                        ft(st)
                elif fe is not None:
                    fe(st)
                return
            if ft is not None:
                tm = _and(outer, c)
                if tm.any():
                    st.mask = _norm_mask(tm) if outer is None else tm
                    try:
                        ft(st)
                    finally:
                        st.mask = outer
            if fe is not None:
                em = _and(outer, ~c)
                if em.any():
                    st.mask = _norm_mask(em) if outer is None else em
                    try:
                        fe(st)
                    finally:
                        st.mask = outer

        return branch

    def for_loop(self, s: t.For):
        where = _Where(s)
        fs = self.cexpr(s.start, where)
        fx = self.cexpr(s.extent, where)
        slot = self._var(s.var)
        body = self.stmt(s.body)
        vt = dt.to_numpy(s.var.dtype).type
        if body is None:
            return None

        def loop(st):
            m = st.mask
            start, ext = fs(st, m), fx(st, m)
            if not isinstance(start, np.ndarray) and not isinstance(ext, np.ndarray):
                for k in range(int(start), int(start) + int(ext)):
                    st.vars[slot] = vt(k)
                    body(st)
                return
            # trip counts differ between lanes: run to the largest and mask lanes out
            lo = np.broadcast_to(start, (st.L,))
            hi = lo + np.broadcast_to(ext, (st.L,))
            act = np.ones(st.L, bool) if m is None else m
            if not act.any() or not (hi > lo)[act].any():
                return
            k0, k1 = int(lo[act].min()), int(hi[act].max())
            try:
                for k in range(k0, k1):
                    km = act & (lo <= k) & (k < hi)
                    if not km.any():
                        continue
                    st.mask = _norm_mask(km) if m is None else km
                    st.vars[slot] = vt(k)
                    body(st)
            finally:
                st.mask = m

        return loop

    def vec_copy(self, s: th.VecCopy):
        where = _Where(s)
        if s.dst.dtype != s.src.dtype:
            raise where.error(EmulatorError, f"vector copy between different dtypes ({s.src.dtype} -> {s.dst.dtype})")
        w = int(s.lanes)
        nd = dt.to_numpy(s.dst.dtype)
        nbytes = w * nd.itemsize
        fp = self.cexpr(s.pred, where) if s.pred is not None else None
        fsi = self.cexpr(s.src_index, where)
        fdi = self.cexpr(s.dst_index, where)
        src_local = s.src.scope == "local"
        dst_local = s.dst.scope == "local"
        if src_local:
            read = self._local_rows(s.src, s.src_index, w, nbytes, where)
        else:
            src_mem = self._mem(s.src, where)
        if dst_local:
            write_regs = self._local_rows(s.dst, s.dst_index, w, nbytes, where, write=True)
        else:
            dst_mem = self._mem(s.dst, where)
        what_src = f"vector load of {s.src.scope} {s.src.name}"
        what_dst = f"vector store to {s.dst.scope} {s.dst.name}"

        def vcopy(st):
            m = st.mask
            p = fp(st, m) if fp is not None else None
            if p is not None and not isinstance(p, np.ndarray):
                if not p:
                    if dst_local:  # a predicated-off load into registers yields zeros
                        write_regs(st, [nd.type(0)] * w, m, fdi)
                    return
                p = None
            act = m if p is None else _and(m, p)
            if act is not None and not act.any():
                if dst_local:
                    write_regs(st, [nd.type(0)] * w, m, fdi)
                return
            if src_local:
                vals = read(st, None, None, fsi)
            else:
                vals = src_mem.read_rows(st, fsi(st, act), w, act, what_src, where, nbytes)
            if dst_local:
                if p is not None:
                    zero = nd.type(0)
                    vals = [np.where(p, v, zero) for v in vals]
                write_regs(st, vals, m, fdi)
            else:
                dst_mem.write(st, fdi(st, act), _rows(vals, st.L, nd) if isinstance(vals, list) else vals, act, w,
                              what_dst, where, nbytes)

        return vcopy

    def _local_rows(self, b, idx_expr, w, nbytes, where, write=False):
        """Reader (or writer) of ``w`` consecutive registers of local ``b`` at a constant index."""
        slot = self._reg(b)
        n = b.shape[0]
        nd = dt.to_numpy(b.dtype)
        c = E.const_value(idx_expr)
        if c is None:
            raise where.error(EmulatorError, f"vector access to registers {b.name} needs a constant index")
        c = int(c)
        if c < 0 or c + w > n:
            raise where.error(EmulatorOutOfBoundsError, f"registers {b.name}[{c}:{c + w}] are out of bounds "
                                                        f"({n} registers)")
        if (c * nd.itemsize) % nbytes:
            raise where.error(MisalignedAccessError, f"{nbytes}-byte vector access to registers {b.name}[{c}] "
                                                     "is not aligned")
        if write:
            def write_regs(st, vals, m, fdi):
                regs = st.regs[slot]
                for j in range(w):
                    v = _fix(vals[j], nd)
                    regs[c + j] = v if m is None else np.where(m, v, regs[c + j])

            return write_regs

        def read_regs(st, *_):
            return st.regs[slot][c:c + w]

        return read_regs

    def barrier(self, s: th.Barrier):
        where = _Where(s)

        def barrier(st):
            m = st.mask
            active = None
            if m is not None:
                per_block = m.reshape(st.nb, st.T)
                full, some = per_block.all(axis=1), per_block.any(axis=1)
                if (some & ~full).any():
                    b = int(np.flatnonzero(some & ~full)[0])
                    missing = int(np.flatnonzero(~per_block[b])[0])
                    raise where.error(DivergenceError, f"{st.where(b * st.T + missing)} skips a barrier that other "
                                                       "threads of its block execute")
                active = full
            if st.races is not None:
                st.races.barrier(active)

        return barrier

    def named_barrier(self, s: th.NamedBarrier):
        """Lanes run in lockstep, so a ``bar.sync`` only has to be reached by exactly ``count`` threads of
        each block that reaches it (a thread partition)."""
        where = _Where(s)
        if s.arrive_only:
            raise where.error(EmulatorError, "named-barrier arrive without wait needs the cooperative emulator")

        def named_barrier(st):
            m = st.mask
            per_block = np.ones((st.nb, st.T), dtype=bool) if m is None else m.reshape(st.nb, st.T)
            counts = per_block.sum(axis=1)
            bad = np.flatnonzero((counts != 0) & (counts != s.count))
            if bad.size:
                b = int(bad[0])
                raise where.error(DivergenceError, f"named barrier {s.barrier_id} expects {s.count} threads but "
                                                   f"{int(counts[b])} threads of block {b} reach it")
            if st.races is not None:
                st.races.barrier(counts > 0)

        return named_barrier

    def async_copy(self, s: th.AsyncCopy):
        where = _Where(s)
        if s.dst.scope != "shared" or s.src.scope != "global":
            raise where.error(EmulatorError, "async copies go from global to shared memory")
        nd = dt.to_numpy(s.dst.dtype)
        if s.src.dtype != s.dst.dtype:
            raise where.error(EmulatorError, f"async copy between different dtypes ({s.src.dtype} -> {s.dst.dtype})")
        if s.nbytes % nd.itemsize:
            raise where.error(EmulatorError, f"async copy of {s.nbytes} bytes is not whole {s.dst.dtype} elements")
        k = s.nbytes // nd.itemsize
        src_mem, dst_mem = self._mem(s.src, where), self._mem(s.dst, where)
        fp = self.cexpr(s.pred, where) if s.pred is not None else None
        fsi = self.cexpr(s.src_index, where)
        fdi = self.cexpr(s.dst_index, where)
        what_src = f"async copy from global {s.src.name}"
        what_dst = f"async copy to shared {s.dst.name}"

        def acopy(st):
            m = st.mask
            p = fp(st, m) if fp is not None else None
            act = m if p is None else _and(m, p)  # lanes that read the source; the others zero-fill
            if act is not None and not isinstance(act, np.ndarray):
                act = None if act else np.zeros(st.L, bool)
            if act is not None and act.any():
                vals = src_mem.read_rows(st, fsi(st, act), k, act, what_src, where, s.nbytes)
                vals = _rows(vals, st.L, nd) if isinstance(vals, list) else vals
            elif act is None:
                vals = src_mem.read_rows(st, fsi(st, None), k, None, what_src, where, s.nbytes)
                vals = _rows(vals, st.L, nd) if isinstance(vals, list) else vals
            else:
                vals = np.zeros((k, st.L), nd)
            if act is not None:
                vals = np.where(act, vals, nd.type(0))
            pos, lanes = dst_mem.positions(st, fdi(st, m), k, m, what_dst, where, s.nbytes)
            vals = vals[:, lanes]
            if st.races is not None:
                st.races.issue(pos, nd.itemsize)
            st.async_open.append((dst_mem, pos, vals, lanes, where))

        return acopy

    def async_commit(self, s: th.AsyncCommit):
        def commit(st):
            # a thread partition commits its own groups: remember which lanes did (see wait)
            group = _AsyncGroup(st.async_open)
            group.mask = None if st.mask is None else np.array(st.mask, dtype=bool)
            st.async_groups.append(group)
            st.async_open = []

        return commit

    def async_wait(self, s: th.AsyncWait):
        where = _Where(s)
        keep = int(s.pending)

        def wait(st):
            if st.mask is not None:
                for g in st.async_groups[:max(len(st.async_groups) - keep, 0)]:
                    if g.mask is None or not np.array_equal(g.mask, st.mask):
                        raise where.error(DivergenceError, "async wait under thread-dependent control flow for "
                                                           "copies other threads committed is not supported by the "
                                                           "emulator")
            while len(st.async_groups) > keep:
                for dst_mem, pos, vals, lanes, w in st.async_groups.pop(0):
                    dst_mem.land(st, pos, vals, lanes, w)

        return wait

    # ---------------------------------------------------------------- TMA and mbarriers
    # Per block and mbarrier: the arrivals a phase expects, the arrivals so far, the number of
    # completed phases, and the TMA writes not yet landed (each tagged with its phase).  A TMA load
    # reads global memory when issued; its bytes land in shared memory at the first wait that
    # observes its phase complete, so a missing or wrong-parity wait reads stale data, and a wait
    # on a phase no load will complete is reported instead of hanging.

    def _block_values(self, st, f):
        v = f(st, None)
        return np.broadcast_to(v, (st.L,))[np.arange(st.nb) * st.T].astype(np.int64)

    def mbarrier_init(self, s: th.MbarrierInit):
        where = _Where(s)
        place, off, _ = self._shared_of(s.bar, where)
        count = int(s.count)

        def init(st):
            if st.mask is not None:
                raise where.error(DivergenceError, "mbarrier init under thread-dependent control flow")
            for i in range(int(s.bar.shape[0])):
                st.mbar[(place, i)] = {"count": count, "arrived": np.zeros(st.nb, np.int64),
                                       "phase": np.zeros(st.nb, np.int64), "pending": []}

        return init

    def _mbar(self, st, place, index, bar, where):
        state = st.mbar.get((place, int(index)))
        if state is None:
            raise where.error(EmulatorError, f"mbarrier {bar.name}[{int(index)}] is used before MbarrierInit")
        return state

    def tma_load(self, s: th.TmaLoad):
        where = _Where(s)
        if s.dst.scope != "shared" or s.tmap.param.scope != "global":
            raise where.error(EmulatorError, "TMA loads go from a global tensor to shared memory")
        src = s.tmap.param
        gi = self._global_of(src, where)
        nd = dt.to_numpy(src.dtype)
        if s.dst.dtype != src.dtype:
            raise where.error(EmulatorError, f"TMA load between different dtypes ({src.dtype} -> {s.dst.dtype})")
        box = tuple(int(x) for x in s.tmap.box)
        if len(box) != len(s.coords) or len(box) != src.ndim or not all(0 < x <= 256 for x in box):
            raise where.error(EmulatorError, f"TMA box {box} does not fit tensor {src.name} of rank {src.ndim}")
        lay = s.layout
        rows = int(np.prod(box[:-1]))
        if tuple(lay.shape) != (rows, box[-1]):
            raise where.error(EmulatorError, f"TMA box {box} written with a layout of shape {lay.shape}")
        grid = np.indices(box).reshape(len(box), -1)  # box element -> coordinate offsets per dim
        r, c = np.divmod(np.arange(rows * box[-1]), box[-1])
        dst_off = np.asarray(lay.offset((r, c)), np.int64)  # box element -> element offset in shared
        nbytes = rows * box[-1] * nd.itemsize
        fcoords = [self.cexpr(E.as_expr(x), where) for x in s.coords]
        fshape = [self.cexpr(E.as_expr(x), where) for x in src.shape]
        fstrides = [self.cexpr(E.as_expr(x), where) for x in src.strides]
        fdi, fbi = self.cexpr(s.dst_index, where), self.cexpr(s.bar_index, where)
        dplace, doff, dnd = self._shared_of(s.dst, where)
        bplace, _, _ = self._shared_of(s.bar, where)
        ndst = s.dst.shape[0]

        def tma(st):
            if st.mask is not None:
                raise where.error(DivergenceError, "TMA load under thread-dependent control flow")
            coords = [self._block_values(st, f) for f in fcoords]
            shape = [self._block_values(st, f) for f in fshape]
            strides = [self._block_values(st, f) for f in fstrides]
            di, bi = self._block_values(st, fdi), self._block_values(st, fbi)
            mem = st.glob[gi]
            for j in range(st.nb):
                # the hardware swizzles by address bits with a period of 8 rows of the swizzle width;
                # a box starting elsewhere would not land in the layout the kernel reads
                period = max(128, 8 * lay.tma_swizzle)
                if (doff + int(di[j]) * nd.itemsize) % period:
                    raise where.error(MisalignedAccessError, f"TMA destination {s.dst.name}[{int(di[j])}] is not "
                                                             f"{period}-byte aligned (its swizzle period)")
                if int(di[j]) < 0 or int(di[j]) + int(dst_off.max()) >= ndst:
                    raise where.error(EmulatorOutOfBoundsError, f"TMA box {box} at {s.dst.name}[{int(di[j])}] "
                                                                f"overruns its {ndst} elements")
                g = [coords[d][j] + grid[d] for d in range(len(box))]
                inside = np.ones(grid.shape[1], bool)
                flat = np.zeros(grid.shape[1], np.int64)
                for d in range(len(box)):
                    inside &= (g[d] >= 0) & (g[d] < shape[d][j])
                    flat += g[d] * strides[d][j]
                vals = np.zeros(grid.shape[1], nd)
                vals[inside] = mem[flat[inside]]
                pos = st.sbase[dplace][j * st.T] + int(di[j]) + dst_off
                state = self._mbar(st, bplace, bi[j], s.bar, where)
                if st.races is not None:
                    st.races.overwrite_check(pos, dnd.itemsize, where, s.dst.name, j)
                    st.races.issue(pos, dnd.itemsize)
                state["pending"].append((j, int(state["phase"][j]), pos, vals, nbytes))
                state["arrived"][j] += 1
                if state["arrived"][j] > state["count"]:
                    raise where.error(EmulatorError, f"mbarrier {s.bar.name}[{int(bi[j])}] gets more arrivals than "
                                                     f"the {state['count']} it was initialised for")
                if state["arrived"][j] == state["count"]:
                    state["arrived"][j] = 0
                    state["phase"][j] += 1

        return tma

    def mbarrier_wait(self, s: th.MbarrierWait):
        where = _Where(s)
        fi, fp = self.cexpr(s.index, where), self.cexpr(s.parity, where)
        bplace, _, _ = self._shared_of(s.bar, where)

        def wait(st):
            if st.mask is not None:
                raise where.error(DivergenceError, "mbarrier wait under thread-dependent control flow is not "
                                                   "supported by the emulator")
            idx, par = self._block_values(st, fi), self._block_values(st, fp)
            for j in range(st.nb):
                state = self._mbar(st, bplace, idx[j], s.bar, where)
                done = int(state["phase"][j])
                # the hardware returns once the phase of this parity has completed: the current
                # phase (index `done`) has parity done % 2; waiting on it waits for loads to come
                if done % 2 == int(par[j]) % 2:
                    raise where.error(EmulatorError, f"waiting on phase parity {int(par[j])} of mbarrier "
                                                     f"{s.bar.name}[{int(idx[j])}] in block {st.first + j}, whose "
                                                     f"phase {done} has {int(state['arrived'][j])} of "
                                                     f"{state['count']} arrivals: the kernel would hang")
                keep = []
                for entry in state["pending"]:
                    b, phase, pos, vals, _ = entry
                    if b == j and phase < done:
                        if st.races is not None:
                            st.races.retire(pos, vals.dtype.itemsize)
                        st.sviews[vals.dtype][pos] = vals
                    else:
                        keep.append(entry)
                state["pending"] = keep

        return wait

    def load_matrix(self, s: th.LoadMatrix):
        where = _Where(s)
        if s.src.scope != "shared" or s.dst.scope != "local":
            raise where.error(EmulatorError, "ldmatrix reads shared memory into registers")
        nd = dt.to_numpy(s.src.dtype)
        if nd.itemsize != 2 or s.dst.dtype != s.src.dtype:
            raise where.error(EmulatorError, f"ldmatrix moves 16-bit elements, not {s.src.dtype} -> {s.dst.dtype}")
        if self.k.num_threads % 32:
            raise where.error(EmulatorError, "ldmatrix needs whole warps of 32 threads")
        num, trans, di = int(s.num), bool(s.trans), int(s.dst_index)
        slot = self._reg(s.dst)
        if di < 0 or di + 2 * num > s.dst.shape[0]:
            raise where.error(EmulatorOutOfBoundsError, f"ldmatrix writes registers {s.dst.name}[{di}:{di + 2 * num}] "
                                                        f"of {s.dst.shape[0]}")
        place, off, _ = self._shared_of(s.src, where)
        n = s.src.shape[0]
        fi = self.cexpr(s.src_index, where)
        # where lane l's element (q, j) comes from: (lane of the warp supplying the row, column offset)
        ln = np.arange(32)
        plan = []
        for q in range(num):
            for j in range(2):
                if trans:
                    plan.append((8 * q + 2 * (ln % 4) + j, ln // 4))
                else:
                    plan.append((8 * q + ln // 4, 2 * (ln % 4) + j))
        supplier = ln < 8 * num

        def ldmatrix(st):
            m = st.mask
            warps = st.L // 32
            if m is not None:
                pw = m.reshape(warps, 32)
                if (pw.any(axis=1) & ~pw.all(axis=1)).any():
                    raise where.error(DivergenceError, "ldmatrix runs under control flow that splits a warp")
            sup = np.tile(supplier, warps)
            need = _and(m, sup) if m is not None else sup
            idx = np.broadcast_to(fi(st, need), (st.L,))
            idx = _check_range(st, idx, 0, n - 8, need, f"ldmatrix row of shared {s.src.name}", where)
            _check_align(st, off + idx * 2, 16, need, f"ldmatrix row of shared {s.src.name}", where)
            base = st.sbase[place]
            view = st.sviews[nd]
            if st.races is not None:
                rows = (base + idx)[:, None] + np.arange(8)
                st.races.access(rows[need].reshape(-1), 2, None, where, s.src.name, np.repeat(st.tid[need], 8))
            wbase = st.lane - st.lane % 32
            regs = st.regs[slot]
            for r, (src_lane, col) in enumerate(plan):
                lane = wbase + np.tile(src_lane, warps)
                v = view[base + idx[lane] + np.tile(col, warps)]
                regs[di + r] = v if m is None else np.where(m, v, regs[di + r])

        return ldmatrix

    def matrix_multiply(self, s: th.MatrixMultiply):
        where = _Where(s)
        mi = s.instr
        G = mi.group_size
        if self.k.num_threads % G:
            raise where.error(EmulatorError, f"{mi.name} runs on groups of {G} lanes; the block has "
                                             f"{self.k.num_threads} threads")
        ops = {}
        for name, (buf, off), elems, want in (("a", s.a, mi.a_elems, mi.a_dtype), ("b", s.b, mi.b_elems, mi.b_dtype),
                                              ("c", s.c, mi.c_elems, mi.acc_dtype),
                                              ("d", s.d, mi.c_elems, mi.acc_dtype)):
            if buf.scope != "local":
                raise where.error(EmulatorError, f"operand {name} of {mi.name} must be registers, not {buf.scope}")
            if buf.dtype != want:
                raise where.error(EmulatorError, f"operand {name} of {mi.name} is {buf.dtype}, the instruction "
                                                 f"takes {want}")
            off = int(E.const_value(off) if isinstance(off, E.Expr) else off)
            if off < 0 or off + elems > buf.shape[0]:
                raise where.error(EmulatorOutOfBoundsError, f"operand {name} of {mi.name}: registers "
                                                            f"{buf.name}[{off}:{off + elems}] of {buf.shape[0]}")
            ops[name] = (self._reg(buf), off, elems, dt.to_numpy(buf.dtype))
        a_plan = _gather_plan(mi, "a", mi.a_index, mi.m, mi.k, mi.a_elems, where)
        b_plan = _gather_plan(mi, "b", mi.b_index, mi.k, mi.n, mi.b_elems, where)
        c_plan = _gather_plan(mi, "c", mi.c_index, mi.m, mi.n, mi.c_elems, where, unique=True)
        d_pos = c_plan[2]  # [c_elems * G] positions in the flat m x n result, e-major
        integer = mi.acc_dtype.startswith("int")
        acc_nd = dt.to_numpy(mi.acc_dtype)
        m_, n_, ce = mi.m, mi.n, mi.c_elems

        def operand(st, name, plan, ng, active):
            slot, off, elems, nd = ops[name]
            rows = _rows(st.regs[slot][off:off + elems], st.L, nd).reshape(elems, ng, G)
            e_idx, l_idx, _, replicas = plan
            mat = rows[e_idx, :, l_idx]  # [rows*cols, groups]
            for (re, rl), (fe, fl) in replicas:
                # hardware reads one copy; which one is unspecified, so the copies must agree
                differ = rows[re, :, rl].view(_uint_of(nd)) != rows[fe, :, fl].view(_uint_of(nd))
                if active is not None:
                    differ &= active[None, :]
                if differ.any():
                    i, g = np.argwhere(differ)[0]
                    raise where.error(EmulatorError, f"{mi.name}: operand {name} is replicated, but lane {int(rl[i])} "
                                                     f"and lane {int(fl[i])} of group {int(g)} hold different values "
                                                     f"for the same element")
            return mat

        def mma(st):
            m = st.mask
            ng = st.L // G
            active = None
            if m is not None:
                pg = m.reshape(ng, G)
                full, some = pg.all(axis=1), pg.any(axis=1)
                if (some & ~full).any():
                    raise where.error(DivergenceError, f"{mi.name} runs under control flow that splits a "
                                                       f"{G}-lane group")
                active = full
            A = operand(st, "a", a_plan, ng, active).T.reshape(ng, m_, mi.k)
            B = operand(st, "b", b_plan, ng, active).T.reshape(ng, mi.k, n_)
            C = operand(st, "c", c_plan, ng, None).T.reshape(ng, m_, n_)
            if integer:
                D = (np.matmul(A.astype(np.int64), B.astype(np.int64)) + C).astype(acc_nd)
            else:
                D = (np.matmul(A.astype(_F32), B.astype(_F32)) + C.astype(_F32)).astype(acc_nd)
            out = D.reshape(ng, m_ * n_)[:, d_pos].reshape(ng, ce, G).transpose(1, 0, 2).reshape(ce, st.L)
            slot, off, _, _ = ops["d"]
            regs = st.regs[slot]
            for e in range(ce):
                regs[off + e] = out[e] if m is None else np.where(m, out[e], regs[off + e])

        return mma

    def atomic(self, s: th.AtomicRMW):
        where = _Where(s)
        b = s.buffer
        nd = dt.to_numpy(b.dtype)
        mem = self._mem(b, where)
        fi = self.cexpr(s.index, where)
        fv = self.cexpr(s.value, where)
        op = s.op
        if op not in ("add", "max", "min"):
            raise where.error(EmulatorError, f"unknown atomic operation {op!r}")
        what = f"atomic {op} on {b.scope} {b.name}"
        prev_slot = None if s.result is None else self._reg(s.result[0])
        prev_reg = None if s.result is None else int(E.const_value(s.result[1]))

        def atomic(st):
            m = st.mask
            v = np.broadcast_to(_fix(fv(st, m), nd), (st.L,))
            pos, lanes = mem.positions(st, fi(st, m), None, m, what, where, nd.itemsize)
            arr = mem.backing(st)
            vals = v[lanes]
            pos = np.broadcast_to(pos, vals.shape)
            if st.races is not None and b.scope == "shared":
                st.races.access(pos, nd.itemsize, None, where, b.name, st.tid[lanes], atomic=True)
            if prev_slot is not None:  # return_prev: lanes update one at a time, in lane order
                regs = st.regs[prev_slot]
                got = np.broadcast_to(np.asarray(regs[prev_reg], dtype=nd), (st.L,)).copy()
                for n, (p, x) in enumerate(zip(pos.tolist(), vals)):
                    got[lanes[n]] = arr[p]
                    if op == "add":
                        arr[p] = arr[p] + x
                    elif not (_is_float_np(nd) and np.isnan(x)):
                        arr[p] = max(arr[p], x) if op == "max" else min(arr[p], x)
                regs[prev_reg] = got
                return
            if op == "add":
                np.add.at(arr, pos, vals)
            else:
                if _is_float_np(nd):  # the CAS loops of the printers never store a NaN operand
                    keep = ~np.isnan(vals.astype(_F32))
                    pos, vals = pos[keep], vals[keep]
                (np.maximum if op == "max" else np.minimum).at(arr, pos, vals)

        return atomic


_BINOPS = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal, "&": np.bitwise_and, "|": np.bitwise_or,
    "^": np.bitwise_xor, "<<": np.left_shift, ">>": np.right_shift, "pow": np.power,
}


def _has_effects(e) -> bool:
    """Whether evaluating ``e`` on lanes that do not need it could fail (loads, shuffles)."""
    found = False

    def f(x):
        nonlocal found
        if isinstance(x, (E.Load, E.Shuffle)):
            found = True

    walk_expr(e, f)
    return found


def _uint_of(nd: np.dtype) -> np.dtype:
    return np.dtype(f"u{nd.itemsize}")


def _gather_plan(mi, name: str, index_fn, rows: int, cols: int, elems: int, where: _Where, unique: bool = False):
    """Where each element of operand ``name`` lives: for every (row, col), row-major, the register
    ``e`` and lane ``l`` of its first holder (lowest lane, then lowest register), the flat positions
    of every (e, l) (e-major) and the extra holders of replicated elements."""
    G = mi.group_size
    lane = np.arange(G)
    pos = np.empty((elems, G), np.int64)
    for e in range(elems):
        r, c = index_fn(lane, e)
        r, c = np.broadcast_to(np.asarray(r), (G,)), np.broadcast_to(np.asarray(c), (G,))
        if (r < 0).any() or (r >= rows).any() or (c < 0).any() or (c >= cols).any():
            raise where.error(EmulatorError, f"{mi.name}: the {name} layout maps register {e} outside the "
                                             f"{rows}x{cols} matrix")
        pos[e] = r * cols + c
    flat = pos.T.reshape(-1)  # lane-major order, so the first hit is the lowest lane
    order = np.argsort(flat, kind="stable")
    sorted_pos = flat[order]
    firsts = np.ones(len(sorted_pos), bool)
    firsts[1:] = sorted_pos[1:] != sorted_pos[:-1]
    covered = sorted_pos[firsts]
    if len(covered) != rows * cols:
        raise where.error(EmulatorError, f"{mi.name}: the {name} layout leaves {rows * cols - len(covered)} of "
                                         f"{rows}x{cols} elements unheld")
    if unique and not firsts.all():
        raise where.error(EmulatorError, f"{mi.name}: the {name} layout gives an element to two lanes")
    first_idx = order[firsts]  # lane-major flat index (l * elems + e) of each element's first holder
    l_idx, e_idx = first_idx // elems, first_idx % elems
    replicas = []
    if not firsts.all():
        group_start = np.cumsum(firsts) - 1
        extra = ~firsts
        other = order[extra]
        first_of = first_idx[group_start[extra]]
        replicas.append(((other % elems, other // elems), (first_of % elems, first_of // elems)))
    return e_idx, l_idx, pos.reshape(-1), replicas


# --------------------------------------------------------------------------------------------
# memory buffers (global / shared) for element and vector accesses


class _GlobalMem:
    def __init__(self, b, gi):
        self.b, self.gi = b, gi
        self.nd = dt.to_numpy(b.dtype)

    def backing(self, st):
        return st.glob[self.gi]

    def positions(self, st, idx, w, need, what, where, nbytes):
        """Flat positions of ``w`` consecutive elements (``w`` None: one) at ``idx`` for the lanes in
        ``need``; returns (positions [w, n] or [n], lane indices)."""
        arr = st.glob[self.gi]
        span = 1 if w is None else w
        lanes = st.lane if need is None else np.flatnonzero(need)
        idx = np.broadcast_to(idx, (st.L,))[lanes]
        if len(lanes):
            _check_range(st, idx, 0, arr.size - span, None, what, where)
            _check_align(st, idx * self.nd.itemsize, nbytes, None, what, where)
        if w is None:
            return idx, lanes
        return idx[None, :] + np.arange(w)[:, None], lanes

    def read_rows(self, st, idx, w, need, what, where, nbytes):
        arr = st.glob[self.gi]
        if not isinstance(idx, np.ndarray):
            if need is None or need.any():
                _check_range(st, idx, 0, arr.size - w, need, what, where)
                _check_align(st, idx * self.nd.itemsize, nbytes, need, what, where)
                return [arr[int(idx) + j] for j in range(w)]
            return [self.nd.type(0)] * w
        idx = _check_range(st, idx, 0, arr.size - w, need, what, where)
        _check_align(st, idx * self.nd.itemsize, nbytes, need, what, where)
        return arr[idx[None, :] + np.arange(w)[:, None]]

    def write(self, st, idx, vals, need, w, what, where, nbytes=None):
        arr = st.glob[self.gi]
        pos, lanes = self.positions(st, idx, w, need, what, where, nbytes or self.nd.itemsize)
        if not len(lanes):
            return
        vals = np.broadcast_to(vals, (st.L,) if w is None else (w, st.L))[..., lanes]
        if st.races is not None:
            _check_duplicate_stores(st, pos, vals, lanes, where, self.b.name)
        arr[pos] = vals


class _SharedMem:
    def __init__(self, b, place, off, nd):
        self.b, self.place, self.off, self.nd = b, place, off, nd
        self.n = b.shape[0]

    def backing(self, st):
        return st.sviews[self.nd]

    def positions(self, st, idx, w, need, what, where, nbytes):
        span = 1 if w is None else w
        lanes = st.lane if need is None else np.flatnonzero(need)
        idx = np.broadcast_to(idx, (st.L,))[lanes]
        if len(lanes):
            _check_range(st, idx, 0, self.n - span, None, what, where)
            _check_align(st, self.off + idx * self.nd.itemsize, nbytes, None, what, where)
        pos = st.sbase[self.place][lanes] + idx
        if w is None:
            return pos, lanes
        return pos[None, :] + np.arange(w)[:, None], lanes

    def read_rows(self, st, idx, w, need, what, where, nbytes):
        idx = _check_range(st, np.broadcast_to(idx, (st.L,)), 0, self.n - w, need, what, where)
        _check_align(st, self.off + idx * self.nd.itemsize, nbytes, need, what, where)
        pos = (st.sbase[self.place] + idx)[None, :] + np.arange(w)[:, None]
        if st.races is not None:
            lanes = st.lane if need is None else np.flatnonzero(need)
            st.races.access(pos[:, lanes].reshape(-1), self.nd.itemsize, None, where, self.b.name,
                            np.tile(st.tid[lanes], w))
        return st.sviews[self.nd][pos]

    def write(self, st, idx, vals, need, w, what, where, nbytes=None):
        pos, lanes = self.positions(st, idx, w, need, what, where, nbytes or self.nd.itemsize)
        if not len(lanes):
            return
        vals = np.broadcast_to(_fix(vals, self.nd), (st.L,) if w is None else (w, st.L))[..., lanes]
        view = st.sviews[self.nd]
        if st.races is not None:
            tids = np.broadcast_to(st.tid[lanes], pos.shape)
            st.races.write(pos.reshape(-1), self.nd, np.ascontiguousarray(vals).reshape(-1), tids.reshape(-1),
                           where, self.b.name)
        view[pos] = vals

    def land(self, st, pos, vals, lanes, where):
        """Complete an async copy issued earlier (``pos`` [k, n], ``vals`` [k, n])."""
        if st.races is not None:
            tids = np.broadcast_to(st.tid[lanes], pos.shape)
            st.races.retire(pos, self.nd.itemsize)
            st.races.write(pos.reshape(-1), self.nd, np.ascontiguousarray(vals).reshape(-1), tids.reshape(-1),
                           where, self.b.name)
        st.sviews[self.nd][pos] = vals


def _check_duplicate_stores(st, pos, vals, lanes, where, name):
    flat_pos = np.asarray(pos).reshape(-1)
    flat_val = np.ascontiguousarray(vals).reshape(-1)
    order = np.argsort(flat_pos, kind="stable")
    p, v = flat_pos[order], flat_val[order].view(_uint_of(flat_val.dtype))
    clash = (p[1:] == p[:-1]) & (v[1:] != v[:-1])
    if clash.any():
        i = int(np.flatnonzero(clash)[0])
        raise where.error(RaceError, f"threads store different values to {name}[{int(p[i])}] in one statement")


class _Races:
    """Per-block shared-memory access sets since the last barrier, at byte granularity.

    ``wmin``/``wmax``: smallest/largest thread that changed the byte; ``rmin``/``rmax``: the same for
    readers; ``pending``: async copies issued to the byte and not yet landed."""

    NONE_MIN = np.iinfo(np.int32).max

    def __init__(self, st: _State):
        self.st = st
        n = st.nb * st.S
        self.wmin = np.full(n, self.NONE_MIN, np.int32)
        self.wmax = np.full(n, -1, np.int32)
        self.rmin = np.full(n, self.NONE_MIN, np.int32)
        self.rmax = np.full(n, -1, np.int32)
        self.pending = np.zeros(n, np.int32)

    def _bytes(self, pos, sz):
        pos = np.asarray(pos).reshape(-1)
        return (pos[:, None] * sz + np.arange(sz)).reshape(-1)

    def _describe(self, byte, name):
        S = self.st.S
        b = int(byte) // S
        return f"block {self.st.first + b}, shared byte {int(byte) % S} ({name})"

    def access(self, pos, sz, need, where, name, tids, atomic=False):
        """A read of elements ``pos`` (flat element positions of the ``sz``-byte view)."""
        st = self.st
        if tids is None:
            lanes = st.lane if need is None else np.flatnonzero(need)
            pos = np.broadcast_to(pos, (st.L,))[lanes]
            tids = st.tid[lanes]
        byts = self._bytes(pos, sz)
        tb = np.repeat(np.asarray(tids).reshape(-1), sz)
        pend = self.pending[byts] > 0
        if pend.any():
            i = int(np.flatnonzero(pend)[0])
            raise where.error(RaceError, f"thread {int(tb[i])} reads {self._describe(byts[i], name)} while an async "
                                         "copy to it is still pending (missing async wait?)")
        if atomic:
            return
        wmin, wmax = self.wmin[byts], self.wmax[byts]
        other = (wmax >= 0) & ~((wmin == tb) & (wmax == tb))
        if other.any():
            i = int(np.flatnonzero(other)[0])
            w = int(wmax[i]) if int(wmax[i]) != int(tb[i]) else int(wmin[i])
            raise where.error(RaceError, f"thread {int(tb[i])} reads {self._describe(byts[i], name)}, which thread "
                                         f"{w} wrote since the last barrier (missing barrier?)")
        np.minimum.at(self.rmin, byts, tb)
        np.maximum.at(self.rmax, byts, tb)

    def write(self, pos, nd, vals, tids, where, name):
        sz = nd.itemsize
        byts = self._bytes(pos, sz)
        new = np.ascontiguousarray(vals).view(np.uint8).reshape(-1)
        tb = np.repeat(np.asarray(tids).reshape(-1), sz)
        if self.pending[byts].any():
            i = int(np.flatnonzero(self.pending[byts])[0])
            raise where.error(RaceError, f"thread {int(tb[i])} writes {self._describe(byts[i], name)} while an "
                                         "async copy to it is still pending")
        order = np.argsort(byts, kind="stable")
        sb, sv = byts[order], new[order]
        clash = (sb[1:] == sb[:-1]) & (sv[1:] != sv[:-1])
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            raise where.error(RaceError, f"threads {int(tb[order][i])} and {int(tb[order][i + 1])} store different "
                                         f"values to {self._describe(sb[i], name)} in one statement")
        changed = self.st.smem[byts] != new
        if not changed.any():
            return
        byts, tb = byts[changed], tb[changed]
        rmin, rmax, wmin, wmax = self.rmin[byts], self.rmax[byts], self.wmin[byts], self.wmax[byts]
        other_r = (rmax >= 0) & ~((rmin == tb) & (rmax == tb))
        other_w = (wmax >= 0) & ~((wmin == tb) & (wmax == tb))
        bad = other_r | other_w
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            kind = "read" if other_r[i] else "wrote"
            o = (rmax if other_r[i] else wmax)[i]
            o = int(o) if int(o) != int(tb[i]) else int((rmin if other_r[i] else wmin)[i])
            raise where.error(RaceError, f"thread {int(tb[i])} changes {self._describe(byts[i], name)}, which thread "
                                         f"{o} {kind} since the last barrier (missing barrier?)")
        np.minimum.at(self.wmin, byts, tb)
        np.maximum.at(self.wmax, byts, tb)

    def issue(self, pos, sz):
        np.add.at(self.pending, self._bytes(pos, sz), 1)

    def overwrite_check(self, pos, sz, where, name, block):
        """A TMA load about to overwrite bytes: no thread may have read or written them since the
        last barrier (the copy is not ordered after those accesses)."""
        byts = self._bytes(pos, sz)
        touched = (self.rmax[byts] >= 0) | (self.wmax[byts] >= 0) | (self.pending[byts] > 0)
        if touched.any():
            i = int(np.flatnonzero(touched)[0])
            raise where.error(RaceError, f"a TMA load overwrites {self._describe(byts[i], name)}, which a thread "
                                         "accessed since the last barrier or a copy still targets (missing barrier "
                                         "or wait?)")

    def retire(self, pos, sz):
        np.subtract.at(self.pending, self._bytes(pos, sz), 1)

    def barrier(self, active_blocks):
        S = self.st.S
        for arr, v in ((self.wmin, self.NONE_MIN), (self.wmax, -1), (self.rmin, self.NONE_MIN), (self.rmax, -1)):
            if active_blocks is None:
                arr.fill(v)
            else:
                arr.reshape(-1, S)[active_blocks] = v
