"""Scoring a custom file (benchmarks/custom): `correct` per row by its type, accuracy = mean(correct).

- single choice (and true/false, yes/no, 是/否): the letter read from the logits is the gold letter;
- multi-answer: the set decoded is the gold set, exactly;
- numerical: the number decoded (`12.5`, `-3`, `12%` read as 12) against the gold number:
  `numeric_exact` (equal) and `numeric_within_tolerance` (|a − g| ≤ t·|g| for a relative tolerance,
  ≤ t for an absolute one, equal without one) are both reported; `correct` is within tolerance;
- open: the --judge model's verdict where it gave one, else the rule's exact match after normalisation.
A row with an error is wrong. Beside the headline: accuracy per type, per breakdown (the data's own
columns: `breakdown_columns`) with clustered 95 % intervals (`breakdown_clusters`: what the rows
cluster on — the cluster column, else the image's content — t(G − 1), one pass per column), and
the label balance (scoring/balance.py, per answer type).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import ACCURACY, Metric
from finbench.benchmarks.scorer import Scorer
from finbench.core.types import MULTI, NUMERICAL, OPEN, SINGLE
from finbench.kernels.segments import factorize
from finbench.scoring.clustered import clustered_summary
from finbench.scoring.stats import ScoreTable, error_mask, float_column, str_column

LABEL = "custom file (accuracy = mean(correct): letters, sets, numbers within tolerance, open answers matched or judged)"
TYPES = (SINGLE, MULTI, NUMERICAL, OPEN)
METRIC_OF = {SINGLE: "single_accuracy", MULTI: "multi_accuracy", NUMERICAL: "numeric_within_tolerance",
             OPEN: "open_accuracy"}


def numbers(values: np.ndarray) -> np.ndarray:
    """Decoded or gold numbers as float64 ("12%" → 12, "1,234" → 1234); NaN where none."""
    text = pd.Series(values, dtype=object).astype(str).str.replace(r"[%,\s]", "", regex=True)
    return pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)


def verdicts(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row: its type masks, `correct`, and a number's `exact` and `within` (0/1, errors wrong)."""
    kind, answer, gold = str_column(df, "kind"), str_column(df, "answer"), str_column(df, "gold")
    ok = ~error_mask(df)
    predicted, truth = numbers(answer), numbers(gold)
    tolerance = np.nan_to_num(float_column(df, "tolerance"), nan=0.0)
    rule = str_column(df, "tolerance_kind")
    gap = np.abs(predicted - truth)
    allowed = np.where(rule == "relative", tolerance * np.abs(truth), np.where(rule == "absolute", tolerance, 0.0))
    exact = ok & (kind == NUMERICAL) & (predicted == truth)
    within = ok & (kind == NUMERICAL) & (gap <= allowed + 1e-12 * np.abs(truth))
    judged = float_column(df, "judge_score")
    open_score = np.where(np.isnan(judged), np.nan_to_num(float_column(df, "rule_score"), nan=0.0), judged)
    choice = ok & np.isin(kind, (SINGLE, MULTI)) & (answer == gold)
    open_right = ok & (kind == OPEN) & (open_score >= 0.5)
    correct = choice | within | open_right
    return {"kind": kind, "correct": correct, "exact": exact, "within": within, "ok": ok}


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """Segment sums [..., S, C] (n, correct, then per type its n and right, then numbers exact) → metrics."""
    total = sums.sum(-2)
    out = {"accuracy": total[..., 1] / total[..., 0]}
    for k, name in enumerate(TYPES):
        out[METRIC_OF[name]] = total[..., 3 + 2 * k] / total[..., 2 + 2 * k]
    out["numeric_exact"] = total[..., 10] / total[..., 6]
    return out


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    found = verdicts(df)
    kind, correct = found["kind"], found["correct"]
    columns = [np.ones(len(df)), correct]
    for name in TYPES:
        columns += [kind == name, (kind == name) & correct]
    values = np.stack([*columns, found["exact"]], axis=1).astype(np.float64)
    dev = torch.device(device)
    present = [name for name in TYPES if (kind == name).any()]
    headline = ("accuracy", *(METRIC_OF[name] for name in present),
                *(("numeric_exact",) if NUMERICAL in present else ()))
    right = torch.from_numpy(correct.astype(np.float64)).to(dev)
    return ScoreTable(ids=str_column(df, "id"), correct=right, score=right.clone(), values=torch.from_numpy(values).to(dev),
                      segments=torch.zeros(len(df), dtype=torch.int64, device=dev), n_segments=1,
                      statistic=statistics, headline=headline, primary="accuracy",
                      info={"label": LABEL, "n_errors": int((~found["ok"]).sum()), "notes": []})


def breakdown_columns(df: pd.DataFrame) -> tuple[str, ...]:
    """The data's breakdowns (each row names them: `breakdown_columns`), then the answer type."""
    named = pd.unique(str_column(df, "breakdown_columns")) if len(df) else []
    columns = dict.fromkeys(c for text in named for c in str(text).split(",") if c and c in df.columns)
    return (*columns, "answer_type")


def breakdown_clusters(df: pd.DataFrame, correct: torch.Tensor) -> dict[str, Any]:
    """{column: {value: clustered summary of accuracy}} — every group of a column at once: a value
    matrix [N, groups] holding each row's correctness in its group's column and NaN elsewhere."""
    if not len(df):
        return {}
    keys = pd.Series(str_column(df, "cluster"), dtype=object)
    keys = keys.where(keys != "", "id:" + pd.Series(str_column(df, "id"), dtype=object))
    cluster_ids, uniques = factorize(keys)
    out: dict[str, Any] = {}
    for column in breakdown_columns(df):
        groups, labels = factorize(pd.Series(str_column(df, column), dtype=object))
        matrix = torch.full((len(df), len(labels)), float("nan"), dtype=torch.float64)
        matrix[torch.arange(len(df)), groups] = correct.cpu().to(torch.float64)
        found = clustered_summary({str(label): matrix[:, j] for j, label in enumerate(labels)}, cluster_ids, "cluster",
                                  len(uniques))["metrics"]
        out[column] = {label: {"n": int((groups == j).sum()), "accuracy": float(correct.cpu()[groups == j].mean()),
                               **found[str(label)]} for j, label in enumerate(map(str, labels))}
    return out


def summary(df: pd.DataFrame, table: ScoreTable, estimates: Mapping[str, Any]) -> dict[str, Any]:
    kind = str_column(df, "kind")
    counts = {f"n_{name}": int((kind == name).sum()) for name in TYPES}
    judged = ~np.isnan(float_column(df, "judge_score")) & (kind == OPEN)
    return {**counts, "n_open_judged": int(judged.sum()), "n_open_by_rule": int(counts["n_open"] - judged.sum()),
            "breakdown_clustered": breakdown_clusters(df, table.correct)}


METRICS = (ACCURACY, Metric("single_accuracy", "single-choice accuracy", n_key="n_single", n_label="single-choice item"),
           Metric("multi_accuracy", "multi-answer accuracy (exact set)", n_key="n_multi", n_label="multi-answer item"),
           Metric("numeric_within_tolerance", "numbers within tolerance", n_key="n_numerical", n_label="numerical item"),
           Metric("numeric_exact", "numbers exact", n_key="n_numerical", n_label="numerical item"),
           Metric("open_accuracy", "open answers (matched or judged)", n_key="n_open", n_label="open item"))
SCORER = Scorer(build_table=build_table, summary=summary, metrics=METRICS, breakdown_columns=breakdown_columns)
