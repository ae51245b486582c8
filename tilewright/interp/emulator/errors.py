"""The errors the emulator raises: each names the statement (and its source line) that went wrong."""

from __future__ import annotations

from ..tile import InterpError, OutOfBoundsError


class EmulatorError(InterpError):
    """The lowered kernel does something whose result on a GPU is undefined (or the IR is malformed)."""


class EmulatorOutOfBoundsError(EmulatorError, OutOfBoundsError):
    """An active lane reads or writes outside a buffer."""


class MisalignedAccessError(EmulatorError):
    """A vector access is not aligned to its width."""


class RaceError(EmulatorError):
    """Two threads of a block touch the same shared memory without a barrier between them."""


class DivergenceError(EmulatorError):
    """A collective operation (barrier, shuffle, ldmatrix, matrix instruction) runs under divergence."""




class DeadlockError(EmulatorError):
    """Every warp of a block is blocked (on a barrier, a named barrier or an mbarrier wait), or a
    warp finished while others still wait for it: the GPU would hang."""
