"""Statistics over scored questions: point estimates, bootstrap CIs, paired comparisons, calibration.

Every benchmark rule (scoring/<name>.py) turns a samples table into a `ScoreTable`:
per-question value channels [N, C], a segment id per question (the domain, for FinMME) and a
`statistic` mapping segment sums [..., S, C] to the headline numbers. Point estimates, bootstrap
resamples, paired differences and abstention curves all evaluate that same function on different
segment sums, so the headline number and its CI can never be computed two different ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import ACCURACY
from finbench.core.types import OPTION_LETTERS, SINGLE
from finbench.kernels.bitmask import letters_to_mask, single_bit_index
from finbench.kernels.bootstrap import bootstrap_segment_sums, cluster_bootstrap_segment_sums, percentile_ci
from finbench.kernels.segments import factorize, segment_sum, weighted_segment_sums

Statistic = Callable[[torch.Tensor], dict[str, torch.Tensor]]
_STR = np.frompyfunc(str, 1, 1)


# ---- the common currency of the benchmark rules -----------------------------------------------
@dataclass(frozen=True)
class ScoreTable:
    """Scored questions of one run, ready for statistics.

    `correct` is the binary per-question correctness (McNemar, flips, breakdown accuracy);
    `score` the per-question score the rule averages (== correct for binary rules); `values`
    [N, C] the channels `statistic` needs; `segments` [N] ids in 0..n_segments-1."""

    ids: np.ndarray
    correct: torch.Tensor
    score: torch.Tensor
    values: torch.Tensor
    segments: torch.Tensor
    n_segments: int
    statistic: Statistic
    headline: tuple[str, ...]
    primary: str
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    def subset(self, positions: torch.Tensor | np.ndarray) -> "ScoreTable":
        """The same table restricted to (and reordered by) `positions`."""
        pos = torch.as_tensor(np.asarray(positions), dtype=torch.int64, device=self.values.device)
        return ScoreTable(ids=self.ids[pos.cpu().numpy()], correct=self.correct[pos], score=self.score[pos],
                          values=self.values[pos], segments=self.segments[pos], n_segments=self.n_segments,
                          statistic=self.statistic, headline=self.headline, primary=self.primary, info=self.info)


def point_estimates(table: ScoreTable) -> dict[str, float]:
    """The statistic on the full sample."""
    sums = segment_sum(table.values, table.segments, table.n_segments)[None]
    return {k: float(v[0]) for k, v in table.statistic(sums).items()}


def ci_dict(low: float, high: float, level: float) -> dict[str, float | None]:
    return {"low": _finite_or_none(low), "high": _finite_or_none(high), "level": level}


def bootstrap_cis(table: ScoreTable, n_bootstrap: int, seed: int = 0, level: float = 0.95, method: str = "auto",
                  clusters: tuple[torch.Tensor, int] | None = None) -> dict[str, dict[str, float | None]]:
    """Seeded percentile bootstrap CI of every statistic: questions (or, given `clusters` = (dense
    ids [N], G), whole clusters) are resampled with replacement and the whole statistic (domain
    normalisation, P_H, ...) is recomputed inside each resample."""
    if clusters is not None:
        sums = cluster_bootstrap_segment_sums(table.values, table.segments, table.n_segments, clusters[0],
                                              clusters[1], n_bootstrap, seed=seed)
    else:
        sums = bootstrap_segment_sums(table.values, table.segments, table.n_segments, n_bootstrap,
                                      seed=seed, method=method)
    samples = table.statistic(sums)
    return {k: ci_dict(*percentile_ci(v, level), level) for k, v in samples.items()}


def paired_bootstrap(a: ScoreTable, b: ScoreTable, n_bootstrap: int, seed: int = 0, level: float = 0.95,
                     method: str = "auto", clusters: tuple[torch.Tensor, int] | None = None
                     ) -> dict[str, dict[str, float | None]]:
    """Percentile CI of statistic(b) − statistic(a) when the SAME resampled questions (or, given
    `clusters` = (dense ids [N], G), whole clusters) feed both runs (the tables must be aligned
    row by row; segments are taken from `a`)."""
    if a.n != b.n:
        raise ValueError("paired bootstrap needs aligned tables of equal length")
    c = a.values.shape[1]
    joint = torch.cat([a.values, b.values.to(a.values.device)], dim=1)
    if clusters is not None:
        sums = cluster_bootstrap_segment_sums(joint, a.segments, a.n_segments, clusters[0].to(joint.device),
                                              clusters[1], n_bootstrap, seed=seed)
    else:
        sums = bootstrap_segment_sums(joint, a.segments, a.n_segments, n_bootstrap, seed=seed, method=method)
    stat_a, stat_b = a.statistic(sums[..., :c]), b.statistic(sums[..., c:])
    return {k: ci_dict(*percentile_ci(stat_b[k] - stat_a[k], level), level) for k in stat_a if k in stat_b}


def wilson_interval(successes: torch.Tensor, n: torch.Tensor, level: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Wilson score interval (Wilson, 1927) of proportions successes/n, elementwise; NaN where n = 0.
    Used for breakdown groups, whose accuracy is a plain proportion of 0/1 answers."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2)
    n = n.to(torch.float64)
    p = successes.to(torch.float64) / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * torch.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half).clamp(0, 1), (centre + half).clamp(0, 1)


# ---- paired tests -------------------------------------------------------------------------------
def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact (binomial) McNemar p-value, two-sided: under H0 the b + c discordant questions split
    Binomial(b + c, 1/2) — `scipy.stats.binomtest(b, b + c).pvalue`."""
    from scipy.stats import binomtest

    n = int(b) + int(c)
    return 1.0 if n == 0 else float(binomtest(int(b), n, 0.5).pvalue)


