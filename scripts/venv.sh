# Sourced by scripts/demo.sh and scripts/test.sh (from the repository root): makes sure the project's
# virtual environment exists and has tilewright installed with the given extras, and sets
#   PY    the environment's python (everything is installed with "$PY" -m pip, run with "$PY")
#
# Nothing is installed outside the environment, so it works as a normal user and on systems whose
# python refuses pip installs (PEP 668: stock Debian 12, Ubuntu 24.04).  The environment is .venv in
# the repository (ignored by git; TILEWRIGHT_VENV names another folder) and is reused when present.
# Python: $TILEWRIGHT_PYTHON, else the first of python3, python3.13 ... python3.10 that is >= 3.10.
#
# usage: tw_venv_setup EXTRAS     e.g. tw_venv_setup "cuda,test"

tw_say() { echo "[tilewright setup] $*" >&2; }

tw_find_python() {
  local c
  for c in "${TILEWRIGHT_PYTHON:-}" python3 python3.13 python3.12 python3.11 python3.10; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  tw_say "error: tilewright needs Python >= 3.10; none found (install one, e.g. sudo apt-get install python3)"
  return 1
}

# The Debian/Ubuntu package that provides ensurepip for a python, e.g. python3.11-venv.
tw_venv_package() {
  "$1" -c 'import sys; print("python%d.%d-venv" % sys.version_info[:2])'
}

tw_venv_create() {
  local base="$1" venv="$2" out pkg
  pkg="$(tw_venv_package "$base")"
  tw_say "creating the virtual environment $venv (python: $(command -v "$base"))"
  if [ -z "${TILEWRIGHT_VENV_WITHOUT_ENSUREPIP:-}" ]; then
    if out="$("$base" -m venv --clear "$venv" 2>&1)" && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
      return 0
    fi
    if [ ! -f "$venv/pyvenv.cfg" ] && ! "$base" -m venv --clear --without-pip "$venv" >/dev/null 2>&1; then
      tw_say "error: could not create $venv:"
      echo "$out" >&2
      return 1
    fi
  elif ! "$base" -m venv --clear --without-pip "$venv"; then
    tw_say "error: '$base -m venv' does not work here; install it with: sudo apt-get install $pkg"
    return 1
  fi
  # The environment exists without pip: python's ensurepip is missing (stock Debian/Ubuntu without
  # python3.X-venv).  Fetch pip from the package index with the standard library only.
  # TILEWRIGHT_VENV_WITHOUT_ENSUREPIP=1 takes this path on machines that have ensurepip (to test it).
  tw_say "python's ensurepip is missing (Debian/Ubuntu package $pkg); installing pip into $venv from the index"
  "$base" -m venv --clear --without-pip "$venv" >/dev/null 2>&1 || true  # drop a half-made environment's leftovers
  if ! "$venv/bin/python" scripts/bootstrap_pip.py; then
    tw_say "error: could not install pip into $venv (no network access to the package index?);"
    tw_say "       install python's venv support and run this command again: sudo apt-get install $pkg"
    rm -rf "$venv"
    return 1
  fi
}

tw_venv_setup() {
  local extras="$1" venv="${TILEWRIGHT_VENV:-$PWD/.venv}" base
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    tw_say "error: $venv exists and is not a virtual environment; move it away or set TILEWRIGHT_VENV"
    return 1
  fi
  if [ -f "$venv/pyvenv.cfg" ]; then
    if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
      tw_say "$venv does not run (its python was removed or upgraded); making it again"
      rm -rf "$venv"
    elif ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
      tw_say "$venv has no pip; installing it"
      "$venv/bin/python" scripts/bootstrap_pip.py || { rm -rf "$venv"; }
    fi
  fi
  if [ ! -f "$venv/pyvenv.cfg" ]; then
    base="$(tw_find_python)" || return 1
    tw_venv_create "$base" "$venv" || return 1
  fi
  PY="$venv/bin/python"
  # A user-wide PIP_USER=1 would make pip refuse to install into the environment.
  export PIP_USER=0 PIP_DISABLE_PIP_VERSION_CHECK=1
  # Install (editable) when the environment lacks tilewright with these extras for this pyproject.toml.
  local stamp="$venv/.tilewright-$(echo "$extras" | tr ',' '-')" want
  want="$(cksum <pyproject.toml) $PWD"
  # -I: not the tilewright folder of the current directory, the installed one
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$PY" -I -c "import tilewright" >/dev/null 2>&1; then
    tw_say "installing tilewright[$extras] into $venv"
    "$PY" -m pip install -q -e ".[$extras]" || { tw_say "error: pip could not install tilewright[$extras]"; return 1; }
    echo "$want" >"$stamp"
  fi
}
