"""Thread IR: what one thread (lane) of a block executes.

Lowering turns the Tile IR into this level.  It reuses the Tile IR's ``SeqStmt``, ``For``,
``IfThenElse``, ``LetStmt`` and ``BufferStore`` (with exactly one index: an element offset into a
flat buffer) and the shared expressions; loads (``Load``) likewise take one flat index.  Buffers
are flat here: ``global`` (a kernel parameter pointer), ``shared`` (a slice of the block's dynamic
shared memory / LDS at ``SharedDecl.offset`` bytes) and ``local`` (a per-thread register array).

Matrix and async-copy instructions are structured nodes, never opaque strings: the CUDA and HIP
printers print them, and the emulator executes them, from the same fields.  ``MatrixMultiply``
carries a ``MatrixInstr`` from ``target/`` whose lane layouts say which lane holds which element,
so mma.sync (warp of 32), MFMA (wave of 64) and WMMA (wave of 32) are one node type.  Hopper's
warpgroup instruction is ``Wgmma`` (operands through shared-memory descriptors, ``WgmmaOperand``),
with ``WgmmaFence`` / ``WgmmaCommit`` / ``WgmmaWait`` around it; only the CUDA printer prints them.

Special variables: ``ThreadKernel.thread_var`` is ``threadIdx.x`` (threads are numbered linearly);
``block_vars`` are ``blockIdx.x/y/z``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..target.matrix import MatrixInstr
from .tile import Buffer, Stmt


@dataclass(eq=False)
class LocalDecl(Stmt):
    """Declare a per-thread register array ``buffer`` (scope ``local``), optionally zero-initialised."""

    buffer: Buffer
    init: Any = None
    loc: Any = None


@dataclass(eq=False)
class GlobalDecl(Stmt):
    """Declare global tensor ``buffer`` at byte address ``address`` (an int64 expression): a tensor made by
    ``T.make_tensor`` on an address the kernel computed (frontend/address_tensors.py)."""

    buffer: Buffer
    address: Any
    loc: Any = None


@dataclass(eq=False)
class SharedDecl(Stmt):
    """Place shared buffer ``buffer`` at byte ``offset`` of the block's dynamic shared memory."""

    buffer: Buffer
    offset: int
    loc: Any = None


@dataclass(eq=False)
class VecCopy(Stmt):
    """Copy ``lanes`` contiguous elements ``src[src_index : +lanes]`` to ``dst[dst_index : +lanes]`` as one
    vector access.  Both buffers have the same dtype.  With ``pred`` false: a load into a local
    buffer writes zeros, a store to memory does nothing."""

    dst: Buffer
    dst_index: Any
    src: Buffer
    src_index: Any
    lanes: int
    pred: Any = None
    loc: Any = None


@dataclass(eq=False)
class Barrier(Stmt):
    """Block-wide barrier (``__syncthreads``) that also orders shared-memory accesses."""

    loc: Any = None


@dataclass(eq=False)
class AsyncCopy(Stmt):
    """Asynchronous global -> shared copy of ``nbytes`` (4, 8 or 16): cp.async on NVIDIA.  With
    ``pred`` false the destination is zero-filled and the source is not read."""

    dst: Buffer
    dst_index: Any
    src: Buffer
    src_index: Any
    nbytes: int
    pred: Any = None
    loc: Any = None


@dataclass(eq=False)
class AsyncCommit(Stmt):
    """Close the current group of async copies (cp.async.commit_group)."""

    loc: Any = None


@dataclass(eq=False)
class AsyncWait(Stmt):
    """Wait until at most ``pending`` groups of this thread's async copies are still in flight."""

    pending: int
    loc: Any = None


@dataclass(frozen=True)
class TensorMap:
    """A tensor-memory-accelerator (TMA) descriptor the kernel receives as an extra parameter:
    global tensor ``param`` read in boxes of ``box`` elements (outermost dimension first), written
    to shared memory with the ``swizzle`` pattern of that many bytes (0, 32, 64 or 128).  The
    runtime encodes one per launch from the argument bound to ``param``."""

    param: Any  # a global Buffer among ThreadKernel.params
    box: tuple
    swizzle: int