def mcnemar(correct_a: torch.Tensor, correct_b: torch.Tensor) -> dict[str, float | int]:
    """Discordant counts and exact p: `a_only` = right in A only, `b_only` = right in B only."""
    a = correct_a.to(torch.bool)
    bb = correct_b.to(torch.bool).to(a.device)
    a_only, b_only = int((a & ~bb).sum()), int((~a & bb).sum())
    return {"a_only": a_only, "b_only": b_only, "p": mcnemar_exact_p(a_only, b_only)}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control), in input order
    (`statsmodels.stats.multitest.multipletests(method="holm")`)."""
    if len(pvalues) == 0:
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(x) for x in multipletests(list(pvalues), method="holm")[1]]


def flipped_ids(table_a: ScoreTable, table_b: ScoreTable) -> dict[str, list[str]]:
    """Questions whose correctness differs: `gained` (wrong in A, right in B), `lost` (the reverse)."""
    a = table_a.correct.to(torch.bool).cpu().numpy()
    b = table_b.correct.to(torch.bool).cpu().numpy()
    return {"gained": [str(i) for i in table_a.ids[~a & b]], "lost": [str(i) for i in table_a.ids[a & ~b]]}


# ---- calibration ----------------------------------------------------------------------------------
def bin_index(confidence: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Equal-width bins (lo, hi] on [0, 1]; confidence 0 goes to the first bin."""
    return (torch.ceil(confidence * n_bins) - 1).clamp(0, n_bins - 1).to(torch.int64)


def reliability_bins(confidence: torch.Tensor, hit: torch.Tensor, n_bins: int = 10) -> list[dict[str, Any]]:
    """Per bin: range, count, mean confidence, accuracy (None when the bin is empty)."""
    idx = bin_index(confidence, n_bins)
    n = torch.bincount(idx, minlength=n_bins).to(torch.float64)
    conf = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, confidence.to(torch.float64))
    acc = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, hit.to(torch.float64))
    return [{"low": i / n_bins, "high": (i + 1) / n_bins, "n": int(n[i]),
             "confidence": float(conf[i] / n[i]) if n[i] > 0 else None,
             ACCURACY.key: float(acc[i] / n[i]) if n[i] > 0 else None} for i in range(n_bins)]


