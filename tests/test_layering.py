"""The layers of the README's architecture, checked on the imports of every module (lazy imports
inside functions included): a lower layer never imports a higher one."""

from __future__ import annotations

import ast
import os

import tilewright

ROOT = os.path.dirname(os.path.abspath(tilewright.__file__))
FOUNDATION = {"errors", "config"}  # shared by every layer: error types and the option registry

# layer -> the other layers (besides the foundation) it may import; None: no restriction
ALLOWED = {
    "ir": {"target"},
    "target": {"ir"},
    "toolchain": {"target"},
    "passes": {"ir", "target"},
    "codegen": {"ir", "target"},
    "interp": {"ir", "target"},
}
RUNTIME_FORBIDDEN = {"passes", "codegen", "interp", "frontend", "profiler", "compiler", "jit", "backends", "language",
                     "kernels", "autotune", "cli"}


def _imports(path: str, module: str):
    """Every ``tilewright.*`` module named by an import in ``path``."""
    with open(path) as f:
        tree = ast.parse(f.read())
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module:
                yield target
            else:
                yield from (f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _modules():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                yield path, rel.removesuffix(".__init__")


def _edges():
    for path, module in _modules():
        parts = module.split(".")
        layer = parts[1] if len(parts) > 1 else ""
        for target in _imports(path, module):
            tparts = target.split(".")
            if tparts[0] == "tilewright" and len(tparts) > 1 and tparts[1] != layer:
                yield path, module, layer, target, tparts[1]


def test_lower_layers_never_import_higher_ones():
    bad = []
    for _path, module, layer, target, tlayer in _edges():
        if tlayer in FOUNDATION:
            continue
        if layer in ALLOWED and tlayer not in ALLOWED[layer]:
            bad.append(f"{module} ({layer}) imports {target}")
        if layer == "runtime" and tlayer in RUNTIME_FORBIDDEN:
            bad.append(f"{module} (runtime) imports {target}")
    assert not bad, "layering violations:\n" + "\n".join(sorted(bad))


def test_vendor_runtimes_never_import_each_other():
    bad = []
    for path, module in _modules():
        targets = set(_imports(path, module))
        if module.endswith("runtime.cuda_driver") and any("hip" in x for x in targets):
            bad.append(module)
        if module.endswith("runtime.hip_runtime") and any("cuda_driver" in x or "cuda.bindings" in x for x in targets):
            bad.append(module)
    assert not bad


def test_the_check_sees_violations():
    """The checker itself: a made-up module of the ir layer importing passes is reported."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fake.py")
        with open(path, "w") as f:
            f.write("from ..passes.pipeline import run_pipeline\nimport tilewright.codegen.cuda\n")
        found = set(_imports(path, "tilewright.ir.fake"))
    assert found == {"tilewright.passes.pipeline", "tilewright.codegen.cuda"}
