"""The tile-op registry (``ir.tile_ops``): every Tile IR statement is a declared tile op or
structural, and a tile op defined only here -- ``Scale(dst, factor)``: ``dst *= factor`` on a tile --
runs through the interpreter, the compiler (verifier, barrier insertion, lowering, CUDA/HIP source)
and the emulator, and prints, with its declaration and one hook per layer and no other file edited.
Outputs are poisoned with NaN; results are compared with a float64 NumPy reference."""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright.language as T
from tilewright.backends import backend_for
from tilewright.compiler import _verify
from tilewright.frontend import builder
from tilewright.frontend.regions import to_region
from tilewright.interp.emulator import RaceError, run_thread_kernel
from tilewright.interp.tile import run_tile_ir
from tilewright.ir import expr as E
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir import tile_ops
from tilewright.ir.printer import expr_str, print_func, region_str
from tilewright.ir.visitor import rebuild, walk
from tilewright.passes.expand_tile_ops import in_bounds, region_indices
from tilewright.passes.lower_exprs import lower_expr
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target.base import Target

TARGETS = ["cuda -arch=sm_90a", "cuda -arch=sm_80", "hip -arch=gfx942", "hip -arch=gfx1100"]


def test_every_tile_ir_statement_is_a_tile_op_or_structural():
    classes = [c for c in vars(t).values() if isinstance(c, type) and issubclass(c, t.Stmt) and c is not t.Stmt]
    assert classes
    for c in classes:
        declared, structural = c in tile_ops.declared(), c in tile_ops.STRUCTURAL
        assert declared != structural, f"{c.__name__}: declare it in ir.tile_ops or list it in STRUCTURAL"
    for c in tile_ops.declared():  # the built-in ops have their meaning in every layer
        if c.__module__ == t.__name__:
            assert tile_ops.hook(c, "interp") is not None, c.__name__
            assert tile_ops.hook(c, "lower") or tile_ops.hook(c, "expand"), c.__name__


def test_register_refuses_undeclared_ops_and_unknown_layers():
    @dataclass(eq=False)
    class Nothing(t.Stmt):
        loc: Any = None

    with pytest.raises(TypeError, match="not a declared tile op"):
        tile_ops.register(Nothing, "interp", lambda *a: None)
    with pytest.raises(ValueError, match="unknown layer"):
        tile_ops.register(t.Copy, "codegen", lambda *a: None)
    with pytest.raises(TypeError, match="structural"):
        tile_ops.declare(t.ParallelFor, tile_ops.TileOpDecl("parallel", lambda s: [], lambda s, r, e: s, str))


# ------------------------------------------------------------------------------------------
# the toy op: everything it needs is below


@dataclass(eq=False)
class Scale(t.Stmt):
    """``dst *= factor`` on a tile."""

    dst: t.Region
    factor: Any
    loc: Any = None


def scale(buf, factor):
    """What kernel code calls (the language layer's part)."""
    r = to_region(buf, what="scale target")
    builder.current().emit(Scale(r, E.cast(r.buffer.dtype, factor)))


def _interp(interp, s: Scale, c) -> None:
    interp._tile_op_allowed(c, "scale")
    f = interp._scalar(s.factor, c, "the scale factor")
    old = interp._read_region(s.dst, c, "scale")
    interp._write_region(s.dst, c, (old * f).astype(old.dtype), "scale")


def _expand(s: Scale):
    """Fragments: an elementwise ``T.Parallel`` loop, which infer_layouts and the lowering know."""
    if s.dst.buffer.scope != "fragment":
        return None
    shape = tuple(s.dst.shape)
    vs = [E.Var(f"s{k}", "int32", kind="loop") for k in range(len(shape))]
    idx = region_indices(s.dst, vs, shape)
    store = t.BufferStore(s.dst.buffer, idx, E.Load(s.dst.buffer, idx) * s.factor, loc=s.loc)
    return t.ParallelFor(tuple(vs), shape, store, loc=s.loc)


