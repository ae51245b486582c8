"""The steps of the slow ``ops.*`` calls one by one, for ``bench/host_overhead_cpu.py`` with
``HOST_BENCH_STEPS=1`` (it imports this after the plans of its calls exist, with the kernels behind
them launching into the stub driver).  Each row is one step of a repeat call as the op's code makes
it (the same objects, the same arguments), so the rows of one call add up to about the whole call
(less the frames between them).  Not a test: a figure per step, to see what a cut would save.
"""

from __future__ import annotations


def _fixed_of(row_launch, rows):
    """The ``FixedLaunch`` (or ``PreparedLaunch``) a ``RowLaunch`` keeps for ``rows`` rows."""
    return row_launch._prepared[rows]


def steps(ops_calls, t) -> list:
    import torch

    import tilewright.ops.attention_dispatch as ad
    import tilewright.ops.decode_kernels as dk
    import tilewright.ops.dispatch as dispatch
    import tilewright.ops.rows as rows_mod
    from tilewright.jit.kernel import _sync_after_launch
    from tilewright.runtime import cuda_driver

    xs, w, ga, gb, q, kv, qp, kp = (t[k] for k in ("xs", "w", "ga", "gb", "q", "kv", "qp", "kp"))
    out = []
    calls = dict(ops_calls)
    out.append(("ops.rms_norm 64x1024 + residual: whole call", calls["ops.rms_norm 64x1024 + residual"]))
    eps = 1e-6

    def rms_key():  # (the key rms_norm_impl builds, found in the plans: its items differ between versions)
        x, weight, residual = xs, w, xs
        return rows_mod._row_plans.get((
            "rms_norm+residual", x.__class__, x.dtype, len(s := x.shape), s[-1], x.device, weight.__class__,
            weight.dtype, weight.shape, weight.device, eps.__class__, eps, residual.__class__, residual.dtype,
            residual.device))

    if rms_key() is None:  # (the code before session 10's keys)
        def rms_key():
            x, weight, residual = xs, w, xs
            return rows_mod._row_plans.get((
                "rms_norm+residual", x.__class__, x.dtype, x.dim(), x.shape[-1], x.device, weight.__class__,
                weight.dtype, weight.dim(), weight.shape[-1], weight.device, eps.__class__, eps, residual.__class__,
                residual.dtype, residual.device))

    plan = rms_key()
    fixed = _fixed_of(plan.launch, 64)
    ptrs = [xs.data_ptr(), xs.data_ptr(), w.data_ptr(), xs.data_ptr(), xs.data_ptr()]
    go = getattr(fixed, "launch", None)  # (FixedLaunch's FixedCudaLaunch)
    out += [
        ("  torch.compiler.is_compiling()", torch.compiler.is_compiling),
        ("  plan key (16 items) + dict lookup", rms_key),
        ("  residual.shape != x.shape", lambda: xs.shape != xs.shape),
        ("  _dense(x) (is_contiguous, data_ptr)", lambda: rows_mod._dense(xs)),
        ("  plan.empty_like(x)", lambda: plan.empty_like(xs)),
        ("  x.numel() // n", lambda: xs.numel() // plan.n),
        ("  RowLaunch.pointers (dict get + FixedLaunch)", lambda: plan.launch.pointers(ptrs, 64, None)),
        ("  FixedLaunch.__call__ (thread, stream, sync, driver)", lambda: fixed(ptrs, None, False)),
        ("  _sync_after_launch()", _sync_after_launch),
        ("  current stream (FixedLaunch._stream)", lambda: fixed._stream(0)),
        ("  cuda_driver.current_stream(0)", lambda: cuda_driver.current_stream(0)),
    ]
    if go is not None:
        out.append(("  driver launch alone (pack + call)", lambda: go(ptrs, 0)))

    out.append(("ops.attention decode return_lse=True: whole call", calls["ops.attention decode return_lse=True"]))
    dkey = ad._dense_key(q, kv, kv, False, None, None, None, None, hashed=False)
    run = ad._dense_plans[dkey]
    if isinstance(run, dk._DecodeRun):
        dev = run.dev
        out += [
            ("  torch.is_grad_enabled() + _wants_grad", lambda: torch.is_grad_enabled() and ad._wants_grad(q, kv, kv)),
            ("  _dense_key (23 items) + dict lookup",
             lambda: ad._dense_plans.get(ad._dense_key(q, kv, kv, False, None, None, None, None, hashed=False))),
            ("  _dense_key (23 items) == the last call's (the memo's repeat path)",
             lambda: ad._dense_key(q, kv, kv, False, None, None, None, None, hashed=False) == dkey),
            ("  4 data_ptr reads", lambda: (q.data_ptr(), kv.data_ptr(), kv.data_ptr(), q.data_ptr())),
            ("  torch.empty_like(q) (output)", lambda: torch.empty_like(q)),
            ("  make_lse() (the LSE)", run.make_lse or run._lse_maker(q)),
            ("  _capturing(dev)", lambda: dk._capturing(dev)),
            ("  _stream(dev)", lambda: dk._stream(dev)),
            ("  _stream_workspace", lambda: dk._stream_workspace(run.device, dev, 0, run.numel, run.n_counters)),
            ("  run(...) (all but the key)", lambda: run.run(q, kv, kv, None, True)),
        ]

    out.append(("ops.matmul 256^3: whole call", calls["ops.matmul 256^3"]))
    mkey = dispatch._matmul_key(ga, gb, None, "none", None, False)
    mrun = dispatch._matmul_plans[mkey]
    mo = mrun.make_out() if hasattr(mrun, "make_out") else torch.empty(256, 256, dtype=ga.dtype)
    out += [
        ("  _matmul_key + dict lookup",
         lambda: dispatch._matmul_plans.get(dispatch._matmul_key(ga, gb, None, "none", None, False))),
        ("  _matmul_key == the last call's (the memo's repeat path)",
         lambda: dispatch._matmul_key(ga, gb, None, "none", None, False) == mkey),
        ("  torch.empty(M, N, dtype=, device=)", lambda: torch.empty(256, 256, dtype=ga.dtype, device=ga.device)),
    ]
    if hasattr(mrun, "make_out"):
        out.append(("  make_out() (empty_like of a template)", mrun.make_out))
    out.append(("  from_pointers (ptrs, checks, launch)", lambda: mrun.from_pointers(ga, gb, None, mo)))
    return out
