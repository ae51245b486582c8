#!/usr/bin/env python3
"""Measure TileLang compatibility with TileLang's own tests.

Takes a TileLang checkout (or an extracted copy holding its ``testing/python`` and ``examples``
folders; this script fetches nothing), copies the chosen test folders into a temporary directory,
rewrites their import statements only (``import tilelang`` -> ``import tilewright as tilelang``,
``from tilelang.x import y`` -> ``y`` from ``tilewright.x``; a name tilewright lacks, TVM's included,
becomes a stand-in that fails only the tests that use it, naming itself), leaves out the tests that
test TVM or TileLang compiler internals or quote generated source text, runs pytest on them with a
per-test timeout, and classifies every failure:

  missing name      a TileLang name, attribute or module tilewright lacks (AttributeError/ImportError)
  kernel refused    tilewright raised CompileError (or refused a dtype)
  parameter         a parameter or argument not taken (TypeError from a call)
  wrong result      an AssertionError raised by a comparison of results
  internal error    tilewright's InternalError
  NVRTC rejected    the generated code did not compile (ToolchainError)
  error text differs  the test expects an error and one is raised, with other words than TileLang's
  missing package   a third-party package the test imports (einops, triton...) is not installed
  needs a GPU       CUDA was needed at run time (only with --assume-gpu on a machine without one)
  timeout           the test ran past --timeout
  other             anything else

and writes a markdown report (counts, a table per folder, the top missing names, the top refusal
reasons, every failure with its one-line reason) and a JSON file of the raw results.

    python scripts/tilelang_tests.py --tests-dir /path/to/tilelang [--report out.md] [--jobs 8]
    python scripts/tilelang_tests.py --tests-dir /path/to/tilelang --export .tilelang_tests   # the test folders only
    python scripts/tilelang_tests.py --tests-dir .tilelang_tests --assume-gpu 9.0 --target "cuda -arch=sm_90a"

``--assume-gpu X.Y`` (for a machine without a GPU) makes ``tilelang.testing``'s skip decorators act
as if a CUDA device of compute capability X.Y were present and sets TILEWRIGHT_TARGET, so kernels
compile (through NVRTC) and failures at compile time show; the GPU parts then fail as "needs a GPU".
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SUITES = ("kernel", "language", "issue", "math", "jit", "profiler", "runtime")
CLASSES = ("missing name", "kernel refused", "parameter", "wrong result", "internal error", "NVRTC rejected",
           "error text differs", "missing package", "needs a GPU", "timeout", "other")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ============================================================================ finding and copying the tests


def find_layout(root: str) -> tuple[str, str]:
    """(testing/python folder, examples folder) of a checkout or an exported copy."""
    tp, ex = os.path.join(root, "testing", "python"), os.path.join(root, "examples")
    if not os.path.isdir(tp):
        sys.exit(f"{root} has no testing/python folder: pass a TileLang checkout or an --export'ed copy")
    return tp, ex


def example_folders(examples: str) -> list[str]:
    """The example folders that hold test files (``test_*.py``), relative to ``examples``."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(examples):
        dirnames[:] = [d for d in dirnames if d not in ("bitnet-1.58b", "__pycache__")]
        if any(f.startswith("test_") and f.endswith(".py") for f in filenames):
            found.add(os.path.relpath(dirpath, examples))
    return sorted(found)


def export(root: str, dest: str, suites, examples) -> None:
    """Copy only what the run needs (the suites and the example test folders) to ``dest``."""
    tp, ex = find_layout(root)
    for s in suites:
        shutil.copytree(os.path.join(tp, s), os.path.join(dest, "testing", "python", s), dirs_exist_ok=True)
    for e in examples:
        shutil.copytree(os.path.join(ex, e), os.path.join(dest, "examples", e), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.png", "*.jpg", "*.pdf", "*.pt", "*.bin", "*.safetensors"))
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dest) for f in fs)
    print(f"exported {len(suites)} suites and {len(examples)} example folders to {dest} ({size / 2**20:.1f} MiB)")


# ============================================================================ rewriting imports

