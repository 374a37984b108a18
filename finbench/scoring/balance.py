"""The biases raw accuracy hides: beside a run's accuracy on its choice items, the constant-answer
baseline, the macro-recall over the gold labels and the lowest per-label recall.

Computed for every benchmark from the samples table and the rule's per-question correctness, per
answer type (the column a benchmark declares as `Benchmark.answer_type_field`: `kind` unless its
single choices differ in their labels, as FinChart-Bench's MC letters and TF True/False do):

- a label is a gold answer of a choice item (single or multi kind: `B`, `ACD`) within its type;
- constant-answer baseline = the accuracy of always giving each type's most frequent gold label
  (= Σ over types of that label's count / n): a model below it has learnt less than the answer key's
  skew (FinChart-Bench's MC gold is C 41.6 % of the time);
- recall of a label = the share of its items the rule judged right; macro-recall = the unweighted
  mean over the labels (of every type); the lowest per-label recall names the label a model
  neglects (recall below 1/labels of its type is below a uniform guess's).
Numerical and open items have an open set of answers and are left out (`majority_baseline` covers
numbers). One pass of `bincount` and `scatter_reduce` over all items; no loop over rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import ACCURACY
from finbench.core.types import MULTI, SINGLE
from finbench.kernels.segments import factorize
from finbench.scoring.stats import str_column

CHOICE_KINDS = (SINGLE, MULTI)
ITEMS = "choice items (single and multi-answer), per answer type"


def label_recalls(label: torch.Tensor, n_labels: int, correct: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(items [L], recall [L]) per label of `label` [N] (ids in 0..L−1) from `correct` [N] (0/1)."""
    items = torch.bincount(label, minlength=n_labels).to(torch.float64)
    hits = torch.bincount(label, weights=correct.to(torch.float64), minlength=n_labels)
    return items, hits / items.clamp(min=1)


def type_reductions(items: torch.Tensor, recall: torch.Tensor, label_type: torch.Tensor,
                    n_types: int) -> dict[str, torch.Tensor]:
    """Per type [T]: its most frequent label's count and id, macro-recall and lowest recall with its
    label id, from per-label counts and recalls [L] and each label's type [L]."""
    most = torch.zeros(n_types, dtype=torch.float64).scatter_reduce(0, label_type, items, reduce="amax")
    lowest = torch.full((n_types,), float("inf"), dtype=torch.float64).scatter_reduce(0, label_type, recall, reduce="amin")
    n_labels = torch.bincount(label_type, minlength=n_types).to(torch.float64)
    macro = torch.zeros(n_types, dtype=torch.float64).index_add_(0, label_type, recall) / n_labels.clamp(min=1)
    ids = torch.arange(len(items))
    # the first label (in sorted order) holding the type's maximum count / minimum recall
    big = torch.full((n_types,), len(items), dtype=torch.int64)
    mode = big.clone().scatter_reduce(0, label_type, torch.where(items == most[label_type], ids, len(items)), reduce="amin")
    low = big.clone().scatter_reduce(0, label_type, torch.where(recall == lowest[label_type], ids, len(items)), reduce="amin")
    return {"most": most, "mode": mode, "macro": macro, "lowest": lowest, "low": low, "n_labels": n_labels}


def label_texts(rows: pd.DataFrame, gold: np.ndarray) -> dict[str, str]:
    """The option text of each one-letter gold label whose items all show one text at that letter
    (a fixed answer set: FCMR's A is always "none"), so a label is named by what it means; a label
    whose text differs from item to item (FinMME's A) is left as its letter."""
    if "options" not in rows.columns or not len(rows):
        return {}
    position = np.array([ord(g[0]) - ord("A") if len(g) == 1 else -1 for g in gold])
    text = [str(o[p]) if o is not None and 0 <= p < len(o) else None for o, p in zip(rows["options"], position)]
    found = pd.DataFrame({"label": gold, "text": text}).dropna().groupby("label")["text"].agg(["nunique", "first"])
    return {label: t for label, (count, t) in found.iterrows() if count == 1 and t != label}


def label_balance(rows: pd.DataFrame, correct: torch.Tensor, type_field: str = "kind") -> dict[str, Any]:
    """results.json's `scores.label_balance` of the scored `rows` (in table order) and their
    per-question `correct` [N]; see the module docstring."""
    kind, gold = str_column(rows, "kind"), str_column(rows, "gold")
    keep = np.isin(kind, CHOICE_KINDS) & (gold != "")
    out: dict[str, Any] = {"items": ITEMS, "answer_type": type_field, "n": int(keep.sum())}
    if not keep.any():
        return {**out, "note": "no choice items: nothing to balance"}
    given = str_column(rows, type_field) if type_field in rows.columns else kind
    types = np.where(given[keep] != "", given[keep], kind[keep])
    gold = gold[keep]
    hit = correct.detach().cpu().to(torch.float64)[torch.from_numpy(np.flatnonzero(keep))]
    type_id, type_names = factorize(pd.Series(types, dtype=object), sort=True)
    label_id, label_names = factorize(pd.Series(types + "\x1f" + gold, dtype=object), sort=True)
    items, recall = label_recalls(label_id, len(label_names), hit)
    label_type = torch.zeros(len(label_names), dtype=torch.int64).scatter_(0, label_id, type_id)
    per_type = type_reductions(items, recall, label_type, len(type_names))
    named = [str(name).split("\x1f", 1)[1] for name in label_names]
    several = len(type_names) > 1

    def shown(j: int) -> str:
        return f"{type_names[int(label_type[j])]} {named[j]}" if several else named[j]

    n = float(len(gold))
    by_type = {}
    for t, name in enumerate(type_names):
        members = (label_type == t).nonzero().flatten().tolist()
        size = float(items[members].sum())
        accuracy = float(hit[type_id == t].sum()) / size
        by_type[str(name)] = {
            "n": int(size), ACCURACY.key: accuracy, "n_labels": len(members),
            "constant_answer": named[int(per_type["mode"][t])],
            "constant_baseline": float(per_type["most"][t]) / size, "macro_recall": float(per_type["macro"][t]),
            "min_recall": float(per_type["lowest"][t]), "min_recall_label": named[int(per_type["low"][t])],
            "recall": {named[j]: {"n": int(items[j]), "recall": float(recall[j])} for j in members}}
    weakest = int(torch.argmin(recall))  # the first label of the lowest recall, in sorted order
    return {**out, "label_texts": label_texts(rows[keep], gold), ACCURACY.key: float(hit.sum()) / n,
            "constant_baseline": float(per_type["most"].sum()) / n,
            "constant_answers": {str(name): g["constant_answer"] for name, g in by_type.items()},
            "macro_recall": float(recall.mean()), "min_recall": float(recall[weakest]), "min_recall_label": shown(weakest),
            "by_type": by_type}
