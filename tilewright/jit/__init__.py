"""The JIT layer: the callable kernel users hold (``JITKernel``) and ``export``; above the compiler,
the runtime and the CPU interpreters, which never import it."""

from .kernel import JITKernel  # noqa: F401