# TileLang modules that are its compiler's internals (TVM passes, code generators, intrinsic
# emitters, IR spans, caches): a test that uses a name imported from one is left out.
INTERNAL_MODULES = ("tilelang.cuda", "tilelang.rocm", "tilelang.metal", "tilelang.webgpu", "tilelang.engine",
                    "tilelang.jit.adapter", "tilelang.jit.abi", "tilelang.jit.diagnostics", "tilelang.contrib",
                    "tilelang._ffi_api", "tilelang.ir", "tilelang.language.eager", "tilelang.language.dtypes",
                    "tilelang.language.tir", "tilelang.language.common", "tilelang.language.kernel",
                    "tilelang.tileop", "tilelang.cache", "tilelang.env", "tilelang.analysis", "tilelang.backend",
                    "tilelang.utils.language", "tilelang.transform", "tilelang.profiler.bench", "tilelang.libinfo",
                    "tvm")
_PUBLIC_FROM_INTERNAL = {"PassConfigKey"}  # tilelang.transform.PassConfigKey is user API

_HELPERS = "from tilewright.testing import lenient_import as _tw_import, lenient_from as _tw_from"


def _tw(module: str) -> str:
    return "tilewright" + module[len("tilelang"):] if module.startswith("tilelang") else module


def _rewrite_node(node) -> str | None:
    """The one-line replacement of an import statement, or None to keep it.  Imports of TileLang
    and TVM names never fail here: a name tilewright lacks becomes a stand-in that raises an
    AttributeError naming it when a test uses it (so only the tests that use it fail)."""
    if isinstance(node, ast.Import):
        if not any(a.name.split(".")[0] in ("tilelang", "tvm") for a in node.names):
            return None
        parts = []
        for a in node.names:
            root = a.name.split(".")[0]
            if root not in ("tilelang", "tvm"):
                parts.append(f"import {a.name}" + (f" as {a.asname}" if a.asname else ""))
            elif a.asname:
                parts.append(f"{a.asname} = _tw_import({_tw(a.name)!r})")
            elif root == "tvm":
                parts.append("tvm = _tw_import('tvm')")
            else:
                parts.append("import tilewright as tilelang" + (f"; _tw_import({_tw(a.name)!r})" if "." in a.name
                                                                   else ""))
        return "; ".join([_HELPERS] + parts)
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
            node.module.split(".")[0] in ("tilelang", "tvm"):
        parts = [_HELPERS]
        for a in node.names:
            if a.name == "*":
                return f"from {_tw(node.module)} import *"
            if node.module == "tilelang" and a.name == "tvm":  # TileLang re-exports TVM
                parts.append(f"{a.asname or a.name} = _tw_import('tvm')")
            else:
                parts.append(f"{a.asname or a.name} = _tw_from({_tw(node.module)!r}, {a.name!r})")
        return "; ".join(parts)
    return None


