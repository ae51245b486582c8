#!/usr/bin/env bash
# The test command of the README: installs what the tests need into the project's virtual environment
# (.venv, created on first use; nothing is installed outside it except, as root, the optional AMD
# toolchain), then runs the tests.  Arguments are passed to pytest.  Works as a normal user on a fresh
# Debian/Ubuntu machine with Python >= 3.10.  e.g. bash scripts/test.sh tests/test_interp.py -x
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh

# clang-19 + lld-19 compile HIP to AMD code objects; without them the AMD compile tests skip.
AMD_PACKAGES="clang-19 lld-19 llvm-19"
if ! command -v clang-19 >/dev/null 2>&1 || ! command -v ld.lld-19 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    tw_say "installing the AMD toolchain: apt-get install -y $AMD_PACKAGES"
    # shellcheck disable=SC2086
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $AMD_PACKAGES >/dev/null) \
      || tw_say "warning: could not install $AMD_PACKAGES; the AMD compile tests will be skipped"
  else
    tw_say "note: clang-19/lld-19 not found; the AMD compile tests will be skipped. To run them:"
    tw_say "      sudo apt-get install -y $AMD_PACKAGES     (Debian 12, Ubuntu 24.04)"
  fi
fi

tw_venv_setup "cuda,test"

# A CPU build of PyTorch exercises the torch integration without a GPU (optional; TILEWRIGHT_NO_TORCH=1
# skips it).  On a machine with local wheels pip takes the CPU build from there.
if [ -z "${TILEWRIGHT_NO_TORCH:-}" ] && ! "$PY" -c "import torch" >/dev/null 2>&1; then
  tw_say "installing PyTorch (torch==2.13.0) into the environment"
  "$PY" -m pip install -q torch==2.13.0 \
    || tw_say "warning: torch could not be installed; the torch integration tests will be skipped"
fi
# transformers (the [examples] extra) runs the Llama drop-in example's tests; after torch, so that
# pip keeps the CPU build instead of fetching another torch for it
if [ -z "${TILEWRIGHT_NO_TORCH:-}" ] && "$PY" -c "import torch" >/dev/null 2>&1 \
    && ! "$PY" -c "import transformers" >/dev/null 2>&1; then
  tw_say "installing transformers (the examples' extra) into the environment"
  "$PY" -m pip install -q "transformers>=5.0" \
    || tw_say "warning: transformers could not be installed; the Llama example tests will be skipped"
fi

rc=0
# no path among the arguments: pytest runs tests/ (testpaths in pyproject.toml)
"$PY" -m pytest -q -p no:cacheprovider "$@" || rc=$?
if [ "$rc" = 5 ]; then
  tw_say "error: pytest collected no tests (exit status 5); that is a failure, not a pass"
  exit 1
fi
exit "$rc"
