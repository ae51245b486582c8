"""Compiling ordinary statements (sequences, declarations, stores, branches, loops, vector copies,
block barriers, atomics) to closures ``f(st)``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import dtype as dt
from ...ir import expr as E
from ...ir import thread as th
from ...ir import tile as t
from ..host_addresses import AddressError
from .errors import DivergenceError, EmulatorError, EmulatorOutOfBoundsError, MisalignedAccessError
from .support import _F32, _and, _check_range, _fix, _is_float_np, _norm_mask, _poison, _rows, _Where


class StmtCompiler:
    """Mixin of ``_Program``: statements."""

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
        if isinstance(s, (th.SharedDecl, th.Comment, th.GridDependency)):
            return None  # (GridDependency: the emulator runs launches one after the other)
        if isinstance(s, th.GlobalDecl):
            return self.global_decl(s)
        if isinstance(s, th.PrefetchL2):
            return self.prefetch_l2(s)
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
        if isinstance(s, th.AsyncCopy):
            return self.async_copy(s)
        if isinstance(s, th.AsyncCommit):
            return self.async_commit(s)
        if isinstance(s, th.AsyncWait):
            return self.async_wait(s)
        if isinstance(s, th.LoadMatrix):
            return self.load_matrix(s)
        if isinstance(s, th.StoreMatrix):
            return self.store_matrix(s)
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
        if isinstance(s, th.TmaStore):
            return self.tma_store(s)
        if isinstance(s, th.TmaStoreCommit):
            return self.tma_store_commit(s)
        if isinstance(s, th.TmaStoreWait):
            return self.tma_store_wait(s)
        if isinstance(s, th.MbarrierArrive):
            return self.mbarrier_arrive(s)
        if isinstance(s, th.MbarrierExpectTx):
            return self.mbarrier_expect_tx(s)
        if isinstance(s, th.NamedBarrier):
            return self.named_barrier(s)
        if isinstance(s, th.ClusterBarrier):
            return self.cluster_barrier(s)
        if isinstance(s, th.SetMaxNReg):
            return self.set_max_nreg(s)
        if isinstance(s, th.FenceProxyAsync):
            return self.fence_proxy_async(s)
        if isinstance(s, th.Wgmma):
            return self.wgmma(s)
        if isinstance(s, th.WgmmaCommit):
            return self.wgmma_commit(s)
        if isinstance(s, th.WgmmaWait):
            return self.wgmma_wait(s)
        if isinstance(s, th.WgmmaFence):
            return None  # orders register accesses on the GPU; the emulator executes in order
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

    def prefetch_l2(self, s: th.PrefetchL2):
        """``T.prefetch_l2``: the element is read (a global load's bounds check: the address must be inside the
        buffer) and the value dropped; nothing is cached (a hint has no effect on a result)."""
        fl = self.cexpr(s.load, _Where(s))

        def prefetch(st):
            fl(st, st.mask)

        return prefetch

    def global_decl(self, s: th.GlobalDecl):
        """``T.make_tensor`` on an address: the slot of the buffer becomes the host array the address points
        into (host_addresses.py), one address per block."""
        where = _Where(s)
        b = s.buffer
        gi = self.global_index[b]
        fa = self.cexpr(s.address, where)
        fdims = [self.cexpr(E.as_expr(x), where) for x in b.shape]
        fstrides = [self.cexpr(E.as_expr(x), where) for x in b.strides]

        def one(st, f, what):
            v = np.broadcast_to(np.asarray(f(st, st.mask)), (st.L,))
            if st.mask is not None:
                v = v[np.broadcast_to(st.mask, (st.L,))]
            if v.size and (v != v[0]).any():
                raise where.error(EmulatorError, f"the {what} of tensor {b.name} differs between the threads of a "
                                                 "block; the CPU backends need one per block")
            return None if not v.size else int(v[0])

        def decl(st):
            address = one(st, fa, "address")
            if address is None:  # no lane runs the declaration
                return
            dims = [one(st, f, "shape") for f in fdims]
            strides = [one(st, f, "strides") for f in fstrides]
            try:
                st.glob[gi] = st.addresses.resolve(address, dims, strides, b.dtype, b.name)
            except AddressError as err:
                raise where.error(EmulatorError, str(err)) from None
            if st.graces is not None:
                st.graces.bufs.pop(gi, None)  # another array now: its race records start afresh

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
            if st.coop is not None:
                st.coop.barrier(st, 0, st.T, False, where, kind="barrier")
                return
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
            if st.graces is not None:
                st.graces.barrier(active)

        return barrier

    def atomic(self, s: th.AtomicRMW):
        where = _Where(s)
        b = s.buffer
        nd = dt.to_numpy(b.dtype)
        mem = self._mem(b, where)
        fi = self.cexpr(s.index, where)
        fv = self.cexpr(s.value, where)
        op = s.op
        if op not in _ATOMIC_OPS:
            raise where.error(EmulatorError, f"unknown atomic operation {op!r}")
        if op in ("and", "or", "xor") and nd.kind not in "iu":
            raise where.error(EmulatorError, f"atomic {op} needs an integer buffer, not {b.dtype}")
        if s.scope not in ("cta", "gpu", "sys"):
            raise where.error(EmulatorError, f"atomic scope {s.scope!r}: use 'cta', 'gpu' or 'sys'")
        if s.order not in ("relaxed", "acquire", "release", "acq_rel", "seq_cst"):
            raise where.error(EmulatorError, f"atomic memory order {s.order!r}: use relaxed, acquire, release, "
                                             "acq_rel or seq_cst")
        fn = _ATOMIC_OPS[op]
        what = f"atomic {op} on {b.scope} {b.name}"
        result = None
        if s.result is not None:
            rbuf, ridx = s.result
            c = E.const_value(E.as_expr(ridx))
            if rbuf.scope != "local" or c is None or not 0 <= int(c) < rbuf.shape[0]:
                raise where.error(EmulatorError, f"the previous value of an atomic goes to a register at a constant "
                                                 f"index, not {rbuf.scope} {rbuf.name}[{ridx}]")
            result = (self._reg(rbuf), int(c), dt.to_numpy(rbuf.dtype))
        skip_nan = _is_float_np(nd) and op in ("max", "min")  # the printers' CAS loops never store NaN

        def atomic(st):
            m = st.mask
            v = np.broadcast_to(_fix(fv(st, m), nd), (st.L,))
            pos, lanes = mem.positions(st, fi(st, m), None, m, what, where, nd.itemsize)
            arr = mem.backing(st)
            vals = v[lanes]
            pos = np.broadcast_to(pos, vals.shape)
            if st.races is not None and b.scope == "shared":
                st.races.access(pos, nd.itemsize, None, where, b.name, st.tid[lanes], atomic=True)
            if result is not None:
                # each lane gets the value its update replaced: lanes hitting one element apply in lane order
                prev = arr[pos].copy()
                if len(np.unique(pos)) != len(pos):
                    for i in range(len(pos)):
                        p = pos[i]
                        prev[i] = arr[p]
                        if not (skip_nan and np.isnan(np.float32(vals[i]))):
                            arr[p] = fn(arr[p], vals[i])
                else:
                    keep = ~np.isnan(vals.astype(_F32)) if skip_nan else slice(None)
                    arr[pos[keep]] = fn(prev[keep], vals[keep])
                slot, c, rnd = result
                full = np.zeros(st.L, rnd)
                full[lanes] = _fix(prev, rnd)
                regs = st.regs[slot]
                regs[c] = full if m is None else np.where(m, full, regs[c])
                return
            if op == "exch":
                arr[pos] = vals
                return
            if skip_nan:
                keep = ~np.isnan(vals.astype(_F32))
                pos, vals = pos[keep], vals[keep]
            fn.at(arr, pos, vals)

        return atomic


_ATOMIC_OPS = {
    "add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "exch": lambda old, new: new,
}
