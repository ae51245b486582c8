"""The session-8 host cuts on a CUDA GPU, against float64 with the ops' allocations poisoned (NaN):
decode attention's per-(device, stream) workspace of split partials and counters (back-to-back
calls of growing size on one stream, replacing the workspace while earlier launches may still read
it; two streams at once without the LSE), a CUDA graph captured after eager calls and replayed
after an eager call that grew the capture stream's workspace (the graph keeps partials of its own),
and the argument buffers packed once per plan launched from two threads at once (each thread's
launches carry its own pointers).  Skipped without a CUDA GPU."""

from __future__ import annotations

import importlib
import math
import threading

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _close, poisoned  # noqa: E402,F401 (poisoned: a fixture)

from tilewright import ops  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")


def _ref(q, k, v):
    g = q.shape[1] // k.shape[1]
    s = q.double() @ k.double().repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v.double().repeat_interleave(g, 1), torch.logsumexp(s, -1)


def _rand(*shape):
    return torch.randn(*shape, device="cuda").half()


def test_decode_workspace_grows_between_back_to_back_calls(poisoned):  # noqa: F811
    torch.manual_seed(80)
    cases = [(_rand(b, 32, 1, 128), _rand(b, 8, 2048, 128), _rand(b, 8, 2048, 128)) for b in (1, 2, 4, 8, 16)]
    results = []
    for _ in range(2):  # the first pass binds and makes the plans; the second launches from pointers
        for q, k, v in cases:  # growing partials: the workspace is replaced while earlier launches run
            results.append((ops.attention(q, k, v, num_splits=4), ops.attention(q, k, v, num_splits=4,
                                                                                return_lse=True)))
    torch.cuda.synchronize()
    for i, (out, (out2, lse)) in enumerate(results):
        q, k, v = cases[i % len(cases)]
        want, want_lse = _ref(q, k, v)
        _close(out, want, 3e-3)
        _close(out2, want, 3e-3)
        _close(lse, want_lse, 1e-3)
    assert all(int(c.abs().sum()) == 0 for c in dk._counters.values())  # every launch left them zero


def test_decode_two_streams_at_once_without_the_lse(poisoned):  # noqa: F811
    torch.manual_seed(81)
    cases = [(_rand(4, 32, 1, 128), _rand(4, 8, 8192, 128), _rand(4, 8, 8192, 128)) for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    results = [[], []]
    for _ in range(6):
        for i, (s, (q, k, v)) in enumerate(zip(streams, cases)):
            with torch.cuda.stream(s):
                results[i].append(ops.attention(q, k, v, num_splits=8))
    torch.cuda.synchronize()
    for (q, k, v), got in zip(cases, results):
        want = _ref(q, k, v)[0]
        for out in got:
            _close(out, want, 3e-3)


def test_graph_keeps_its_partials_after_an_eager_call_grows_the_workspace(poisoned):  # noqa: F811
    torch.manual_seed(82)
    q, k, v = _rand(2, 32, 1, 128), _rand(2, 8, 4096, 128), _rand(2, 8, 4096, 128)
    big = (_rand(16, 32, 1, 128), _rand(16, 8, 4096, 128), _rand(16, 8, 4096, 128))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # eager calls: the plan and the workspace of stream s
            ops.attention(q, k, v, num_splits=4)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = ops.attention(q, k, v, num_splits=4)
    with torch.cuda.stream(s):  # an eager call on the capture stream that needs a bigger workspace
        big_out = ops.attention(*big, num_splits=4)
        # blocks the size of the workspace just replaced (2 x 32 x 4 splits x 129 floats), on its stream:
        # the allocator hands them its memory, which a graph holding its address would overwrite
        filler = [torch.full((4 * 64 * 129,), 7.0, device="cuda") for _ in range(64)]
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        q.copy_(_rand(*q.shape))
        g.replay()
        torch.cuda.synchronize()
        _close(out, _ref(q, k, v)[0], 3e-3)
    assert all(bool((f == 7.0).all()) for f in filler)  # the replays wrote nothing of anyone else's
    _close(big_out, _ref(*big)[0], 3e-3)


def test_packed_launches_from_two_threads(poisoned):  # noqa: F811
    torch.manual_seed(83)
    w = torch.randn(1024, device="cuda").half()
    q, k, v = _rand(4, 32, 1, 128), _rand(4, 8, 512, 128), _rand(4, 8, 512, 128)
    for _ in range(3):  # plans and packed buffers made by this thread
        ops.rms_norm(torch.randn(64, 1024, device="cuda").half(), w)
        ops.attention(q, k, v)
    errors = []

    def work(seed):
        try:
            gen = torch.Generator(device="cuda").manual_seed(seed)
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(50):
                    x = torch.randn(64, 1024, device="cuda", generator=gen).half()
                    qq = torch.randn(4, 32, 1, 128, device="cuda", generator=gen).half()
                    y, o = ops.rms_norm(x, w), ops.attention(qq, k, v)
                    stream.synchronize()
                    xd = x.double()
                    _close(y, xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double(), 2e-2)
                    _close(o, _ref(qq, k, v)[0], 3e-3)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for th in threads:
        th.start()
    work(3)  # and the owner thread at the same time
    for th in threads:
        th.join()
    assert not errors, errors