def expected_calibration_error(confidence: torch.Tensor, hit: torch.Tensor, n_bins: int = 10) -> float:
    """ECE = Σ_b (n_b / N)·|accuracy_b − confidence_b| over equal-width bins (Guo et al., 2017)."""
    n = confidence.numel()
    if n == 0:
        return float("nan")
    idx = bin_index(confidence, n_bins)
    gap = torch.zeros(n_bins, dtype=torch.float64).index_add_(
        0, idx, confidence.to(torch.float64) - hit.to(torch.float64))
    return float(gap.abs().sum() / n)


def brier_score(probs: torch.Tensor, target: torch.Tensor) -> float:
    """Multi-class Brier score (Brier, 1950): mean over questions of Σ_k (p_k − 1[k = gold])²."""
    if probs.shape[0] == 0:
        return float("nan")
    onehot = torch.zeros_like(probs, dtype=torch.float64)
    onehot[torch.arange(probs.shape[0]), target] = 1.0
    return float(((probs.to(torch.float64) - onehot) ** 2).sum(1).mean())


def calibration(probs: torch.Tensor, target: torch.Tensor, n_bins: int = 10) -> dict[str, Any]:
    """Calibration of the top-1 option: confidence = max probability, hit = argmax is the gold.
    `probs` [N, K] rows summing to 1 (zero-padded past each question's options), `target` [N]."""
    confidence, predicted = probs.max(dim=1)
    hit = predicted == target
    return {"n": int(probs.shape[0]), "n_bins": n_bins,
            ACCURACY.key: float(hit.to(torch.float64).mean()) if probs.shape[0] else None,
            "mean_confidence": float(confidence.mean()) if probs.shape[0] else None,
            "ece": _finite_or_none(expected_calibration_error(confidence, hit, n_bins)),
            "brier": _finite_or_none(brier_score(probs, target)),
            "bins": reliability_bins(confidence, hit, n_bins)}


