"""Robustness studies scored from a run's tables alone (no model, CPU): circular evaluation, image
ablation, majority and prior baselines, and the items two runs' answers disagree on.

The tables are the run folder's: `samples.parquet` (the base run, one row per question) and
`variants.parquet` (one row per question × variant, written by runner/studies.py: `study`,
`variant`, `rotation` or `ablation`, the answer, the gold as asked, `correct`; columns in
report/schema.py). Definitions:

- circular evaluation (`--permutations K`): an item is asked in its published order (rotation 0,
  the base run) and with its options cyclically rotated by 1..k−1 positions (k = min(K, its
  option count)); at rotation r the option shown at letter j is the published option (j + r) mod n.
  *circular accuracy*: the share of items answered correctly in every rotation. *per-position
  pick rate*: over every (item, rotation) answer, how often each letter position is chosen.
  *position bias*: the share of items whose chosen POSITION (letter set) is the same in every
  rotation — 1.0 for a model that always says A, 0 for one that follows the content.
  *option consistency*: the share of items whose chosen OPTION (the published option, i.e. its
  text) is the same in every rotation — 1.0 for a model that follows the content, 0 for one that
  always says A. Bias and consistency are over items answered without an error in every rotation.
- image ablation (`--image-ablation`): the same items with every image blank, noise or removed;
  the benchmark's headline score and accuracy on the ablated items, each against the base run's on
  the same items (`retained` = ablated / base), overall and by domain.
- majority and prior baselines (every run): per question type, the accuracy of always giving the
  type's most frequent gold answer (its option text, or its number), of always answering A, and of
  always answering the type's most frequent gold letter(s) — priors that know this run's gold
  distribution and nothing of the items — beside the model's accuracy and its margin over the
  best of them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
import torch

from finbench.core.types import MULTI, NUMERICAL, OPTION_LETTERS, SINGLE
from finbench.kernels.bitmask import letters_to_mask, masks_to_letters
from finbench.kernels.segments import factorize
from finbench.scoring.answers import normalize_response, numeric_values
from finbench.scoring.stats import error_mask, float_column, str_column
from finbench.scoring.tables import _jsonable, per_question_correct, score_samples

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark

CHOICE_KINDS = (SINGLE, MULTI)
MAX_DISAGREEMENTS = 2000  # items listed by `answer_disagreements` (all are counted)
RAW_OUTPUT_CHARS = 200  # the official raw output, shortened, beside each disagreement


def _mean(values: torch.Tensor) -> float | None:
    return float(values.to(torch.float64).mean()) if values.numel() else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _correct(df: pd.DataFrame) -> torch.Tensor:
    """Per-row 0/1 correctness from the `correct` column (NaN: not scored), errors wrong."""
    correct = float_column(df, "correct")
    return torch.from_numpy(np.where(error_mask(df), np.where(np.isnan(correct), np.nan, 0.0), correct))


def _segment_rates(values: torch.Tensor, segments: torch.Tensor, n_segments: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean of the known (non-NaN) values per segment, their count) in one pass."""
    known = ~torch.isnan(values) & (segments >= 0)
    counts = torch.bincount(segments[known], minlength=n_segments).to(torch.float64)
    sums = torch.zeros(n_segments, dtype=torch.float64).index_add_(0, segments[known], values[known].to(torch.float64))
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan)), counts


def _per_item(values: torch.Tensor, item: torch.Tensor, n_items: int, reduce: str) -> torch.Tensor:
    """`reduce` (amin, amax, sum) of int64 `values` [R] over each item's rows."""
    return torch.zeros(n_items, dtype=torch.int64).scatter_reduce(0, item, values.to(torch.int64), reduce=reduce,
                                                                  include_self=False)


