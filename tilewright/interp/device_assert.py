"""``T.device_assert(cond, msg)`` on a run-time condition (language/compat_names.py) in the tile interpreter
and the emulator: the first executing thread whose condition is false stops the run with a
``DeviceAssertError`` naming the message, the block and the thread (on a GPU the kernel traps, and the launch
fails with a device-side assertion error)."""

from __future__ import annotations

from ..errors import TilewrightError

ASSERT_PREFIX = "device_assert:"


class DeviceAssertError(TilewrightError, RuntimeError):
    """A ``T.device_assert`` condition was false in a thread."""


def message(name: str) -> str:
    """The message of a ``device_assert:<msg>`` call name."""
    return name[len(ASSERT_PREFIX):] or "assertion failed"


def fail(name: str, cond_text: str, block, thread) -> None:
    block = [int(b) for b in block] + [0] * (3 - len(block))
    raise DeviceAssertError(f"T.device_assert({cond_text}) failed in block ({', '.join(map(str, block))}) "
                            f"thread {thread}: {message(name)}")


__all__ = ["ASSERT_PREFIX", "DeviceAssertError", "fail", "message"]
