"""The HIP path's fp8 conversions (integer-only device functions in codegen/hip_fp8.py) agree with
the interpreter and the emulator: every byte decodes to the same float as ml_dtypes decodes it, and
floats (normal, subnormal, ties, overflow, NaN, signed zero) encode to the same value: saturating
(ir/float8.py, CUDA's satfinite) for the default encoder, as ml_dtypes rounds for the ``_nosat`` one.  The device
functions are plain C++, so they are compiled and run on the host with g++."""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from tilewright.codegen import hip_fp8
from tilewright.ir import float8

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the conversions on the host")


def _samples(dtype: str) -> np.ndarray:
    t = getattr(ml_dtypes, dtype)
    every = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
    every = every[np.isfinite(every)]
    mids = (every[:-1] + np.diff(np.sort(every)) / 2) if len(every) > 1 else every  # ties and near-ties
    big = float(ml_dtypes.finfo(t).max)
    rng = np.random.default_rng(0)
    extra = [0.0, -0.0, big, -big, big * 1.02, big * 1.2, -big * 1.5, 1e-12, -1e-12, np.inf, -np.inf, np.nan]
    pts = np.concatenate([every, np.sort(every)[:-1] + np.diff(np.sort(every)) / 2, mids,
                          rng.standard_normal(2000).astype(np.float32) * big / 8, np.array(extra, np.float32)])
    return pts.astype(np.float32)


@pytest.mark.parametrize("sat", [True, False], ids=["sat", "nosat"])
@pytest.mark.parametrize("dtype", sorted(hip_fp8.FP8))
def test_fp8_conversions_match_ml_dtypes(dtype, sat, tmp_path):
    n = hip_fp8.short(dtype)
    pts = _samples(dtype)
    src = hip_fp8.helpers([dtype]).replace("__device__ __forceinline__", "static inline")
    vals = ", ".join(f"{np.float32(x).view(np.uint32):#x}u" for x in pts)
    prog = f"""#include <cstdio>
#include <cstring>
{src}
static const unsigned inputs[] = {{{vals}}};
int main() {{
  for (int b = 0; b < 256; ++b) {{ float f = tw_{n}_to_f32((unsigned char)b); unsigned u; std::memcpy(&u, &f, 4);
    std::printf("%u\\n", u); }}
  for (unsigned i = 0; i < sizeof(inputs) / sizeof(inputs[0]); ++i) {{ float f; std::memcpy(&f, &inputs[i], 4);
    std::printf("%u\\n", (unsigned)tw_f32_to_{n}{"" if sat else "_nosat"}(f)); }}
  return 0;
}}
"""
    (tmp_path / "t.cpp").write_text(prog)
    subprocess.run(["g++", "-std=c++20", "-O1", "-o", str(tmp_path / "t"), str(tmp_path / "t.cpp")], check=True)
    out = [int(x) for x in subprocess.check_output([str(tmp_path / "t")], text=True).split()]
    t = getattr(ml_dtypes, dtype)
    decoded = np.array(out[:256], dtype=np.uint32).view(np.float32)
    want = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(decoded), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(decoded[ok], want[ok])
    got = np.array(out[256:], dtype=np.uint8).view(t).astype(np.float32)
    ref = (float8.convert(pts, np.dtype(t)) if sat else pts.astype(t)).astype(np.float32)
    if sat:  # nothing but NaN becomes NaN, and the largest finite values are reached
        assert np.isnan(ref).sum() == np.isnan(pts).sum() and (ref == float(ml_dtypes.finfo(t).max)).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok], ref[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(ref[ok]))
