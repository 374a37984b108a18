"""FCMR scoring: exact match of the answer set, as the paper scores it (the repository HYU-NLP/FCMR
@ 594775b publishes no script), with a per-statement accuracy beside it.

Each answer is a 3-bit mask (statement k true ↔ bit k−1): a constrained answer is the letter of one
of the eight sets (benchmarks/fcmr.py `SETS`: A = none … H = 1, 2, 3), an official one the set read
from the generated text. `accuracy` = exact-set match (the headline, the paper's); `statement_accuracy`
= the share of the three true/false judgements a set implies that are right (3 − popcount(p XOR g))/3,
so a model that gets two statements of three right scores 2/3 there and 0 in the headline. An
unreadable answer or a per-sample error is wrong in both.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.fcmr import SETS
from finbench.benchmarks.metrics import ACCURACY, Metric, Variant
from finbench.benchmarks.scorer import Scorer
from finbench.scoring.stats import ScoreTable, error_mask, letters_read, str_column

LABEL = "FCMR (exact match of the answer set, as the paper; per-statement accuracy beside it), HYU-NLP/FCMR"
LETTERS = "ABCDEFGH"
# FCMR publishes no prompt and no scorer: what the reports name as the rule says so, under either protocol
RULE = Variant("official", "the paper's exact match of the set, on finbench's prompt and answer reading (FCMR "
                           "publishes no prompt or scorer)")
SET_MASKS = tuple(sum(1 << (int(k) - 1) for k in s.split(", ")) if s != "none" else 0 for s in SETS)


def masks(values: np.ndarray, letters: bool) -> torch.Tensor:
    """[N] 3-bit masks of answers given as letters of SETS (`letters`) or as set texts; −1 where
    the answer is neither."""
    names = LETTERS if letters else SETS
    lookup = pd.Series(SET_MASKS, index=pd.Index(list(names), dtype=object), dtype=np.int64)
    # looked up as Python strings: numpy's fixed-width ones drop a trailing NUL ("C\x00" would be C)
    found = lookup.reindex(pd.Index(list(values), dtype=object)).to_numpy()
    return torch.from_numpy(np.nan_to_num(found.astype(np.float64), nan=-1).astype(np.int64))


def statement_hits(predicted: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact [N], right statements of three [N]) of masks; a −1 prediction gets neither."""
    valid = (predicted >= 0) & (gold >= 0)
    differ = torch.bitwise_xor(predicted.clamp(min=0), gold.clamp(min=0))
    wrong = sum((differ >> k) & 1 for k in range(3))
    return (valid & (differ == 0)).to(torch.float64), torch.where(valid, 3 - wrong, torch.zeros_like(wrong)).to(torch.float64)


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """Segment sums [..., S, 3] (exact, right statements, n) → the two accuracies."""
    exact, statements, n = sums.sum(-2).unbind(-1)
    return {"accuracy": exact / n, "statement_accuracy": statements / (3 * n)}


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    answers = str_column(df, "answer")
    letter_read = torch.from_numpy(letters_read(df))
    predicted = torch.where(letter_read, masks(answers, letters=True), masks(answers, letters=False))
    gold = masks(str_column(df, "gold"), letters=True)
    exact, statements = statement_hits(predicted, gold)
    ok = torch.from_numpy(~error_mask(df)).to(torch.float64)
    exact, statements = exact * ok, statements * ok
    dev = torch.device(device)
    values = torch.stack([exact, statements, torch.ones(len(df), dtype=torch.float64)], dim=1).to(dev)
    unreadable = int(((predicted < 0) & (ok > 0)).sum())
    notes = [f"{unreadable} answers name no set (no statement number and no 'none'): wrong"] if unreadable else []
    return ScoreTable(ids=str_column(df, "id"), correct=values[:, 0].clone(), score=values[:, 0].clone(), values=values,
                      segments=torch.zeros(len(df), dtype=torch.int64, device=dev), n_segments=1, statistic=statistics,
                      headline=("accuracy", "statement_accuracy"), primary="accuracy",
                      info={"label": LABEL, "n_errors": int((ok == 0).sum()), "notes": notes, "n_unreadable": unreadable})


def summary(df: pd.DataFrame, table: ScoreTable, estimates: dict) -> dict:
    return {"n_unreadable": table.info["n_unreadable"], "chance_accuracy": 1 / len(SETS)}


# one entry of the repository's option_type, a Python dict written as text: 'Text': 'Only_Text'
OPTION_ENTRY = re.compile(r"""['"]([^'"]+)['"]\s*:\s*['"]([^'"]*)['"]""")


def readable_option_type(value: object) -> object:
    """The repository's `option_type` ("{'Text': 'Only_Text', 'Table': 'Arithmetic', ...}") as a
    group name: "Text: Only Text; Table: Arithmetic; ...", read by a pattern (never evaluated);
    anything else as it is."""
    entries = OPTION_ENTRY.findall(value) if isinstance(value, str) else []
    return "; ".join(f"{key.replace('_', ' ')}: {kind.replace('_', ' ')}" for key, kind in entries) or value


def group_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`option_type` with readable group names (readable_option_type); the other columns as stored."""
    if "option_type" not in df.columns:
        return df
    return pd.DataFrame({"option_type": df["option_type"].map(readable_option_type)}, index=df.index)


SCORER = Scorer(build_table=build_table, summary=summary, variants=(RULE,), group_frame=group_frame,
                metrics=(ACCURACY, Metric("statement_accuracy", "per-statement accuracy")))
