"""Error bars for questions that are not independent (Miller, "Adding Error Bars to Evals", 2024).

The questions of these benchmarks come in clusters — FAMMA's sub-questions share one main
question's images, FinMTM's turns one session, MME-Finance's and FinMME's questions one image —
and an interval that treats them as independent is too narrow. Everything here is a pure tensor
function of per-question values and dense cluster ids (`kernels.segments.factorize`):

- `clustered_se`: the cluster-robust standard error of a mean, equal to statsmodels'
  `OLS(y, ones).fit(cov_type="cluster", cov_kwds={"groups": g}).bse[0]` with its default
  small-sample correction G/(G-1)·(N-1)/(N-K), K = 1 (so the factor is G/(G-1));
- intervals use the t quantile with G − 1 degrees of freedom, not the normal one: with 10–15
  clusters the normal quantile covers only 92–93 % (scripts/coverage_sim.py); a mean of values in
  [0, 1] has its interval clipped to [0, 1];
- `paired_difference`: a variant against its reference on the same questions, with the clustered
  SE of the per-question difference and the minimum detectable effect at 80% power, α = 0.05
  (two-sided);
- `verdict`: what an interval says — significant when it excludes 0, else the mde, and no mde at
  all from fewer than `MIN_CLUSTERS_FOR_POWER` clusters or a zero SE;
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
MDE_FACTOR = Z_95 + Z_POWER_80  # large-G minimum detectable effect = (z_0.975 + z_0.8) · SE_diff ≈ 2.80 · SE
MIN_CLUSTERS_FOR_POWER = 10  # below this the SE itself is too uncertain to size a detectable effect


def t_quantile(p: float, n_clusters: float) -> float:
    """The p quantile of Student's t with G − 1 degrees of freedom (the normal one for G = inf;
    NaN for G < 2): the clustered intervals' multiplier (Cameron & Miller 2015, "A Practitioner's
    Guide to Cluster-Robust Inference", on few clusters)."""
    from scipy.stats import t

    if not math.isfinite(n_clusters):
        return NormalDist().inv_cdf(p)
    return float(t.ppf(p, n_clusters - 1)) if n_clusters >= 2 else math.nan