@dataclass(eq=False)
class MbarrierInit(Stmt):
    """Block-level: thread 0 initialises the ``bar.shape[0]`` mbarriers of shared buffer ``bar``
    (uint64) to expect ``count`` arrivals per phase, then makes that visible to the async proxy.
    A ``Barrier`` must follow before any thread waits on them."""

    bar: Buffer
    count: int
    loc: Any = None


@dataclass(eq=False)
class TmaLoad(Stmt):
    """Block-level: one thread has the TMA copy the box of ``tmap`` whose first element is at
    ``coords`` (element coordinates, outermost first; may lie partly or wholly outside the tensor,
    those elements read as zero) into shared ``dst`` starting at element ``dst_index``, in the
    layout ``layout`` (a ``SharedLayout`` of the box shape whose swizzle matches ``tmap.swizzle``),
    and completes its bytes on mbarrier ``bar[bar_index]``.  ``expect_bytes`` says what the issuing
    thread tells the barrier first: None, this box's bytes (pipelined copies); a number, that many
    bytes (the first box of a ``T.tma_copy``, for all its boxes); 0, nothing (its other boxes).
    ``arrives``: the issuing thread also arrives once with those expected bytes
    (``mbarrier.arrive.expect_tx``: the compiler's own rings); False, it only raises the phase's
    expected bytes (``mbarrier.expect_tx``: ``T.tma_copy``, whose program arrives itself, as in
    TileLang).  ``issuer_warp``: the warp (of the block) whose elected lane issues it — the first
    warp of the thread set that runs the copy."""

    dst: Buffer
    dst_index: Any
    layout: Any
    tmap: TensorMap
    coords: tuple
    bar: Buffer
    bar_index: Any
    loc: Any = None
    expect_bytes: Any = None
    issuer_warp: int = 0
    arrives: bool = True
    multicast: Any = None  # a ctaMask (int): the box lands at the same offset in each of those blocks of the
    # cluster and completes its bytes on the mbarrier at ``bar``'s offset there (``.multicast::cluster``)


@dataclass(eq=False)
class TmaStore(Stmt):
    """Block-level: thread ``issuer`` (a thread index of the block) has the TMA copy the shared box that
    starts at element ``src_index`` of ``src``, laid out in ``layout`` (a ``SharedLayout`` of the box
    shape whose swizzle matches ``tmap.swizzle``), to the box of ``tmap`` whose first element is at
    ``coords`` (element coordinates, outermost first); elements outside the tensor are not written
    (``cp.async.bulk.tensor...global.shared::cta.bulk_group``).  Asynchronous: the store joins the
    issuer's open bulk group (``TmaStoreCommit`` closes it); ``src`` may be written again only after
    a ``TmaStoreWait`` of the issuer covering that group (and a barrier that orders the writers after
    it).  The threads that wrote ``src`` must have run ``FenceProxyAsync`` and a barrier before it."""

    src: Buffer
    src_index: Any
    layout: Any
    tmap: TensorMap
    coords: tuple
    issuer: int = 0
    loc: Any = None


@dataclass(eq=False)
class TmaStoreCommit(Stmt):
    """Thread ``issuer`` closes its open group of TMA stores (``cp.async.bulk.commit_group``)."""

    issuer: int = 0
    loc: Any = None


@dataclass(eq=False)
class TmaStoreWait(Stmt):
    """Thread ``issuer`` waits until at most ``pending`` of its committed TMA-store groups still read
    their shared source (``cp.async.bulk.wait_group.read pending``).  ``issuer`` None: the first
    thread of the thread set that runs it (filled in by lowering)."""

    pending: int = 0
    issuer: Any = None
    loc: Any = None


