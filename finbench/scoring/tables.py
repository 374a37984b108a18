"""The scoring API: the benchmark dispatch (`build_table`), breakdowns over metadata columns,
calibration from option probabilities, `score_samples`, `per_question_correct` and `compare_runs`.
`finbench.scoring` hands these names on; see its docstring for the contract."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks import get_benchmark
from finbench.benchmarks.metrics import ACCURACY, OFFICIAL, SCORE
from finbench.benchmarks.scorer import Scorer
from finbench.core.types import OPTION_LETTERS, SINGLE
from finbench.kernels.bitmask import letters_to_mask, single_bit_index
from finbench.kernels.segments import MISSING_LABEL, factorize, multi_column_counts_sums
from finbench.scoring.balance import label_balance
from finbench.scoring.clustered import clustered_summary, paired_difference, verdict
from finbench.scoring.stats import (ScoreTable, answer_confidence_scores, bootstrap_cis, calibration, ci_dict,
                                    error_mask, flipped_ids, holm, mcnemar, option_prob_matrix, paired_bootstrap,
                                    point_estimates, selective_curve, str_column, wilson_interval)

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark

CI_LEVEL = 0.95

__all__ = ["breakdowns", "build_table", "calibration_summary", "compare_runs", "option_prob_matrix",
           "per_question_correct", "score_samples", "table_benchmark"]


# ---- tables ----------------------------------------------------------------------------------------
def table_benchmark(benchmark: Benchmark | None, df: pd.DataFrame) -> Benchmark:
    """The benchmark whose rule scores `df`: the `Benchmark` given, else the one the table names in
    its `benchmark` column (looked up in the registry). A name instead of the Benchmark, or a table
    that names no benchmark (or several), is one clear error: never a default benchmark's rule."""
    if isinstance(benchmark, str):
        raise TypeError(f"scoring takes the Benchmark (finbench.benchmarks.get_benchmark({benchmark!r})), not its name")
    if benchmark is not None:
        return benchmark
    named = df["benchmark"].dropna().astype(str).str.lower().unique() if "benchmark" in df.columns else []
    named = [n for n in named if n]
    if len(named) != 1:
        raise ValueError("the samples table names no benchmark (no `benchmark` column): give its Benchmark"
                         if not named else f"the samples table names several benchmarks ({', '.join(named)}): "
                                           "score each apart")

    return get_benchmark(named[0])


def build_table(df: pd.DataFrame, benchmark: Benchmark | None = None, variant: str = OFFICIAL.name,
                denominator: str = "gold", device: str | torch.device = "cpu") -> ScoreTable:
    """The ScoreTable of one run under the benchmark's rule (its `Scorer`; `benchmark` None: the
    benchmark the table names, `table_benchmark`)."""
    spec = table_benchmark(benchmark, df)
    scorer = spec.scorer
    if variant not in {v.name for v in scorer.variants}:
        raise ValueError(f"variant {variant!r}: {spec.name} has {', '.join(repr(v.name) for v in scorer.variants)}")
    options = {"denominator": denominator} if denominator != "gold" else {}
    return scorer.build_table(df, variant=variant, device=device, **options)


def _table_rows(df: pd.DataFrame, table: ScoreTable) -> pd.DataFrame:
    """The rows of `df` the table scores, in table order (FinMTM scores objective rows only)."""
    rows = table.info.get("rows")
    return df if rows is None else df.iloc[rows]


def _clusters(rows: pd.DataFrame, spec: Any) -> tuple[str, torch.Tensor, int]:
    """(what the questions cluster on, dense cluster ids [N], G) for the table's rows: the samples'
    `cluster` column (runs written since it exists), else the benchmark's `cluster_field` when the
    table has it as a column (FAMMA's main_question_id), else each question its own cluster. A
    question without a value is its own cluster."""
    field = spec.cluster_field
    by, keys = ("cluster", rows["cluster"]) if "cluster" in rows.columns else \
        (field, rows[field]) if field in rows.columns else ("id", rows["id"])
    own = "id:" + rows["id"].astype(str)
    keys = keys.astype(object).where(keys.notna() & (keys.astype(str) != ""), own).astype(str)
    ids, uniques = factorize(keys.reset_index(drop=True))
    return (field if by == "cluster" else by), ids, len(uniques)


