"""Argument checks, configuration choice and the kernel cache of ``tilewright.ops``."""

from __future__ import annotations

from ..errors import ArgumentError
from . import kernels
from .plan_dict import PlanDict

_kernels: dict = {}  # (op, static key) -> JITKernel
_DTYPES = ("float16", "bfloat16", "float32")


_torch_module: list = []  # torch, imported on first use (tilewright itself does not need it)
_dtype_names: dict = {}  # torch dtype -> "float16", ...


def _torch():
    if not _torch_module:
        import torch

        _torch_module.append(torch)
    return _torch_module[0]


def _dtype_name(t) -> str:
    name = _dtype_names.get(t.dtype)
    if name is None:
        name = _dtype_names[t.dtype] = str(t.dtype).replace("torch.", "")
    return name


_device_targets: dict = {}  # device index -> target string


def _target_of(t) -> str:
    if t.device.type == "cpu":
        return "interpret"
    if t.device.type != "cuda":
        raise ArgumentError(f"tensors on {t.device} are not supported; use a CUDA/ROCm GPU or the CPU")
    index = t.device.index if t.device.index is not None else _torch().cuda.current_device()
    hit = _device_targets.get(index)
    if hit is None:  # kernels are built for the GPU the tensors live on (GPUs of a machine may differ)
        from ..target.detect import device_target

        hit = _device_targets[index] = str(device_target(index))
    return hit


def _kernel(key: tuple, build, target: str, pass_configs=None):
    """The compiled kernel ``build()`` for ``target`` and ``pass_configs``, cached under ``key``."""
    pc_key = tuple(sorted((pass_configs or {}).items()))
    hit = _kernels.get((key, target, pc_key))
    if hit is None:
        from ..compiler import compile as tw_compile

        hit = tw_compile(build(), target=target, pass_configs=pass_configs or None)
        _kernels[(key, target, pc_key)] = hit
    return hit


def _check_tensor(name: str, t, ndim=None, dtypes=_DTYPES):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise ArgumentError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ArgumentError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if _dtype_name(t) not in dtypes:
        raise ArgumentError(f"{name} has dtype {t.dtype}; supported: {', '.join(dtypes)}")


def _same_device(**tensors):
    first = None
    for t in tensors.values():
        if t is not None:
            if first is None:
                first = t.device
            elif t.device != first:
                break
    else:
        return
    devs = {n: t.device for n, t in tensors.items() if t is not None}
    if len(set(devs.values())) > 1:
        raise ArgumentError("all tensors must be on one device; got " + ", ".join(f"{n} on {d}" for n, d in
                                                                                 devs.items()))


def _check_eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < float("inf"):
        raise ArgumentError(f"eps must be positive and finite, got {eps!r}")


# ---------------------------------------------------------------- matmul
_gemm_choice: dict = {}  # call signature -> GemmConfig (tuned entry or heuristic), per process
_archs: dict = {}  # torch device -> (arch, SM count, name)


def _operand(name: str, t):
    """(tensor to pass, transposed?): a row-major matrix, or the transpose of a row-major one."""
    if t.stride(-1) == 1 and t.stride(0) == t.shape[1]:
        return _aligned(t), False
    if t.stride(0) == 1 and t.stride(1) == t.shape[0]:
        return _aligned(t.t()), True
    return t.contiguous(), False


def _aligned(t):
    """``t`` (contiguous), or a copy of it when its start is off a 16-byte boundary (a slice, a storage
    offset): the kernels load vectors, and the launcher refuses such a start on a GPU."""
    return t.clone() if t.data_ptr() & 15 else t


def _arch_of(t) -> tuple[str, int, str]:
    """(architecture family the configurations are chosen for, SM/CU count, device name)."""
    hit = _archs.get(t.device)
    if hit is None:
        hit = _archs[t.device] = _probe_arch(t)
    return hit


_shared_limits: dict = {}  # torch device -> shared memory (LDS) bytes per block