@dataclass(eq=False)
class MbarrierWait(Stmt):
    """Every thread waits until the phase of parity ``parity`` (0/1) of mbarrier ``bar[index]``
    has completed, i.e. the TMA loads that arrived on it have landed in shared memory.  ``phase``
    (optional, for the emulator only; the GPU sees the parity): the number of the phase the wait
    means, for threads that wait on some phases of a barrier and not on others (ping-pong consumers
    sharing one ring): the emulator then checks that the wait returns on exactly that phase instead
    of checking that the thread waited for every phase."""

    bar: Buffer
    index: Any
    parity: Any
    loc: Any = None
    phase: Any = None


@dataclass(eq=False)
class MbarrierArrive(Stmt):
    """The executing threads arrive on mbarrier ``bar[index]``: ``count`` arrivals per executing
    thread (or, with ``elected``, by one elected lane of each executing warp: ``elect.sync``).  With
    ``expect_tx`` (bytes) the arrival also raises the phase's expected transaction count
    (``mbarrier.arrive.expect_tx``): the phase then completes once both the arrivals and that many
    bytes of asynchronous copies have landed."""

    bar: Buffer
    index: Any
    count: int = 1
    expect_tx: Any = None
    elected: bool = False
    loc: Any = None
    cta: Any = None  # a block rank of the cluster: arrive on the mbarrier at this one's offset in that block
    # (``mapa`` + ``mbarrier.arrive.release.cluster.shared::cluster``); None: this block's own


CLUSTER_RANK = "cluster_ctarank"  # E.Call(CLUSTER_RANK, (), "int32"): the block's rank in its cluster
# E.Call(WARP_UNIFORM, (x,), dtype): a compiler-made promise that every lane of the warp holds the same x; its
# value is x (interp/warp_ops.py: what the printers and the emulator make of it)
WARP_UNIFORM = "warp_uniform"


@dataclass(eq=False)
class ClusterBarrier(Stmt):
    """The thread-block cluster's barrier (``barrier.cluster.arrive`` / ``barrier.cluster.wait``): every
    executing thread arrives (``arrive``, release semantics) and/or waits (``wait``, acquire) until every
    thread of every block of the cluster has arrived in the current phase.  Orders shared memory across
    the cluster's blocks (mbarrier initialisation before peers use the barriers, a block's exit after
    its peers' last remote accesses)."""

    arrive: bool = True
    wait: bool = True
    loc: Any = None
    # ``barrier.cluster.arrive.relaxed``: no release of the executing threads' memory operations (a sync
    # after MbarrierInit, whose fence.mbarrier_init.release.cluster already publishes the barriers)
    relaxed: bool = False


@dataclass(eq=False)
class MbarrierExpectTx(Stmt):
    """Raise the expected transaction bytes of the current phase of ``bar[index]`` by ``nbytes``
    without arriving (``mbarrier.expect_tx``); issued by one elected thread of the executing set."""

    bar: Buffer
    index: Any
    nbytes: Any
    loc: Any = None


@dataclass(eq=False)
class NamedBarrier(Stmt):
    """Hardware named barrier ``barrier_id`` (1..15 on NVIDIA; 0 is ``__syncthreads``) over
    ``count`` threads (a multiple of the warp size).  ``arrive_only``: the executing threads
    arrive without waiting (``bar.arrive``, a producer signalling consumers); otherwise they
    arrive and wait until ``count`` threads have arrived (``bar.sync``).  Orders shared memory
    among the threads that sync on it."""

    barrier_id: Any
    count: int
    arrive_only: bool = False
    loc: Any = None