# ---- circular evaluation ------------------------------------------------------------------------
def circular_summary(samples: pd.DataFrame, variants: pd.DataFrame | None, k: int,
                     domain_column: str = "domain", n_not_rotatable: int = 0) -> dict[str, Any]:
    """results.json's `circular` from the base samples and the rotation rows (`variants`: the
    circular study's rows of variants.parquet, finbench/studies/circular.py);
    `n_not_rotatable`: the choice items asked only in their published order because an option
    names other options (benchmarks/base.py `names_other_options`; not in `n`)."""
    rows = _rows(variants)
    out: dict[str, Any] = {"k": int(k), "n": 0, "n_not_rotatable": int(n_not_rotatable), "base_accuracy": None, "circular_accuracy": None,
                           "position_bias": None, "option_consistency": None, "n_consistency": 0,
                           "pick_rate": {}, "chance_pick_rate": {}, "rotations_per_item": {}, "by_domain": {}}
    if rows is None or not len(rows):
        return out
    base = samples[samples["id"].astype(str).isin(set(rows["id"].astype(str)))].assign(rotation=0)
    columns = ["id", "rotation", "n_options", "answer", "correct", "error"] + \
        ([domain_column] if domain_column in samples.columns and domain_column in rows.columns else [])
    frame = pd.concat([base[columns], rows[columns]], ignore_index=True)
    item, ids = factorize(frame["id"].astype(str), sort=False)
    n_items = len(ids)
    rotation = torch.tensor(frame["rotation"].to_numpy(np.int64))
    n_options = torch.tensor(frame["n_options"].to_numpy(np.int64))
    error = torch.from_numpy(error_mask(frame))
    correct = (torch.nan_to_num(_correct(frame), nan=0.0) > 0.5) & ~error
    shown = letters_to_mask(str_column(frame, "answer"), OPTION_LETTERS, casefold=False)  # positions as asked
    full = (torch.ones_like(n_options) << n_options) - 1
    published = ((shown << rotation) | (shown >> (n_options - rotation))) & full  # position j → option (j + r) mod n

    all_correct = _per_item(correct, item, n_items, "amin") == 1
    base_correct = _per_item(correct & (rotation == 0), item, n_items, "amax") == 1
    clean = _per_item(error, item, n_items, "amax") == 0
    same_position = _per_item(shown, item, n_items, "amin") == _per_item(shown, item, n_items, "amax")
    same_option = _per_item(published, item, n_items, "amin") == _per_item(published, item, n_items, "amax")
    answered = ~error
    width = int(n_options.max())
    bits = (shown[answered, None] >> torch.arange(width)) & 1  # [R answered, positions]
    available = (torch.arange(width)[None, :] < n_options[answered, None]).to(torch.float64)
    chance = (available / n_options[answered, None].clamp(min=1)).mean(0) if bits.shape[0] else torch.zeros(width)
    letters = OPTION_LETTERS[:width]
    n_rotations = torch.bincount(item, minlength=n_items)
    out.update({
        "n": n_items, "n_answers": int(len(frame)),
        "base_accuracy": _mean(base_correct), "circular_accuracy": _mean(all_correct),
        "position_bias": _mean(same_position[clean]), "option_consistency": _mean(same_option[clean]),
        "n_consistency": int(clean.sum()),
        "pick_rate": {c: float(v) for c, v in zip(letters, bits.to(torch.float64).mean(0))} if bits.shape[0] else {},
        "chance_pick_rate": {c: float(v) for c, v in zip(letters, chance)} if bits.shape[0] else {},
        "rotations_per_item": {str(r): int(c) for r, c in enumerate(torch.bincount(n_rotations).tolist()) if c},
    })
    if len(columns) > 6:
        domain, labels = factorize(frame[domain_column].astype(object).where(frame[domain_column].notna(), None))
        item_domain = torch.full((n_items,), -1, dtype=torch.int64).scatter_reduce(0, item, domain, reduce="amax")
        circ, n = _segment_rates(all_correct.to(torch.float64), item_domain, len(labels))
        base_rate, _ = _segment_rates(base_correct.to(torch.float64), item_domain, len(labels))
        out["by_domain"] = {str(label): {"n": int(n[j]), "base_accuracy": float(base_rate[j]),
                                         "circular_accuracy": float(circ[j])}
                            for j, label in enumerate(labels) if n[j] > 0}
    return _jsonable(out)