def rewrite_imports(text: str) -> str:
    """Rewrite the TileLang and TVM import statements (``import tilelang`` -> ``import tilewright
    as tilelang``, ``from tilelang.x import y`` -> y from ``tilewright.x``); nothing else changes,
    and every other line keeps its number (a multi-line import becomes one line and blank ones)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.split("\n")
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        new = _rewrite_node(node)
        if new is None:
            continue
        first, last = node.lineno - 1, node.end_lineno - 1
        head, tail = lines[first][:node.col_offset], lines[last][node.end_col_offset:]
        lines[first] = head + new + tail
        for i in range(first + 1, last + 1):
            lines[i] = ""
    return "\n".join(lines)


def stage(root: str, work: str, suites, examples) -> list[str]:
    """Copy the test folders into ``work`` with rewritten imports; returns the folders (relative)."""
    tp, ex = find_layout(root)
    folders = []
    for s in suites:
        src = os.path.join(tp, s)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(work, "testing", s), ignore=shutil.ignore_patterns("conftest.py"))
            folders.append(os.path.join("testing", s))
    for e in examples:
        src = os.path.join(ex, e)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(work, "examples", e), ignore=shutil.ignore_patterns("conftest.py"))
            folders.append(os.path.join("examples", e))
    for dirpath, _, filenames in os.walk(work):
        for f in filenames:
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                with open(p, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                with open(p, "w", encoding="utf-8") as fh:
                    fh.write(rewrite_imports(text))
    return folders


# ============================================================================ tests left out

# Names whose use means a test looks at TVM or TileLang compiler internals rather than at what a
# kernel computes.
_INTERNAL_ATTRS = {"tvm", "tirx", "tir", "IRModule", "simplify_prim_func", "apply_simplify", "LowerAccessPtr",
                   "determine_target", "tilelang_lower", "get_tir", "script", "ir_module", "mod",
                   "analysis", "engine", "tileop", "transform_module", "host_mod", "device_mod", "adapter",
                   "cutedsl", "CuTeDSLKernelAdapter", "TVMFFIKernelAdapter", "NVRTCKernelAdapter",
                   "TLCPUSourceWrapper", "TLCuTeDSLSourceWrapper", "resolve_gemm_impl", "mutate", "BaseBuilder",
                   "jit_phase", "kernel_cache", "env", "_all_dtypes", "_normalize_threads", "tir_ir",
                   "_VALID_CAST_ROUNDING_MODES", "to_buffer_region", "rocm_tir",
                   # TileLang's JIT internals (argument parsing and cache keys of its decorator)
                   "parse_args", "_parse_phase1_key", "_kernel_cache", "_call_form_cache", "set_mode",
                   # TileLang's TIR op module, TVM's script parser, where its functions are defined, its nvcc driver
                   "common_tir_op", "upstream_tir_parser", "__module__", "nvcc"}
_SOURCE_CALLS = {"get_kernel_source", "get_host_source", "get_source", "kernel_source", "get_code",
                 "get_cuda_source", "imported_modules", "inspect_source", "get_device_source"}


class _ModuleFacts:
    """Per module: its top-level functions and classes, and the names/attributes each one uses."""

    def __init__(self, path: str):
        with open(path, encoding="utf-8", errors="replace") as f:
            self.tree = ast.parse(f.read(), filename=path)
        self.defs = {}
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.defs[node.name] = node
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.defs[f"{node.name}::{sub.name}"] = sub
        self.imported_modules = set()
        self.internal_names = set()  # names this module imports from TileLang/TVM internals
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.imported_modules.add(a.asname or a.name)
                    if a.asname and _is_internal(a.name):
                        self.internal_names.add(a.asname)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _is_internal(node.module):
                self.internal_names |= {a.asname or a.name for a in node.names if a.name not in _PUBLIC_FROM_INTERNAL}


def _is_internal(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in INTERNAL_MODULES)


def _reasons_of(node) -> tuple[set, set, bool]:
    """(names used, attribute names used, quotes source) in ``node``.  A source quote under an
    ``if`` (``if batch > 1: assert "run_batch" in src``) does not count: the test also checks
    results, and the parametrizations that quote fail rather than being left out."""
    names, attrs = set(), set()
    state = {"quotes": False, "uses_source": False}

    def is_quote(n) -> bool:
        if isinstance(n, ast.Assert):  # `assert "ld.global" in src`, `assert check_str in code, ...`
            return any(isinstance(c, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in c.ops)
                       for c in ast.walk(n.test))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("search", "findall",
                                                                                               "count", "match"):
            # a literal pattern, or an f-string one (``rf"{op}<[^>]*?, (\d+, \d+, \d+),"``)
            return any(isinstance(a, ast.JoinedStr) or isinstance(a, ast.Constant) and isinstance(a.value, str)
                       for a in n.args)
        return False

    def visit(n, conditional: bool) -> None:
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            attrs.add(n.attr)
            if n.attr in _SOURCE_CALLS:
                state["uses_source"] = True
        if not conditional and is_quote(n):
            state["quotes"] = True
        if isinstance(n, ast.If):
            visit(n.test, conditional)
            for child in n.body + n.orelse:
                visit(child, True)
            return
        for child in ast.iter_child_nodes(n):
            visit(child, conditional)

    visit(node, False)
    return names, attrs, state["quotes"] and state["uses_source"]


def leave_out_plan(work: str, folders) -> dict:
    """nodeid prefix ("folder/file.py::test") -> why the test is left out."""
    plan = {}
    for folder in folders:
        base = os.path.join(work, folder)
        modules = {}

        def facts(name, base=base, modules=modules):
            if name not in modules:
                p = os.path.join(base, name + ".py")
                try:
                    modules[name] = _ModuleFacts(p) if os.path.exists(p) else None
                except SyntaxError:
                    modules[name] = None
            return modules[name]

        for f in sorted(os.listdir(base)):
            if not (f.startswith("test_") and f.endswith(".py")):
                continue
            mod = facts(f[:-3])
            if mod is None:
                continue
            for key, node in mod.defs.items():
                short = key.split("::")[-1]
                if not short.startswith("test"):
                    continue
                why = _why_left_out(mod, node, facts)
                if why:
                    plan[f"{folder}/{f}::{key}"] = why
    return plan


def _why_left_out(mod: _ModuleFacts, root, facts) -> str | None:
    seen, todo = set(), [(mod, root)]
    internal, quotes = set(), False
    while todo:
        m, node = todo.pop()
        if (id(m), id(node)) in seen:
            continue
        seen.add((id(m), id(node)))
        names, attrs, q = _reasons_of(node)
        quotes = quotes or q
        internal |= (names | attrs) & _INTERNAL_ATTRS
        internal |= names & m.internal_names
        for n in names:
            if n in m.defs:
                todo.append((m, m.defs[n]))
            elif n in m.imported_modules:  # a sibling example module: follow the functions it uses
                other = facts(n)
                if other is not None:
                    for a in attrs:
                        if a in other.defs:
                            todo.append((other, other.defs[a]))
    internal.discard("env") if "env" in internal and "tilelang" not in internal else None
    if internal:
        return "tests TVM/TileLang internals (" + ", ".join(sorted(internal)[:4]) + ")"
    if quotes:
        return "quotes generated source text"
    return None


# ============================================================================ the pytest plugin of a run

CONFTEST = r'''
import json, os, signal, traceback
import pytest

_PLAN = json.load(open(os.environ["TW_TL_PLAN"]))
_OUT = os.environ["TW_TL_RESULTS"]
_TIMEOUT = float(os.environ.get("TW_TL_TIMEOUT", "300"))
_ROOT = os.path.dirname(os.path.abspath(__file__))


def _emit(rec):
    with open(_OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")


def pytest_configure(config):
    config.addinivalue_line("markers", "perf: a TileLang performance test (left out)")


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        rel = os.path.relpath(str(item.path), _ROOT)
        base = rel + "::" + item.name.split("[")[0]
        if item.cls is not None:
            base = rel + "::" + item.cls.__name__ + "::" + item.name.split("[")[0]
        why = _PLAN.get(base)
        if why is None and item.get_closest_marker("perf") is not None:
            why = "a performance test (TileLang skips these by default)"
        if why is None:
            kept.append(item)
        else:
            dropped.append(item)
            _emit({"nodeid": rel + "::" + item.name, "outcome": "left out", "why": why})
    items[:] = kept
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def pytest_collectreport(report):
    if report.failed:
        text = str(report.longrepr)
        _emit({"nodeid": report.nodeid, "outcome": "error", "phase": "collect", "exc_type": "", "message": "",
               "text": text[-4000:], "frames": []})


def _alarm(signum, frame):
    raise TimeoutError(f"harness timeout: the test ran past {_TIMEOUT:.0f} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with open(_OUT + ".current", "w") as f:  # the test in progress, for a shard killed while it hangs
        f.write(os.path.relpath(str(item.path), _ROOT) + "::" + item.name)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, _TIMEOUT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rel = os.path.relpath(str(item.path), _ROOT) + "::" + item.name
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        rec = {"nodeid": rel, "phase": rep.when, "outcome": rep.outcome}
        if rep.skipped:
            rec["message"] = str(rep.longrepr[-1]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        elif call.excinfo is not None and rep.failed:
            e = call.excinfo.value
            chain = []
            x = e
            while x is not None and len(chain) < 4:
                chain.append(type(x).__module__ + "." + type(x).__qualname__)
                x = x.__cause__ or x.__context__
            rec["exc_type"] = chain[0]
            rec["exc_chain"] = chain
            rec["message"] = str(e)[:3000]
            rec["frames"] = [(os.path.basename(fs.filename), fs.name, (fs.line or "")[:200])
                             for fs in traceback.extract_tb(call.excinfo.tb)][-25:]
        _emit(rec)
'''


# ============================================================================ running


def shards(work: str, folders, per_shard: int) -> list[tuple[str, list[str]]]:
    """(folder, files) groups, one pytest process each (example folders stay whole: their tests
    import the folder's other modules)."""
    out = []
    for folder in folders:
        files = sorted(f for f in os.listdir(os.path.join(work, folder)) if f.startswith("test_") and f.endswith(".py"))
        if folder.startswith("examples"):
            out.append((folder, files))
            continue
        for i in range(0, len(files), per_shard):
            out.append((folder, files[i:i + per_shard]))
    return out


def run_shard(work: str, folder: str, files, env: dict, shard_timeout: float, idx: int, extra) -> str:
    results = os.path.join(work, f".results-{idx}.jsonl")
    e = dict(env, TW_TL_RESULTS=results)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", work, "-c",
           os.path.join(work, "pytest.ini"), "--continue-on-collection-errors", "-o", "console_output_style=classic",
           *extra, *[os.path.join(folder, f) for f in files]]
    try:
        p = subprocess.run(cmd, cwd=work, env=e, capture_output=True, text=True, timeout=shard_timeout)
        log = p.stdout[-3000:] + p.stderr[-3000:]
        code = p.returncode
    except subprocess.TimeoutExpired:
        log, code = f"shard timed out after {shard_timeout:.0f} s", "timeout"
        # a test that hangs in native code (a GPU kernel that never finishes) is not stopped by the
        # per-test alarm: name the test that was running as a timeout (a hang, or a slow shard), from
        # the marker the plugin writes before each test; the shard's later tests are not run
        if os.path.exists(results + ".current"):
            with open(results + ".current") as f:
                hung = f.read().strip()
            with open(results, "a") as f:
                msg = f"harness timeout: running when its shard was killed ({shard_timeout:.0f} s)"
                f.write(json.dumps({"nodeid": hung, "outcome": "failed", "phase": "call",
                                    "exc_type": "builtins.TimeoutError", "message": msg, "frames": []}) + "\n")
    if code not in (0, 1, 5):  # 0 ok, 1 failures, 5 nothing collected; else the process died
        with open(results, "a") as f:
            f.write(json.dumps({"nodeid": f"{folder}::<shard {' '.join(files)}>", "outcome": "error",
                                "phase": "process", "exc_type": "", "message": f"pytest exited {code}",
                                "text": log, "frames": []}) + "\n")
    return results


