"""TileLang-compatible layout helpers (``tilelang.layout.make_swizzled_layout``).

tilewright infers shared-memory layouts and swizzles itself, so these only record the request;
``T.annotate_layout`` accepts them for source compatibility."""

from __future__ import annotations

from .language.layout_objects import Fragment, Layout  # noqa: F401  (TileLang's tilelang.layout.Layout / Fragment)


class LayoutRequest:
    def __init__(self, kind: str, buffer):
        self.kind = kind
        self.buffer = buffer

    def __repr__(self) -> str:
        return f"LayoutRequest({self.kind}, {getattr(self.buffer, 'name', self.buffer)})"


def make_swizzled_layout(buffer, *args, **kwargs) -> LayoutRequest:
    return LayoutRequest("swizzled", buffer)


def make_linear_layout(buffer, *args, **kwargs) -> LayoutRequest:
    return LayoutRequest("linear", buffer)