def shared_limit(t) -> int:
    """Shared memory / LDS bytes a block may use on ``t``'s device (the CPU mirrors an H200)."""
    hit = _shared_limits.get(t.device)
    if hit is None:
        from . import gemm_configs

        if t.device.type == "cpu":
            hit = gemm_configs.H200_SHARED_BYTES
        else:
            from ..target import Target

            hit = Target.current().max_shared_bytes
        _shared_limits[t.device] = hit
    return hit


def _probe_arch(t) -> tuple[str, int, str]:
    torch = _torch()
    if t.device.type == "cpu":
        return "interpret", 132, "cpu"  # the CPU runs what an H200 would (same kernels, same splits)
    props = torch.cuda.get_device_properties(t.device)
    if getattr(torch.version, "hip", None):
        arch = getattr(props, "gcnArchName", "gfx").split(":")[0]
    else:
        arch = "sm_90" if (props.major, props.minor) == (9, 0) else f"sm_{props.major}{props.minor}"
    return arch, props.multi_processor_count, props.name


def _normalize_activation(activation) -> str:
    return "none" if activation is None else activation


def matmul(a, b, bias=None, activation=None, out_dtype=None):
    """``act(a @ b + bias)`` for 2-D fp16/bf16 ``a`` (M, K) and ``b`` (K, N); transposed operands
    (``w.t()``) are read in place.  ``activation``: None/"none", relu, gelu_tanh, silu; ``out_dtype``:
    the input dtype (default) or torch.float32.  The configuration (tiles, stages, split-K, ...)
    comes from a tuned entry of the tuning cache (``tune_matmul``) or else a shape heuristic
    (``ops/gemm_configs.py``)."""
    torch = _torch()
    if activation is None:
        activation = "none"
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and _wants_grad(a, b, bias)):
        return torch.ops.tilewright.matmul(a, b, bias, activation, out_dtype)  # traced, or with autograd
    return matmul_impl(a, b, bias, activation, out_dtype)


def _wants_grad(a, b, c=None) -> bool:
    """Does any of the tensors (None or not a tensor: no) require a gradient?"""
    try:  # (three attribute reads: the common case, tensors and None)
        return (a.requires_grad is True or b.requires_grad is True
                or (c is not None and c.requires_grad is True))
    except AttributeError:
        return any(getattr(t, "requires_grad", False) is True for t in (a, b, c))


def _check_matmul(a, b, bias, activation, out_dtype):
    torch = _torch()
    _check_tensor("a", a, 2, ("float16", "bfloat16"))
    _check_tensor("b", b, 2, ("float16", "bfloat16"))
    if a.dtype != b.dtype:
        raise ArgumentError(f"a and b must have one dtype; got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ArgumentError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's columns must equal b's rows")
    if activation not in kernels.ACTIVATIONS:
        raise ArgumentError(f"activation {activation!r} is not one of {', '.join(kernels.ACTIVATIONS)}")
    out_dtype = out_dtype or a.dtype
    if out_dtype not in (a.dtype, torch.float32):
        raise ArgumentError(f"out_dtype must be {a.dtype} or torch.float32, got {out_dtype}")
    if bias is not None:
        _check_tensor("bias", bias, 1, (_dtype_name(a),))
        if bias.shape[0] != b.shape[1]:
            raise ArgumentError(f"bias has {bias.shape[0]} elements; b has {b.shape[1]} columns")
    _same_device(a=a, b=b, bias=bias)
    return out_dtype