def _rows(variants: pd.DataFrame | None) -> pd.DataFrame | None:
    return None if variants is None or not len(variants) else variants


# ---- image ablation -----------------------------------------------------------------------------
def ablation_summary(samples: pd.DataFrame, variants: pd.DataFrame | None, benchmark: Benchmark,
                     domain_column: str = "domain") -> dict[str, Any]:
    """results.json's `image_ablation`: per mode, the benchmark's headline score and accuracy on
    the ablated items and the base run's on the same items, `retained` = ablated / base, and by
    domain (base accuracy, ablated accuracy, retained); `variants`: the ablation study's rows."""
    rows = _rows(variants)
    if rows is None or not len(rows):
        return {}
    out = {}
    for mode in pd.unique(rows["ablation"].astype(str)):
        ablated = rows[rows["ablation"].astype(str) == mode]
        base = samples[samples["id"].astype(str).isin(set(ablated["id"].astype(str)))]
        scored = score_samples(ablated, benchmark=benchmark, group_columns=())
        before = score_samples(base, benchmark=benchmark, group_columns=())
        primary = before.get("primary", "accuracy")
        out[mode] = {"n": int(len(ablated)), "metric": primary, "score": scored.get(primary),
                     "accuracy": scored.get("accuracy"), "base_score": before.get(primary),
                     "base_accuracy": before.get("accuracy"),
                     "retained": _ratio(scored.get(primary), before.get(primary)),
                     "retained_accuracy": _ratio(scored.get("accuracy"), before.get("accuracy")),
                     "by_domain": _domain_retention(base, ablated, domain_column)}
    return _jsonable(out)


def _domain_retention(base: pd.DataFrame, ablated: pd.DataFrame, column: str) -> dict[str, Any]:
    if column not in base.columns or column not in ablated.columns:
        return {}
    both = pd.concat([base[[column]], ablated[[column]]], ignore_index=True)[column]
    domain, labels = factorize(both.astype(object).where(both.notna(), None))
    before, n = _segment_rates(_correct(base), domain[:len(base)], len(labels))
    after, _ = _segment_rates(_correct(ablated), domain[len(base):], len(labels))
    return {str(label): {"n": int(n[j]), "base": _finite(before[j]), "ablated": _finite(after[j]),
                         "retained": _ratio(_finite(after[j]), _finite(before[j]))}
            for j, label in enumerate(labels) if n[j] > 0}


def _finite(value: torch.Tensor) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


# ---- majority and prior baselines ---------------------------------------------------------------
BASELINES = ("majority_answer", "always_a", "most_frequent_position")