def selective_curve(table: ScoreTable, confidence: torch.Tensor,
                    thresholds: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """Answer a question only when its confidence exceeds τ (τ = 0 answers everything);
    questions without a confidence (NaN: errors, answers without probabilities) abstain at every
    τ > 0, so coverage falls to 0 at τ = 1. Per τ: coverage (answered / all), and the benchmark's
    statistic (accuracy, FinScore, ...) over the answered questions only (None when none are)."""
    if thresholds is None:
        thresholds = [round(0.05 * i, 2) for i in range(21)]
    tau = torch.as_tensor(list(thresholds), dtype=torch.float64, device=table.values.device)
    conf = confidence.to(torch.float64).to(table.values.device)
    answered = (tau[:, None] <= 0) | (torch.nan_to_num(conf, nan=-1.0)[None, :] > tau[:, None])  # [T, N]
    sums = weighted_segment_sums(answered.to(torch.float64), table.values, table.segments, table.n_segments)
    stats = table.statistic(sums)
    n_answered = answered.sum(1)
    rows = []
    for t in range(len(thresholds)):
        row: dict[str, Any] = {"tau": float(thresholds[t]), "n_answered": int(n_answered[t]),
                               "coverage": float(n_answered[t]) / table.n if table.n else None}
        row.update({k: _finite_or_none(float(v[t])) if n_answered[t] > 0 else None for k, v in stats.items()})
        rows.append(row)
    return rows


def answer_calibration(confidence: torch.Tensor, hit: torch.Tensor, n_bins: int = 10) -> dict[str, Any]:
    """Calibration of whole answers: `confidence` [N] the probability the decoder gave its answer
    (NaN rows are left out), `hit` [N] whether the answer was right. Brier = mean (conf − hit)²."""
    known = ~torch.isnan(confidence)
    conf, hit = confidence[known].to(torch.float64), hit[known].to(torch.float64)
    n = int(conf.numel())
    return {"n": n, "n_bins": n_bins,
            ACCURACY.key: float(hit.mean()) if n else None,
            "mean_confidence": float(conf.mean()) if n else None,
            "ece": _finite_or_none(expected_calibration_error(conf, hit, n_bins)),
            "brier": _finite_or_none(float(((conf - hit) ** 2).mean())) if n else None,
            "bins": reliability_bins(conf, hit, n_bins)}


def answer_confidence_scores(table: ScoreTable, rows: pd.DataFrame,
                             thresholds: Sequence[float] | None = None) -> dict[str, Any]:
    """Reliability diagram and selective-prediction curve from the `confidence` column (the
    decoder's probability of its own answer, every kind), with the same confidence in both.
    `rows` are the table's rows in table order. Calibration uses the answers that have a
    confidence; the selective curve covers every scored question (those without one abstain)."""
    confidence = torch.from_numpy(float_column(rows, "confidence"))
    kinds = str_column(rows, "kind")
    known = ~np.isnan(confidence.numpy())
    if not known.any():
        return {}
    by_kind = {str(k): int(n) for k, n in zip(*np.unique(kinds[known], return_counts=True))}
    calib = answer_calibration(confidence, table.correct.cpu(), n_bins=10)
    calib["items"] = "answers with a confidence: " + ", ".join(f"{n} {k}" for k, n in by_kind.items())
    calib["n_by_kind"] = by_kind
    calib["confidence"] = "probability of the decoded answer (single: chosen option; multi/numerical: product of steps)"
    return {"calibration": calib,
            "selective": selective_curve(table, confidence, thresholds),
            "selective_items": f"all {table.n} scored questions; {int((~known).sum())} without a confidence "
                               "(errors, free-text answers) abstain at every τ > 0"}


# ---- distribution shift between two runs -------------------------------------------------------------
def distribution_shift(p_ref: torch.Tensor, p_var: torch.Tensor, gold: torch.Tensor,
                       floor: float = 1e-12) -> dict[str, torch.Tensor]:
    """Per question, between a reference and a variant run's option distributions ([N, K], rows
    summing to 1, zero-padded past each question's options, same questions in the same order):
    `kl` = KL(ref ‖ var) = Σ_k p_ref·(log p_ref − log p_var) in nats (0·log 0 = 0; p_var is floored
    at `floor` so a hard zero gives a large finite value, not inf); `agree` = same top-1 option;
    `gold_shift` = p_var[gold] − p_ref[gold] (NaN where `gold` [N] is −1)."""
    ref, var = p_ref.to(torch.float64), p_var.to(torch.float64)
    terms = torch.where(ref > 0, ref * (torch.log(ref.clamp(min=floor)) - torch.log(var.clamp(min=floor))),
                        torch.zeros_like(ref))
    kl = terms.sum(1)
    agree = ref.argmax(1) == var.argmax(1)
    has_gold = gold >= 0
    index = gold.clamp(min=0)[:, None]
    shift = torch.where(has_gold, (var.gather(1, index) - ref.gather(1, index)).squeeze(1),
                        torch.full_like(kl, math.nan))
    return {"kl": kl, "agree": agree, "gold_shift": shift}


def segment_means(values: torch.Tensor, segments: torch.Tensor, n_segments: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean of `values` [N] per segment ignoring NaN, count of non-NaN per segment), one pass."""
    known = ~torch.isnan(values)
    seg = segments[known]
    counts = torch.bincount(seg, minlength=n_segments).to(torch.float64)
    sums = torch.zeros(n_segments, dtype=torch.float64).index_add_(0, seg, values[known].to(torch.float64))
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan)), counts


# ---- reading samples tables (shared by the benchmark rules) ----------------------------------------
def str_column(df: pd.DataFrame, name: str, default: str = "") -> np.ndarray:
    """A column as a numpy object array of str; missing column or None/NaN → `default`."""
    if name not in df.columns:
        return np.full(len(df), default, dtype=object)
    values = df[name].to_numpy(dtype=object)
    # str() of each as a Python string: pandas' Arrow-backed `astype(str)` refuses text UTF-8 cannot encode
    return _STR(np.where(pd.isna(values), default, values)).astype(object)


def float_column(df: pd.DataFrame, name: str) -> np.ndarray:
    """A column as float64 (unparseable or missing → NaN)."""
    if name not in df.columns:
        return np.full(len(df), np.nan)
    return np.array(pd.to_numeric(df[name], errors="coerce"), dtype=np.float64)  # writable copy


def error_mask(df: pd.DataFrame) -> np.ndarray:
    """True where the row carries a per-sample error (those count as wrong, never disappear); an
    error of any text, "\x00" too, is one (Python lengths, not numpy's fixed-width strings)."""
    if not len(df):
        return np.zeros(0, bool)
    return pd.Series(str_column(df, "error"), dtype=object).str.len().to_numpy(dtype=np.int64) > 0


def letters_read(df: pd.DataFrame) -> np.ndarray:
    """True where the row's `answer` is option letters the letter decoder read (a choice request),
    not text for the benchmark's rule to read: the `letters` column (runs and `score --predictions`
    write it), else — a run written before it existed — the rows with option probabilities."""
    if "letters" in df.columns:
        return np.array(df["letters"].astype(object).where(df["letters"].notna(), False), dtype=bool)
    if "option_probs" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return (option_prob_matrix(df["option_probs"])[1] > 0).numpy()


def first_present(df: pd.DataFrame, names: Sequence[str]) -> str | None:
    return next((n for n in names if n in df.columns), None)


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def option_prob_matrix(values: pd.Series) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged option-probability lists → (zero-padded [N, K] float64, lengths [N]). Arrow does the
    flattening; None / NaN / empty entries have length 0."""
    import pyarrow as pa

    cleaned = [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values]
    try:
        arr = pa.array(cleaned, type=pa.list_(pa.float64()), from_pandas=True)
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        flat = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        lists = [list(map(float, v)) if v is not None else [] for v in cleaned]
        offsets = np.concatenate([[0], np.cumsum([len(v) for v in lists])]).astype(np.int64)
        flat = np.array([x for v in lists for x in v], dtype=np.float64)
    lengths = np.diff(offsets)
    n, k = len(lengths), int(lengths.max()) if len(lengths) else 0
    probs = np.zeros((n, k), dtype=np.float64)
    if flat.size:
        rows = np.repeat(np.arange(n), lengths)
        cols = np.arange(flat.size) - np.repeat(offsets[:-1], lengths)
        probs[rows, cols] = flat
    return torch.from_numpy(probs), torch.from_numpy(lengths)


def distribution_comparison(dfs: Sequence[pd.DataFrame], names: Sequence[str], group: str = "domain",
                            floor: float = 1e-12) -> dict[str, Any]:
    """Option-distribution shift of every run against the first, from `option_probs` alone:
    mean KL(reference ‖ run), top-1 agreement and mean shift of the gold option's probability,
    overall and per `group` value. Items: single-choice questions present in both runs, without
    an error in either, with option probabilities of the same length in both (renormalised)."""
    ref = dfs[0].assign(_pos=np.arange(len(dfs[0])))
    out: dict[str, Any] = {"reference": names[0], "group": group, "floor": floor, "units": "KL in nats",
                           "items": "single-choice items with option probabilities in both runs, no error",
                           "runs": {}}
    for name, df in zip(names[1:], dfs[1:]):
        merged = ref.merge(df.assign(_pos=np.arange(len(df))), on="id", suffixes=("_ref", "_var"))
        p_ref, n_ref = option_prob_matrix(merged["option_probs_ref"])
        p_var, n_var = option_prob_matrix(merged["option_probs_var"])
        width = max(p_ref.shape[1], p_var.shape[1], 1)  # official runs store no option probabilities
        p_ref = torch.nn.functional.pad(p_ref, (0, width - p_ref.shape[1]))
        p_var = torch.nn.functional.pad(p_var, (0, width - p_var.shape[1]))
        no_error = ~torch.from_numpy(error_mask(merged.rename(columns={"error_ref": "error"}))) \
            & ~torch.from_numpy(error_mask(merged.rename(columns={"error_var": "error"})))
        usable = (torch.from_numpy(str_column(merged, "kind_ref") == SINGLE) & (n_ref > 0) & (n_ref == n_var)
                  & no_error & (p_ref.sum(1) > 0) & (p_var.sum(1) > 0))
        p_ref = p_ref[usable] / p_ref[usable].sum(1, keepdim=True)
        p_var = p_var[usable] / p_var[usable].sum(1, keepdim=True)
        kept = merged[usable.numpy()]
        gold_letters = str_column(kept, "gold_ref")
        gold = single_bit_index(letters_to_mask(gold_letters, OPTION_LETTERS, casefold=False))
        gold = torch.where((torch.from_numpy(np.array([len(g) for g in gold_letters], dtype=np.int64)) == 1)
                           & (gold < width), gold, torch.full_like(gold, -1))
        shift = distribution_shift(p_ref, p_var, gold, floor)
        entry: dict[str, Any] = {"n": int(usable.sum()), **_shift_summary(shift)}
        column = f"{group}_ref"
        if column in kept.columns and len(kept):
            codes, labels = factorize(kept[column].astype(object))
            codes = torch.where(codes < 0, torch.full_like(codes, len(labels)), codes)
            labels = [str(v) for v in labels] + ["(missing)"]
            means = {k: segment_means(v.to(torch.float64), codes, len(labels))
                     for k, v in shift.items()}
            entry["by_group"] = {label: {"n": int(means["kl"][1][j]), "kl": _finite_or_none(float(means["kl"][0][j])),
                                         "agreement": _finite_or_none(float(means["agree"][0][j])),
                                         "gold_shift": _finite_or_none(float(means["gold_shift"][0][j]))}
                                 for j, label in enumerate(labels) if means["kl"][1][j] > 0}
        out["runs"][name] = entry
    return out


def _shift_summary(shift: dict[str, torch.Tensor]) -> dict[str, float | None]:
    known_gold = ~torch.isnan(shift["gold_shift"])
    n = shift["kl"].numel()
    return {"kl_mean": _finite_or_none(float(shift["kl"].mean())) if n else None,
            "kl_max": _finite_or_none(float(shift["kl"].max())) if n else None,
            "agreement": float(shift["agree"].to(torch.float64).mean()) if n else None,
            "gold_shift_mean": _finite_or_none(float(shift["gold_shift"][known_gold].mean()))
            if bool(known_gold.any()) else None}


# ---- quantization studies ---------------------------------------------------------------------------
def domain_sensitivity(correct: torch.Tensor, domains: Sequence[Any], names: Sequence[str]) -> dict[str, Any]:
    """Which domains lose most: `correct` [R, N] (0/1, the same N questions in every run, the first
    run the reference), `domains` [N] labels. Per domain: n, each run's accuracy, each variant's
    change against the reference; domains ordered by their largest loss in any variant (first =
    most sensitive). One segment pass for all runs."""
    codes, labels = factorize(pd.Series(list(domains), dtype=object).astype(str))
    n_groups = len(labels)
    counts = torch.bincount(codes, minlength=n_groups).to(torch.float64)
    values = correct.to(torch.float64)
    sums = torch.zeros(values.shape[0], n_groups, dtype=torch.float64).index_add_(1, codes, values)
    accuracy = sums / counts.clamp(min=1)  # [R, G]
    delta = accuracy[1:] - accuracy[:1]  # [R-1, G]
    worst = delta.min(dim=0).values if delta.shape[0] else torch.zeros(n_groups, dtype=torch.float64)
    order = torch.argsort(worst, stable=True).tolist()
    rows = [{"domain": str(labels[g]), "n": int(counts[g]),
             ACCURACY.key: {name: float(accuracy[r, g]) for r, name in enumerate(names)},
             "delta": {name: float(delta[r - 1, g]) for r, name in enumerate(names) if r > 0},
             "worst_delta": float(worst[g])} for g in order if counts[g] > 0]
    return {"reference": names[0], "n": int(values.shape[1]), "domains": rows,
            "meaning": "accuracy per domain on the questions every run shares; delta = variant − reference; "
                       "ordered by the largest loss in any variant"}
