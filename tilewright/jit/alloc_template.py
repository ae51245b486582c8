"""Templates that allocate an output of a fixed shape, dtype and device through ``torch.empty_like``.

``torch.empty(*shape, dtype=, device=)`` parses its keyword arguments on every call: on the H200's
host it measured 5.1 us against ``torch.empty_like``'s 4.0 (bench/results/2026-12-01-2018-launch-
overhead-NVIDIA-H200.md), on this project's CPU machine 1.15 against 0.95.  A template is one
element of the dtype on the device, expanded to the shape (every stride 0: no memory beyond that
element), and ``torch.empty_like(template)`` makes a new tensor of that shape, dtype and device.

torch works the new tensor's strides out from the template's (a template with zero strides is
not dense, so it infers dense strides in the order of the template's): contiguous in every case
tried, but that is torch's choice, not a promise, so a template is only handed out after a probe
allocation made from it came out exactly as ``torch.empty(shape, dtype=, device=)`` would (shape,
strides, dtype, device).  Shapes without elements get no template (their strides are torch's
business and nothing is launched on them).
"""

from __future__ import annotations


def empty_template(torch, shape, dtype, device):
    """A tensor ``t`` for which ``torch.empty_like(t)`` is a new contiguous tensor of ``shape``,
    ``dtype`` and ``device``; None where no template is proven to give one (then allocate with
    ``torch.empty``)."""
    shape = tuple(int(s) for s in shape)
    if not shape or 0 in shape:
        return None
    try:
        template = torch.empty((1,) * len(shape), dtype=dtype, device=device).expand(shape)
        probe, want = torch.empty_like(template), torch.empty(shape, dtype=dtype, device=device)
    except (RuntimeError, TypeError, ValueError):  # a device or dtype torch cannot allocate this way
        return None
    if (probe.shape != want.shape or probe.stride() != want.stride() or probe.dtype != want.dtype
            or probe.device != want.device or probe.layout != want.layout):
        return None
    return template


def empty_maker(torch, shape, dtype, device):
    """A function of no arguments making a new contiguous tensor of ``shape``, ``dtype`` and
    ``device``: ``torch.empty_like`` of a template where one is proven, else ``torch.empty``.
    (``torch`` is the caller's: the functions are looked up on it once, here.)"""
    from functools import partial

    template = empty_template(torch, shape, dtype, device)
    if template is not None:
        return partial(torch.empty_like, template)
    return partial(torch.empty, tuple(shape), dtype=dtype, device=device)