@dataclass(eq=False)
class SetMaxNReg(Stmt):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 count``: the executing warpgroup's per-thread
    register budget becomes ``count`` (24..256, a multiple of 8).  sm_90a only; every warp of the
    warpgroup executes it together."""

    count: int
    increase: bool
    loc: Any = None


@dataclass(eq=False)
class FenceProxyAsync(Stmt):
    """``fence.proxy.async.shared::cta``: orders the executing threads' generic-proxy shared-memory
    writes before later async-proxy accesses (TMA stores, wgmma operand reads) of the same data."""

    loc: Any = None


@dataclass(eq=False)
class GridDependency(Stmt):
    """Programmatic dependent launch (sm_90+), ``T.pdl_sync`` / ``T.pdl_trigger``.  ``action`` "wait":
    ``griddepcontrol.wait``, the executing thread waits until the grids this launch depends on have completed
    and their memory is visible (at once when it was launched without the programmatic attribute: the stream
    order already did that); a kernel holding one is launched with programmatic stream serialization
    (``LaunchSpec.programmatic``), so every global access it makes before its wait must not depend on the
    previous kernel.  "launch_dependents": ``griddepcontrol.launch_dependents``, the block allows the next
    programmatic launch to start its blocks (they run until their own wait).  Elsewhere (before sm_90, AMD,
    the emulator, which runs launches in order) neither has anything to do.  ``prefetch_tensor_maps`` (a wait,
    ``passes/pdl_prologue``): on CUDA one thread of the block first prefetches the kernel's TMA descriptors."""

    action: str  # "wait" or "launch_dependents"
    loc: Any = None
    prefetch_tensor_maps: bool = False


@dataclass(eq=False)
class PrefetchL2(Stmt):
    """``T.prefetch_l2``: the executing thread asks for the cache line holding element ``load`` of a global buffer
    to be brought into L2 (``prefetch.global.L2``).  A hint with no effect on any value or on memory ordering: L2
    is the device's point of coherence, so a later load of the line (a TMA copy included) sees every write made
    to it, before or after the prefetch; so it may sit before ``griddepcontrol.wait``.  The element must be
    inside the buffer (the emulator reads it, with its bounds check; the value is unused).  Nothing on AMD."""

    load: Any  # an expr.Load of a global buffer: logical indices in Tile IR, one element offset in thread IR
    loc: Any = None


@dataclass(eq=False)
class LoadMatrix(Stmt):
    """ldmatrix: the warp loads ``num`` (1, 2, 4) 8x8 matrices of 16-bit elements from shared memory.
    Lane ``l`` supplies ``src_index`` = the element offset of row ``l % 8`` of matrix ``l // 8``.
    Lane ``l`` receives, for each matrix q, 2 elements into ``dst[dst_index + 2q : +2]``: row
    ``l // 4``, columns ``2 (l % 4) + {0, 1}`` (of the transposed matrix when ``trans``)."""

    dst: Buffer
    dst_index: int
    src: Buffer
    src_index: Any
    num: int
    trans: bool = False
    loc: Any = None


@dataclass(eq=False)
class StoreMatrix(Stmt):
    """stmatrix (sm_90): the warp stores ``num`` (1, 2, 4) 8x8 matrices of 16-bit elements to shared
    memory, the mirror of ``LoadMatrix``.  Lane ``l`` supplies ``dst_index`` = the element offset of
    row ``l % 8`` of matrix ``l // 8`` (8 contiguous, 16-byte aligned elements), and holds, for each
    matrix q, 2 elements in ``src[src_index + 2q : +2]``: row ``l // 4``, columns ``2 (l % 4) + {0, 1}``."""

    dst: Buffer
    dst_index: Any
    src: Buffer
    src_index: int
    num: int
    loc: Any = None


@dataclass(eq=False)
class MatrixMultiply(Stmt):
    """One matrix instruction over the lanes of a warp/wave: D = A @ B + C.

    Each operand is ``(buffer, offset)``: the lane's elements of that operand occupy
    ``buffer[offset : offset + instr.<x>_elems]`` in register order."""

    instr: MatrixInstr
    d: tuple
    a: tuple
    b: tuple
    c: tuple
    loc: Any = None


