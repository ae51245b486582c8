"""Moved to ``tilewright.ir.analysis`` (analyses are an IR concern shared by every layer); this
name stays only until the passes are switched over."""

from ..ir.analysis import affine_coeffs, eval_expr, is_nonnegative, uses_var  # noqa: F401
