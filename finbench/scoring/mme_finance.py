"""MME-Finance scoring, restated from HiThink-Research/MME-Finance @ 70f146b (the authors'
VLMEvalKit fork): `MMfin_acc` and `MMfin_Binary.evaluate`.

- Open items (`kind` open): the judge's 0–5 score (`judge_score`); the headline `score` is the
  mean over the judged items / 5 (the fork reports mean × 20, the same number ×100), and the
  breakdowns by task category, image type and image style are the fork's three tables. An item
  with a per-sample error scores 0. Items without a judge score (no `--judge`) are not scored and
  are counted (`n_unjudged`).
- Binary items (`kind` single, options 是/否 or Yes/No): the prediction and the answer compared
  exactly after stripping "。" only (quirk kept: whitespace is not stripped); a constrained answer
  (a letter from the letter decoder) is read as its option's text first; a free reply of just
  "A" or "B" is not (the fork compares it as it is: wrong). `binary_accuracy` = correct / total;
  `binary_f1` = 2·TP / (2·TP + FP + FN) with the positive class the item's first option (是; Yes
  for English yes/no data outside the official sets), counting only predictions that are exactly
  one of the item's own options — a "Yes" to a 是 item is neither TP nor FP, as the fork knows
  only 是/否 — and (quirk kept) FN counts only predictions that are exactly the negative answer,
  so an unreadable prediction of a positive item is neither TP nor FN.
`correct` (for McNemar and flips) is binary correctness, and full marks (5) for open items.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import Metric
from finbench.benchmarks.scorer import Scorer
from finbench.core.types import OPEN, OPTION_LETTERS
from finbench.scoring.stats import ScoreTable, error_mask, float_column, letters_read, str_column

LABEL = "MME-Finance (judge score ×20 for open items; binary accuracy and F1), HiThink-Research/MME-Finance"
FULL_MARKS = 5.0
STRIP = "。"
OPTIONS_BY_LANGUAGE = {"zh": ("是", "否"), "en": ("Yes", "No")}  # (positive, negative): the first is F1's class
CHANNELS = ("open", "grade", "binary", "binary_correct", "tp", "fp", "fn")


def _binary_texts(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(prediction, truth, positive, negative) texts of every row as the fork compares them, "。"
    stripped from both ends. The gold letter is read as its option's text; an answer letter only
    where the letter decoder gave it (`letters_read`: a constrained choice) — a free
    reply of just "A" is compared as "A", as the fork does. A row's options are its own 是/否 or
    Yes/No (without an options column, its language's)."""
    answers, golds = str_column(df, "answer"), str_column(df, "gold")
    options = df["options"].tolist() if "options" in df.columns else [None] * len(df)
    languages = str_column(df, "language")
    decoded = letters_read(df)

    def listed(value: Any) -> list:
        return list(value) if isinstance(value, (list, tuple, np.ndarray)) else []

    row_options = [listed(o) or list(OPTIONS_BY_LANGUAGE.get(lang, OPTIONS_BY_LANGUAGE["zh"]))
                   for o, lang in zip(options, languages)]

    def as_text(value: str, opts: list) -> str:
        if len(value) == 1 and value in OPTION_LETTERS[:len(opts)]:
            return str(opts[OPTION_LETTERS.index(value)])
        return value

    predicted = np.array([(as_text(a, o) if d else a).strip(STRIP)
                          for a, o, d in zip(answers, row_options, decoded)], dtype=object)
    truth = np.array([as_text(g, o).strip(STRIP) for g, o in zip(golds, row_options)], dtype=object)
    positive = np.array([str(o[0]) for o in row_options], dtype=object)
    negative = np.array([str(o[1]) if len(o) > 1 else "" for o in row_options], dtype=object)
    return predicted, truth, positive, negative


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """Segment sums [..., S, 7] (one segment) → the three headline numbers."""
    total = sums.sum(-2)
    open_n, grade, binary_n, right, tp, fp, fn = total.unbind(-1)
    f1_denominator = 2 * tp + fp + fn
    return {"score": grade / open_n, "binary_accuracy": right / binary_n,
            "binary_f1": torch.where(f1_denominator > 0, 2 * tp / f1_denominator.clamp(min=1), torch.zeros_like(tp))
            .where(binary_n > 0, torch.full_like(tp, float("nan")))}


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    kind = str_column(df, "kind")
    has_error = error_mask(df)
    grade = np.where(has_error, 0.0, float_column(df, "judge_score"))
    is_open = kind == OPEN
    judged = is_open & ~np.isnan(grade)
    binary = ~is_open
    rows = np.flatnonzero(judged | binary)
    sub = df.iloc[rows]
    predicted, truth, positive_text, negative_text = _binary_texts(sub)
    sub_binary, sub_error = binary[rows], has_error[rows]
    right = sub_binary & ~sub_error & (predicted == truth)
    positive = truth == positive_text  # F1 counts only the item's own options, as accuracy does
    says_positive = ~sub_error & (predicted == positive_text)
    says_negative = ~sub_error & (predicted == negative_text)
    sub_grade = np.nan_to_num(grade[rows], nan=0.0) / FULL_MARKS
    values = np.stack([judged[rows], np.where(judged[rows], sub_grade, 0.0), sub_binary, right,
                       sub_binary & says_positive & positive, sub_binary & says_positive & ~positive,
                       sub_binary & says_negative & positive], axis=1).astype(np.float64)
    dev = torch.device(device)
    score = torch.from_numpy(np.where(sub_binary, right.astype(np.float64), sub_grade)).to(dev)
    correct = torch.from_numpy(np.where(sub_binary, right, sub_grade >= 1.0).astype(np.float64)).to(dev)
    n_unjudged = int((is_open & np.isnan(grade)).sum())
    notes = [f"{n_unjudged} open items have no judge score (run with --judge, a vision-language model, "
             "to score them): generated, stored, not scored"] if n_unjudged else []
    headline = tuple(name for name, present in (("score", judged.any()), ("binary_accuracy", binary.any()),
                                                ("binary_f1", binary.any())) if present) or ("score",)
    return ScoreTable(ids=str_column(sub, "id"), correct=correct, score=score, values=torch.from_numpy(values).to(dev),
                      segments=torch.zeros(len(sub), dtype=torch.int64, device=dev), n_segments=1,
                      statistic=statistics, headline=headline, primary=headline[0],
                      info={"label": LABEL, "rows": rows, "n_unjudged": n_unjudged, "notes": notes,
                            "n_errors": int(has_error[rows].sum()), "n_open": int(judged.sum()),
                            "n_binary": int(binary.sum())})


def summary(df: pd.DataFrame, table: ScoreTable, estimates: dict[str, Any]) -> dict[str, Any]:
    score = estimates.get("score")
    return {"score_x20": score * 100 if score is not None else None, "n_open": table.info["n_open"],
            "n_binary": table.info["n_binary"], "n_unjudged": table.info["n_unjudged"]}


METRICS = (Metric("score", "score", n_key="n_open", n_label="judged open item"),
           Metric("binary_accuracy", "binary accuracy", n_key="n_binary", n_label="binary item"),
           Metric("binary_f1", "binary F1", n_key="n_binary", n_label="binary item"))
SCORER = Scorer(build_table=build_table, summary=summary, metrics=METRICS)