def majority_baselines(samples: pd.DataFrame) -> dict[str, Any]:
    """results.json's `majority_baseline`: per question type (the `question_type` column, else the
    kind) of the choice and numerical items with a gold answer, the baselines' accuracies, the
    model's (`correct`) and its margin over the best baseline; `all` sums the per-type baselines
    (a prior that knows each item's type)."""
    kind = str_column(samples, "kind")
    gold = str_column(samples, "gold")
    keep = np.isin(kind, (*CHOICE_KINDS, NUMERICAL)) & (gold != "")
    rows = samples[keep]
    column = "question_type" if "question_type" in rows.columns and (str_column(rows, "question_type") != "").any() \
        else "kind"
    out: dict[str, Any] = {"column": column, "n": int(len(rows)), "by_type": {}, "all": None}
    if not len(rows):
        return out
    kind, gold = kind[keep], gold[keep]
    types = np.where(str_column(rows, column) != "", str_column(rows, column), kind)
    choice = np.isin(kind, CHOICE_KINDS)
    answer = np.where(choice, _gold_texts(rows, gold), _number_texts(gold))
    position = np.where(choice, gold, "")
    type_id, labels = factorize(pd.Series(types, dtype=object))
    n_types = len(labels)
    n = torch.bincount(type_id, minlength=n_types).to(torch.float64)
    hits = {"majority_answer": _mode_hits(type_id, n_types, answer, np.ones(len(rows), bool)),
            "always_a": (torch.zeros(n_types, dtype=torch.float64).index_add_(
                0, type_id, torch.from_numpy((choice & (gold == "A")).astype(np.float64))), None),
            "most_frequent_position": _mode_hits(type_id, n_types, position, choice)}
    has_choice = torch.bincount(type_id[torch.from_numpy(choice)], minlength=n_types) > 0
    model = torch.nan_to_num(_correct(rows), nan=0.0)
    model_hits = torch.zeros(n_types, dtype=torch.float64).index_add_(0, type_id, model)

    def entry(size: float, found: dict[str, float | None], model_accuracy: float, shown: dict[str, str]) -> dict:
        present = {name: value for name, value in found.items() if value is not None}
        best = max(present, key=present.get) if present else None
        return {"n": int(size), **{f"{name}_accuracy": found[name] for name in BASELINES}, **shown,
                "model_accuracy": model_accuracy, "best_baseline": best,
                "best_accuracy": present.get(best) if best else None,
                "above_best": model_accuracy - present[best] if best else None}

    for t, label in enumerate(labels):
        found = {name: float(h[t] / n[t]) for name, (h, _) in hits.items()}
        if not has_choice[t]:  # a numerical type: no letter to answer
            found["always_a"] = found["most_frequent_position"] = None
        shown = {"majority_answer": hits["majority_answer"][1][t], "most_frequent_position":
                 hits["most_frequent_position"][1][t] if has_choice[t] else None}
        out["by_type"][str(label)] = entry(n[t], found, float(model_hits[t] / n[t]), shown)
    total = float(n.sum())
    overall = {name: float(h.sum()) / total for name, (h, _) in hits.items()}  # a type's prior on its own items
    if not bool(has_choice.any()):
        overall["always_a"] = overall["most_frequent_position"] = None
    out["all"] = entry(total, overall, float(model_hits.sum()) / total, {})
    return _jsonable(out)


def _mode_hits(type_id: torch.Tensor, n_types: int, values: np.ndarray,
               counted: np.ndarray) -> tuple[torch.Tensor, list[str | None]]:
    """Per type, how many of its `counted` rows hold the type's most frequent value, and that value."""
    value_id, uniques = factorize(pd.Series(values, dtype=object), sort=True)
    mask = torch.from_numpy(counted) & (value_id >= 0)
    joint = torch.bincount(type_id[mask] * len(uniques) + value_id[mask], minlength=n_types * max(len(uniques), 1))
    counts = joint.reshape(n_types, max(len(uniques), 1)).to(torch.float64)
    best = counts.max(1)
    return best.values, [str(uniques[j]) if best.values[t] > 0 else None for t, j in enumerate(best.indices.tolist())]


def _gold_texts(rows: pd.DataFrame, gold: np.ndarray) -> np.ndarray:
    """The gold option texts of choice items, ' | '-joined in letter order ('' where unknown)."""
    options = rows["options"].tolist() if "options" in rows.columns else [()] * len(rows)
    return np.array([" | ".join(str(list(opts)[OPTION_LETTERS.index(c)]) for c in g
                                if c in OPTION_LETTERS and OPTION_LETTERS.index(c) < len(list(opts)))
                     if opts is not None else "" for opts, g in zip(options, gold)], dtype=object)


def _number_texts(gold: np.ndarray) -> np.ndarray:
    """Numerical golds read as numbers ('8.810' and '8.81' are one answer)."""
    values = pd.to_numeric(pd.Series(gold, dtype=object), errors="coerce").to_numpy(np.float64)
    return np.where(np.isnan(values), gold, np.array([repr(float(v)) for v in values], dtype=object))


