"""examples/tensor_parallel.py, launched the way users launch it (torchrun, two ranks): on CPU ranks
with gloo here, on two GPUs with NCCL where a machine has them (issue 13)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), os.path.join(ROOT, "examples", "tensor_parallel.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_parallel_mlp_on_two_cpu_ranks_matches_the_reference(dtype):
    r = _torchrun("--cpu", "--tokens", "24", "--hidden", "64", "--ffn", "128", "--dtype", dtype)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches the single-device reference" in r.stdout
    assert "on 2 ranks" in r.stdout


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensor_parallel_mlp_on_two_gpus_matches_the_reference():
    r = _torchrun("--tokens", "512", "--hidden", "1024", "--ffn", "4096")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches the single-device reference" in r.stdout and "(NCCL)" in r.stdout