# ============================================================================ classifying

_COMPARE_FUNCS = ("assert_close", "assert_allclose", "torch_assert_close", "assert_mostly_close", "allclose",
                  "assert_array_equal", "assert_equal", "assert_array_almost_equal", "manual_assert_close",
                  "assert_consistent", "isclose", "array_equal")
_GPU_WORDS = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs", "CUDA driver",
              "no CUDA-capable device", "cuInit", "CUDA_ERROR_NO_DEVICE", "torch.cuda", "is on cuda",
              "device='cuda", "on the GPU without", "CUDA error: no kernel image", "cudaErrorNoDevice",
              "Cannot get CUDA generator", "ATen_cuda")


def _exc_from_text(text: str) -> tuple[str, str]:
    """(exception type, message) from a collection error's text ("E   ModuleNotFoundError: ...")."""
    for line in reversed(text.splitlines()):
        m = re.match(r"^E\s+([\w.]+(?:Error|Exception|Warning|Exit|Interrupt)):\s*(.*)$", line)
        if m:
            return m[1], m[2]
    return "", text.strip().splitlines()[-1] if text.strip() else ""


def classify(rec: dict) -> tuple[str, str]:
    """(class, one-line reason) of a failed or errored test."""
    exc = rec.get("exc_type", "")
    msg = rec.get("message", "")
    if not exc and rec.get("text"):
        exc, msg = _exc_from_text(rec["text"])
    short = exc.rsplit(".", 1)[-1]
    chain = " ".join(rec.get("exc_chain", [exc]))
    first = (msg.strip().splitlines() or [""])[0][:240]
    frames = rec.get("frames", [])
    if msg.startswith("Regex pattern did not match"):  # pytest.raises(match=...): judge the error raised instead
        actual = re.search(r"Actual message: (['\"])(.*)", msg, re.S)
        text = actual[2] if actual else ""
        if re.match(r"(AttributeError|ImportError|ModuleNotFoundError): ", text):
            return classify({"exc_type": exc, "message": text, "frames": frames})
        if "not supported" in text.split("\n")[0]:
            return "kernel refused", text.split("\n")[0][:240]
        return "error text differs", "expected /" + (re.search(r"Expected regex: '(.*?)'", msg) or [0, "?"])[1] + \
            "/, raised: " + text.split("\n")[0][:200]
    if short == "TimeoutError" and "harness timeout" in msg:
        return "timeout", first
    if any(w in msg for w in _GPU_WORDS) and short not in ("CompileError", "InternalError"):
        return "needs a GPU", first
    wrapped = re.match(r"(AttributeError|ImportError|ModuleNotFoundError|NameError): ", msg)
    if wrapped:  # the frontend reports a missing T.* name inside a CompileError that names the line
        short, msg = wrapped[1], msg[wrapped.end():]
    pkg = re.match(r"No module named '([\w]+)", msg) if short in ("ModuleNotFoundError", "ImportError") else None
    if pkg and pkg[1] not in ("tilewright", "tilelang", "tvm"):  # einops, triton...: not a TileLang name
        return "missing package", f"{pkg[1]} (a package the test needs; install it where the tests run)"
    if short in ("AttributeError", "ImportError", "ModuleNotFoundError", "NameError") or (
            short == "TypeError" and "not part of tilewright" in msg):
        return "missing name", missing_name(short, msg) or first
    if "not part of tilewright: " in msg:
        return "missing name", missing_name(short, msg) or first
    if short == "InternalError":
        return "internal error", first
    if short == "ToolchainError" or "nvrtc" in chain.lower():
        err = re.search(r"error: (.*)", msg)  # the compiler's first complaint says more than the headline
        return "NVRTC rejected", err[1][:240] if err else first
    if short in ("CompileError", "DTypeError", "UnsupportedDTypeError", "TargetError") or "CompileError" in chain:
        return "kernel refused", first
    if short == "TypeError" and re.search(r"unexpected keyword|positional argument|required (keyword|positional)"
                                           r"|takes \d+|got multiple values", msg):
        return "parameter", first
    if short == "AssertionError":
        in_compare = any(fr[1] in _COMPARE_FUNCS or any(c in fr[2] for c in _COMPARE_FUNCS) for fr in frames)
        if in_compare or re.search(r"mismatch|not close|allclose|Mismatched elements", msg, re.I):
            return "wrong result", first
    return "other", f"{short}: {first}" if short else first


