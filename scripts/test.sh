#!/usr/bin/env bash
# The test command of the README: installs what the tests need, then runs them.
# Works on a fresh Debian/Ubuntu machine with Python >= 3.10 (root for apt; skipped otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-19 >/dev/null 2>&1 || ! command -v ld.lld-19 >/dev/null 2>&1; then
  # clang-19 + lld-19 compile HIP to AMD code objects; without them the AMD compile tests skip
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq clang-19 lld-19 llvm-19 >/dev/null) \
      || echo "warning: could not install clang-19/lld-19; AMD compile tests will be skipped"
  fi
fi
python3 -m pip install -q --disable-pip-version-check -e ".[cuda,test]"
# a CPU build of PyTorch exercises the torch integration without a GPU (optional)
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check torch==2.13.0 \
  || echo "warning: torch not installed; torch integration tests will be skipped"
python3 -m pytest -q -p no:cacheprovider tests "$@"
