"""A progress bar over the candidates of a tuning run: tqdm on a terminal, nothing otherwise
(a log file or CI output gets the summary table instead of a stream of bar redraws)."""

from __future__ import annotations

import sys


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, description: str):
    """An object with ``update()`` and ``close()``: a tqdm bar, or one that shows nothing."""
    if not sys.stderr.isatty() or total < 2:
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit="config", leave=False)