# ---- two runs' answers ----------------------------------------------------------------------------
def read_answers(answers: Sequence[Any], kinds: Sequence[Any]) -> np.ndarray:
    """Each answer as the comparison reads it: for choice items the set of letters it names when it
    is only letters and separators ('A, C' and 'AC' are one answer; markdown bold and LaTeX boxes
    removed as FinMME's judge does); for numerical items the number it holds (FinMME's reading:
    '8.81%' and '8.810' are one answer); else its case-folded, whitespace-collapsed text."""
    text = pd.Series(normalize_response(answers), dtype=object).str.strip()  # Python strings: any text a reply holds
    letters_only = text.str.upper().str.fullmatch(r"\(?[A-N](?:[\s,;/&、，]*[A-N])*\)?[\s,.;)]*").fillna(False)
    choice = pd.Series(np.isin(np.asarray(kinds, dtype=object), CHOICE_KINDS), index=text.index)
    letters = pd.Series(masks_to_letters(letters_to_mask(text.str.upper().to_numpy(dtype=object), OPTION_LETTERS,
                                                         casefold=False)), index=text.index, dtype=object)
    plain = "text:" + text.str.casefold().str.split().str.join(" ")
    number = pd.Series(numeric_values(text.to_numpy(dtype=object)).numpy(), index=text.index)
    numerical = pd.Series(np.asarray(kinds, dtype=object) == NUMERICAL, index=text.index) & number.notna()
    plain = plain.where(~numerical, "number:" + number.map(repr))
    return ("letters:" + letters).where(choice & letters_only, plain).to_numpy(dtype=object)


def answer_disagreements(dfs: Sequence[pd.DataFrame], names: Sequence[str], benchmark: Benchmark,
                         official: str | None = None) -> dict[str, Any]:
    """The shared items two runs answer differently (`read_answers`): id, each run's answer, the
    official run's raw output shortened, the gold, and which run is right ('both', 'neither' or a
    run's name) by the benchmark's rule; counted in full, listed up to MAX_DISAGREEMENTS."""
    frames = [df.assign(_correct=per_question_correct(df, benchmark)).set_index(df["id"].astype(str)) for df in dfs]
    shared = frames[0].index.intersection(frames[1].index, sort=False)
    left, right = (f.loc[shared] for f in frames)
    read = [read_answers(str_column(f, "answer"), str_column(f, "kind")) for f in (left, right)]
    differ = np.flatnonzero(read[0] != read[1])
    hits = [np.nan_to_num(f["_correct"].to_numpy(np.float64), nan=0.0)[differ] > 0.5 for f in (left, right)]
    verdict = np.where(hits[0] & hits[1], "both", np.where(hits[0], names[0], np.where(hits[1], names[1], "neither")))
    source = (left, right)[list(names).index(official)] if official in names else None
    raw = str_column(source, "raw_output")[differ] if source is not None else np.full(len(differ), "", dtype=object)
    answers = [str_column(f, "answer")[differ] for f in (left, right)]
    golds = str_column(left, "gold")[differ]
    items = [{"id": str(shared[i]), "answers": {names[0]: answers[0][k], names[1]: answers[1][k]},
              "gold": golds[k], "right": str(verdict[k]), "raw_output": _shortened(raw[k])}
             for k, i in enumerate(differ[:MAX_DISAGREEMENTS])]
    counts = {name: int((verdict == name).sum()) for name in (*names, "both", "neither")}
    return _jsonable({"runs": list(names), "official": official, "n_shared": int(len(shared)),
                      "n_disagree": int(len(differ)), "right": counts, "items": items,
                      "listed": len(items), "meaning": "answers read as letter sets for choice items, as text else; "
                                                       "'right' by the benchmark's rule"})


def _shortened(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= RAW_OUTPUT_CHARS else text[:RAW_OUTPUT_CHARS - 1] + "…"
