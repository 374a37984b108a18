"""Error bars for questions that are not independent (Miller, "Adding Error Bars to Evals", 2024).

The questions of these benchmarks come in clusters — FAMMA's sub-questions share one main
question's images, FinMTM's turns one session, MME-Finance's and FinMME's questions one image —
and an interval that treats them as independent is too narrow. Everything here is a pure tensor
function of per-question values and dense cluster ids (`kernels.segments.factorize`):

- `clustered_se`: the cluster-robust standard error of a mean, equal to statsmodels'
  `OLS(y, ones).fit(cov_type="cluster", cov_kwds={"groups": g}).bse[0]` with its default
  small-sample correction G/(G-1)·(N-1)/(N-K), K = 1;
- `paired_difference`: a variant against its reference on the same questions, with the clustered
  SE of the per-question difference and the minimum detectable effect at 80% power, α = 0.05;
- `cluster_resample_weights`: bootstrap weights that resample whole clusters (for non-linear
  headlines such as FinScore);
- `repeated_sampling`: K answers per question (mean, SE, maj@k, pass@k, agreement).

Values are float tensors [N] or [N, M] (M metrics at once); NaN marks a question a metric does not
count (each metric has its own N and G). Every reduction is one `index_add_` over all questions.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Mapping

import torch

Z_95 = NormalDist().inv_cdf(0.975)  # two-sided 95%
Z_POWER_80 = NormalDist().inv_cdf(0.80)  # 80% power
MDE_FACTOR = Z_95 + Z_POWER_80  # minimum detectable effect = (z_0.975 + z_0.8) · SE_diff ≈ 2.80 · SE


def _as_matrix(values: torch.Tensor) -> torch.Tensor:
    values = values.to(torch.float64)
    return values[:, None] if values.dim() == 1 else values


def _squeeze_like(out: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return out[0] if values.dim() == 1 else out


def _cluster_moments(values: torch.Tensor, cluster_ids: torch.Tensor, n_clusters: int):
    """Per metric: N, the mean, the number of clusters holding a counted question, and the
    per-cluster sums of residuals [G, M]."""
    y = _as_matrix(values)
    counted = ~torch.isnan(y)
    n = counted.sum(0).to(torch.float64)
    mean = torch.where(counted, y, 0.0).sum(0) / n.clamp(min=1)
    residual = torch.where(counted, y - mean, 0.0)
    sums = torch.zeros(n_clusters, y.shape[1], dtype=torch.float64).index_add_(0, cluster_ids, residual)
    members = torch.zeros(n_clusters, y.shape[1], dtype=torch.float64).index_add_(0, cluster_ids, counted.double())
    return y, counted, n, mean, (members > 0).sum(0).to(torch.float64), sums


def clustered_se(values: torch.Tensor, cluster_ids: torch.Tensor, n_clusters: int | None = None) -> torch.Tensor:
    """The cluster-robust SE of each metric's mean ([N] → scalar, [N, M] → [M]); NaN where a
    metric has fewer than two clusters. `cluster_ids`: int64 [N], dense 0..G-1."""
    n_clusters = int(cluster_ids.max()) + 1 if n_clusters is None else n_clusters
    _, _, n, _, g, sums = _cluster_moments(values, cluster_ids, n_clusters)
    correction = g / (g - 1)  # (N-1)/(N-K) is 1 for K = 1
    se = torch.sqrt(correction * (sums ** 2).sum(0)) / n
    return _squeeze_like(torch.where(g > 1, se, torch.nan), values)


def iid_se(values: torch.Tensor) -> torch.Tensor:
    """The ordinary SE of each metric's mean: sample standard deviation (ddof 1) / sqrt(N)."""
    y = _as_matrix(values)
    counted = ~torch.isnan(y)
    n = counted.sum(0).to(torch.float64)
    mean = torch.where(counted, y, 0.0).sum(0) / n.clamp(min=1)
    variance = (torch.where(counted, y - mean, 0.0) ** 2).sum(0) / (n - 1)
    return _squeeze_like(torch.where(n > 1, torch.sqrt(variance / n), torch.nan), values)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def clustered_summary(metrics: Mapping[str, torch.Tensor], cluster_ids: torch.Tensor, by: str,
                      n_clusters: int | None = None) -> dict[str, Any]:
    """results.json's `scores.clustered`: for every mean-type metric its clustered SE, the iid SE,
    the design effect (SE² ratio: how many times the variance iid sampling would claim) and a
    normal 95% interval around the mean."""
    n_clusters = int(cluster_ids.max()) + 1 if n_clusters is None and len(cluster_ids) else (n_clusters or 0)
    out: dict[str, Any] = {"by": by, "n_clusters": n_clusters, "metrics": {}}
    if not metrics or n_clusters == 0:
        return out
    names = list(metrics)
    values = torch.stack([metrics[name].to(torch.float64) for name in names], dim=1)
    se, se0 = clustered_se(values, cluster_ids, n_clusters), iid_se(values)
    counted = ~torch.isnan(values)
    mean = torch.where(counted, values, 0.0).sum(0) / counted.sum(0).clamp(min=1)
    for j, name in enumerate(names):
        s, s0, m = float(se[j]), float(se0[j]), float(mean[j])
        out["metrics"][name] = {"se": _finite(s), "se_iid": _finite(s0),
                                "design_effect": _finite(s * s / (s0 * s0)) if s0 > 0 else None,
                                "ci": {"low": _finite(m - Z_95 * s), "high": _finite(m + Z_95 * s)}}
    return out


