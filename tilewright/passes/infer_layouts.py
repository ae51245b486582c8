"""Pass ``infer_layouts``: decide where every fragment element lives and how shared tiles are laid out.

Needs: Tile IR after ``expand_tile_ops`` (elementwise work is in ``ParallelFor`` loops) and
``plan_gemms`` (``func.plans.gemms``), a target.
Guarantees, recorded in ``func.plans`` (``ir.plans.Plans``):

* ``fragment_layouts[buffer]``: a ``FragmentLayout`` for every fragment, found in this order:
  0. A fragment with a ``T.Fragment`` annotation takes that layout (``user_layouts``); an operation
     that needs another (a gemm accumulator or operand) is a CompileError.
  1. ``T.gemm`` accumulators take the matrix instruction's accumulator layout over a warp grid
     of the gemm's plan (a SIMT layout when the plan is SIMT); a fragment A operand takes the
     matching operand layout (of a SIMT gemm, no layout from the gemm: ``lower_gemm`` stages it in
     shared memory).
  2. Propagation to a fixpoint: ``T.reduce`` gives its destination the reduced source layout;
     in a ``T.Parallel`` loop, fragments indexed exactly by the loop variables share one layout,
     and fragments indexed by a subset of them take the projection of it.
  3. Fragments still without a layout get a striped layout (vectorized chunks per thread), the
     earliest-used first, and propagation runs again.  A reduction source whose rows (slices along
     the reduced dimension) the striped layout splits differently in different threads gets a
     ``SlicedLayout`` instead; a reduction or projection that still has no register grouping common
     to all threads leaves its destination to a default layout (``lower_reduce`` / ``lower_parallel``
     then go through shared memory).
* ``parallel_layouts[loop]``: the layout each ``T.Parallel`` loop iterates by (``WholeLayout``, every
  thread every iteration, for a loop that fills a block-wide table ``frontend.uniform_fragments`` made;
  the stored fragment's layout for a loop that stores to it at other positions than its own:
  ``store_driven_layouts``).
* ``shared_layouts[buffer]``: row-major, XOR-swizzled for tiles read by matrix loads; the TMA
  layout (``SharedLayout(tma=True)``) for ring buffers ``pipeline_loops`` marked for TMA and for
  operands of wgmma gemms (the layout a wgmma matrix descriptor describes).  A wgmma accumulator
  takes ``MmaAccumLayout`` over the warpgroup grid with the m64nN instruction's C layout (warp w of
  a warpgroup owns rows 16w..16w+15 of each 64-row atom), a fragment A the m64nNk16 A layout.
  Operands of MFMA/WMMA gemms (AMD) take the layouts of ``lower_gemm_amd.operand_layouts``:
  swizzled or padded rows when K is the tile's last dimension, ``KPackedLayout`` when it is the
  first, so that lanes read their K runs as 64/128-bit vectors.

Errors name the gemm or loop and say what to change (tile too small for the warps, transposed
fragment operands, conflicting layouts).
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import tile as t
from ..ir.layout import (
    MmaAccumLayout,
    MmaOperandLayout,
    ReducedLayout,
    SharedLayout,
    SimtAccumLayout,
    SlicedLayout,
    StripedLayout,
    WholeLayout,
)
from ..ir.uniformity import thread_sets
from ..ir.verifier import exprs_of, regions_of
from ..ir.visitor import loads_in, walk
from .store_driven_layouts import store_driven_layout
from .user_layouts import check_user_reductions, user_layouts


def infer_layouts(func: t.PrimFunc, ctx) -> t.PrimFunc:
    target = ctx.target
    kernel = _kernel(func)
    nthreads = kernel.num_threads
    stmts: list = []
    walk(func.body, stmts.append)
    # each statement is planned for the threads that execute it (the block or a thread partition)
    sets = thread_sets(func.body, nthreads)

    def count(s) -> int:
        return sets.get(s, (0, nthreads))[1]

    frag_counts = _fragment_thread_counts(stmts, count)
    frags = [s.buffer for s in stmts if isinstance(s, t.Alloc) and s.buffer.scope == "fragment"]
    layouts: dict = {}
    plans = func.plans.gemms

    def assign(buf, layout, why, loc):
        old = layouts.get(buf)
        if old is None:
            layouts[buf] = layout
            return True
        if not old.same_as(layout):
            raise CompileError(f"fragment {buf.name} would need two different layouts ({old} and {layout}, the "
                               f"second for {why})", loc,
                               hint="use separate fragments for the two uses and T.copy between them")
        return False

    # 0. layouts the program gives (T.annotate_layout with a T.Fragment)
    user = user_layouts(frags, frag_counts, nthreads)
    layouts.update(user)

    def assign_op(buf, lay, why, loc):
        if buf in user and not user[buf].same_as(lay):
            raise CompileError(f"fragment {buf.name} is laid out by its T.Fragment annotation, but {why} needs it in "
                               f"the layout {lay}", loc, hint=f"remove the T.Fragment annotation of {buf.name}, or "
                               "T.copy between a fragment in that layout and one for this operation")
        assign(buf, lay, why, loc)

    # 1. gemm constraints
    for s in stmts:
        if isinstance(s, t.Gemm):
            plan = plans[s]
            shape = tuple(s.c.shape)
            if plan.kind == "mma":
                lay = MmaAccumLayout(shape, plan.instr, plan.warps_m, plan.warps_n, count(s))
            else:
                lay = SimtAccumLayout(shape, plan.tm, plan.tn, count(s))
            if s.c.buffer.scope == "fragment":
                if not s.c.is_full():
                    raise CompileError(f"T.gemm accumulator {s.c.buffer.name} must be used whole", s.loc)
                assign_op(s.c.buffer, lay, "T.gemm (as its accumulator)", s.loc)
            if s.a.buffer.scope == "fragment" and plan.kind == "mma":  # (SIMT: lower_gemm stages A in shared)
                if s.trans_a:
                    raise CompileError("T.gemm with A in a fragment does not support transpose_A=True", s.loc,
                                       hint="transpose while filling the fragment instead")
                assign_op(s.a.buffer, MmaOperandLayout(tuple(s.a.shape), plan.instr, plan.warps_m, plan.warps_n,
                                                       count(s)), "T.gemm (as its A operand)", s.loc)
            if s.b.buffer.scope == "fragment":
                raise CompileError("T.gemm operand B must be in shared memory", s.loc,
                                   hint="T.copy it into a T.alloc_shared buffer first")

    # 2./3. propagation with defaults
    parallels = [s for s in stmts if isinstance(s, t.ParallelFor)]
    while True:
        changed = True
        while changed:
            changed = False
            for s in stmts:
                if isinstance(s, t.Reduce) and s.src in layouts and s.dst.scope == "fragment" \
                        and s.dst not in layouts and s.src.scope == "fragment":
                    red = _reduced(layouts[s.src], s.dim, s.dst.shape)
                    if red is not None:  # else the destination gets a default layout of its own
                        layouts[s.dst] = red
                        changed = True
                elif isinstance(s, t.ParallelFor):
                    changed |= _propagate_parallel(s, layouts, assign)
        missing = [b for b in frags if b not in layouts]
        if not missing:
            break
        buf = _first_use_order(missing, stmts)
        layouts[buf] = _default_layout(buf, frag_counts.get(buf, nthreads), stmts)

    for b, lay in layouts.items():
        try:
            lay.check_complete()
        except ValueError:
            raise CompileError(f"fragment {b.name}{tuple(b.shape)} cannot be spread over {nthreads} threads "
                               f"({lay})", b.loc, hint="use a tile size that the thread count divides") from None

    check_user_reductions(stmts, layouts, user, target)
    _check_register_budget(layouts, nthreads, target)
    par_layouts = func.plans.parallel_layouts
    for p in parallels:
        drive = _driving(p, layouts)
        if drive is None and _fills_table(p):
            # a block-wide table (frontend.uniform_fragments) is whole in every thread: each runs
            # every iteration (a striped layout would fill each copy only at the positions it iterates)
            drive = WholeLayout(p.extents, count(p))
        elif drive is None:
            dtypes = [b.dtype for b in _buffers_in(p)] or ["float32"]
            vec = _vec_for(p.extents, dtypes)
            if p.coalesced_width is not None:  # the author's bound on the elements per vector access
                vec = min(vec, p.coalesced_width)
            drive = StripedLayout(p.extents, count(p), vec)
        # a loop that stores to a fragment at positions other than its own (a transpose, a part or a
        # reshaped view of an accumulator) iterates by that fragment's layout (store_driven_layouts.py)
        drive = store_driven_layout(p, layouts, drive, count(p)) or drive
        par_layouts[p] = drive

    shared = {}
    gemm_operands, wgmma_operands = set(), set()
    for s in stmts:
        if isinstance(s, t.Gemm):
            plan = plans[s]
            for r in (s.a, s.b):
                if r.buffer.scope == "shared" and plan.kind == "mma":
                    gemm_operands.add(r.buffer)
                    if plan.family == "wgmma":
                        wgmma_operands.add(r.buffer)
    # destinations of T.tma_copy are written in the TMA layout too
    tma_copy_dsts = {s.dst.buffer for s in stmts if isinstance(s, t.Copy) and s.user_sync}
    tma_copy_dsts |= {s.src.buffer for s in stmts if isinstance(s, t.Copy) and s.mode == "tma_store"}  # and sources
    for s in stmts:
        if isinstance(s, t.Alloc) and s.buffer.scope == "shared" and s.buffer.static_shape() is not None:
            b = s.buffer  # (a shared buffer sized at launch is row-major: lowering_context.shared_flat)
            # ring buffers filled by TMA take the layout the TMA writes (swizzled like the ldmatrix one);
            # wgmma operands take it too: its swizzles (32/64/128-byte rows, 128-byte column blocks,
            # 1 KiB aligned) are the canonical layouts a wgmma descriptor describes, so a TMA-filled
            # ring feeds wgmma directly
            tma = (b in func.plans.rings and func.plans.rings[b].tma) or b in wgmma_operands or b in tma_copy_dsts
            shared[b] = SharedLayout(b.shape, b.dtype, swizzle=b in gemm_operands and target.vendor == "nvidia",
                                     tma=tma)
    # AMD matrix-instruction operands: swizzled or K-packed so that lanes read their K runs as
    # 64/128-bit vectors (lower_gemm_amd.py)
    from .lower_gemm_amd import operand_layouts

    shared.update(operand_layouts(stmts, plans, target))
    func.plans.fragment_layouts.update(layouts)
    func.plans.shared_layouts.update(shared)
    return func


def _fragment_thread_counts(stmts, count) -> dict:
    """Fragment -> the size of the thread set that uses it; a fragment used by thread sets of
    different sizes has no one layout (its elements live in registers of fixed threads)."""
    out: dict = {}
    for s in stmts:
        bufs = [r.buffer for r in regions_of(s)] + [ld.buffer for e in exprs_of(s) for ld in loads_in(e)]
        if isinstance(s, t.BufferStore):
            bufs.append(s.buffer)
        for b in bufs:
            if b.scope != "fragment":
                continue
            old = out.setdefault(b, count(s))
            if old != count(s):
                raise CompileError(f"fragment {b.name} is used by a set of {old} threads and by one of {count(s)} "
                                   "threads", s.loc, hint="use one fragment per thread partition and exchange data "
                                   "through shared memory")
    return out


def _fills_table(p) -> bool:
    """The loop stores to a fragment that ``frontend.uniform_fragments`` made a per-thread table."""
    found = []

    def f(s):
        if isinstance(s, t.BufferStore) and s.buffer.scope == "local" and s.buffer.attrs.get("uniform_table"):
            found.append(s)

    walk(p.body, f)
    return bool(found)


def _reduced(src, dim, shape):
    """The layout ``reduce(src, dim)`` has, or None when threads group the source registers of one
    result differently (``lower_reduce`` then reduces through shared memory)."""
    try:
        return ReducedLayout(src, dim, shape)
    except ValueError:
        return None


def _default_layout(buf, nthreads, stmts):
    """Striped, unless the fragment is reduced along a dimension whose slices the striped layout
    splits unevenly between threads (e.g. rows of 65 over 64 threads): then slice by slice."""
    vec = _vec_for(buf.shape, [buf.dtype])
    striped = StripedLayout(buf.shape, nthreads, vec)
    uses = {(s.dim, tuple(s.dst.shape)) for s in stmts
            if isinstance(s, t.Reduce) and s.src is buf and s.dst.scope == "fragment"}
    if all(_reduced(striped, dim, shape) is not None for dim, shape in uses):
        return striped
    if len({dim for dim, _ in uses}) != 1:
        return striped  # reduced along several dimensions: lower_reduce goes through shared memory
    sliced = SlicedLayout(buf.shape, next(iter(uses))[0], nthreads, vec)
    return sliced if all(_reduced(sliced, dim, shape) is not None for dim, shape in uses) else striped


REGISTER_FILE_REFUSAL = 16  # times the register file: beyond, the unrolled per-register code is refused


def _check_register_budget(layouts: dict, nthreads: int, target) -> None:
    """Fragments beyond the per-thread register file compile, as in TileLang, with a warning: the
    device compiler keeps what does not fit in local memory (spills that ``resource_usage``
    reports).  Beyond 16 times the register file (for one fragment or all together) the kernel is
    refused: the per-register code the lowering unrolls would be enormous, and spilling nearly
    everything is never what was meant."""
    import warnings

    from ..errors import TilewrightWarning

    limit = target.registers_per_thread if not target.is_interpret else None
    if limit is None:
        return
    total = largest = 0
    for buf, lay in layouts.items():
        regs = lay.num_regs * max(dt.bits(buf.dtype), 32) // 32
        total += regs
        largest = max(largest, regs)
        if regs > REGISTER_FILE_REFUSAL * limit:
            raise CompileError(
                f"fragment {buf.name}{tuple(buf.shape)} needs {regs} registers per thread with {nthreads} threads; "
                f"{target} has at most {limit}", buf.loc,
                hint="use more threads (T.Kernel(threads=...)), a smaller tile, or shared memory for this buffer")
    if total > REGISTER_FILE_REFUSAL * limit:
        raise CompileError(
            f"the kernel's fragments need {total} registers per thread with {nthreads} threads; {target} has at "
            f"most {limit}", None, hint="use more threads or smaller tiles")
    if largest > limit or total > 2 * limit:  # fragments are not all live at once: some slack in the total
        big = max(layouts, key=lambda b: layouts[b].num_regs * max(dt.bits(b.dtype), 32) // 32)
        line = f" (the largest: {big.name}{tuple(big.shape)}, line {big.loc.lineno})" if big.loc is not None else ""
        msg = (f"the kernel's fragments need {total} registers per thread with {nthreads} threads{line}; {target} "
               f"has {limit}: the part that does not fit is kept in local memory, which is slow (use more threads "
               "or smaller tiles)")
        if big.loc is not None:  # reported at the fragment's line in the kernel source
            warnings.warn_explicit(msg, TilewrightWarning, big.loc.filename, big.loc.lineno)
        else:
            warnings.warn(msg, TilewrightWarning, stacklevel=2)


def _kernel(func) -> t.Kernel:
    found = []
    walk(func.body, lambda s: found.append(s) if isinstance(s, t.Kernel) else None)
    return found[0]


def _vec_for(shape, dtypes) -> int:
    """Elements per chunk: 16 bytes of the widest dtype, dividing the innermost extent."""
    width = max(dt.nbytes(d) for d in dtypes)
    vec = max(16 // width, 1)
    inner = shape[-1]
    while vec > 1 and inner % vec:
        vec //= 2
    return vec


def _buffers_in(p) -> list:
    out = []

    def f(s):
        if isinstance(s, t.BufferStore):
            out.append(s.buffer)
        for e in exprs_of(s):
            out.extend(ld.buffer for ld in loads_in(e))

    walk(p.body, f)
    return out


def _frag_accesses(p) -> list:
    """(buffer, indices) of every fragment access in a T.Parallel body."""
    out = []

    def f(s):
        if isinstance(s, t.BufferStore) and s.buffer.scope == "fragment":
            out.append((s.buffer, s.indices))
        for e in exprs_of(s):
            out.extend((ld.buffer, ld.indices) for ld in loads_in(e) if ld.buffer.scope == "fragment")

    walk(p.body, f)
    return out


def _aligned(p, idx) -> bool:
    return len(idx) == len(p.vars) and all(i is v for i, v in zip(idx, p.vars))


def _projection(p, idx):
    """Loop dims indexed, when ``idx`` is a strictly increasing subsequence of the loop vars."""
    pos = []
    for i in idx:
        hit = [k for k, v in enumerate(p.vars) if i is v]
        if not hit:
            return None
        pos.append(hit[0])
    if pos != sorted(pos) or len(set(pos)) != len(pos) or len(pos) == len(p.vars):
        return None
    return pos


def _driving(p, layouts):
    for buf, idx in _frag_accesses(p):
        if _aligned(p, idx) and tuple(buf.shape) == tuple(p.extents) and buf in layouts:
            return layouts[buf]
    return None


def _propagate_parallel(p, layouts, assign) -> bool:
    drive = _driving(p, layouts)
    if drive is None:
        return False
    changed = False
    for buf, idx in _frag_accesses(p):
        if buf in layouts:
            continue
        if _aligned(p, idx) and tuple(buf.shape) == tuple(p.extents):
            layouts[buf] = drive
            changed = True
            continue
        keep = _projection(p, idx)
        if keep is not None and tuple(buf.shape) == tuple(p.extents[k] for k in keep):
            lay = drive
            # drop the loop dims the fragment is not indexed by, highest first
            for d in reversed(range(len(p.vars))):
                if d not in keep and lay is not None:
                    shape = tuple(x for k, x in enumerate(lay.shape) if k != d)
                    lay = _reduced(lay, d, shape)
            if lay is not None:  # else a default layout, converted through shared memory in this loop
                layouts[buf] = lay
                changed = True
    return changed


def _first_use_order(bufs, stmts):
    """The fragment to give a default layout next: the earliest used, except that a reduction's
    destination defers to its source (whose layout then determines the destination's)."""
    wanted = set(bufs)
    reduce_src = {s.dst: s.src for s in stmts if isinstance(s, t.Reduce) and s.src.scope == "fragment"}
    # reduction sources first: their layouts determine the reductions' results
    srcs = [b for b in _first_use_candidates(bufs, stmts, wanted) if b in set(reduce_src.values())]
    if srcs:
        return srcs[0]
    for b in _first_use_candidates(bufs, stmts, wanted):
        seen = set()
        while b in reduce_src and reduce_src[b] in wanted and b not in seen:
            seen.add(b)
            b = reduce_src[b]
        return b
    return bufs[0]


def _first_use_candidates(bufs, stmts, wanted):
    for s in stmts:
        touched = []
        if isinstance(s, t.ParallelFor):
            touched = [b for b, _ in _frag_accesses(s)]
        elif isinstance(s, t.Reduce):
            touched = [s.src, s.dst]
        elif isinstance(s, t.Gemm):
            touched = [s.a.buffer, s.b.buffer, s.c.buffer]
        for b in touched:
            if b in wanted:
                yield b
    yield bufs[0]
