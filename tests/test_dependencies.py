"""Regression tests of issue 11, item 12 (fresh install): tilewright imports only what it declares, the
setup scripts install only into the project's virtual environment, one version string, a LICENSE,
and CI cannot pass without tests passing.

Before: the emulator's ``T.erf`` imported scipy, declared nowhere, so the README's test command failed
on a clean install (and passed on CI only because that machine had scipy).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys

import pytest

import tilewright

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tilewright")

# What each declared distribution provides to import; a new dependency must be added here.
IMPORT_NAMES = {
    "numpy": {"numpy"},
    "ml_dtypes": {"ml_dtypes"},
    "tqdm": {"tqdm"},
    "msgpack": {"msgpack"},
    "cuda-bindings": {"cuda"},
    "nvidia-cuda-nvrtc": {"nvidia"},
    "nvidia-cuda-runtime": {"nvidia"},
    "torch": {"torch"},
    "transformers": {"transformers"},  # the [examples] extra: examples/llama_dropin.py only
    "matplotlib": {"matplotlib"},
    "pytest": {"pytest"},
    "ruff": set(),  # a command, never imported
    "nvidia-cuda-nvdisasm": set(),  # a binary the SASS tests run, never imported
}

# Probed, never required: each import must sit in a try whose except catches ImportError.
OPTIONAL_PROBES = {
    "rocm_sdk": "AMD's ROCm Python packages (a separate wheel index per GPU family), found when installed",
    "zstandard": "decompresses zstd-compressed AMD code objects when installed",
    "compression": "the standard library's zstd from Python 3.14 on",
}

# Only while the emulator's T.erf (tilewright/interp, another helper's files) still imports scipy; that
# fix removes it, and then this entry matches nothing and must be deleted.
PENDING_ELSEWHERE = {("tilewright/interp/emulator.py", "scipy")}


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]


def _declared() -> tuple[set[str], set[str]]:
    """(import names of the core dependencies, import names of core + every extra)."""
    project = _pyproject()["project"]
    core_dists = [_dist_name(r) for r in project["dependencies"]]
    all_dists = core_dists + [_dist_name(r) for reqs in project["optional-dependencies"].values() for r in reqs]
    unknown = sorted(d for d in all_dists if d not in IMPORT_NAMES)
    assert not unknown, f"add the import names of {unknown} to IMPORT_NAMES"
    core = set().union(*(IMPORT_NAMES[d] for d in core_dists))
    return core, set().union(*(IMPORT_NAMES[d] for d in all_dists))


_CATCHING = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _names(exprs) -> set[str]:
    out = set()
    for e in exprs:
        for t in e.elts if isinstance(e, ast.Tuple) else [e]:
            out.add(t.id if isinstance(t, ast.Name) else getattr(t, "attr", ""))
    return out


def _guards(node: ast.AST) -> bool:
    """A ``try`` whose except catches ImportError, or ``with contextlib.suppress(ImportError...)``."""
    if isinstance(node, ast.Try):
        return any(h.type is None or _names([h.type]) & _CATCHING for h in node.handlers)
    if isinstance(node, ast.With):
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and _names([call.func]) == {"suppress"} and _names(call.args) & _CATCHING:
                return True
    return False


def _imports(path: str):
    """``(top-level module, line, at module level?, guarded by a try catching ImportError?)`` of every
    absolute import in a file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = []

    def visit(node, in_function: bool, guarded: bool):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((alias.name.partition(".")[0], node.lineno, not in_function, guarded))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module.partition(".")[0], node.lineno, not in_function, guarded))
        for name, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for child in children:
                if not isinstance(child, ast.AST):
                    continue
                func = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                g = guarded or (name == "body" and _guards(node))
                visit(child, func, g)

    visit(tree, False, False)
    return out


def _package_files():
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, ROOT).replace(os.sep, "/"), path


def test_tilewright_imports_only_declared_packages_and_the_standard_library():
    core, declared = _declared()
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    problems = set()
    for rel, path in _package_files():
        for top, line, module_level, guarded in _imports(path):
            if top in stdlib or top == "tilewright":
                continue
            if top in OPTIONAL_PROBES:
                if not guarded:
                    problems.add((rel, top, f"{rel}:{line}: {top} is optional and must be imported inside "
                                            "try/except ImportError"))
            elif top not in declared:
                problems.add((rel, top, f"{rel}:{line}: imports {top}, which pyproject.toml does not declare"))
            elif module_level and top not in core and not guarded:
                problems.add((rel, top, f"{rel}:{line}: imports {top} (an optional extra) when the module is "
                                        "imported; import it where it is used"))
    pending = {(rel, top) for rel, top, _ in problems} & PENDING_ELSEWHERE
    rest = sorted(msg for rel, top, msg in problems if (rel, top) not in pending)
    assert not rest, "\n".join(rest)
    if pending:
        pytest.xfail(f"still pending in another helper's files: {sorted(pending)}")


def test_the_scan_sees_what_it_must_refuse(tmp_path):
    """The scanner itself: finds imports in functions, at module level and under guards."""
    src = tmp_path / "m.py"
    src.write_text("import os\nimport scipy.special\n\ndef f():\n    from torch import nn\n    try:\n"
                   "        import zstandard\n    except ImportError:\n        pass\n"
                   "    with contextlib.suppress(Exception):\n        import rocm_sdk\n"
                   "    try:\n        import cuda\n    except KeyError:\n        pass\n")
    assert _imports(str(src)) == [("os", 1, True, False), ("scipy", 2, True, False),
                                  ("torch", 5, False, False), ("zstandard", 7, False, True),
                                  ("rocm_sdk", 11, False, True), ("cuda", 13, False, False)]


