"""Number formatting and metric names shared by the HTML and Markdown reports (both import it;
neither imports the other's helpers)."""

from __future__ import annotations

import math
from typing import Any

HEADLINE_LABELS = {"finscore": "FinScore", "domain_accuracy": "domain-normalised accuracy (F)",
                   "p_h": "multi-answer error rate (P_H)", "accuracy": "accuracy", "domain_score": "domain score",
                   "score": "score", "strict_accuracy": "strict accuracy"}


def pct(value: Any, digits: int = 2) -> str:
    """A 0–1 value as a percentage with `digits` decimals; "–" when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{100 * float(value):.{digits}f}"


def num(value: Any) -> str:
    """A value as 4 significant digits (floats) or as text; "–" when missing."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4g}"
    return str(value)