_MISSING_RES = [
    (re.compile(r"module '([\w.]+)' has no attribute '(\w+)'"), lambda m: f"{_tl(m[1])}.{m[2]}"),
    (re.compile(r"No module named '([\w.]+)'"), lambda m: f"{_tl(m[1])} (module)"),
    (re.compile(r"cannot import name '(\w+)' from '([\w.]+)'"), lambda m: f"{_tl(m[2])}.{m[1]}"),
    (re.compile(r"'(\w+)' object has no attribute '(\w+)'"), lambda m: f"{m[1]}.{m[2]}"),
    (re.compile(r"type object '(\w+)' has no attribute '(\w+)'"), lambda m: f"{m[1]}.{m[2]}"),
    (re.compile(r"not part of tilewright: ([\w.]+) is used"), lambda m: m[1]),
    (re.compile(r"name '(\w+)' is not defined"), lambda m: f"{m[1]} (name)"),
]


def _tl(module: str) -> str:
    if module == "tilewright.language":
        return "T"
    return re.sub(r"^tilewright", "tilelang", module)


def missing_name(exc: str, msg: str) -> str | None:
    for pattern, fmt in _MISSING_RES:
        m = pattern.search(msg)
        if m:
            return fmt(m)
    return None


# ============================================================================ the report