def _lower(lowering, s: Scale, env) -> list:
    """Shared or global tiles: thread k of the block scales elements k, k + threads, ..."""
    ctx, r = lowering.ctx, s.dst
    n = math.prod(r.shape)
    k = E.Var(ctx.fresh("k"), "int32", kind="loop")
    flat = ctx.tid + k * ctx.nthreads
    idx, rest = list(r.starts), flat
    tile_dims = [d for d in range(r.buffer.ndim) if d not in r.squeezed]
    for d in reversed(tile_dims):
        idx[d] = idx[d] + rest % r.extents[d]
        rest = rest // r.extents[d]
    idx = tuple(lower_expr(ctx, x, env, s.loc) for x in idx)
    fb, off = ctx.flat_access(r.buffer, idx)
    store = t.BufferStore(fb, (off,), E.Load(fb, (off,)) * lower_expr(ctx, s.factor, env, s.loc), loc=s.loc)
    cond = flat < n
    bounds = in_bounds(r.buffer, idx)
    if bounds is not None:
        cond = E.binary("and", cond, bounds)
    trips = -(-n // ctx.nthreads)
    return [t.For(k, E.as_expr(0), E.as_expr(trips), t.IfThenElse(cond, store, None, loc=s.loc), loc=s.loc)]


@pytest.fixture
def scale_op():
    tile_ops.declare(Scale, tile_ops.TileOpDecl(
        "scale", regions=lambda s: [(s.dst, "rw")], exprs=lambda s: [s.factor],
        rebuild=lambda s, rf, ef: rebuild(s, dst=rf(s.dst), factor=ef(s.factor)),
        text=lambda s: f"scale({region_str(s.dst)}, {expr_str(s.factor)})"))
    tile_ops.register(Scale, "interp", _interp)
    tile_ops.register(Scale, "expand", _expand)
    tile_ops.register(Scale, "lower", _lower)
    yield Scale
    tile_ops.unregister(Scale)


def via_shared(N, block=256, threads=128):
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            S = T.alloc_shared((block,), "float32")
            T.copy(A[bx * block], S)
            scale(S, 3.0)
            T.copy(S, B[bx * block])

    return k


def via_fragment(M, N, bm=16, bn=64):
    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), f: T.float32):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            F = T.alloc_fragment((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], F)
            scale(F, f)
            T.copy(F, B[by * bm, bx * bn])

    return k


def in_place_global(N):
    @T.prim_func
    def k(A: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            scale(A[bx * 128:(bx + 1) * 128], -2.0)

    return k


def _compile(func, target):
    _verify(func)
    return run_pipeline(func, PassContext(Target.parse(target)))


@pytest.mark.parametrize("target", ["interpret"] + TARGETS)
def test_scale_on_shared_memory(scale_op, target):
    rng = np.random.default_rng(1)
    N = 1000
    a, b = rand(rng, N), poisoned(N)
    if target == "interpret":
        run_tile_ir(via_shared(N), [a, b])
    else:
        run_thread_kernel(_compile(via_shared(N), target), [a, b], check_races=True)
    close(b, f64(a) * 3.0)


@pytest.mark.parametrize("target", ["interpret"] + TARGETS)
def test_scale_on_fragments_and_global(scale_op, target):
    rng = np.random.default_rng(2)
    M, N = 40, 100
    a, b = rand(rng, (M, N)), poisoned((M, N))
    g = rand(rng, 300)
    want_g = f64(g) * -2.0
    if target == "interpret":
        run_tile_ir(via_fragment(M, N), [a, b, 0.5])
        run_tile_ir(in_place_global(300), [g])
    else:
        run_thread_kernel(_compile(via_fragment(M, N), target), [a, b, 0.5], check_races=True)
        run_thread_kernel(_compile(in_place_global(300), target), [g], check_races=True)
    close(b, f64(a) * 0.5)
    close(g, want_g)


def test_scale_declaration_drives_barriers_printing_and_codegen(scale_op):
    func = via_shared(1000)
    text = print_func(func)
    assert "scale(S, 3.0)" in text
    for target in TARGETS:
        kernel = _compile(via_shared(1000), target)
        barriers = []
        walk(kernel.body, lambda s: barriers.append(s) if isinstance(s, th.Barrier) else None)
        # copy into S | barrier | scale S | barrier | copy out of S: the declared "rw" region orders them
        assert len(barriers) >= 2, target
        src = backend_for(Target.parse(target)).print_source(kernel)
        assert "3.0" in src or "3.0f" in src, target


def test_without_the_declared_write_the_emulator_sees_the_race(scale_op):
    """The barriers in the test above come from the declaration: declared read-only, the scale's
    writes to S are unordered with the copy out, and the race detector reports it."""
    tile_ops.declare(Scale, tile_ops.TileOpDecl(
        "scale", regions=lambda s: [(s.dst, "r")], exprs=lambda s: [s.factor],
        rebuild=lambda s, rf, ef: s, text=lambda s: "scale"))
    rng = np.random.default_rng(3)
    a, b = rand(rng, 1000), poisoned(1000)
    with pytest.raises(RaceError):
        run_thread_kernel(_compile(via_shared(1000), "cuda -arch=sm_80"), [a, b], check_races=True)


def test_scale_is_refused_inside_t_parallel(scale_op):
    from tilewright.errors import CompileError

    with pytest.raises(CompileError, match="T.scale cannot be used inside a T.Parallel loop"):
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((64,), "float32")
                for i in T.Parallel(64):
                    scale(S[i:i + 1], 2.0)
                T.copy(S, A)

        _verify(k)

