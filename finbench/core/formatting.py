"""Numbers as the reports and the studies' lines show them, below both (report/format.py hands
them on to the reports)."""

from __future__ import annotations

import math
from typing import Any


def pct(value: Any, digits: int = 2) -> str:
    """A 0–1 value as a percentage with `digits` decimals; "–" when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{100 * float(value):.{digits}f}"
