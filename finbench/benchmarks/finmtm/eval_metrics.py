"""HiThink-Research/FinMTM @ 40557ba `finmtm_eval/metrics.py`, restated (torch-free): the
capability and dialogue scores by which finbench/benchmarks/finmtm/verdicts.py reads the judge's
replies, and the agent items' tool score (Eqs. 4–6)."""

from __future__ import annotations

from typing import Any

CAPABILITIES = ("visual_precision", "financial_logic", "data_accuracy", "cross_modal_verification",
                "temporal_awareness")


def clamp(value: Any, lower: float, upper: float) -> float:
    """A number clamped to [lower, upper]; a non-number or NaN is `lower`."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return lower
    return lower if number != number else min(max(number, lower), upper)


def f_beta_score(precision: Any, recall: Any, beta: float = 2.0) -> float:
    """F-beta of precision and recall clamped to [0, 1]; 0 when both are 0."""
    if beta <= 0:
        raise ValueError("beta must be positive")
    p, r = clamp(precision, 0.0, 1.0), clamp(recall, 0.0, 1.0)
    denominator = beta * beta * p + r
    return 0.0 if denominator == 0 else (1 + beta * beta) * p * r / denominator


def tool_score(precision: Any, recall: Any, beta: float = 2.0, weight: float = 25.0) -> float:
    """Qt = weight · F_beta (Eq. 5)."""
    return max(weight, 0.0) * f_beta_score(precision, recall, beta)


def turn_capability_score(scores: Any) -> float:
    """Uniform mean of the five 0–10 capability scores (a mapping: a missing one counts 0)."""
    if isinstance(scores, dict):
        values = [scores.get(name, 0.0) for name in CAPABILITIES]
    else:
        values = list(scores)
        if len(values) != len(CAPABILITIES):
            raise ValueError(f"expected {len(CAPABILITIES)} capability scores")
    return sum(clamp(v, 0.0, 10.0) for v in values) / len(CAPABILITIES)


def dialogue_score(turn: Any, session: Any, alpha: float = 0.5, report_scale: float = 100.0) -> float:
    """(alpha·turn + (1 − alpha)·session) on 0–10, reported × report_scale/10 (Eq. 4)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    return (alpha * clamp(turn, 0.0, 10.0) + (1 - alpha) * clamp(session, 0.0, 10.0)) * report_scale / 10.0


def agent_score(answer: Any, reasoning: Any, precision: Any, recall: Any) -> dict[str, float]:
    """Qa (0–50) + Qr (0–25) + Qt (25·F2) = Qfinal (Eqs. 5–6)."""
    qa, qr, qt = clamp(answer, 0.0, 50.0), clamp(reasoning, 0.0, 25.0), tool_score(precision, recall)
    return {"answer": qa, "reasoning": qr, "tool": qt, "total": qa + qr + qt}
