#!/usr/bin/env bash
# The demo command of the README: installs tilewright, then compiles and runs kernels on the local
# GPU (or the CPU interpreter when there is none) and shows the CUDA and HIP code it made.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[cuda]"
python3 -m tilewright.demo "$@"