def expand_collection_errors(records: list[dict], work: str, plan: dict) -> list[dict]:
    """A test file that fails to import is one error record; count it as one failure per test
    function it defines (parametrizations unknown: one each), leaving out what the plan leaves out."""
    out = []
    for r in records:
        path = os.path.join(work, r["nodeid"])
        if r.get("phase") != "collect" or "::" in r["nodeid"] or not os.path.isfile(path):
            out.append(r)
            continue
        try:
            facts = _ModuleFacts(path)
        except SyntaxError:
            out.append(r)
            continue
        tests = [k for k in facts.defs if k.split("::")[-1].startswith("test")]
        kept = [k for k in tests if f"{r['nodeid']}::{k}" not in plan]
        for k in kept or [""]:
            out.append(dict(r, nodeid=f"{r['nodeid']}::{k}" if k else r["nodeid"], file_error=True))
    return out


def summarize(records: list[dict]) -> dict:
    tests = {}
    for r in records:  # the last record of a test wins (a setup error then no call)
        tests[r["nodeid"]] = r
    internal = tuple(m + "." for m in INTERNAL_MODULES)
    for r in tests.values():
        if r["outcome"] in ("failed", "error"):
            r["class"], r["reason"] = classify(r)
            if r["class"] == "missing name" and r["reason"].startswith(internal):
                # a name of TileLang's internals reached at run time (in a decorator, a helper the
                # static analysis did not follow): the test is left out like the ones found before
                r["outcome"], r["why"] = "left out", f"uses TVM/TileLang internals ({r['reason']})"
                del r["class"], r["reason"]
    return tests


