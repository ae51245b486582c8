"""PNG charts of measurements: a roofline (kernels as points under the device's memory and compute
roofs) and a grouped bar chart (``tilewright bench``).  matplotlib is an optional extra
(``pip install 'tilewright[plot]'``); without it these raise ``PlotUnavailable`` saying so."""

from __future__ import annotations

import os


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


_INSTALL = "pip install 'tilewright[plot]'  (or: pip install matplotlib)"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(f"plotting needs matplotlib, which is not installed; {_INSTALL}") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(fig, plt, path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def roofline_png(path: str, points: list, roof=None, dtype: str = "float16", title: str = "") -> str:
    """``points``: ``(label, FLOP per byte, achieved TFLOP/s)``.  ``roof``: a ``peaks.DeviceRoof``
    (the roofs are drawn), or None (CPU timing: only the points)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p[1] for p in points if p[1] and p[2]]
    lo = min(xs + [0.1]) / 4
    hi = max(xs + [roof.ridge(dtype) if roof else 10.0]) * 4
    if roof is not None:
        peak = roof.peak_tflops(dtype)
        ridge = roof.ridge(dtype)
        bw = roof.bandwidth_gbs / 1e3  # TB/s: TFLOP/s per FLOP/byte
        ax.plot([lo, ridge, hi], [lo * bw, peak, peak], color="black", linewidth=1.5,
                label=f"{roof.name}: {roof.bandwidth_gbs:.0f} GB/s, {peak:.0f} TFLOP/s")
        ax.axvline(ridge, color="gray", linestyle=":", linewidth=1)
    for label, intensity, tflops in points:
        if intensity and tflops:
            ax.scatter([intensity], [tflops], zorder=3)
            ax.annotate(label, (intensity, tflops), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or "roofline")
    ax.grid(True, which="both", alpha=0.3)
    if roof is not None:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(0.02, 0.97, "timed with the CPU clock: no device roof", transform=ax.transAxes, fontsize=8, va="top")
    return _save(fig, plt, path)


def bars_png(path: str, labels: list, series: dict, ylabel: str, title: str = "", log: bool = False) -> str:
    """A grouped bar chart: ``series`` maps a name to one value per label (None: no bar)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels) + 2), 4.5))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ax.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None], width,
               label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)