def matmul_impl(a, b, bias, activation, out_dtype, config=None, out=None):
    """``matmul`` without the torch.library detour; ``config`` (a ``GemmConfig``) overrides the
    tuned entry and the heuristic, ``out`` receives the result (both for ``tune_matmul``, the
    benchmark and the tests)."""
    if activation is None:  # (_normalize_activation, inline: a frame less per call)
        activation = "none"
    memo = _matmul_key(a, b, bias, activation, out_dtype, False) if config is None and out is None else None
    if memo is not None:
        try:  # (the last call's key compared first, else a lookup, which hashes the key: an argument
            # that cannot be hashed or compared raises here, and then there is no memo)
            hit = _matmul_plans.find(memo)
        except (TypeError, ValueError, RuntimeError):
            memo = hit = None
        if hit is not None:  # a repeat call: the checks passed and the plan was made for this metadata
            out = hit.make_out()
            if not hit.from_pointers(a, b, bias, out):
                hit(_OPERAND[hit.op_a](a), _OPERAND[hit.op_b](b), bias, out)
            return out
    if config is not None:
        from .gemm_configs import refusal

        why = refusal(config)
        if why:
            raise ArgumentError(f"config {config.short()!r} is not one the GEMM kernels build as named: {why}")
    out_dtype = _check_matmul(a, b, bias, activation, out_dtype)
    torch = _torch()  # (after the repeat path, which does not need it: a frame less there)
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=a.device)
    elif out.shape != (M, N) or out.dtype != out_dtype or not out.is_contiguous():
        raise ArgumentError(f"out must be a contiguous ({M}, {N}) {out_dtype} tensor")
    if M == 0 or N == 0:
        return out
    if K == 0:
        r = torch.zeros((M, N), dtype=torch.float32, device=a.device) + (0 if bias is None else bias.float())
        f = {"relu": torch.relu, "silu": torch.nn.functional.silu,
             "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}.get(activation)
        return out.copy_(f(r) if f else r)  # an empty sum: act(bias)
    av, ta = _operand("a", a)
    bv, tb = _operand("b", b)
    arch, num_sms, _ = _arch_of(a)
    cfg = config or matmul_config(M, N, K, a, ta, tb, bias is not None, activation, out_dtype)
    if cfg.kind in ("persistent", "streamk") and arch not in ("sm_90", "interpret"):
        raise ArgumentError(f"the {cfg.kind} GEMM runs on sm_90 only (this device is {arch})")
    plan = _launch_matmul(cfg, av, bv, ta, tb, bias, activation, out, arch, num_sms)
    if memo is not None:
        if len(_matmul_plans) > 4096:
            _matmul_plans.clear()
        _matmul_plans[memo] = _MatmulRun(plan, cfg, _operand_kind(a), _operand_kind(b), (M, N), out_dtype, a)
    return out


class _MatmulRun:
    """The launches of one matmul call signature (``_matmul_key``: shapes, strides, dtypes, device,
    activation, output dtype), each a ``BoundKernel``: the signature fixes every argument's
    metadata, the row count included, so a repeat call reads pointers only."""

    __slots__ = ("M", "N", "atomic", "bias_ptr", "bias_stub", "device", "direct", "dtype", "first", "make_out", "op_a",
                 "op_b", "second", "streamk", "ws_shape")

    def __init__(self, plan, cfg, op_a, op_b, shape, out_dtype, a):
        from .bound_kernel import BoundKernel

        torch = _torch()
        self.op_a, self.op_b = op_a, op_b
        self.M, self.N = shape
        self.dtype, self.device = out_dtype, a.device
        self.first = BoundKernel(plan[1])
        self.second = BoundKernel(plan[2]) if plan[0] in ("splitk", "streamk") else None
        self.atomic = cfg.atomic
        self.streamk = plan[0] == "streamk"
        # split-K: one fp32 slice per split of the output; stream-K: one fp32 tile per (left-over
        # tile, K slice), at most one left-over tile per SM (as _run_matmul allocates them)
        self.ws_shape = ((plan[3], cfg.splits, cfg.block_M, cfg.block_N) if self.streamk
                         else (shape[0], 1 if cfg.atomic else cfg.splits, shape[1]))
        # the bias parameter of a kernel compiled without bias (never read), as _run_matmul passes it
        self.bias_stub = _placeholder(a.dtype if plan[0] == "direct" else torch.float32, a.device)
        self.bias_ptr = self.bias_stub.data_ptr()  # (the placeholder is never freed: its address stays valid)
        # the output of a repeat call: torch.empty_like of a template (jit/alloc_template.py; on the H200's
        # host torch.empty(M, N, dtype=, device=) measured 2.1-2.3 us against torch.empty_like's 1.7-1.8),
        # made through the module's torch at plan time (tests that poison its allocations poison this)
        from ..jit.alloc_template import empty_maker

        self.make_out = empty_maker(torch, shape, out_dtype, a.device)
        # one launch of (A, B, bias, C) with A and B passed as they are or as their transposes (which
        # start where they do): a bound repeat call needs only the pointers (from_pointers)
        self.direct = self.second is None and op_a < 2 and op_b < 2 and len(self.first.kernel.params) == 4

    def from_pointers(self, a, b, bias, out) -> bool:
        """Launch a repeat call from the pointers of ``a``, ``b``, ``bias`` and ``out`` (the plan's
        key fixed their metadata; the transposed views ``__call__`` would pass start where ``a``
        and ``b`` do); False where ``__call__`` is needed (before the first bind, a copied operand,
        a second launch, a start off a 16-byte boundary)."""
        first = self.first
        if not self.direct or first._dyn is None:  # (BoundKernel.bound, read without the property's frame)
            return False
        if bias is None:
            cp = self.bias_ptr
        elif not bias.is_contiguous():
            return False
        else:
            cp = bias.data_ptr()
        ap, bp = a.data_ptr(), b.data_ptr()
        if (ap | bp | cp) & 15:
            return False
        first.launch_pointers([ap, bp, cp, out.data_ptr()], ())
        return True

    def __call__(self, av, bv, bias, out) -> None:
        av, bv = _aligned(av), _aligned(bv)  # (the plan's key has the strides, not the start's alignment)
        bias_arg = self.bias_stub if bias is None else _aligned(bias.contiguous())
        if self.second is None:
            self.first(av, bv, bias_arg, out)
            return
        torch = _torch()
        if self.streamk:
            ws = torch.empty(*self.ws_shape, dtype=torch.float32, device=self.device)
            self.first(av, bv, bias_arg, out, ws)
            self.second(ws, bias_arg, out)
            return
        ws = (torch.zeros if self.atomic else torch.empty)(*self.ws_shape, dtype=torch.float32, device=self.device)
        self.first(av, bv, ws)
        self.second(ws, bias_arg, out)


_matmul_plans = PlanDict()  # argument metadata (_matmul_key) -> _MatmulRun (the last call's key first)


def _matmul_key(a, b, bias, activation, out_dtype, hashed=True):
    """What the checks, the configuration and the operand handling of a matmul call depend on:
    type, dtype, shape, strides and device of each tensor, the activation and the output dtype
    (None when an argument is not a tensor: the checked path says what is wrong)."""
    try:
        key = (a.__class__, a.dtype, a.shape, a.stride(), a.device, b.__class__, b.dtype, b.shape, b.stride(),
               b.device, activation, out_dtype)
        if bias is not None:
            key += (bias.__class__, bias.dtype, bias.shape, bias.stride(), bias.device)
        if hashed:  # (matmul_impl's lookup finds out itself: no second hash of the key)
            hash(key)
        return key
    except (AttributeError, TypeError):
        return None


def _operand_kind(t) -> int:
    """How ``_operand`` passes ``t``: 0 as it is, 1 transposed, 2 copied (decided by shape and strides)."""
    if t.stride(-1) == 1 and t.stride(0) == t.shape[1]:
        return 0
    if t.stride(0) == 1 and t.stride(1) == t.shape[0]:
        return 1
    return 2


_OPERAND = (lambda t: t, lambda t: t.t(), lambda t: t.contiguous())


def matmul_config(M, N, K, a, trans_a=False, trans_b=False, has_bias=False, activation="none", out_dtype=None):
    """The ``GemmConfig`` ``ops.matmul`` uses for this shape on ``a``'s device: a tuned entry of the
    tuning cache when there is one, else the heuristic."""
    from . import gemm_configs

    out_name = _dtype_name(a) if out_dtype is None else str(out_dtype).replace("torch.", "")
    memo = (gemm_configs.m_bucket(M), M, N, K, a.dtype, out_name, trans_a, trans_b, has_bias, activation, a.device)
    hit = _gemm_choice.get(memo)
    if hit is None:
        arch, num_sms, device = _arch_of(a)
        key = gemm_configs.cache_key(M, N, K, _dtype_name(a), out_name, trans_a, trans_b, has_bias, activation, arch,
                                     device)
        hit = gemm_configs.tuned(key) or gemm_configs.heuristic(M, N, K, _dtype_name(a), arch, num_sms,
                                                              shared_limit(a), activation, out_name)
        _gemm_choice[memo] = hit
    return hit


_placeholders: dict = {}  # (dtype, device) -> one-element tensor standing for an absent bias


def _placeholder(dtype, device):
    """A one-element tensor for the bias parameter of a kernel compiled without bias (never read):
    made once per device, so that a call launches no fill kernel for it."""
    hit = _placeholders.get((dtype, device))
    if hit is None:
        hit = _placeholders[(dtype, device)] = _torch().zeros(1, dtype=dtype, device=device)
    return hit


_plans: dict = {}  # launch signature -> (kind, kernels): compiled once, looked up per call


def _plan(cfg, N, K, dtype, out_name, ta, tb, has_bias, activation, target, arch, num_sms):
    """``("splitk", partial, reduction)``, ``("persistent", kernel)``, ``("streamk", kernel, fixup,
    blocks)`` or ``("direct", kernel)``."""
    sig = (cfg, N, K, dtype, out_name, ta, tb, has_bias, activation, target, arch, num_sms)
    hit = _plans.get(sig)
    if hit is not None:
        return hit
    pc = cfg.pass_configs(arch)
    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    staged = cfg.staged_epilogue(out_name)  # (gemm_configs.fit_shared counts 16-bit C)
    if cfg.kind == "splitk":
        slices = 1 if cfg.atomic else cfg.splits
        part = _kernel(("gemm_splitk", N, K, dtype, ta, tb, tiles, cfg.splits, cfg.atomic),
                       lambda: kernels.linear_splitk(N, K, dtype, ta, tb, *tiles, cfg.splits, cfg.atomic), target, pc)
        bias_dt = dtype if has_bias else None
        red = _kernel(("gemm_splitk_reduce", N, slices, out_name, bias_dt, activation),
                      lambda: kernels.splitk_epilogue(N, slices, out_name, bias_dt, activation), target)
        hit = ("splitk", part, red)
    elif cfg.kind == "persistent":
        pair = cfg.cluster[0] if target != "interpret" else 1  # clusters of two: an even number of blocks
        blocks = num_sms // pair * pair
        key = ("gemm_persistent", N, K, dtype, out_name, ta, tb, has_bias, activation, tiles, blocks, cfg.group_M,
               staged) + ((pair,) if pair != 1 else ()) + ((cfg.pdl,) if cfg.pdl else ())
        kern = _kernel(key, lambda: kernels.linear_persistent(N, K, dtype, out_name, ta, tb, has_bias, activation,
                                                              *tiles, blocks, cfg.group_M, staged, pair, cfg.pdl),
                       target, pc)
        src = "" if target == "interpret" else kern.get_kernel_source()
        if target == "interpret" or ("cp.async.bulk.tensor" in src and "cp.async.c" not in src):
            hit = ("persistent", kern)
        # else: operands TMA cannot describe (strides that are not 16-byte multiples, a transposed A
        # with a symbolic row count) leave the pipeline on cp.async, which the tile loop does not
        # support yet (matmul_persistent's docstring): one block per tile instead
    elif cfg.kind == "streamk":
        bias_dt = dtype if has_bias else None
        first = _kernel(("gemm_streamk", N, K, dtype, out_name, ta, tb, has_bias, activation, tiles, num_sms,
                         cfg.splits),
                        lambda: kernels.linear_streamk(N, K, dtype, out_name, ta, tb, has_bias, activation, *tiles,
                                                       num_sms, cfg.splits), target, pc)
        fix = _kernel(("gemm_streamk_fixup", N, cfg.block_M, cfg.block_N, cfg.splits, num_sms, out_name, bias_dt,
                       activation), lambda: kernels.streamk_epilogue(N, cfg.block_M, cfg.block_N, cfg.splits, num_sms,
                                                                     out_name, bias_dt, activation), target)
        src = "" if target == "interpret" else first.get_kernel_source()
        if target == "interpret" or ("cp.async.bulk.tensor" in src and "cp.async.c" not in src):
            hit = ("streamk", first, fix, num_sms)
        # else: as for "persistent" above, one block per tile
    if hit is None:
        cluster = cfg.cluster if target != "interpret" else (1, 1)  # (the interpreter has no clusters)
        key = ("linear", N, K, dtype, out_name, ta, tb, has_bias, activation, tiles, staged) + (
            (cluster,) if cluster != (1, 1) else ()) + ((cfg.pdl,) if cfg.pdl else ())
        hit = ("direct", _kernel(key, lambda: kernels.linear(N, K, dtype, out_name, ta, tb, has_bias, activation,
                                                             *tiles, staged, cluster, cfg.pdl), target, pc))
    _plans[sig] = hit
    return hit


def _launch_matmul(cfg, av, bv, ta, tb, bias, activation, out, arch, num_sms):
    """Launch the plan of this configuration; returns the plan (for the per-call memo)."""
    M, N = out.shape
    K = av.shape[0] if ta else av.shape[1]
    plan = _plan(cfg, N, K, _dtype_name(av), _dtype_name(out), ta, tb, bias is not None, activation,
                 _target_of(av), arch, num_sms)
    _run_matmul(plan, cfg, av, bv, ta, tb, bias, out)
    return plan


def _run_matmul(plan, cfg, av, bv, ta, tb, bias, out):
    torch = _torch()
    if plan[0] == "direct":
        plan[1](av, bv, _aligned(bias.contiguous()) if bias is not None else _placeholder(av.dtype, av.device), out)
        return
    bias_arg = _aligned(bias.contiguous()) if bias is not None else _placeholder(torch.float32, av.device)
    if plan[0] == "persistent":
        plan[1](av, bv, bias_arg, out)
        return
    if plan[0] == "streamk":
        # one fp32 tile per (left-over tile, K slice): at most num_sms left-over tiles
        ws = torch.empty((plan[3], cfg.splits, cfg.block_M, cfg.block_N), dtype=torch.float32, device=av.device)
        plan[1](av, bv, bias_arg, out, ws)
        plan[2](ws, bias_arg, out)
        return
    M, N = out.shape
    slices = 1 if cfg.atomic else cfg.splits
    ws = (torch.zeros if cfg.atomic else torch.empty)((M, slices, N), dtype=torch.float32, device=av.device)
    plan[1](av, bv, ws)
    plan[2](ws, bias_arg, out)


def tune_matmul(a, b, bias=None, activation=None, out_dtype=None, configs=None, rep: int = 20, store: bool = True):
    """Time the candidate configurations of this shape (``gemm_configs.candidates`` or ``configs``)
    on ``a``'s device, each checked against a float32 reference with its output poisoned first,
    and keep the fastest correct one in the tuning cache, where ``ops.matmul`` finds it for every
    row count of the same bucket.  Returns rows ``(config, milliseconds or None, note)``."""
    import time

    from . import gemm_configs

    torch = _torch()
    activation = _normalize_activation(activation)
    out_dtype = _check_matmul(a, b, bias, activation, out_dtype)
    M, K = a.shape
    N = b.shape[1]
    arch, num_sms, device = _arch_of(a)
    _, ta = _operand("a", a)
    _, tb = _operand("b", b)
    ref = a.float() @ b.float() + (bias.float() if bias is not None else 0)
    ref = {"none": ref, "relu": ref.clamp_min(0), "silu": torch.nn.functional.silu(ref),
           "gelu_tanh": torch.nn.functional.gelu(ref, approximate="tanh")}[activation]
    scale = ref.abs().max().item() + 1e-6
    on_gpu = a.device.type == "cuda"
    rows = []
    for cfg in configs or gemm_configs.candidates(M, N, K, _dtype_name(a), arch, num_sms, shared_limit(a)):
        try:
            out = matmul_impl(a, b, bias, activation, out_dtype, config=cfg)  # compile outside the timing
            out.fill_(float("nan"))  # poisoned: every element must be written again
            matmul_impl(a, b, bias, activation, out_dtype, config=cfg, out=out)
        except Exception as e:  # noqa: BLE001 (a configuration the compiler refuses is skipped, with why)
            rows.append((cfg, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            continue
        err = (out.float() - ref).abs().max().item() / scale
        if not err < 2e-2:
            rows.append((cfg, None, f"wrong result (relative error {err:.3g})"))
            continue
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(rep):
            matmul_impl(a, b, bias, activation, out_dtype, config=cfg)
        if on_gpu:
            torch.cuda.synchronize()
        rows.append((cfg, (time.perf_counter() - t0) * 1e3 / rep, ""))
    timed = [r for r in rows if r[1] is not None]
    if timed and store:
        best = min(timed, key=lambda r: r[1])
        record_tuned(a, b, bias, activation, out_dtype, best[0], best[1], rows)
    return rows


def record_tuned(a, b, bias, activation, out_dtype, best, latency_ms: float, rows=()) -> None:
    """Keep ``best`` (a ``GemmConfig``) in the tuning cache as the configuration of this call's
    shape bucket; ``rows``: ``(config, milliseconds or None, note)`` of every candidate timed."""
    from . import gemm_configs

    activation = _normalize_activation(activation)
    out_dtype = out_dtype or a.dtype
    arch, _, device = _arch_of(a)
    _, ta = _operand("a", a)
    _, tb = _operand("b", b)
    M, K = a.shape
    key = gemm_configs.cache_key(M, b.shape[1], K, _dtype_name(a), str(out_dtype).replace("torch.", ""), ta, tb,
                                 bias is not None, activation, arch, device)
    gemm_configs.store(key, best, latency_ms, [{"config": c.to_json(), "latency_ms": ms, "note": n}
                                               for c, ms, n in rows], arch, device)
    forget_plans()  # every row count of the bucket now finds the tuned entry


def forget_plans() -> None:
    """Forget every call plan and configuration choice ``tilewright.ops`` remembers (the kernels
    stay compiled).  ``tune_matmul``/``record_tuned`` do this themselves; call it after the tuning
    cache changed otherwise (another process tuned, ``TILEWRIGHT_CACHE_DIR`` now names another
    folder): a configuration is read from the tuning cache once per process and call signature."""
    from . import attention_dispatch, rows

    _gemm_choice.clear()
    _matmul_plans.clear()
    _plans.clear()  # launch signature -> kernels: looked up again through _kernel (still compiled there)
    rows._row_plans.clear()
    rows._torch_ref[0] = None  # (the torch a test patched in goes with its plans)
    attention_dispatch.forget_plans()


# ---------------------------------------------------------------- row-wise operators (ops/rows.py)
from .rows import layer_norm, layer_norm_impl, rms_norm, rms_norm_impl, softmax, softmax_impl  # noqa: E402,F401