_BLOCKER = r"""
import importlib.abc, pkgutil, sys
ALLOWED = set(sys.stdlib_module_names) | {"tilewright", "numpy", "ml_dtypes"}

class Refuse(importlib.abc.MetaPathFinder):
    # refuses any other package when the import comes from a tilewright module
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in ALLOWED:
            return None
        f = sys._getframe(1)
        while f is not None and f.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
            f = f.f_back
        importer = f.f_globals.get("__name__", "") if f is not None else ""
        if importer.partition(".")[0] == "tilewright":
            raise ImportError(f"{importer} imports {name} at import time")
        return None

sys.meta_path.insert(0, Refuse())
import tilewright
bad = []
for m in pkgutil.walk_packages(tilewright.__path__, "tilewright."):
    if m.name.endswith("__main__"):
        continue
    try:
        __import__(m.name)
    except ImportError as exc:
        bad.append(f"{m.name}: {exc}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_every_module_imports_with_only_the_core_dependencies():
    """``import tilewright`` and each of its modules work without torch, cuda-bindings, scipy, ... ."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", _BLOCKER], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_test_path_installs_no_scipy():
    """scripts/test.sh installs tilewright[cuda,test] and torch: none of that may bring scipy back."""
    project = _pyproject()["project"]
    reqs = project["dependencies"] + [r for rs in project["optional-dependencies"].values() for r in rs]
    assert not [r for r in reqs if _dist_name(r).lower() == "scipy"]
    for name in ("scripts/test.sh", "scripts/venv.sh", ".ci/run"):
        with open(os.path.join(ROOT, name)) as f:
            assert "scipy" not in f.read(), name


# ------------------------------------------------------------------ setup scripts
@pytest.mark.parametrize("name", ["scripts/demo.sh", "scripts/test.sh", "scripts/venv.sh", ".ci/run"])
def test_setup_scripts_install_only_into_the_project_environment(name):
    """Every pip install goes through the environment's python ("$PY" -m pip), never python3 -m pip or a
    bare pip, which on Debian 12 / Ubuntu 24.04 are refused (PEP 668) and elsewhere fill the system."""
    with open(os.path.join(ROOT, name)) as f:
        lines = [ln for ln in f.read().splitlines() if not ln.lstrip().startswith("#")]
    for ln in lines:
        assert not re.search(r"\bpython3?(\.\d+)?\s+-m\s+pip\b|(^|[;&|(]\s*)(sudo\s+)?pip3?\s+install", ln), ln
        if re.search(r"-m pip install", ln):
            assert '"$PY" -m pip install' in ln, ln


def test_the_venv_is_ignored_by_git_and_ruff_is_a_test_extra():
    with open(os.path.join(ROOT, ".gitignore")) as f:
        assert "/.venv/" in f.read().split()
    extras = _pyproject()["project"]["optional-dependencies"]
    assert {_dist_name(r) for r in extras["test"]} >= {"pytest", "ruff"}


def _load_check_report():
    spec = importlib.util.spec_from_file_location("check_report", os.path.join(ROOT, ".ci", "check_report.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("attrs, ok", [
    ('tests="10" failures="0" errors="0" skipped="2"', True),
    ('tests="0" failures="0" errors="0" skipped="0"', False),  # pytest exit status 5: nothing collected
    ('tests="10" failures="0" errors="0" skipped="10"', False),  # everything skipped
    ('tests="10" failures="1" errors="0" skipped="0"', False),
    ('tests="10" failures="0" errors="1" skipped="0"', False),
])
def test_ci_fails_without_passing_tests(tmp_path, attrs, ok):
    report = tmp_path / "r.xml"
    report.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" {attrs}/></testsuites>')
    check = _load_check_report()
    assert check.main([str(report)]) == (0 if ok else 1)
    assert check.main([str(tmp_path / "missing.xml")]) == 1


def test_ci_runs_the_readme_test_command_with_a_report_and_ruff():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        text = f.read()
    assert "bash scripts/test.sh --junitxml=" in text and "check_report.py" in text and "-m ruff check" in text
    assert "set -e" not in text or "|| status=1" in text
    with open(os.path.join(ROOT, "scripts", "test.sh")) as f:
        test_sh = f.read()
    assert '"$rc" = 5' in test_sh  # pytest's "no tests collected" is turned into a failure


# ------------------------------------------------------------------ version, license
def test_one_version_string():
    assert re.fullmatch(r"\d+\.\d+\.\d+([a-z]+\d+)?", tilewright.__version__)
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tilewright.__version__"}
    for rel, path in _package_files():  # no second copy of the string in the sources
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if rel != "tilewright/__init__.py":
            assert not re.search(r"""^\s*_?_?VERSION_?_?\s*=\s*["']\d""", text, re.M | re.I), rel
    try:
        from importlib.metadata import PackageNotFoundError, version

        installed = version("tilewright")
    except PackageNotFoundError:
        pytest.skip("tilewright is not installed (run from the source tree)")
    assert installed == tilewright.__version__


def test_license_file_matches_pyproject():
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
