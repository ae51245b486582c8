"""Kernels are built for the GPU their tensors live on: ``device_target(i)`` asks torch about GPU i
(a machine may hold two kinds), ``TILEWRIGHT_TARGET`` still wins, and ops key kernels by it."""

from __future__ import annotations

import sys
import types

import pytest

from tilewright.target import detect


def _fake_torch(ccs):
    props = [types.SimpleNamespace(major=m, minor=n, gcnArchName="") for m, n in ccs]
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: len(ccs),
                                 get_device_properties=lambda i: props[i])
    return types.SimpleNamespace(version=types.SimpleNamespace(cuda="13.0", hip=None), cuda=cuda)


@pytest.fixture
def two_kinds(monkeypatch):
    monkeypatch.delenv(detect.ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch([(9, 0), (8, 0)]))
    detect.clear_cache()
    yield
    detect.clear_cache()


def test_each_device_gets_its_own_architecture(two_kinds):
    assert str(detect.device_target(0)) == "cuda -arch=sm_90a"
    assert str(detect.device_target(1)) == "cuda -arch=sm_80"


def test_an_explicit_target_wins_over_the_device(two_kinds, monkeypatch):
    monkeypatch.setenv(detect.ENV_VAR, "cuda -arch=sm_80")
    assert str(detect.device_target(0)) == "cuda -arch=sm_80"


def test_a_device_torch_does_not_know_falls_back_to_the_local_target(two_kinds, monkeypatch):
    monkeypatch.setattr(detect, "detect_target", lambda **kw: "local")
    assert detect.device_target(5) == "local"
