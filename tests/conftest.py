import os
import sys

# test helper modules (zoo.py, tilelang_quickstart.py) live next to the tests
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_ops_attention_plans():
    """ops.attention remembers a launch plan per call signature (kernels, configuration); tests that
    monkeypatch its kernel factory or pass configs must not be served a plan made before."""
    from tilewright.ops import attention_dispatch

    attention_dispatch._plans.clear()
    yield
    attention_dispatch._plans.clear()
