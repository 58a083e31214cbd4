"""Number formats a sweep can measure: the one table in `gemmlab.formats`, seen from the harness."""

from __future__ import annotations

from ..formats import FORMATS, FP32, NumberFormat, format_named, number_format

__all__ = ["FORMATS", "FP32", "NumberFormat", "format_named", "number_format"]
