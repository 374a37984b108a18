"""How far two judges agree: `finbench judge-agreement RUN_A RUN_B`, from two runs' samples alone.

Two runs of the same answers judged by two `--judge` models (or one judge and its rerun) hold a
`judge_score` per question. On the questions both judged:

- verdicts (every score 0 or 1: FAMMA's, FinMMR's, the open-ended probe's): Cohen's kappa,
  κ = (p_o − p_e) / (1 − p_e), p_o the share of equal verdicts and p_e = Σ_k p_A(k)·p_B(k) the
  share chance would give (Cohen 1960; `statsmodels.stats.inter_rater.cohens_kappa`);
- scores on a scale (MME-Finance's 0–5, FinMTM's 0–100): Krippendorff's alpha for interval data,
  α = 1 − D_o / D_e, D_o the mean squared difference within a question and D_e over all pairs of
  scores (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"; the `krippendorff`
  package, level "interval").

Each with a seeded percentile bootstrap CI over questions (whole clusters where the runs carry a
`cluster` column), and, where a run holds both, the agreement of its rule verdict (`rule_score`)
with its judge's (Cohen's kappa of the two verdicts), so a judge is checked against the rules it
replaces. Every reduction is a tensor pass over all resamples at once.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.kernels.bootstrap import percentile_ci
from finbench.scoring.clustered import cluster_resample_weights

LEVEL = 0.95


def cohen_kappa(a: torch.Tensor, b: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Cohen's kappa of two raters' category codes `a`, `b` (int64 [N], 0..K-1), per row of
    `weights` ([B, N] resample counts; None: one row of ones) → [B]. NaN where p_e is 1."""
    k = int(max(int(a.max()), int(b.max()))) + 1 if a.numel() else 1
    w = torch.ones(1, a.numel(), dtype=torch.float64) if weights is None else weights.to(torch.float64)
    one_a = torch.nn.functional.one_hot(a, k).to(torch.float64)  # [N, K]
    one_b = torch.nn.functional.one_hot(b, k).to(torch.float64)
    total = w.sum(1)
    observed = (w @ (one_a * one_b).sum(1)) / total
    expected = ((w @ one_a) * (w @ one_b)).sum(1) / total ** 2
    return torch.where(expected < 1, (observed - expected) / (1 - expected), torch.full_like(observed, float("nan")))


