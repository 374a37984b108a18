"""FinChart-Bench scoring, restated from its README's "How to test" (Tizzzzy/FinChart-Bench @ 07674bb):
`acc` = mean of `p == gt` per task, where `gt` is `item["answer"].lower()` for MC and TF and
`float(item["answer"])` for QA.

- Official answers (free text, read by benchmarks/finchart_bench.py `extract_official`): MC and TF
  right iff the reading lower-cased equals the gold lower-cased (`[[ C ]]` and `[[ c ]]` both read
  "c"); QA right iff `float(reading) == float(gold)` — exact float equality, as the README; a
  reading float() cannot parse is wrong.
- Constrained answers: the letter read from the logits (the row has option probabilities) is right
  iff it is the gold letter; a QA number from the grammar is judged by the same float equality.
- `qa_accuracy_tolerance`: QA within 1 % of the gold (|p − g| ≤ 0.01·|g|), reported BESIDE the
  README's exact rule (`qa_accuracy`), never instead of it: a chart read to 139.5 instead of 140 is
  exactly wrong and tolerably right.
Headline: accuracy over every item, then per task (the README reports each task apart).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.metrics import ACCURACY, Metric
from finbench.benchmarks.scorer import Scorer
from finbench.scoring.stats import ScoreTable, error_mask, letters_read, str_column

LABEL = "FinChart-Bench (README comparison: lower-cased label for MC/TF, exact float for QA), Tizzzzy/FinChart-Bench"
TASKS = ("MC", "TF", "QA")
QA_RELATIVE_TOLERANCE = 0.01
# channels: per task (n, correct), then QA within the tolerance
CHANNELS = ("n_mc", "mc", "n_tf", "tf", "n_qa", "qa", "qa_tolerance")


def as_float(text: str) -> float:
    """The README's float(): NaN where it raises (NaN equals nothing, so such a reading is wrong)."""
    try:
        return float(text)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def verdicts(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(task [N], exact 0/1 [N], QA within tolerance 0/1 [N]) per row; errors are wrong."""
    task, answer, gold = str_column(df, "task"), str_column(df, "answer"), str_column(df, "gold")
    # Python strings, as the README's `p == gt` compares: numpy's fixed-width strings would drop a
    # trailing NUL ("c\x00" == "c" there), so no text goes through one
    official = pd.Series(str_column(df, "official_answer"), dtype=object).str.lower().to_numpy(dtype=object)
    said = pd.Series(answer, dtype=object).str.strip().str.lower().to_numpy(dtype=object)
    choice_right = np.where(letters_read(df), answer == gold, said == official)
    predicted = np.array([as_float(a) for a in answer], dtype=np.float64)  # string parsing: one pass of float()
    truth = np.array([as_float(g) for g in gold], dtype=np.float64)
    exact = predicted == truth
    close = np.abs(predicted - truth) <= QA_RELATIVE_TOLERANCE * np.abs(truth)
    is_qa = task == "QA"
    ok = ~error_mask(df)
    return task, ok & np.where(is_qa, exact, choice_right), ok & is_qa & (exact | close)


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """Segment sums [..., S, 7] → overall and per-task accuracy (NaN for a task with no item)."""
    n_mc, mc, n_tf, tf, n_qa, qa, tolerance = sums.sum(-2).unbind(-1)
    return {"accuracy": (mc + tf + qa) / (n_mc + n_tf + n_qa), "mc_accuracy": mc / n_mc, "tf_accuracy": tf / n_tf,
            "qa_accuracy": qa / n_qa, "qa_accuracy_tolerance": tolerance / n_qa}


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    task, right, close = verdicts(df)
    columns = []
    for name in TASKS:
        member = task == name
        columns += [member, member & right]
    values = np.stack([*columns, close], axis=1).astype(np.float64)
    dev = torch.device(device)
    present = {name: bool((task == name).any()) for name in TASKS}
    headline = ("accuracy", *(f"{name.lower()}_accuracy" for name in TASKS if present[name]),
                *(("qa_accuracy_tolerance",) if present["QA"] else ()))
    correct = torch.from_numpy(right.astype(np.float64)).to(dev)
    return ScoreTable(ids=str_column(df, "id"), correct=correct, score=correct.clone(),
                      values=torch.from_numpy(values).to(dev), segments=torch.zeros(len(df), dtype=torch.int64, device=dev),
                      n_segments=1, statistic=statistics, headline=headline, primary="accuracy",
                      info={"label": LABEL, "n_errors": int(error_mask(df).sum()), "notes": []})


def summary(df: pd.DataFrame, table: ScoreTable, estimates: dict) -> dict:
    """The README's own numbers: each task's accuracy (its `acc`), and the tolerance used beside QA's."""
    counts = table.values.sum(0).cpu().tolist()
    return {**{f"n_{name.lower()}": int(counts[2 * k]) for k, name in enumerate(TASKS)},
            "qa_relative_tolerance": QA_RELATIVE_TOLERANCE}


METRICS = (ACCURACY, Metric("mc_accuracy", "MC accuracy", n_key="n_mc", n_label="MC item"),
           Metric("tf_accuracy", "TF accuracy", n_key="n_tf", n_label="TF item"),
           Metric("qa_accuracy", "QA accuracy (exact)", n_key="n_qa", n_label="QA item"),
           Metric("qa_accuracy_tolerance", "QA accuracy (within 1 %)", n_key="n_qa", n_label="QA item"))
SCORER = Scorer(build_table=build_table, summary=summary, metrics=METRICS)