def report(tests: dict, args, elapsed: float) -> str:
    run = [r for r in tests.values() if r["outcome"] != "left out"]
    counts = collections.Counter(r["outcome"] if r["outcome"] not in ("failed", "error") else "failed" for r in run)
    classes = collections.Counter(r["class"] for r in run if "class" in r)
    lines = [
        "# TileLang's tests against tilewright", "",
        f"Tests from `{args.tests_dir}`; suites {', '.join(args.suites)}; {len(args.examples)} example folders; "
        f"per-test timeout {args.timeout:.0f} s" + (f"; assuming a CUDA {args.assume_gpu} GPU" if args.assume_gpu
                                                    else "") + f"; {elapsed:.0f} s.", "",
        f"**{len(run)} tests: {counts.get('passed', 0)} pass, {counts.get('failed', 0)} fail, "
        f"{counts.get('skipped', 0)} skip** ({sum(1 for r in tests.values() if r['outcome'] == 'left out')} left "
        "out: TVM internals, generated-source quotes, performance tests).", "",
        "| failure class | tests |", "|---|---|",
    ]
    for c in CLASSES:
        lines.append(f"| {c} | {classes.get(c, 0)} |")
    by_folder = collections.defaultdict(collections.Counter)
    for r in run:
        folder = r["nodeid"].split("::")[0].rsplit("/", 1)[0]
        by_folder[folder][r.get("class", r["outcome"])] += 1
    cols = ["passed", "skipped"] + list(CLASSES)
    lines += ["", "## Per folder", "", "| folder | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for folder in sorted(by_folder):
        c = by_folder[folder]
        lines.append(f"| {folder} | " + " | ".join(str(c.get(k, 0)) for k in cols) + " |")
    missing = collections.Counter(r["reason"] for r in run if r.get("class") == "missing name")
    lines += ["", "## Top missing names", "", "| name | tests |", "|---|---|"]
    lines += [f"| `{n}` | {k} |" for n, k in missing.most_common(args.top)]
    for cls in ("kernel refused", "parameter", "wrong result", "internal error", "NVRTC rejected",
                "error text differs", "missing package", "other"):
        reasons = collections.Counter(_generalize(r["reason"]) for r in run if r.get("class") == cls)
        if reasons:
            lines += ["", f"## Top reasons: {cls}", "", "| reason | tests |", "|---|---|"]
            lines += [f"| {_cell(n)} | {k} |" for n, k in reasons.most_common(args.top)]
    lines += ["", "## Every failure", "", "| test | class | reason |", "|---|---|---|"]
    for nodeid in sorted(tests):
        r = tests[nodeid]
        if "class" in r:
            lines.append(f"| `{nodeid}` | {r['class']} | {_cell(r['reason'])} |")
    return "\n".join(lines) + "\n"


def _generalize(reason: str) -> str:
    """A reason without the parts that differ per test (numbers, file positions)."""
    reason = re.sub(r"\bline \d+", "line N", reason)
    reason = re.sub(r"\b\d+(\.\d+)?\b", "N", reason)
    return reason[:200]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:300]


