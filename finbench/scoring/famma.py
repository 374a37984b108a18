"""FAMMA: plain accuracy from per-question correctness, overall and by metadata.

Official source: famma-bench/bench-script @ fcb95d7 — every sub-question, multiple choice
included, is judged correct/incorrect by an LLM against `answers`; the metric is plain accuracy,
overall and by arithmetic / non-arithmetic (`is_arithmetic`), language, difficulty
(`topic_difficulty`), subfield and language × difficulty. Older code judged multiple choice by
exact match.

Per-question correctness, first source that applies:
- choice items whose answer is canonical letters (the constrained decoder's output): recomputed
  as an exact letter-set match (the older official multiple-choice rule) — deterministic, never stale;
- `judge_score`: the `--judge` model's verdict, read as the analyzer reads verdicts ("correct" or
  True is 1, anything else 0);
- `rule_score`: finbench's rule judge (a number within tolerance, the option by letter or text);
- the stored `correct` column (a re-score of an older run);
- otherwise: numerical items with a tolerance by the FinMME number rule, anything else by
  normalised exact text match — a fallback, reported as such.
Rows with a per-sample error are wrong. Questions without a gold answer (the live set,
`gold_status` = unanswered) are not scored: they are counted as `n_unscored`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.scorer import Scorer
from finbench.core.types import MULTI, NUMERICAL, OPTION_LETTERS, SINGLE
from finbench.kernels.bitmask import letters_to_mask, to_str_array
from finbench.scoring.answers import numeric_values, numerical_correct
from finbench.scoring.stats import ScoreTable, error_mask, first_present, float_column, str_column

LABEL = "FAMMA accuracy (famma-bench/bench-script; per-question correctness)"
CANONICAL_LETTERS = re.compile(r"^[A-N]*$")
ARITHMETIC_COLUMNS = ("is_arithmetic", "arithmetic")
DIFFICULTY_COLUMNS = ("difficulty", "topic_difficulty")


def normalized_text(values: np.ndarray) -> np.ndarray:
    """Case-folded, whitespace-collapsed strings for the open-answer fallback."""
    text = pd.Series(to_str_array(values), dtype=object)  # Python strings: any text a reply holds
    return text.str.casefold().str.split().str.join(" ").to_numpy(dtype=object)


def correctness(df: pd.DataFrame) -> tuple[torch.Tensor, dict[str, int]]:
    """Per-question correctness (bool [N]) and how many rows each source decided."""
    kind = str_column(df, "kind")
    answers = str_column(df, "answer")
    golds = str_column(df, "gold")
    has_error = error_mask(df)
    judged = float_column(df, "judge_score")
    ruled = float_column(df, "rule_score")
    stored = np.where(~np.isnan(judged), judged, np.where(~np.isnan(ruled), ruled, float_column(df, "correct")))

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
    sources = {"recomputed_letters": int(canonical.sum()),
               "judge_model": int((~canonical & ~np.isnan(judged)).sum()),
               "rules": int((~canonical & np.isnan(judged) & ~np.isnan(ruled)).sum()),
               "correct_column": int((use_column & np.isnan(judged) & np.isnan(ruled)).sum()),
               "rule_fallback": int(fallback.sum())}
    return torch.from_numpy(correct.astype(bool)), sources


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """From segment sums [..., S, 2] (channels 1, correct): plain accuracy."""
    total = sums.sum(-2)
    return {"accuracy": total[..., 1] / total[..., 0]}


def group_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The official breakdown columns, derived where FAMMA stores them differently:
    `arithmetic` (arithmetic / non-arithmetic; a missing flag stays missing), `difficulty`,
    `language×difficulty`, and each breakdown again within the arithmetic split
    (`arithmetic×subfield`, `arithmetic×difficulty`, `arithmetic×language`,
    `arithmetic×language×difficulty`). A None label stays None (missing), "" stays "" . The benchmark
    lists these among its breakdowns (benchmarks/famma/texts.py `DERIVED_GROUP_COLUMNS`)."""
    out = pd.DataFrame(index=df.index)
    arithmetic = first_present(df, ARITHMETIC_COLUMNS)
    split = None
    if arithmetic is not None:
        flag = df[arithmetic].map(_truthy)
        split = flag.map({True: "arithmetic", False: "non-arithmetic"}).astype(object)
        out["arithmetic"] = split
    difficulty = first_present(df, DIFFICULTY_COLUMNS)
    if difficulty is not None and difficulty != "difficulty":
        out["difficulty"] = df[difficulty]
    language_difficulty = None
    if "language" in df.columns and difficulty is not None:
        language_difficulty = _joined(df["language"], df[difficulty])
        out["language×difficulty"] = language_difficulty
    if split is not None:
        within = {"subfield": df.get("subfield"), "difficulty": df[difficulty] if difficulty else None,
                  "language": df.get("language"), "language×difficulty": language_difficulty}
        for name, column in within.items():
            if column is not None:
                out[f"arithmetic×{name}"] = _joined(split, column)
    return out


def _joined(a: pd.Series, b: pd.Series) -> pd.Series:
    """'a|b' per row; missing when either part is missing (None is not the text 'None')."""
    missing = a.isna().to_numpy() | b.isna().to_numpy()
    text = np.array([f"{x}|{y}" for x, y in zip(a.tolist(), b.tolist())], dtype=object)
    return pd.Series(np.where(missing, None, text), index=a.index, dtype=object)


def _truthy(value: Any) -> bool | None:
    """The analyzer keeps is_arithmetic == '1' and == '0'; the hub stores 1 / 0 (int) and the
    reasoning set True / False, read the same way here. Anything else (None, '') is missing."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(value).strip().lower()
    if text in ("1", "true", "arithmetic"):
        return True
    if text in ("0", "false", "non-arithmetic"):
        return False
    return None


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    """The FAMMA ScoreTable of one run: the answered questions (unanswered ones are counted)."""
    status = str_column(df, "gold_status", default="answered")
    rows = np.flatnonzero(status != "unanswered")
    n_unscored = int(len(df) - len(rows))
    df = df.iloc[rows]
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
                      info={"label": LABEL, "correct_sources": sources, "rows": rows, "n_unscored": n_unscored,
                            "notes": notes + ([f"{n_unscored} question{'s have' if n_unscored != 1 else ' has'} no gold answer (live set): generated, "
                                               "stored, not scored"] if n_unscored else []),
                            "n_errors": int(error_mask(df).sum())})


def summary(df: pd.DataFrame, table: ScoreTable, estimates: dict[str, Any]) -> dict[str, Any]:
    return {"correct_sources": table.info["correct_sources"], "n_unscored": table.info["n_unscored"]}


SCORER = Scorer(build_table=build_table, summary=summary, group_frame=group_frame)
