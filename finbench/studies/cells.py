"""Table cells the studies' console lines and report sections share (values ×100 where a header
says so; ratios as they are)."""

from __future__ import annotations

from typing import Any

from finbench.core.formatting import pct

__all__ = ["interval", "kept", "pct", "ratio", "signed"]


def signed(value: Any) -> str:
    return "–" if value is None else f"{100 * value:+.2f}"


def ratio(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def kept(value: Any) -> str:
    """A ratio in a line whose numbers are ×100: as a percentage of the base, never a bare 1.200."""
    return "retained –" if value is None else f"{100 * value:.1f} % of the base"


def interval(paired: Any) -> str:
    """", 95% CI low … high" of a paired difference (×100), "" without one."""
    ci = (paired or {}).get("ci_diff") or {}
    return "" if ci.get("low") is None else f", 95% CI {signed(ci['low'])} … {signed(ci['high'])}"
