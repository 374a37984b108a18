"""FAMMA: plain accuracy from per-question correctness, overall and by metadata.

Official source: famma-bench/bench-script @ fcb95d7 — every sub-question, multiple choice
included, is judged correct/incorrect by an LLM against `answers`; the metric is plain accuracy,
overall and by arithmetic / non-arithmetic (`is_arithmetic`), language, difficulty
(`topic_difficulty`), subfield and language × difficulty. Older code judged multiple choice by
exact match.

finbench cannot re-run an LLM judge while scoring, so per-question correctness is taken as:
- choice items whose answer is canonical letters (the constrained decoder's output): recomputed
  as an exact letter-set match (the older official multiple-choice rule) — deterministic, never stale;
- otherwise the `correct` column (the verdict of the judge, local model or rules, at run time);
- where that is missing: numerical items with a tolerance by the FinMME number rule, anything else
  by normalised exact text match (case-folded, whitespace collapsed) — a fallback, reported as such.
Rows with a per-sample error are wrong.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import torch

from finbench.kernels.bitmask import letters_to_mask
from finbench.scoring.finmme import numeric_values, numerical_correct
from finbench.scoring.stats import ScoreTable, error_mask, first_present, float_column, str_column
from finbench.types import MULTI, NUMERICAL, OPTION_LETTERS, SINGLE

LABEL = "FAMMA accuracy (famma-bench/bench-script; per-question correctness)"
CANONICAL_LETTERS = re.compile(r"^[A-N]*$")
ARITHMETIC_COLUMNS = ("is_arithmetic", "arithmetic")
DIFFICULTY_COLUMNS = ("difficulty", "topic_difficulty")


def normalized_text(values: np.ndarray) -> np.ndarray:
    """Case-folded, whitespace-collapsed strings for the open-answer fallback."""
    return pd.Series(values, dtype=object).astype(str).str.casefold().str.split().str.join(" ").to_numpy(dtype=object)


def correctness(df: pd.DataFrame) -> tuple[torch.Tensor, dict[str, int]]:
    """Per-question correctness (bool [N]) and how many rows each source decided."""
    kind = str_column(df, "kind")
    answers = str_column(df, "answer")
    golds = str_column(df, "gold")
    has_error = error_mask(df)
    stored = float_column(df, "correct")

    is_choice = np.isin(kind, (SINGLE, MULTI))
    canonical = is_choice & np.array([bool(CANONICAL_LETTERS.match(a.strip())) for a in answers], dtype=bool)
    letter_match = (letters_to_mask(answers, OPTION_LETTERS, casefold=False)
                    == letters_to_mask(golds, OPTION_LETTERS, casefold=False)).numpy()

    tolerance = float_column(df, "tolerance")
    numeric = (kind == NUMERICAL) & ~np.isnan(tolerance)
    number_match = numerical_correct(numeric_values(answers), numeric_values(golds),
                                     torch.from_numpy(tolerance)).numpy()
    text_match = normalized_text(answers) == normalized_text(golds)

    use_column = ~canonical & ~np.isnan(stored)
    fallback = ~canonical & ~use_column
    correct = np.where(canonical, letter_match,
                       np.where(use_column, stored > 0.5, np.where(numeric, number_match, text_match)))
    correct &= ~has_error
    sources = {"recomputed_letters": int(canonical.sum()), "correct_column": int(use_column.sum()),
               "rule_fallback": int(fallback.sum())}
    return torch.from_numpy(correct.astype(bool)), sources


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """From segment sums [..., S, 2] (channels 1, correct): plain accuracy."""
    total = sums.sum(-2)
    return {"accuracy": total[..., 1] / total[..., 0]}


def group_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The official breakdown columns, derived where FAMMA stores them differently:
    `arithmetic` (arithmetic / non-arithmetic), `difficulty`, and `language×difficulty`."""
    out = pd.DataFrame(index=df.index)
    arithmetic = first_present(df, ARITHMETIC_COLUMNS)
    if arithmetic is not None:
        flag = df[arithmetic].map(_truthy)
        out["arithmetic"] = flag.map({True: "arithmetic", False: "non-arithmetic"}).astype(object)
    difficulty = first_present(df, DIFFICULTY_COLUMNS)
    if difficulty is not None and difficulty != "difficulty":
        out["difficulty"] = df[difficulty]
    if "language" in df.columns and difficulty is not None:
        out["language×difficulty"] = str_column(df, "language") + "|" + str_column(df, difficulty)
    return out


def _truthy(value: Any) -> bool | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "arithmetic")
    return bool(value)


def build_table(df: pd.DataFrame, device: str | torch.device = "cpu") -> ScoreTable:
    """The FAMMA ScoreTable of one run."""
    correct, sources = correctness(df)
    dev = torch.device(device)
    c = correct.to(torch.float64).to(dev)
    notes = []
    if sources["rule_fallback"]:
        notes.append(f"{sources['rule_fallback']} rows had no judge verdict and were judged by rules "
                     "(numbers with tolerance, exact normalised text): not the official LLM judge")
    return ScoreTable(ids=str_column(df, "id"), correct=c, score=c, values=torch.stack([torch.ones_like(c), c], 1),
                      segments=torch.zeros(len(df), dtype=torch.int64, device=dev), n_segments=1,
                      statistic=statistics, headline=("accuracy",), primary="accuracy",
                      info={"label": LABEL, "correct_sources": sources, "notes": notes,
                            "n_errors": int(error_mask(df).sum())})
