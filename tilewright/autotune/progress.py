"""A progress bar over the candidates of a tuning run: tqdm on a terminal, nothing otherwise
(a log file or CI output gets the summary table instead of a stream of bar redraws)."""

from __future__ import annotations

import sys


def progress(items, description: str):
    items = list(items)
    if not sys.stderr.isatty() or len(items) < 2:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=description, unit="config", leave=False)
