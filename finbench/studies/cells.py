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
    """", 95% CI low … high" of a paired difference (×100), with why it says little where it rests
    on too few clusters or on none of the spread an interval needs; "" without one."""
    ci = (paired or {}).get("ci_diff") or {}
    return "" if ci.get("low") is None else f", 95% CI {signed(ci['low'])} … {signed(ci['high'])}" + caveat(paired)


def caveat(paired: dict[str, Any]) -> str:
    """' (only 2 clusters: too few to size an interval; every item moved by the same amount, so its
    width is 0)': why a paired interval says little, '' where it does not."""
    from finbench.scoring.clustered import MIN_CLUSTERS_FOR_POWER

    reasons = []
    groups = paired.get("n_clusters_counted")
    if groups is not None and groups < MIN_CLUSTERS_FOR_POWER:
        reasons.append(f"only {groups} cluster{'' if groups == 1 else 's'}: too few for an interval to say much "
                       f"(fewer than {MIN_CLUSTERS_FOR_POWER})")
    if paired.get("se_diff") == 0:
        reasons.append("every item moved by the same amount, so the interval has no width")
    return f" ({'; '.join(reasons)})" if reasons else ""
