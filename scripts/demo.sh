#!/usr/bin/env bash
# The demo command of the README: installs tilewright into the project's virtual environment (.venv,
# created on first use), then compiles and runs kernels on the local GPU (or the CPU interpreter when
# there is none) and shows the CUDA and HIP code it made.  Works as a normal user; installs nothing
# outside .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
tw_venv_setup "cuda"
exec "$PY" -m tilewright.demo "$@"