@dataclass(frozen=True)
class WgmmaOperand:
    """A wgmma operand read through a shared-memory matrix descriptor: the tile of shared ``buffer``
    (flat) whose canonical layout starts at element ``index`` (the atom's first row/column, where
    the swizzle is the identity), stored ``major`` (``"k"``: K contiguous; ``"mn"``: M/N contiguous,
    which sets the instruction's transpose bit), with a ``swizzle``-byte swizzle (32, 64, 128) and
    the leading / stride byte offsets ``lbo`` / ``sbo`` of ``target.matrix`` (see there).  The
    printer builds the 64-bit descriptor from the buffer's shared address; the emulator encodes and
    decodes the same value.  ``base`` / ``step`` (``tw.wgmma_desc_fold``): ``index`` is ``base`` plus
    ``step`` * 16 bytes, ``base`` the tile's first element; the printer writes the descriptor of ``base``
    plus ``step`` (the same value: the start-address field is the address / 16, and both addresses are
    shared addresses below 2**18), which the K steps of one gemm share."""

    buffer: Buffer
    index: Any
    major: str
    swizzle: int
    lbo: int
    sbo: int
    base: Any = None
    step: int = 0


@dataclass(eq=False)
class Wgmma(Stmt):
    """``wgmma.mma_async`` by one warpgroup (128 consecutive threads, all executing it): D += A @ B
    with D the ``instr.c_elems`` accumulator registers ``d = (local buffer, offset)`` in the
    instruction's C lane layout.  ``a`` is a ``WgmmaOperand`` or registers ``(local buffer, offset)``
    holding ``instr.a_elems`` elements in the A lane layout; ``b`` is a ``WgmmaOperand``.
    ``scale_d``: 1 accumulates into D, 0 overwrites it (D = A @ B).  Asynchronous: the registers of D
    (and of a register A) may be touched again only after a ``WgmmaWait`` that covers its group;
    a ``WgmmaFence`` must precede the first wgmma that uses registers written by other code."""

    instr: MatrixInstr
    d: tuple
    a: Any
    b: WgmmaOperand
    scale_d: int = 1
    loc: Any = None


@dataclass(eq=False)
class WgmmaFence(Stmt):
    """``wgmma.fence.sync.aligned``: orders the warpgroup's earlier register (and shared) accesses
    before the wgmma instructions that follow.  ``fenced``: local buffers (the accumulators) whose
    registers the device compiler must not move accesses to across this point."""

    fenced: tuple = ()
    loc: Any = None


@dataclass(eq=False)
class WgmmaCommit(Stmt):
    """``wgmma.commit_group.sync.aligned``: the wgmmas issued since the last commit form a group."""

    loc: Any = None


@dataclass(eq=False)
class WgmmaWait(Stmt):
    """``wgmma.wait_group.sync.aligned pending``: wait until at most ``pending`` groups are in flight.
    ``fenced``: local buffers (accumulators, register A operands) that the finished groups wrote or
    read; the device compiler must not move their accesses above the wait."""

    pending: int
    fenced: tuple = ()
    loc: Any = None


@dataclass(eq=False)
class AtomicRMW(Stmt):
    """``buffer[index] = op(buffer[index], value)`` atomically (op: add, max, min, and, or, xor,
    exch).  ``scope`` is the set of threads the atomicity and ordering hold for ("gpu", "cta",
    "sys"); ``order`` the memory order ("relaxed", "acquire", "release", "acq_rel", "seq_cst").
    With ``result`` (a local buffer and element offset) the value before the update is stored
    there."""

    op: str
    buffer: Buffer
    index: Any
    value: Any
    loc: Any = None
    scope: str = "gpu"
    order: str = "relaxed"
    result: Any = None  # (local Buffer, index) or None


@dataclass(eq=False)
class Comment(Stmt):
    text: str
    loc: Any = None


@dataclass(eq=False)
class ThreadKernel:
    """A lowered kernel: parameters, launch shape, shared memory, and the per-thread body."""

    name: str
    params: list  # Buffer (global, flat view; shape kept for argument checks) or Var (scalars)
    dyn_vars: list  # symbolic dims passed as int32 parameters after the declared params
    grid: tuple  # exprs of dyn vars / scalar params
    num_threads: int
    shared_bytes: int
    body: Any
    thread_var: Any
    block_vars: tuple
    target: Any = None
    attrs: dict = field(default_factory=dict)
    tensor_maps: list = field(default_factory=list)  # TensorMap, passed after params and dyn_vars