def clustered_scores(rows: pd.DataFrame, table: ScoreTable, spec: Any) -> dict[str, Any]:
    """results.json's `scores.clustered`: the clustered SE, iid SE, design effect and 95% interval
    of every mean-type metric — accuracy, and the per-question score where it is not 0/1."""
    by, ids, n_clusters = _clusters(rows, spec)
    metrics = {ACCURACY.key: table.correct.cpu()}
    if not torch.equal(table.score, table.correct):
        metrics[SCORE.key] = table.score.cpu()
    return clustered_summary(metrics, ids, by, n_clusters)


def per_question_correct(df: pd.DataFrame, benchmark: Benchmark | None = None) -> np.ndarray:
    """Official per-question correctness (float 0/1, one per row of `df`); rows the benchmark's
    rule does not score (FinMTM open items) keep their stored `correct`, else NaN."""
    table = build_table(df, benchmark)
    rows = table.info.get("rows")
    correct = table.correct.cpu().numpy().astype(np.float64)
    if rows is None:
        return correct
    out = pd.to_numeric(df["correct"], errors="coerce").to_numpy(np.float64) if "correct" in df.columns \
        else np.full(len(df), np.nan)
    out = out.copy()
    out[rows] = correct
    return out


# ---- breakdowns ------------------------------------------------------------------------------------
def breakdowns(df: pd.DataFrame, table: ScoreTable, columns: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """{column: {value: {"n", "accuracy", "ci"[, "score"]}}} for every column, in one segment pass.
    `ci` is the 95% Wilson interval of the group's accuracy (a proportion of 0/1 answers; the run's
    bootstrap covers the headline numbers); `score` (mean per-question score) appears when the
    rule is not plain 0/1 (paper S, FinMTM Eq. 1)."""
    columns = [c for c in columns if c in df.columns]
    if not columns or table.n == 0:
        return {}
    codes, labels = [], []
    for column in columns:
        col = df[column]
        ids, uniques = factorize(col.astype(object).where(col.isna(), col.astype(str)))  # mixed types sort as text
        ids = torch.where(ids < 0, torch.full_like(ids, len(uniques)), ids)
        codes.append(ids.to(table.values.device))
        labels.append([str(u) for u in uniques] + [MISSING_LABEL])
    show_score = not torch.equal(table.score, table.correct)
    values = torch.stack([table.correct, table.score], dim=1)
    counts, sums = multi_column_counts_sums(codes, [len(lab) for lab in labels], values)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for column, lab, n, s in zip(columns, labels, counts, sums):
        groups = {}
        low, high = wilson_interval(s[:, 0], n, CI_LEVEL)
        for j, label in enumerate(lab):
            if n[j] == 0:
                continue
            entry: dict[str, Any] = {"n": int(n[j]), ACCURACY.key: float(s[j, 0] / n[j]),
                                     "ci": {"low": float(low[j]), "high": float(high[j]), "level": CI_LEVEL,
                                            "method": "wilson"}}
            if show_score:
                entry[SCORE.key] = float(s[j, 1] / n[j])
            groups[label] = entry
        out[column] = groups
    return out


def _group_frame(df: pd.DataFrame, scorer: Scorer) -> pd.DataFrame:
    """`df` with the scorer's derived breakdown columns (replacing columns of the same name)."""
    derived = scorer.group_frame(df)
    if derived is df:
        return df
    return pd.concat([df.drop(columns=[c for c in derived.columns if c in df.columns]), derived], axis=1)


# ---- option probabilities ------------------------------------------------------------------------------
def _confidences(df: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(renormalised probs [N, K], valid rows [N], max prob per row with NaN where invalid) or None."""
    if "option_probs" not in df.columns or len(df) == 0:
        return None
    probs, lengths = option_prob_matrix(df["option_probs"])
    if probs.shape[1] == 0:
        return None
    total = probs.sum(1)
    valid = (lengths > 0) & torch.isfinite(probs).all(1) & (probs >= 0).all(1) & (total > 0)
    valid &= ~torch.from_numpy(error_mask(df))
    probs = torch.where(valid[:, None], probs / total.clamp(min=1e-300)[:, None], torch.zeros_like(probs))
    confidence = torch.where(valid, probs.max(1).values, torch.full_like(total, math.nan))
    return probs, valid, confidence


def calibration_summary(df: pd.DataFrame, n_bins: int = 10) -> dict[str, Any] | None:
    """ECE, Brier and reliability bins of single-choice items from `option_probs` (renormalised over
    the options; prediction = argmax, hit = argmax is the gold letter)."""
    found = _confidences(df)
    if found is None:
        return None
    probs, valid, _ = found
    gold = single_bit_index(letters_to_mask(str_column(df, "gold"), OPTION_LETTERS, casefold=False))
    gold_count = torch.from_numpy(np.array([len(g) for g in str_column(df, "gold")]))
    usable = valid & torch.from_numpy(str_column(df, "kind") == SINGLE) & (gold >= 0) & (gold_count == 1)
    usable &= gold < probs.shape[1]
    if not bool(usable.any()):
        return None
    out = calibration(probs[usable], gold[usable], n_bins)
    out["items"] = "single-choice items with option probabilities"
    return out


# ---- score / compare --------------------------------------------------------------------------------
def score_samples(df: pd.DataFrame, benchmark: Benchmark | None = None, variant: str = OFFICIAL.name, n_bootstrap: int = 0,
                  seed: int = 0, group_columns: Sequence[str] | None = None, device: str | torch.device = "cpu",
                  denominator: str = "gold", level: float = CI_LEVEL,
                  thresholds: Sequence[float] | None = None) -> dict[str, Any]:
    """Score one run's samples table. Headline numbers are on the 0–1 scale (papers quote ×100);
    `ci` holds percentile bootstrap CIs (questions resampled, the whole statistic recomputed per
    resample) when n_bootstrap > 0. `denominator` is the paper variant's n (`gold` | `options`)."""
    spec = table_benchmark(benchmark, df)
    table = build_table(df, spec, variant, denominator, device)
    rows = _table_rows(df, table)
    info = table.info
    out: dict[str, Any] = {"benchmark": spec.name, "variant": variant, "label": info["label"], "n": table.n,
                           "n_errors": info.get("n_errors", 0)}
    out.update({name: info[name] for name in spec.scorer.variant(variant).info_fields})  # FinMME paper: its n
    out.update(point_estimates(table))
    out["headline"] = list(table.headline)
    out["primary"] = table.primary
    if table.n > 0:
        out["clustered"] = clustered_scores(rows, table, spec)
    if n_bootstrap > 0:
        # Clusters are resampled when the run says what its questions cluster on (a `cluster`
        # column) and some share one; otherwise the question bootstrap, whose numbers stay as before.
        clusters = _clusters(rows, spec)[1:] if "cluster" in rows.columns and table.n else None
        clusters = clusters if clusters is not None and clusters[1] < table.n else None
        out["bootstrap"] = {"n_resamples": int(n_bootstrap), "seed": int(seed), "level": level,
                            "unit": "question" if clusters is None else "cluster", "method": "percentile"}
        if table.n > 0:
            clusters = None if clusters is None else (clusters[0].to(table.values.device), clusters[1])
            out["ci"] = bootstrap_cis(table, n_bootstrap, seed, level, clusters=clusters)
    out["label_balance"] = label_balance(rows, table.correct, spec.answer_type_field)  # scoring/balance.py
    out.update(spec.scorer.summary(df, table, out))  # after the CIs: a rule's side scores take the same settings
    if "correct" in rows.columns:
        stored = pd.to_numeric(rows["correct"], errors="coerce").to_numpy(np.float64)
        known = ~np.isnan(stored)
        mismatch = int(((stored[known] > 0.5) != (table.correct.cpu().numpy()[known] > 0.5)).sum())
        out["stored_correct_mismatches"] = mismatch
    if group_columns is None:  # the benchmark's, or those its data names (Scorer.breakdown_columns)
        found = spec.scorer.breakdown_columns
        group_columns = found(rows) if found is not None else spec.group_columns
    out["breakdowns"] = breakdowns(_group_frame(rows, spec.scorer), table, group_columns)
    if "confidence" in rows.columns:  # every answer's own confidence (runs written since it exists)
        out.update(answer_confidence_scores(table, rows, thresholds))
    elif (calib := calibration_summary(rows)) is not None:
        out["calibration"] = calib
        confidences = _confidences(rows)
        if confidences is not None:
            out["selective"] = selective_curve(table, confidences[2], thresholds)
    out["notes"] = list(info.get("notes", []))
    return _jsonable(out)


def compare_runs(dfs: Sequence[pd.DataFrame], names: Sequence[str], benchmark: Benchmark | None = None,
                 n_bootstrap: int = 1000, seed: int = 0, variant: str = OFFICIAL.name, level: float = CI_LEVEL,
                 device: str | torch.device = "cpu", means: Sequence[pd.Series | None] | None = None
                 ) -> dict[str, Any]:
    """Paired comparison of runs; the first run is the baseline. `means` (one per run, None for a
    run without --samples): each sampled question's mean score over its K samples by id
    (scoring/sampling_scores.py `per_question_means`), used for the clustered paired difference in place
    of sample 0's score.

    Each run is compared with the baseline on the questions THOSE TWO both scored (`n` of its
    comparison, with both runs' `scores` on them); a run that shares none with the baseline is
    refused in one ValueError line. Per run vs baseline: exact McNemar on correctness, Holm-adjusted
    p over all runs, paired bootstrap CIs (the same resampled questions feed both runs) of every
    headline difference, and the flipped ids. `scores` and `n_shared`: every run on the questions
    all of them scored (empty when none is shared by all)."""
    if len(dfs) != len(names) or len(dfs) < 2:
        raise ValueError("compare_runs needs at least two runs and one name per run")
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be distinct: {list(names)}")
    spec = table_benchmark(benchmark, dfs[0])
    tables = [build_table(df, spec, variant, device=device) for df in dfs]
    for name, table in zip(names, tables):
        if len(set(table.ids.tolist())) != table.n:
            raise ValueError(f"run {name!r} has duplicate question ids")
    pairs = [_shared_ids([tables[0], table]) for table in tables[1:]]
    for name, shared in zip(names[1:], pairs):
        if not shared:
            raise ValueError(f"{name} and {names[0]} share no scored question: there is nothing to compare "
                             f"({tables[0].n} and {tables[names.index(name)].n} questions)")
    shared = _shared_ids(tables)
    scores = {name: point_estimates(t.subset(_positions(t, shared))) for name, t in zip(names, tables)} if shared else {}
    comparisons = [_compare_pair(dfs[0], tables[0], table, names[0], name, ids, spec, n_bootstrap, seed, level,
                                 (means[0], means[k]) if means else None)
                   for k, (name, table, ids) in enumerate(zip(names[1:], tables[1:], pairs), start=1)]
    for comparison, p in zip(comparisons, holm([c["mcnemar"]["p"] for c in comparisons])):
        comparison["p_holm"] = p
    notes = [note for name, df, ids in zip(names[1:], dfs[1:], pairs)
             for note in _gold_disagreements([dfs[0], df], [names[0], name], ids)]
    return _jsonable({"benchmark": spec.name, "variant": variant, "label": tables[0].info["label"],
                      "baseline": names[0], "runs": list(names), "primary": tables[0].primary,
                      "headline": list(tables[0].headline), "n_shared": len(shared),
                      "n_by_run": {name: t.n for name, t in zip(names, tables)},
                      "scores": scores, "comparisons": comparisons,
                      "bootstrap": {"n_resamples": int(n_bootstrap), "seed": int(seed), "level": level,
                                    "paired": True},
                      "notes": notes})


def _compare_pair(df0: pd.DataFrame, table0: ScoreTable, table: ScoreTable, baseline: str, name: str,
                  shared: Sequence[str], spec: Any, n_bootstrap: int, seed: int, level: float,
                  means: tuple[pd.Series | None, pd.Series | None] | None) -> dict[str, Any]:
    """One run against the baseline on the questions both scored (`shared`, in the baseline's
    order): the scores of both there, McNemar, the clustered paired difference with its verdict and
    the one interval of every headline difference."""
    first = _positions(table0, shared)
    base = table0.subset(first)
    mine = table.subset(_positions(table, shared))
    aligned = dataclasses.replace(base, correct=mine.correct, score=mine.score, values=mine.values)
    scores = {baseline: point_estimates(base), name: point_estimates(aligned)}
    by, cluster_ids, n_clusters = _clusters(_table_rows(df0, table0).iloc[first], spec)
    mc = mcnemar(base.correct, aligned.correct)
    resampled = (cluster_ids.to(base.values.device), n_clusters) if n_clusters < base.n else None
    cis = paired_bootstrap(base, aligned, n_bootstrap, seed, level, clusters=resampled) if n_bootstrap > 0 else {}
    # the mean per-question score's paired difference, its clustered SE and interval, and the
    # smallest difference this set detects (80% power, α = 0.05 two-sided)
    theirs, own = means if means else (None, None)
    paired = {key: v for key, v in paired_difference(_sampled(aligned, own), _sampled(base, theirs), cluster_ids,
                                                     n_clusters).items() if key != "n"}
    paired["verdict"] = verdict(paired["ci_diff"], paired["mde"])  # the sentence every output prints
    sampled = theirs is not None or own is not None
    if sampled:
        paired["per_question"] = "mean score over the K samples of --samples runs"
    mean_metrics = {m for m in base.headline if _is_mean(scores[baseline].get(m), base)
                    and _is_mean(scores[name].get(m), aligned)}
    delta = {m: one_interval(_diff(scores[name].get(m), scores[baseline].get(m)), paired, m in mean_metrics,
                             cis.get(m, ci_dict(math.nan, math.nan, level)) if n_bootstrap > 0 else None, level,
                             sampled)
             for m in base.headline}
    return {"run": name, "baseline": baseline, "n": base.n, "scores": scores, "delta": delta,
            "mcnemar": {"baseline_only": mc["a_only"], "run_only": mc["b_only"], "p": mc["p"]},
            "flipped": flipped_ids(base, aligned), **paired, "cluster_by": by, "n_clusters": n_clusters}


def _sampled(table: ScoreTable, means: pd.Series | None) -> torch.Tensor:
    """The table's per-question scores, a sampled question's replaced by its mean over K samples."""
    score = table.score.cpu().to(torch.float64)
    if means is None:
        return score
    found = means.reindex(pd.Index([str(i) for i in table.ids])).to_numpy(np.float64, copy=True)
    return torch.where(torch.from_numpy(np.isnan(found)), score, torch.from_numpy(found))


def _is_mean(value: float | None, table: ScoreTable) -> bool:
    """Whether a headline value is the table's mean per-question score (what `paired_difference`
    differences), not a statistic of its own (FinScore, P_H)."""
    return value is not None and table.n > 0 and abs(value - float(table.score.double().mean())) <= 1e-9


def one_interval(value: float | None, paired: Mapping[str, Any], mean: bool, bootstrap: dict[str, Any] | None,
                 level: float, sampled: bool = False) -> dict[str, Any]:
    """A headline difference with the ONE interval every output prints (`ci`, with its `method`):
    the clustered t interval of the paired difference where the metric is the mean per-question
    score that difference measures (accuracy, a mean score), else the paired bootstrap (clusters
    resampled where the run has clusters) — the only interval a non-linear headline (FinScore,
    P_H) has. The bootstrap of a mean metric is kept as `bootstrap_check`, which only the
    reports show, named as a check.

    `sampled` (a --samples run on either side): a mean metric's difference IS the paired one, the
    difference of the per-question means over the K samples, not sample 0's (`per_question` says
    so); sample 0's bootstrap measures another difference, so it is no check of it and is dropped."""
    if sampled and mean and paired.get("diff") is not None:
        ci = paired.get("ci_diff") or {}
        return {"value": paired["diff"], "per_question": "mean over the K samples",
                "ci": {**ci, "level": level, "method": "clustered t(G-1)"} if ci.get("low") is not None else None,
                "bootstrap_check": None}
    same = mean and value is not None and paired.get("diff") is not None and abs(value - paired["diff"]) <= 1e-9
    if same and (paired.get("ci_diff") or {}).get("low") is not None:
        return {"value": value, "ci": {**paired["ci_diff"], "level": level, "method": "clustered t(G-1)"},
                "bootstrap_check": bootstrap}
    return {"value": value, "ci": None if bootstrap is None else {**bootstrap, "method": "paired bootstrap"}}


def _shared_ids(tables: Sequence[ScoreTable]) -> list[str]:
    """Ids scored in every run, in the baseline's order."""
    common = set(tables[0].ids.tolist())
    for t in tables[1:]:
        common &= set(t.ids.tolist())
    return [i for i in tables[0].ids.tolist() if i in common]


def _positions(table: ScoreTable, ids: Sequence[str]) -> np.ndarray:
    index = pd.Index(table.ids)
    return index.get_indexer(pd.Index(ids, dtype=object)).astype(np.int64)


def _gold_disagreements(dfs: Sequence[pd.DataFrame], names: Sequence[str], shared: Sequence[str]) -> list[str]:
    base = dfs[0].set_index(dfs[0]["id"].astype(str))["gold"].astype(str).reindex(shared) \
        if "gold" in dfs[0].columns else None
    notes = []
    for name, df in zip(names[1:], dfs[1:]):
        if base is None or "gold" not in df.columns:
            continue
        other = df.set_index(df["id"].astype(str))["gold"].astype(str).reindex(shared)
        differing = int((other.to_numpy() != base.to_numpy()).sum())
        if differing:
            notes.append(f"{name}: gold differs from {names[0]} on {differing} shared ids")
    return notes


def _diff(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _jsonable(obj: Any) -> Any:
    """numpy/torch scalars → Python, NaN/inf → None, tuples → lists (strict JSON)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, torch.Tensor):
        return _jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj
