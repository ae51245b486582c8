"""Pass ``plan_gemms``: choose, for every ``T.gemm``, the instruction family and the partition of C
over the executing warps (or warpgroups).

Needs: Tile IR after ``pipeline_loops`` and ``expand_tile_ops``; a target.
Guarantees: ``func.plans.gemms[gemm]`` holds a ``GemmPlan`` for every ``Gemm`` node:

* the family: ``mma.sync`` (NVIDIA), ``mfma`` (CDNA), ``wmma`` (RDNA), ``wgmma`` (sm_90a only, see
  below) or ``simt`` (no matrix instruction for the operand types: fp32, the CPU interpreter);
* the instruction, and the warp grid ``warps_m x warps_n`` over C chosen by the gemm's warp policy
  (Square: warp tiles as square as possible — for wgmma, the warpgroup partition that reads the
  fewest operand bytes from shared memory per K step first (``_operand_rows_read``); FullRow: warps
  stacked along M, each owning whole rows; FullCol: warps side by side along N) — or the SIMT
  thread grid;
* where the instruction reads A and B (registers or a shared-memory descriptor);
* where wgmma is possible (sm_90a, 16-bit or 8-bit inputs, whole warpgroups, M a multiple of 64 per
  warpgroup, N per warpgroup in the type's N-family), the warpgroup partition (``plan.wgmma``).

Where wgmma is possible it is the family, unless TileLang's pass config ``tl.disable_wgmma`` is set
(then ``mma.sync``, with ``plan.reason`` saying that wgmma was possible).  ``tw.enable_wgmma`` is an
explicit choice that overrides it: true forces wgmma where possible, false turns it off.  wgmma
also needs its shared operands to be whole tiles that a matrix descriptor can describe
(``_descriptor_problem``; ``infer_layouts`` then gives them the swizzled TMA layout).

Errors (``CompileError`` at the gemm's line): a tile the warps cannot split evenly, with the
multiples to use.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import tile as t
from ..ir.layout import SharedLayout
from ..ir.plans import GemmPlan, WgmmaPlan
from ..ir.uniformity import thread_sets
from ..ir.visitor import walk
from ..target.matrix import REGISTERS, SMEM_DESC

WGMMA_OPTION = "tw.enable_wgmma"
DISABLE_WGMMA_OPTION = "tl.disable_wgmma"


def wgmma_enabled(options) -> bool:
    """Whether wgmma is chosen where it is possible: ``tw.enable_wgmma`` when given, else on unless
    ``tl.disable_wgmma``."""
    options = options or {}
    explicit = options.get(WGMMA_OPTION)
    if explicit is not None:
        return bool(explicit)
    return not options.get(DISABLE_WGMMA_OPTION)


def plan_gemms(func: t.PrimFunc, ctx) -> t.PrimFunc:
    kernels: list = []
    gemms: list = []

    def visit(s):
        if isinstance(s, t.Kernel):
            kernels.append(s)
        elif isinstance(s, t.Gemm):
            gemms.append(s)

    walk(func.body, visit)
    if not gemms:
        return func
    nthreads = kernels[0].num_threads
    sets = thread_sets(func.body, nthreads)  # a gemm inside a thread partition is planned for its threads
    for g in gemms:
        first, count = sets.get(g, (0, nthreads))
        func.plans.gemms[g] = plan_gemm(g, count, ctx.target, ctx.options, first_thread=first)
    return func


def _k_extent(g: t.Gemm) -> int:
    return g.a.shape[0] if g.trans_a else g.a.shape[1]


def plan_gemm(g: t.Gemm, nthreads: int, target, options=None, first_thread: int = 0) -> GemmPlan:
    """The plan of one gemm executed by ``nthreads`` threads (from thread ``first_thread`` on) on ``target``."""
    options = options or {}
    m, n = g.c.shape
    a_dt, b_dt, c_dt = g.a.buffer.dtype, g.b.buffer.dtype, g.c.buffer.dtype
    policy = g.policy
    a_source = REGISTERS
    wg, why_not = (None, "the CPU interpreter runs gemms as whole-tile products") if target.is_interpret \
        else _wgmma_partition(g, nthreads, target, first_thread)
    if wg is not None and wgmma_enabled(options):
        why = f"{WGMMA_OPTION} is set" if options.get(WGMMA_OPTION) else "wgmma is the default where possible"
        return GemmPlan("wgmma", wg.instr, wg.warpgroups_m, wg.warpgroups_n, policy=policy, a_source=wg.a_source,
                        b_source=SMEM_DESC, wgmma=wg, reason=why)
    if wg is not None:
        off = f"{WGMMA_OPTION} is false" if options.get(WGMMA_OPTION) is not None else f"{DISABLE_WGMMA_OPTION} is set"
        reason = (f"wgmma is possible ({wg.warpgroups_m}x{wg.warpgroups_n} warpgroups of {wg.instr.name}, A from "
                  f"{wg.a_source}) but not enabled ({off})")
    else:
        reason = f"no wgmma: {why_not}"
    instrs = target.matrix_instr_for(a_dt, b_dt, c_dt) if not target.is_interpret else []
    k = _k_extent(g)
    for instr in instrs:
        if nthreads % instr.group_size or k % instr.k:
            continue
        grid = _warp_grid(m, n, nthreads // instr.group_size, instr, policy)
        if grid is not None:
            return GemmPlan(instr.family, instr, grid[0], grid[1], policy=policy, a_source=a_source,
                            wgmma=wg, reason=reason)
    if instrs:
        instr = instrs[0]
        raise CompileError(
            f"No valid warp partition: T.gemm tile {m}x{n}x{k} cannot be split over "
            f"{nthreads // max(instr.group_size, 1)} warps of {instr.group_size} lanes with {instr.name} "
            f"({instr.m}x{instr.n}x{instr.k} per instruction)", g.loc,
            hint=f"make M a multiple of {instr.m}*warps_m and N of {instr.n}*warps_n, K a multiple of {instr.k}, "
            "or use fewer threads")
    plan = _simt_plan(g, m, n, nthreads, policy)
    plan.wgmma, plan.reason = wg, f"no matrix instruction for the types; {reason}"
    return plan


def _simt_plan(g, m, n, nthreads, policy) -> GemmPlan:
    """Scalar multiply-adds (types without a matrix instruction): a ``tm x tn`` thread grid with
    per-thread tiles as square as possible."""
    best = None
    for tm in range(1, nthreads + 1):
        if nthreads % tm:
            continue
        tn = nthreads // tm
        if m % tm or n % tn:
            continue
        score = abs((m // tm) - (n // tn))
        if best is None or score < best[0]:
            best = (score, tm, tn)
    if best is None:
        raise CompileError(f"T.gemm tile {m}x{n} cannot be spread over {nthreads} threads", g.loc,
                           hint="use a thread count that divides M*N evenly (e.g. 128 for a 64x64 tile)")
    return GemmPlan("simt", None, tm=best[1], tn=best[2], policy=policy)


def _warp_grid(m, n, nwarps, instr, policy):
    """(warps_m, warps_n) with ``warps_m * warps_n == nwarps`` whose warp tiles ``instr`` atoms fill."""
    options = []
    for wm in range(1, nwarps + 1):
        if nwarps % wm:
            continue
        wn = nwarps // wm
        if m % (instr.m * wm) or n % (instr.n * wn):
            continue
        options.append((wm, wn))
    if not options:
        return None
    if policy == "fullrow":
        full = [o for o in options if o[1] == 1]
        return full[0] if full else max(options, key=lambda o: o[0])
    if policy == "fullcol":
        full = [o for o in options if o[0] == 1]
        return full[0] if full else max(options, key=lambda o: o[1])

    def score(o):
        wm, wn = o
        tile_m, tile_n = m // wm, n // wn
        # prefer square warp tiles, then warp tiles whose N holds pairs of atoms (ldmatrix.x4)
        return (abs(tile_m - tile_n), 0 if (tile_n // instr.n) % 2 == 0 else 1, -tile_m)

    return min(options, key=score)


def _wgmma_partition(g: t.Gemm, nthreads: int, target, first_thread: int = 0):
    """(WgmmaPlan, "") where wgmma can compute the gemm, else (None, why not)."""
    if not target.has("wgmma"):
        return None, f"{target.arch} has no wgmma (sm_90a only)"
    m, n = g.c.shape
    a_dt, b_dt, c_dt = g.a.buffer.dtype, g.b.buffer.dtype, g.c.buffer.dtype
    family = target.wgmma_instrs(a_dt, b_dt, c_dt)
    if not family:
        return None, f"wgmma does not take {a_dt} x {b_dt} -> {c_dt}"
    if nthreads % 128:
        return None, f"{nthreads} threads are not whole warpgroups of 128"
    if first_thread % 128:
        return None, f"the gemm's threads start at thread {first_thread}, not on a warpgroup boundary"
    if g.b.buffer.scope != "shared":
        return None, "wgmma reads B from shared memory"
    if g.a.buffer.scope == "fragment":
        a_source = REGISTERS
        if REGISTERS not in family[0].a_sources:
            return None, f"wgmma cannot take {a_dt} A from registers"
    elif g.a.buffer.scope == "shared":
        a_source = SMEM_DESC
    else:
        return None, f"A is in {g.a.buffer.scope} memory"
    if not family[0].transposable and (g.trans_a or not g.trans_b):
        return None, f"wgmma reads {a_dt} operands K-major only (A not transposed, B transposed)"
    k = _k_extent(g)
    if k % family[0].k:
        return None, f"K = {k} is not a multiple of {family[0].k}"
    for name, region in (("A", g.a), ("B", g.b)):
        why = _descriptor_problem(region) if region.buffer.scope == "shared" else ""
        if why:
            return None, f"{name} cannot be read through a wgmma descriptor: {why}"
    nwg = nthreads // 128
    by_n = {mi.n: mi for mi in family}
    options = []
    for wgm in range(1, nwg + 1):
        if nwg % wgm:
            continue
        wgn = nwg // wgm
        if m % (64 * wgm) or n % wgn:
            continue
        # the widest family member dividing the warpgroup's N (N itself up to 256) whose
        # instructions all start where a descriptor of an MN-major B can (``_mn_major_start_ok``)
        per_n = n // wgn
        b_atom = _mn_major_atom(g.b.buffer) if not g.trans_b else 0
        a_atom = _mn_major_atom(g.a.buffer) if g.trans_a and a_source == SMEM_DESC else 0
        if not all(_mn_major_start_ok(a_atom, wm * (m // wgm) + mi * 64, 64)
                   for wm in range(wgm) for mi in range(m // wgm // 64)):
            continue
        instr = next((by_n[x] for x in sorted(by_n, reverse=True) if per_n % x == 0
                      and all(_mn_major_start_ok(b_atom, wn * per_n + nj * x, x)
                              for wn in range(wgn) for nj in range(per_n // x))), None)
        if instr is None:
            continue
        options.append((wgm, wgn, instr))
    if not options:
        return None, (f"a {m}x{n} tile does not split into {nwg} warpgroup tiles of 64*i rows and a wgmma N "
                      "whose instructions start on the operands' swizzle atoms")
    if g.policy == "fullrow":
        pick = max(options, key=lambda o: (o[1] == 1, o[0]))
    elif g.policy == "fullcol":
        pick = max(options, key=lambda o: (o[0] == 1, o[1]))
    else:  # Square: the fewest shared operand bytes per K step, then tiles as square as possible
        pick = min(options, key=lambda o: (_operand_rows_read(m, n, o, a_source), abs(m // o[0] - n // o[1]),
                                           -o[2].n))
    wgm, wgn, instr = pick
    return WgmmaPlan(instr, wgm, wgn, m // (64 * wgm), a_source), ""


def _mn_major_atom(buf) -> int:
    """The width, in elements, of one swizzle atom along the contiguous (M or N) dimension of an
    MN-major wgmma operand in the TMA layout: its row, or a 128-byte column block of it."""
    row_bytes = int(buf.shape[-1]) * dt.nbytes(buf.dtype)
    return min(row_bytes, 128) // dt.nbytes(buf.dtype)


def _mn_major_start_ok(atom: int, start: int, width: int) -> bool:
    """Whether a wgmma instruction can read ``width`` M/N indices from ``start`` of an MN-major
    operand whose swizzle atoms are ``atom`` elements wide (``atom`` 0: K-major, always).  The
    hardware adds the instruction's offsets to the descriptor's start address and swizzles the
    sum; it moves to the next atom by the leading byte offset only from an atom's first column.
    A start inside an atom is right only while the instruction stays inside that atom: one that
    crosses the atom's end reads the next rows of the same atom instead (wrong values, found by the
    fuzz on the emulator and the H200: a 64x192 tile over two warpgroups, the second starting at
    column 96)."""
    return atom == 0 or start % atom == 0 or start % atom + width <= atom


def _operand_rows_read(m: int, n: int, option, a_source) -> int:
    """Operand rows (of one K step) the warpgroups of a partition read from shared memory: every
    instruction reads its B rows (``instr.n``) and, unless A is in registers, its 64 A rows.  With
    wgmma both operands stream from shared memory, whose bandwidth (shared with the TMA writes)
    is what limits a large tile: for 128 x 256 over two warpgroups, 64 x 256 each (one m64n256 per
    K step) reads 640 rows, 128 x 128 each (two m64n128) 768 — the role register reuse plays in
    the mma.sync policy."""
    wgm, wgn, instr = option
    instrs = (m // wgm // 64) * (n // wgn // instr.n) * wgm * wgn
    return instrs * (instr.n + (0 if a_source == REGISTERS else 64))


def _descriptor_problem(region) -> str:
    """Why a shared operand tile cannot be described to wgmma ("" when it can): the gemm must read
    whole 2-D tiles (one ring slot of a pipelined buffer) laid out in a swizzled layout the
    descriptor can express — rows of 32, 64 or 128 bytes, or 128-byte column blocks, 8 rows apart."""
    buf = region.buffer
    if tuple(region.extents[-2:]) != tuple(buf.shape[-2:]) or any(int(x) != 1 for x in region.extents[:-2]):
        return f"the gemm reads part of {buf.name}{tuple(buf.shape)}, not a whole tile"
    rows, cols = buf.shape[-2:]
    row_bytes = cols * dt.nbytes(buf.dtype)
    if not SharedLayout.tma_compatible((rows, cols), buf.dtype) or row_bytes < 32:
        return (f"a {rows}x{cols} {buf.dtype} tile has no swizzled layout (rows of 32/64/128 bytes or 128-byte "
                "column blocks, a multiple of 8 rows)")
    return ""