def mde_factor(n_clusters: float) -> float:
    """(t_0.975 + t_0.8) with G − 1 degrees of freedom: the mde in SEs (2.80 for many clusters)."""
    return t_quantile(0.975, n_clusters) + t_quantile(0.80, n_clusters)


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
    95% interval around the mean with the t(G − 1) quantile of the metric's own G, clipped to
    [0, 1] for a metric whose values lie in [0, 1] (every proportion and 0–1 score)."""
    n_clusters = int(cluster_ids.max()) + 1 if n_clusters is None and len(cluster_ids) else (n_clusters or 0)
    out: dict[str, Any] = {"by": by, "n_clusters": n_clusters, "metrics": {}}
    if not metrics or n_clusters == 0:
        return out
    names = list(metrics)
    values = torch.stack([metrics[name].to(torch.float64) for name in names], dim=1)
    se, se0 = clustered_se(values, cluster_ids, n_clusters), iid_se(values)
    *_, mean, groups, _ = _cluster_moments(values, cluster_ids, n_clusters)
    counted = ~torch.isnan(values)
    unit = ((values >= 0) & (values <= 1) | ~counted).all(0)
    for j, name in enumerate(names):
        s, s0, m = float(se[j]), float(se0[j]), float(mean[j])
        low, high = bounded_interval(m, s, float(groups[j]), (0.0, 1.0) if bool(unit[j]) else None)
        out["metrics"][name] = {"se": _finite(s), "se_iid": _finite(s0),
                                "design_effect": _finite(s * s / (s0 * s0)) if s0 > 0 else None,
                                "ci": {"low": low, "high": high}, "n_clusters": int(groups[j]),
                                "method": "clustered t(G-1)"}
    return out


def bounded_interval(estimate: float, se: float, n_clusters: float,
                     bounds: tuple[float, float] | None = None, level: float = 0.95) -> tuple[float | None, float | None]:
    """estimate ± t_{(1+level)/2, G−1} · se, clipped to `bounds` (a proportion's [0, 1], a
    difference of proportions' [−1, 1]); (None, None) where the SE is unknown."""
    half = t_quantile(0.5 + level / 2, n_clusters) * se
    if not math.isfinite(half):
        return None, None
    low, high = estimate - half, estimate + half
    if bounds is not None:
        low, high = min(max(low, bounds[0]), bounds[1]), min(max(high, bounds[0]), bounds[1])
    return _finite(low), _finite(high)


def paired_difference(variant: torch.Tensor, reference: torch.Tensor, cluster_ids: torch.Tensor,
                      n_clusters: int | None = None) -> dict[str, Any]:
    """A variant against its reference on the same questions (NaN in either: not counted): the mean
    difference, its clustered SE, its 95% interval (t with G − 1 degrees of freedom, G the clusters
    holding a counted question; clipped to [−1, 1] for 0–1 scores), `significant` (the interval
    excludes 0, two-sided α = 0.05) and `mde`, the smallest true difference this set detects with
    80% power — a design quantity, never a threshold for the observed difference; None where the
    set cannot estimate it (a zero SE, fewer than MIN_CLUSTERS_FOR_POWER clusters)."""
    diff = variant.to(torch.float64) - reference.to(torch.float64)
    counted = ~torch.isnan(diff)
    n = int(counted.sum())
    if n == 0:
        return {"diff": None, "se_diff": None, "ci_diff": {"low": None, "high": None}, "mde": None,
                "significant": None, "n": 0, "n_clusters_counted": 0}
    n_clusters = int(cluster_ids.max()) + 1 if n_clusters is None else n_clusters
    d = float(diff[counted].mean())
    se = float(clustered_se(diff, cluster_ids, n_clusters))
    groups = int(torch.unique(cluster_ids[counted]).numel())
    unit = bool(((variant[counted] >= 0) & (variant[counted] <= 1) & (reference[counted] >= 0)
                 & (reference[counted] <= 1)).all())
    low, high = bounded_interval(d, se, groups, (-1.0, 1.0) if unit else None)
    powered = math.isfinite(se) and se > 0 and groups >= MIN_CLUSTERS_FOR_POWER
    return {"diff": d, "se_diff": _finite(se), "ci_diff": {"low": low, "high": high},
            "significant": None if low is None else bool(low > 0 or high < 0),
            "mde": _finite(mde_factor(groups) * se) if powered else None, "n": n, "n_clusters_counted": groups}


def verdict(ci: Any, mde: float | None, scale: float = 100.0, unit: str = "points") -> str:
    """What a difference's interval says, in words: 'significant at α = 0.05 (two-sided)' when it
    excludes 0; otherwise 'not significant; this set detects ≥ mde with 80 % power', or, without
    an mde (zero SE, too few clusters), that the set cannot estimate its power."""
    ci = ci or {}
    if ci.get("low") is None or ci.get("high") is None:
        return "no interval (fewer than two clusters)"
    if ci["low"] > 0 or ci["high"] < 0:
        return "significant at α = 0.05 (two-sided)"
    if mde is None or not mde > 0:
        return (f"not significant; this set cannot estimate its power (zero SE or fewer than "
                f"{MIN_CLUSTERS_FOR_POWER} clusters)")
    return f"not significant; this set detects ≥ {scale * mde:.1f} {unit} with 80 % power"



def cluster_resample_weights(cluster_ids: torch.Tensor, n_clusters: int, n_resamples: int,
                             generator: torch.Generator) -> torch.Tensor:
    """[B, N] bootstrap weights that draw G clusters with replacement: a question's weight is how
    often its cluster was drawn. Multiply into per-question values as any bootstrap count."""
    draws = torch.randint(0, n_clusters, (n_resamples, n_clusters), generator=generator)
    counts = torch.zeros(n_resamples, n_clusters, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(n_resamples, n_clusters, dtype=torch.float64))
    return counts[:, cluster_ids]


def repeated_sampling(answers: torch.Tensor, correct: torch.Tensor, parsed: torch.Tensor | None = None,
                      cluster_ids: torch.Tensor | None = None) -> dict[str, Any]:
    """K sampled answers per question. `answers`: int64 [N, K] answer codes (equal code = equal
    answer); `correct`: float [N, K] each sample's score; `parsed`: bool [N, K], False for a sample
    whose rule read no answer (all parsed when None); `cluster_ids`: dense int64 [N] (each question
    its own cluster when None).

    `mean`: the mean score over all samples; `se`: the cluster-robust SE of the N per-question mean
    scores — averaging K samples per question removes the within-question sampling noise from
    the between-question variance (Miller 2024, arXiv:2411.00640, on resampling; `se_iid` the same without
    clusters); `maj_at_k`: the score of each question's most frequent parsed answer (ties: the
    earliest sample; no parsed answer: sample 0's score); `pass_at_k`: the best sample's score;
    `agreement`: over questions with a parsed answer, the share of the parsed samples that give the
    modal one — an unparsed sample is no answer, so never a vote (`n_unparsed` samples,
    `n_no_parsed` questions without any)."""
    n, k = answers.shape
    correct = correct.to(torch.float64)
    parsed = torch.ones(n, k, dtype=torch.bool) if parsed is None else parsed.to(torch.bool)
    same = (answers[:, :, None] == answers[:, None, :]) & parsed[:, None, :] & parsed[:, :, None]  # [N, K, K]
    votes = same.sum(2)  # how many parsed samples agree with parsed sample j (0 for an unparsed one)
    first_max = torch.argmax(votes * (k + 1) - torch.arange(k), dim=1)  # most votes, earliest sample
    n_parsed = parsed.sum(1)
    has_parsed = n_parsed > 0
    per_question = correct.mean(1)
    clusters = torch.arange(n) if cluster_ids is None else cluster_ids
    share = votes.max(1).values.double() / n_parsed.clamp(min=1)
    se = float(clustered_se(per_question, clusters)) if n > 1 else math.nan
    mean = float(per_question.mean()) if n else math.nan
    unit = bool(((correct >= 0) & (correct <= 1)).all())
    low, high = bounded_interval(mean, se, int(torch.unique(clusters).numel()), (0.0, 1.0) if unit else None)
    return {"k": k, "n": n, "mean": _finite(mean), "se": _finite(se), "ci": {"low": low, "high": high},
            "se_iid": _finite(float(iid_se(per_question))) if n > 1 else None,
            "maj_at_k": float(correct.gather(1, first_max[:, None]).mean()) if n else None,
            "pass_at_k": float(correct.max(1).values.mean()) if n else None,
            "agreement": float(share[has_parsed].mean()) if bool(has_parsed.any()) else None,
            "n_unparsed": int((~parsed).sum()), "n_no_parsed": int((~has_parsed).sum())}