# ============================================================================ main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests-dir", "--tilelang", dest="tests_dir", required=True,
                    help="a TileLang checkout, or a copy made with --export (holds testing/python and examples)")
    ap.add_argument("--suites", default=",".join(SUITES), help="testing/python folders to run (comma-separated)")
    ap.add_argument("--examples", default="all", help="example folders to run: 'all' (those with test files), "
                    "'none', or comma-separated names")
    ap.add_argument("--export", metavar="DIR", help="copy only the needed test folders to DIR and stop")
    ap.add_argument("--report", default="tilelang_tests.md", help="markdown report to write")
    ap.add_argument("--json", default=None, help="raw results (JSON) to write; default: the report's name + .json")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test")
    ap.add_argument("--shard-timeout", type=float, default=0.0,
                    help="seconds per shard of test files, after which its process is killed and the test it was "
                         "running reported as hung (default: max(1800, 20 x --timeout))")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="pytest processes at once")
    ap.add_argument("--files-per-shard", type=int, default=6)
    ap.add_argument("--assume-gpu", default=None, metavar="X.Y",
                    help="act as if a CUDA GPU of this compute capability were present (see the module doc)")
    ap.add_argument("--target", default=None, help="TILEWRIGHT_TARGET for the run (e.g. 'cuda -arch=sm_90a')")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    ap.add_argument("--keep", metavar="DIR", help="stage the rewritten tests in DIR (kept) instead of a temp dir")
    ap.add_argument("--top", type=int, default=30, help="rows in the top-N tables")
    ap.add_argument("--reclassify", metavar="JSON", help="write the report again from a run's raw results (JSON)")
    args = ap.parse_args(argv)
    args.suites = [s for s in args.suites.split(",") if s]
    tp, ex = find_layout(args.tests_dir)
    if args.examples == "all":
        args.examples = example_folders(ex) if os.path.isdir(ex) else []
    elif args.examples == "none":
        args.examples = []
    else:
        args.examples = [e for e in args.examples.split(",") if e]
    if args.reclassify:
        with open(args.reclassify) as f:
            tests = summarize(list(json.load(f).values()))
        with open(args.report, "w") as f:
            f.write(report(tests, args, 0.0))
        print(f"report: {args.report}")
        return 0
    if args.export:
        export(args.tests_dir, args.export, args.suites, args.examples)
        return 0

    work = args.keep or tempfile.mkdtemp(prefix="tilelang-tests-")
    if args.keep and os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    folders = stage(args.tests_dir, work, args.suites, args.examples)
    plan = leave_out_plan(work, folders)
    with open(os.path.join(work, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    with open(os.path.join(work, "conftest.py"), "w") as f:
        f.write(CONFTEST)
    with open(os.path.join(work, "pytest.ini"), "w") as f:
        f.write("[pytest]\naddopts = -p no:randomly\nfilterwarnings = ignore\n")
    env = dict(os.environ, TW_TL_PLAN=os.path.join(work, "plan.json"), TW_TL_TIMEOUT=str(args.timeout),
               PYTHONPATH=os.pathsep.join([REPO_ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONDONTWRITEBYTECODE="1")
    if args.assume_gpu:
        env["TILEWRIGHT_TESTING_ASSUME_CUDA"] = args.assume_gpu
    if args.target:
        env["TILEWRIGHT_TARGET"] = args.target
    extra = ["-k", args.keyword] if args.keyword else []
    groups = shards(work, folders, args.files_per_shard)
    # a shard may hold up to files_per_shard files of many tests; bound it generously
    shard_timeout = args.shard_timeout or max(1800.0, args.timeout * 20)
    outputs = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = [pool.submit(run_shard, work, folder, files, env, shard_timeout, i, extra)
                for i, (folder, files) in enumerate(groups)]
        for n, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            outputs.append(fut.result())
            print(f"\r{n}/{len(futs)} shards done", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    records = []
    for path in outputs:
        if os.path.exists(path):
            with open(path) as f:
                records += [json.loads(line) for line in f if line.strip()]
    tests = summarize(expand_collection_errors(records, work, plan))
    text = report(tests, args, time.time() - t0)
    with open(args.report, "w") as f:
        f.write(text)
    with open(args.json or os.path.splitext(args.report)[0] + ".json", "w") as f:
        json.dump(tests, f, indent=1)
    print("\n".join(text.splitlines()[:20 + len(CLASSES)]))
    print(f"report: {args.report}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