def krippendorff_interval(a: torch.Tensor, b: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Krippendorff's alpha (interval) of two raters' scores `a`, `b` (float [N], both present
    on every question), per row of `weights` ([B, N]) → [B]. With n = 2N pairable values:
    D_o = Σ_u (a_u − b_u)² / N and D_e = (2n·Σv² − 2(Σv)²) / (n(n − 1))."""
    w = torch.ones(1, a.numel(), dtype=torch.float64) if weights is None else weights.to(torch.float64)
    a, b = a.to(torch.float64), b.to(torch.float64)
    units = w.sum(1)
    n = 2 * units
    observed = (w @ (a - b) ** 2) / units
    s1, s2 = w @ (a + b), w @ (a * a + b * b)
    expected = (2 * n * s2 - 2 * s1 ** 2) / (n * (n - 1))
    return torch.where(expected > 0, 1 - observed / expected, torch.full_like(observed, float("nan")))


def _with_ci(statistic: Any, a: torch.Tensor, b: torch.Tensor, clusters: torch.Tensor, n_bootstrap: int,
             seed: int) -> dict[str, Any]:
    point = float(statistic(a, b)[0])
    out: dict[str, Any] = {"value": None if np.isnan(point) else point, "n": int(a.numel()),
                           "ci": {"low": None, "high": None, "level": LEVEL}}
    if n_bootstrap > 0 and a.numel() > 1:
        g = int(clusters.max()) + 1
        weights = cluster_resample_weights(clusters, g, n_bootstrap, torch.Generator().manual_seed(seed))
        low, high = percentile_ci(statistic(a, b, weights), LEVEL)
        out["ci"] = {"low": None if np.isnan(low) else float(low), "high": None if np.isnan(high) else float(high),
                     "level": LEVEL, "resamples": n_bootstrap, "unit": "cluster" if g < a.numel() else "question"}
    return out


def _verdicts(values: np.ndarray) -> bool:
    return bool(np.isin(values, (0.0, 1.0)).all())


def _cluster_ids(frame: pd.DataFrame) -> torch.Tensor:
    keys = frame["cluster"].astype(str) if "cluster" in frame.columns else frame["id"].astype(str)
    keys = keys.where(keys != "", "id:" + frame["id"].astype(str))
    return torch.from_numpy(pd.factorize(keys)[0].astype(np.int64))


def agreement(a: np.ndarray, b: np.ndarray, clusters: torch.Tensor, n_bootstrap: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """Kappa for two sets of verdicts, alpha (interval) for scores, with a bootstrap CI."""
    if _verdicts(a) and _verdicts(b):
        found = _with_ci(cohen_kappa, torch.from_numpy(a.astype(np.int64)), torch.from_numpy(b.astype(np.int64)),
                         clusters, n_bootstrap, seed)
        return {"statistic": "cohen_kappa", "scale": "verdicts (0/1)", **found,
                "raw_agreement": float((a == b).mean()) if len(a) else None}
    found = _with_ci(krippendorff_interval, torch.from_numpy(a), torch.from_numpy(b), clusters, n_bootstrap, seed)
    return {"statistic": "krippendorff_alpha_interval", "scale": "scores", **found,
            "mean_abs_difference": float(np.abs(a - b).mean()) if len(a) else None}


def judge_agreement(frames: Sequence[pd.DataFrame], names: Sequence[str], n_bootstrap: int = 1000,
                    seed: int = 0) -> dict[str, Any]:
    """The two runs' judges on the questions both judged, and each run's rules against its judge."""
    a, b = (f.drop_duplicates("id").set_index(f.drop_duplicates("id")["id"].astype(str)) for f in frames[:2])
    for name, frame in zip(names, (a, b)):
        if "judge_score" not in frame.columns:
            raise ValueError(f"{name}: no judge_score column — run it with --judge")
    shared = a.index.intersection(b.index, sort=False)
    sa = pd.to_numeric(a.loc[shared, "judge_score"], errors="coerce").to_numpy(np.float64)
    sb = pd.to_numeric(b.loc[shared, "judge_score"], errors="coerce").to_numpy(np.float64)
    both = ~np.isnan(sa) & ~np.isnan(sb)
    rows = a.loc[shared[both]].reset_index(drop=True)
    out: dict[str, Any] = {"runs": list(names[:2]), "n_shared": int(len(shared)), "n_judged_by_both": int(both.sum()),
                           "judges": agreement(sa[both], sb[both], _cluster_ids(rows), n_bootstrap, seed)
                           if both.any() else None, "rule_vs_judge": {}}
    for name, frame in zip(names, (a, b)):
        if "rule_score" not in frame.columns:
            continue
        rule = pd.to_numeric(frame["rule_score"], errors="coerce").to_numpy(np.float64)
        judge = pd.to_numeric(frame["judge_score"], errors="coerce").to_numpy(np.float64)
        have = ~np.isnan(rule) & ~np.isnan(judge)
        if have.any() and _verdicts(rule[have]) and _verdicts(judge[have]):
            out["rule_vs_judge"][name] = agreement(rule[have], judge[have],
                                                   _cluster_ids(frame[have].reset_index(drop=True)), n_bootstrap, seed)
    return out


def _undefined(found: dict[str, Any]) -> str:
    """Why a statistic has no value: chance agreement is total where every verdict (score) of both
    raters is one and the same, and kappa (alpha) divides by what is left of it."""
    if found["statistic"] == "cohen_kappa":
        raw = found.get("raw_agreement")
        return ("– (undefined: every verdict of both is the same, so chance agreement is 1"
                + (f"; raw agreement {raw:.2f})" if raw is not None else ")"))
    return "– (undefined: every score of both is the same, so no disagreement is expected by chance)"


def agreement_lines(result: dict[str, Any]) -> list[str]:
    """One line for the judges, one per run for its rules against its judge."""
    def text(found: dict[str, Any]) -> str:
        ci = found["ci"]
        interval = f" [{ci['low']:.3f}, {ci['high']:.3f}]" if ci.get("low") is not None else ""
        value = _undefined(found) if found["value"] is None else f"{found['value']:.3f}"
        name = "Cohen's kappa" if found["statistic"] == "cohen_kappa" else "Krippendorff's alpha (interval)"
        return f"{name} {value}{interval} (95% bootstrap CI, n {found['n']})"

    a, b = result["runs"]
    lines = [f"judges of {a} and {b}: " + (text(result["judges"]) if result["judges"] else
                                           "no question judged by both")
             + f"; {result['n_judged_by_both']} of {result['n_shared']} shared questions judged by both"]
    lines += [f"rules vs judge in {name}: {text(found)}" for name, found in result["rule_vs_judge"].items()]
    return lines
