"""Compact pseudo-C text of thread IR statements, for IR dumps and error messages."""

from __future__ import annotations

from .printer import expr_str


def thread_stmt_lines(s) -> list[str]:
    from . import thread as th

    name = type(s).__name__
    if isinstance(s, th.LocalDecl):
        return [f"local {s.buffer.dtype} {s.buffer.name}[{s.buffer.shape[0]}]"]
    if isinstance(s, th.GlobalDecl):
        return [f"global {s.buffer.dtype} {s.buffer.name}{list(s.buffer.shape)} @ {expr_str(s.address)}"]
    if isinstance(s, th.SharedDecl):
        return [f"shared {s.buffer.dtype} {s.buffer.name}[{s.buffer.shape[0]}] @ {s.offset}"]
    if isinstance(s, th.VecCopy):
        p = f" if {expr_str(s.pred)}" if s.pred is not None else ""
        return [f"{s.dst.name}[{expr_str(s.dst_index)} +: {s.lanes}] = {s.src.name}[{expr_str(s.src_index)} +: "
                f"{s.lanes}]{p}"]
    if isinstance(s, th.Barrier):
        return ["barrier()"]
    if isinstance(s, th.AsyncCopy):
        p = f" if {expr_str(s.pred)}" if s.pred is not None else ""
        return [f"async_copy({s.dst.name}[{expr_str(s.dst_index)}], {s.src.name}[{expr_str(s.src_index)}], "
                f"{s.nbytes}B){p}"]
    if isinstance(s, th.AsyncCommit):
        return ["async_commit()"]
    if isinstance(s, th.AsyncWait):
        return [f"async_wait({s.pending})"]
    if isinstance(s, th.LoadMatrix):
        return [f"{s.dst.name}[{s.dst_index} +: {2 * s.num}] = ldmatrix.x{s.num}{'.trans' if s.trans else ''}"
                f"({s.src.name}[{expr_str(s.src_index)}])"]
    if isinstance(s, th.StoreMatrix):
        return [f"{s.dst.name}[{expr_str(s.dst_index)}] = stmatrix.x{s.num}"
                f"({s.src.name}[{s.src_index} +: {2 * s.num}])"]
    if isinstance(s, th.MatrixMultiply):
        def op(o):
            return f"{o[0].name}[{o[1]}]"

        return [f"{op(s.d)} = {s.instr.name}({op(s.a)}, {op(s.b)}, {op(s.c)})"]
    if isinstance(s, th.AtomicRMW):
        call = f"atomic_{s.op}({s.buffer.name}[{expr_str(s.index)}], {expr_str(s.value)}, {s.scope}, {s.order})"
        return [call if s.result is None else f"{s.result[0].name}[{expr_str(s.result[1])}] = {call}"]
    if isinstance(s, th.MbarrierArrive):
        extra = "".join([f", count={s.count}" if s.count != 1 else "",
                         f", expect_tx={expr_str(s.expect_tx)}" if s.expect_tx is not None else "",
                         ", elected" if s.elected else "",
                         f", cta={expr_str(s.cta)}" if s.cta is not None else ""])
        return [f"mbarrier_arrive({s.bar.name}[{expr_str(s.index)}]{extra})"]
    if isinstance(s, th.ClusterBarrier):
        return [f"cluster_barrier({'arrive' if s.arrive else ''}{'+' if s.arrive and s.wait else ''}"
                f"{'wait' if s.wait else ''})"]
    if isinstance(s, th.MbarrierExpectTx):
        return [f"mbarrier_expect_tx({s.bar.name}[{expr_str(s.index)}], {expr_str(s.nbytes)})"]
    if isinstance(s, th.NamedBarrier):
        op = "named_barrier_arrive" if s.arrive_only else "named_barrier_sync"
        return [f"{op}(id={expr_str(s.barrier_id)}, threads={s.count})"]
    if isinstance(s, th.SetMaxNReg):
        return [f"setmaxnreg.{'inc' if s.increase else 'dec'}({s.count})"]
    if isinstance(s, th.FenceProxyAsync):
        return ["fence_proxy_async()"]
    if isinstance(s, th.GridDependency):
        return [f"griddepcontrol.{s.action}()"]
    if isinstance(s, th.PrefetchL2):
        return [f"prefetch_l2({expr_str(s.load)})"]
    if isinstance(s, th.Comment):
        return [f"# {s.text}"]
    if isinstance(s, th.MbarrierInit):
        return [f"mbarrier_init({s.bar.name}[0:{s.bar.shape[0]}], arrivals={s.count})"]
    if isinstance(s, th.TmaLoad):
        coords = ", ".join(expr_str(c) for c in s.coords)
        return [f"{s.dst.name}[{expr_str(s.dst_index)} +: {s.tmap.box}] = tma_load({s.tmap.param.name}[{coords}], "
                f"swizzle={s.tmap.swizzle}B, mbarrier={s.bar.name}[{expr_str(s.bar_index)}]"
                + ("" if s.expect_bytes is None else f", expect_bytes={s.expect_bytes}")
                + ("" if not s.issuer_warp else f", warp={s.issuer_warp}")
                + ("" if s.arrives else ", no arrival")
                + ("" if s.multicast is None else f", multicast={s.multicast:#x}") + ")"]
    if isinstance(s, th.TmaStore):
        coords = ", ".join(expr_str(c) for c in s.coords)
        return [f"tma_store({s.tmap.param.name}[{coords}] +: {s.tmap.box}, {s.src.name}[{expr_str(s.src_index)}], "
                f"swizzle={s.tmap.swizzle}B, thread={s.issuer})"]
    if isinstance(s, th.TmaStoreCommit):
        return [f"tma_store_commit(thread={s.issuer})"]
    if isinstance(s, th.TmaStoreWait):
        return [f"tma_store_wait_read({s.pending}, thread={s.issuer})"]
    if isinstance(s, th.MbarrierWait):
        return [f"mbarrier_wait({s.bar.name}[{expr_str(s.index)}], parity={expr_str(s.parity)})"]
    if isinstance(s, th.MbarrierArrive):
        tx = f", expect_tx={expr_str(s.expect_tx)}" if s.expect_tx is not None else ""
        cta = f", cta={expr_str(s.cta)}" if s.cta is not None else ""
        return [f"mbarrier_arrive({s.bar.name}[{expr_str(s.index)}], count={s.count}{tx}"
                f"{', elected' if s.elected else ''}{cta})"]
    if isinstance(s, th.ClusterBarrier):
        return [f"cluster_barrier(arrive={s.arrive}, wait={s.wait}{', relaxed' if s.relaxed else ''})"]
    if isinstance(s, th.MbarrierExpectTx):
        return [f"mbarrier_expect_tx({s.bar.name}[{expr_str(s.index)}], {expr_str(s.nbytes)})"]
    if isinstance(s, th.NamedBarrier):
        return [f"named_barrier{'_arrive' if s.arrive_only else ''}(id={expr_str(s.barrier_id)}, threads={s.count})"]
    if isinstance(s, th.SetMaxNReg):
        return [f"set_max_nreg({s.count}, {'inc' if s.increase else 'dec'})"]
    if isinstance(s, th.FenceProxyAsync):
        return ["fence_proxy_async()"]
    if isinstance(s, th.GridDependency):
        return [f"griddepcontrol.{s.action}()"]
    if isinstance(s, th.PrefetchL2):
        return [f"prefetch_l2({expr_str(s.load)})"]
    return [f"<{name}>"]


def print_thread_kernel(k) -> str:
    from .printer import print_stmt

    head = (f"thread_kernel {k.name}(grid={tuple(expr_str(g) for g in k.grid)}, threads={k.num_threads}, "
            f"shared={k.shared_bytes}B)\n")
    return head + print_stmt(k.body)
