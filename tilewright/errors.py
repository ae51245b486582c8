"""The one place for errors.

* ``TilewrightError`` is the base of everything we raise on purpose.
* ``CompileError`` is a *user* error found while compiling: it names the kernel source line with a
  caret under the offending column and says what to change.
* ``InternalError`` is our bug: it says so and carries the pass name.
* ``ToolchainError`` carries the compiler log, the generated source path and a command to reproduce.
* ``ArgumentError`` is raised before a launch when an argument does not fit its parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class TilewrightError(Exception):
    """Base class of all tilewright errors."""


class TargetError(TilewrightError, ValueError):
    """A target string or dict cannot be used."""


@dataclass(frozen=True)
class SourceLocation:
    filename: str
    lineno: int  # 1-based, in the file
    col: int  # 0-based
    line_text: str = ""
    func_name: str = ""

    def excerpt(self) -> str:
        if not self.line_text:
            return f'  File "{self.filename}", line {self.lineno}'
        text = self.line_text.rstrip("\n")
        stripped = text.lstrip()
        shift = len(text) - len(stripped)
        caret = " " * max(self.col - shift, 0) + "^"
        where = f'  File "{self.filename}", line {self.lineno}' + (f", in {self.func_name}" if self.func_name else "")
        return f"{where}\n    {stripped}\n    {caret}"


class CompileError(TilewrightError):
    """A user error in a kernel, with the source line and a hint of what to change."""

    def __init__(self, message: str, loc: SourceLocation | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [self.message]
        if self.loc is not None:
            parts.append(self.loc.excerpt())
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def with_loc(self, loc: SourceLocation | None) -> CompileError:
        if self.loc is None and loc is not None:
            import copy

            located = copy.copy(self)  # keeps the class (a CompileValueError stays a ValueError)
            located.loc = loc
            located.args = (located._format(),)
            return located
        return self


class CompileValueError(CompileError, ValueError):
    """A CompileError where TileLang raises ValueError (a bad argument value such as an unsupported
    memory order), so that code catching ValueError keeps working."""


class CompileAssertionError(CompileError, AssertionError):
    """A CompileError where TileLang's frontend fails an assertion (a T.reshape to another number of
    elements), so that code expecting AssertionError keeps working."""


class TilewrightWarning(UserWarning):
    """An argument or setting that tilewright accepts for TileLang compatibility but does not act on
    (a performance hint): the warning names it, says that it has no effect here and what to do."""


class InternalError(TilewrightError):
    """A bug in tilewright itself (not in the user's kernel)."""

    def __init__(self, message: str, pass_name: str = "", loc: SourceLocation | None = None):
        self.pass_name = pass_name
        where = f" in pass '{pass_name}'" if pass_name else ""
        text = f"internal compiler error{where}: {message}\nThis is a tilewright bug; please report it with the kernel."
        if loc is not None:
            text += "\n" + loc.excerpt()
        super().__init__(text)


class ToolchainError(TilewrightError):
    """The device compiler rejected generated code (or is missing)."""

    def __init__(self, message: str, log: str = "", source_path: str = "", repro: str = ""):
        self.log = log
        self.source_path = source_path
        self.repro = repro
        text = message
        if source_path:
            text += f"\ngenerated source: {source_path}"
        if repro:
            text += f"\nreproduce with: {repro}"
        if log:
            text += "\ncompiler log:\n" + log.strip()
        super().__init__(text)


class ArgumentError(TilewrightError, TypeError):
    """A kernel call's argument does not match its parameter (shape, dtype, device, strides)."""


class RuntimeLaunchError(TilewrightError, RuntimeError):
    """The GPU runtime failed to load or launch a kernel."""


# TileLang's ``tilelang.errors.enrich_error``: an error whose text ends in a source marker
# ``\n  --> FILE:LINE:COL`` gets the source line under the marker, with a caret at the column.
_MARKER_RE = re.compile(r"\n\s*--> (?P<file>.+?):(?P<line>\d+):(?P<col>\d+)\s*$")


def enrich_error(exc: BaseException) -> BaseException:
    """``exc`` with the source line its ``--> FILE:LINE:COL`` marker points at appended to its
    message (in place, and returned); an error without a marker, or whose file cannot be read, is
    returned unchanged."""
    text = str(exc)
    m = _MARKER_RE.search(text)
    if m is None:
        return exc
    try:
        with open(m.group("file"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return exc
    line, col = int(m.group("line")), int(m.group("col"))
    if not 0 < line <= len(lines):
        return exc
    src = lines[line - 1]
    exc.args = (f"{text}\n   |\n{line:>3}| {src}\n   | {' ' * max(col - 1, 0)}^",) + tuple(exc.args[1:])
    return exc