def paired_difference(variant: torch.Tensor, reference: torch.Tensor, cluster_ids: torch.Tensor,
                      n_clusters: int | None = None) -> dict[str, Any]:
    """A variant against its reference on the same questions (NaN in either: not counted): the mean
    difference, its clustered SE, a 95% interval and `mde`, the smallest true difference this set
    detects with 80% power at α = 0.05 — a study whose |diff| is below its mde cannot tell."""
    diff = variant.to(torch.float64) - reference.to(torch.float64)
    counted = ~torch.isnan(diff)
    n = int(counted.sum())
    if n == 0:
        return {"diff": None, "se_diff": None, "ci_diff": {"low": None, "high": None}, "mde": None, "n": 0}
    d = float(diff[counted].mean())
    se = float(clustered_se(diff, cluster_ids, n_clusters))
    return {"diff": d, "se_diff": _finite(se), "ci_diff": {"low": _finite(d - Z_95 * se), "high": _finite(d + Z_95 * se)},
            "mde": _finite(MDE_FACTOR * se), "n": n}


def cluster_resample_weights(cluster_ids: torch.Tensor, n_clusters: int, n_resamples: int,
                             generator: torch.Generator) -> torch.Tensor:
    """[B, N] bootstrap weights that draw G clusters with replacement: a question's weight is how
    often its cluster was drawn. Multiply into per-question values as any bootstrap count."""
    draws = torch.randint(0, n_clusters, (n_resamples, n_clusters), generator=generator)
    counts = torch.zeros(n_resamples, n_clusters, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(n_resamples, n_clusters, dtype=torch.float64))
    return counts[:, cluster_ids]


def repeated_sampling(answers: torch.Tensor, correct: torch.Tensor) -> dict[str, Any]:
    """K sampled answers per question. `answers`: int64 [N, K] answer codes (equal code = equal
    answer); `correct`: float [N, K] each sample's score. `mean`: the mean score over all samples;
    `se`: the SE of the per-question mean score, which holds the within-question variance (Miller
    §4: Var = Var(x̄_i)/N); `maj_at_k`: the score of each question's most frequent answer (ties: the
    earliest sample); `pass_at_k`: the best sample's score (any sample correct); `agreement`: the mean share of samples that
    give the modal answer."""
    n, k = answers.shape
    correct = correct.to(torch.float64)
    same = answers[:, :, None] == answers[:, None, :]  # [N, K, K]
    votes = same.sum(2)  # how many samples agree with sample j
    first_max = torch.argmax(votes * (k + 1) - torch.arange(k), dim=1)  # most votes, earliest sample
    per_question = correct.mean(1)
    return {"k": k, "n": n, "mean": float(per_question.mean()) if n else None,
            "se": _finite(float(iid_se(per_question))) if n > 1 else None,
            "maj_at_k": float(correct.gather(1, first_max[:, None]).mean()) if n else None,
            "pass_at_k": float(correct.max(1).values.mean()) if n else None,
            "agreement": float((votes.max(1).values.double() / k).mean()) if n else None}
