"""Compiling warp-collective matrix instructions: ldmatrix and mma.sync / MFMA / WMMA, gathered
from and scattered to the lanes' registers through the instruction's lane layouts."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir import expr as E
from ...ir import thread as th
from .errors import DivergenceError, EmulatorError, EmulatorOutOfBoundsError
from .support import _F32, _and, _check_align, _check_range, _poison, _rows, _uint_of, _Where


class MatrixCompiler:
    """Mixin of ``_Program``: matrix instructions."""

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
            need, idx = _matrix_rows(st, supplier, fi, n, off, "ldmatrix", s.src.name, where)
            base = st.sbase[place]
            view = st.sviews[nd]
            if st.banks is not None:
                # each 8x8 matrix (8 rows of 16 bytes from 8 supplying lanes) is one phase: a
                # 16-byte access of 8 consecutive lanes
                lanes = np.flatnonzero(need)
                st.banks.record(st, where, s.src.name, (base + idx)[lanes], 2, 16, lanes, "ldmatrix")
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

    def store_matrix(self, s: th.StoreMatrix):
        """stmatrix: lane l's registers 2q, 2q + 1 are row l // 4, columns 2 (l % 4) + {0, 1} of matrix q,
        whose row r lands at the address lane 8 q + r supplies."""
        where = _Where(s)
        if s.dst.scope != "shared" or s.src.scope != "local":
            raise where.error(EmulatorError, "stmatrix writes registers to shared memory")
        nd = dt.to_numpy(s.dst.dtype)
        if nd.itemsize != 2 or s.dst.dtype != s.src.dtype:
            raise where.error(EmulatorError, f"stmatrix moves 16-bit elements, not {s.src.dtype} -> {s.dst.dtype}")
        if self.k.num_threads % 32:
            raise where.error(EmulatorError, "stmatrix needs whole warps of 32 threads")
        num, si = int(s.num), int(s.src_index)
        slot = self._reg(s.src)
        if si < 0 or si + 2 * num > s.src.shape[0]:
            raise where.error(EmulatorOutOfBoundsError, f"stmatrix reads registers {s.src.name}[{si}:{si + 2 * num}] "
                                                        f"of {s.src.shape[0]}")
        place, off, _ = self._shared_of(s.dst, where)
        n = s.dst.shape[0]
        fi = self.cexpr(s.dst_index, where)
        ln = np.arange(32)
        supplier = ln < 8 * num

        def stmatrix(st):
            m = st.mask
            need, idx = _matrix_rows(st, supplier, fi, n, off, "stmatrix", s.dst.name, where)
            base = st.sbase[place]
            view = st.sviews[nd]
            act = st.lane if m is None else np.flatnonzero(m)
            wbase = st.lane - st.lane % 32
            pos, vals = [], []
            for q in range(num):
                row_of = wbase + 8 * q + (st.lane % 32) // 4  # the lane addressing this lane's row of matrix q
                for e in range(2):
                    p = base + idx[row_of] + 2 * (st.lane % 4) + e
                    v = np.broadcast_to(np.asarray(st.regs[slot][si + 2 * q + e]).astype(nd), (st.L,))
                    pos.append(p[act])
                    vals.append(v[act])
            pos, vals = np.concatenate(pos), np.concatenate(vals)
            if st.banks is not None:
                lanes = np.flatnonzero(need)
                st.banks.record(st, where, s.dst.name, (base + idx)[lanes], 2, 16, lanes, "stmatrix")
            if st.races is not None:
                st.races.write(pos, nd, vals, np.tile(st.tid[act], 2 * num), where, s.dst.name)
            view[pos] = vals

        return stmatrix

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


    # ------------------------------------------------------------------ wgmma (sm_90a)
    def wgmma(self, s: th.Wgmma):
        """A warpgroup instruction: A and B read from shared memory through the descriptor the
        printer would build (encoded from the operand's shared address and fields, decoded,
        swizzled by address bits), or A from the lanes' registers through the A lane layout; each
        lane's accumulator elements (C lane layout) get their entries of A @ B.  Warp w of a
        warpgroup holds rows 16w..16w+15 of D and of a register A, so a warp computes its part on
        its own: the same code runs in lockstep (whole warpgroups) and warp by warp (cooperative
        mode).  Asynchrony: the result is computed at issue (operands read then) but written to the
        accumulator registers only by the ``wait_group`` that retires its commit group; in between
        the registers hold poison.  The shared bytes it reads count as read until that retirement:
        the race detector records the read again when the group retires (so releasing the slot
        before then leaves the read unordered with the next write), and a write or TMA load over
        bytes an unretired wgmma reads is a ``RaceError`` (``wgmma_issue`` / ``wgmma_retire``)."""
        where = _Where(s)
        mi = s.instr
        G = mi.group_size
        if self.k.num_threads % G:
            raise where.error(EmulatorError, f"{mi.name} runs on warpgroups of {G} threads; the block has "
                                             f"{self.k.num_threads}")
        dbuf, doff = s.d
        doff = int(E.const_value(doff) if isinstance(doff, E.Expr) else doff)
        if dbuf.scope != "local" or dbuf.dtype != mi.acc_dtype:
            raise where.error(EmulatorError, f"the accumulator of {mi.name} must be {mi.acc_dtype} registers, not "
                                             f"{dbuf.scope} {dbuf.dtype}")
        if doff < 0 or doff + mi.c_elems > dbuf.shape[0]:
            raise where.error(EmulatorOutOfBoundsError, f"{mi.name} accumulator registers {dbuf.name}[{doff}:"
                                                        f"{doff + mi.c_elems}] of {dbuf.shape[0]}")
        d_slot, d_nd = self._reg(dbuf), dt.to_numpy(dbuf.dtype)
        _gather_plan(mi, "c", mi.c_index, mi.m, mi.n, mi.c_elems, where, unique=True)  # checks the layout
        a_reg = isinstance(s.a, tuple)
        if a_reg:
            abuf, aoff = s.a
            aoff = int(E.const_value(aoff) if isinstance(aoff, E.Expr) else aoff)
            if abuf.scope != "local" or abuf.dtype != mi.a_dtype or aoff < 0 or aoff + mi.a_elems > abuf.shape[0]:
                raise where.error(EmulatorError, f"register A of {mi.name}: {abuf.scope} {abuf.dtype} "
                                                 f"{abuf.name}[{aoff}:{aoff + mi.a_elems}]")
            a_slot, a_nd = self._reg(abuf), dt.to_numpy(abuf.dtype)
            _gather_plan(mi, "a", mi.a_index, mi.m, mi.k, mi.a_elems, where)
        a_read = None if a_reg else self._descriptor_reader(s.a, mi.m, mi, where, "A")
        b_read = self._descriptor_reader(s.b, mi.n, mi, where, "B")
        integer = mi.acc_dtype.startswith("int")
        ce = mi.c_elems
        scale_d = int(s.scale_d)
        es = np.arange(ce)[:, None]

        def wgmma(st):
            m = st.mask
            L = st.L
            unit = G if st.coop is None else L  # lanes that execute together here: a warpgroup, or a warp
            ng = L // unit
            if m is not None:
                pg = m.reshape(ng, unit)
                if (pg.any(axis=1) & ~pg.all(axis=1)).any():
                    raise where.error(DivergenceError, f"{mi.name} runs under control flow that splits a warpgroup")
                active = pg.all(axis=1)
            else:
                active = np.ones(ng, bool)
            groups = np.flatnonzero(active)
            if not len(groups):
                return
            lane0 = groups * unit
            group_of = np.full(ng, -1)
            group_of[groups] = np.arange(len(groups))
            gl = np.repeat(group_of, unit)  # each lane's row in the per-group operands (-1: inactive)
            on = gl >= 0
            lg = st.tid % G  # lane within the warpgroup
            reads = _pending(st)["open_reads"]
            B = b_read(st, lane0, reads).astype(np.int64 if integer else _F32)  # [g, n, k]
            if a_reg:
                A = np.zeros((len(groups), mi.m, mi.k), np.int64 if integer else _F32)
                vals = _rows(st.regs[a_slot][aoff:aoff + mi.a_elems], L, a_nd)
                for e in range(mi.a_elems):
                    r, c = mi.a_index(lg, e)
                    A[gl[on], np.asarray(r)[on], np.asarray(c)[on]] = vals[e][on]
            else:
                A = a_read(st, lane0, reads).astype(np.int64 if integer else _F32)  # [g, m, k]
            P = np.matmul(A, B.transpose(0, 2, 1))  # [g, m, n]
            regs = st.regs[d_slot]
            pend = _pending(st)
            key = (d_slot, doff)
            src = pend["result"][key][0] if key in pend["result"] else regs[doff:doff + ce]
            C = _rows(src, L, d_nd)
            r, c = mi.c_index(lg[None, :], es)
            r, c = np.broadcast_to(r, (ce, L)), np.broadcast_to(c, (ce, L))
            prod = np.zeros((ce, L), P.dtype)
            prod[:, on] = P[gl[on][None, :], r[:, on], c[:, on]]
            if scale_d:
                prod = prod + (C.astype(np.int64) if integer else C.astype(_F32))
            out = np.where(on[None, :], prod.astype(d_nd), C)
            # the result lands at the wait_group that retires this wgmma; until then the
            # accumulator registers read as poison (reading them early is a bug the tests then see)
            poison = _poison(d_nd)
            for e in range(ce):
                regs[doff + e] = np.where(on, poison, regs[doff + e])
            # what the registers hold from now until the retirement: any other write to them (an
            # accumulator, or a register A the wgmma is still reading) is a hazard, checked there
            held = [(d_slot, doff, tuple(regs[doff:doff + ce]), on.copy(), "accumulator", dbuf.name, where)]
            if a_reg:
                ar = st.regs[a_slot]
                held.append((a_slot, aoff, tuple(ar[aoff:aoff + mi.a_elems]), on.copy(), "register A", abuf.name,
                             where))
            pend["result"][key] = (out, on.copy(), held[0])
            pend["open"].append(key)
            pend["open_held"].extend(held[1:])

        return wgmma

    def wgmma_commit(self, s: th.WgmmaCommit):
        def commit(st):
            pend = _pending(st)
            pend["groups"].append(pend["open"])
            pend["group_reads"].append(pend["open_reads"])
            pend["group_held"].append(pend["open_held"])
            pend["open"], pend["open_reads"], pend["open_held"] = [], [], []

        return commit

    def wgmma_wait(self, s: th.WgmmaWait):
        keep = int(s.pending)

        def wait(st):
            pend = _pending(st)
            while len(pend["groups"]) > keep:
                for pos, eb, where, name, tids in pend["group_reads"].pop(0):
                    if st.races is not None:  # the wgmma has read its operands: ordered from here on
                        st.races.wgmma_retire(pos, eb)
                        st.races.access(pos, eb, None, where, name, tids)
                for held in pend["group_held"].pop(0):
                    _check_held(st, held)
                for key in pend["groups"].pop(0):
                    later = any(key in g for g in pend["groups"]) or key in pend["open"]
                    if later or key not in pend["result"]:
                        continue  # a later wgmma on the same registers is still in flight
                    out, issued, held = pend["result"].pop(key)
                    _check_held(st, held)
                    slot, off = key
                    regs = st.regs[slot]
                    for e in range(out.shape[0]):
                        regs[off + e] = np.where(issued, out[e], regs[off + e])

        return wait

    def _descriptor_reader(self, op: th.WgmmaOperand, rows: int, mi, where, name: str):
        """A function (state, first lane of each executing group) -> the operand tile [groups, rows, k] read through the
        descriptor of ``op``, with bounds (the operand's buffer), uniformity and race checks."""
        from ...target.matrix import wgmma_descriptor, wgmma_operand_addresses

        buf = op.buffer
        if buf.scope != "shared":
            raise where.error(EmulatorError, f"wgmma operand {name} must be in shared memory, not {buf.scope}")
        want = mi.a_dtype if name == "A" else mi.b_dtype
        if buf.dtype != want:
            raise where.error(EmulatorError, f"wgmma operand {name} is {buf.dtype}, {mi.name} takes {want}")
        place, off, nd = self._shared_of(buf, where)
        fi = self.cexpr(op.index, where)
        fb = None if op.base is None else self.cexpr(op.base, where)  # tw.wgmma_desc_fold: base's descriptor + step
        eb = nd.itemsize
        lo, hi = off, off + buf.shape[0] * eb
        k = mi.k
        S = self.k.shared_bytes

        def read(st, lane0, reads):
            unit = mi.group_size if st.coop is None else st.L
            idx = np.broadcast_to(np.asarray(fi(st, None)), (st.L,)).reshape(-1, unit)[lane0 // unit]
            if (idx != idx[:, :1]).any():
                j = int(np.flatnonzero((idx != idx[:, :1]).any(axis=1))[0])
                raise where.error(EmulatorError, f"wgmma operand {name}: the threads of the warpgroup of thread "
                                                 f"{int(st.tid[lane0[j]])} give different descriptor addresses")
            if fb is not None:  # (as the printer: the descriptor of the tile's first element plus the step)
                idx = np.broadcast_to(np.asarray(fb(st, None)), (st.L,)).reshape(-1, unit)[lane0 // unit]
            out = np.empty((len(lane0), rows, k), nd)
            for j, l0 in enumerate(lane0):
                addr = off + int(idx[j, 0]) * eb
                try:
                    desc = wgmma_descriptor(addr, op.lbo, op.sbo, op.swizzle) + int(op.step)
                    addrs = wgmma_operand_addresses(desc, op.major, rows, k, eb)
                except ValueError as e:
                    raise where.error(EmulatorError, f"wgmma operand {name}: {e}") from None
                if addrs.min() < lo or addrs.max() + eb > hi:
                    raise where.error(EmulatorOutOfBoundsError, f"wgmma operand {name} reads shared bytes "
                                                                f"{int(addrs.min())}..{int(addrs.max()) + eb} outside "
                                                                f"{buf.name} ({lo}..{hi})")
                pos = int(st.block[l0]) * (S // eb) + addrs // eb
                flat, tids = pos.reshape(-1), np.full(pos.size, int(st.tid[l0]))
                if st.races is not None:
                    st.races.access(flat, eb, None, where, buf.name, tids)
                    st.races.wgmma_issue(flat, eb)
                reads.append((flat, eb, where, buf.name, tids))
                out[j] = st.sviews[nd][pos]
            return out

        return read


_PENDING = ("wgmma in flight",)


def _pending(st) -> dict:
    """The state's wgmmas issued and not yet retired by a wait_group: open (uncommitted) results,
    committed groups (lists of accumulator keys), each accumulator's latest result, and the shared
    reads of the open and committed groups (flat positions, element bytes, statement, buffer, threads)."""
    pend = st.memo.get(_PENDING)
    if pend is None:
        pend = st.memo[_PENDING] = {"open": [], "groups": [], "result": {}, "open_reads": [], "group_reads": [],
                                    "open_held": [], "group_held": []}
    return pend


def _check_held(st, held) -> None:
    """At a wgmma's retirement: its registers (``held``: slot, first register, the register values
    its issue left, the issuing lanes, role, buffer, statement) must not have been written since —
    the hardware writes the accumulator and reads a register A asynchronously until then."""
    slot, off, was, lanes, role, name, where = held
    now = st.regs[slot][off:off + len(was)]
    for e, (a, b) in enumerate(zip(was, now)):
        if a is b:
            continue  # untouched (every register write makes a new array)
        a, b = np.asarray(a), np.asarray(b)
        if role == "accumulator" and (not lanes.shape or lanes.all()):
            changed = True  # written at all, even with the poison's own value (poison * x is poison)
        else:  # a register A rewritten with the values it had, or lanes that did not issue: harmless
            if a.shape and b.shape and lanes.shape == a.shape == b.shape:
                a, b = a[lanes], b[lanes]
            changed = a.tobytes() != b.tobytes()
        if changed:
            raise where.error(EmulatorError, f"{role} register {name}[{off + e}] of this wgmma was written before "
                                             "the wait_group that retires it (the tensor cores "
                                             f"{'write' if role == 'accumulator' else 'read'} it until then)")


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


def _matrix_rows(st, supplier, fi, n, off, op, name, where):
    """ldmatrix/stmatrix: the whole warp takes part (no divergence), the supplying lanes' row
    indices lie in the shared tile and their rows are 16-byte aligned; returns (lanes that supply a
    row, their row index)."""
    m = st.mask
    warps = st.L // 32
    if m is not None:
        pw = m.reshape(warps, 32)
        if (pw.any(axis=1) & ~pw.all(axis=1)).any():
            raise where.error(DivergenceError, f"{op} runs under control flow that splits a warp")
    sup = np.tile(supplier, warps)
    need = _and(m, sup) if m is not None else sup
    idx = np.broadcast_to(fi(st, need), (st.L,))
    idx = _check_range(st, idx, 0, n - 8, need, f"{op} row of shared {name}", where)
    _check_align(st, off + idx * 2, 16, need, f"{op} row of shared {name}", where)
    return need, idx
