"""FinMMR scoring, restated from addictedLL/FinMMR @ d8b12cc: `evaluate/utils/evaluation_utils.py`
(`get_acc`, `normalize`, `within_eps`) and `evaluate/evaluate.py` (`eval_cot`, `eval_pot`,
`get_statistics`) — reproduced without `eval`.

The answer rule (`get_acc`, `normalize`, `within_eps`) is benchmarks/finmmr_rule.py's, torch-free (the
benchmark's verdicts read it without the score).

Statistics (`get_statistics`): accuracy = mean acc, execution rate = mean execution_rate, ×100
rounded to 2 places in `official`; a per-sample error scores 0 on both. Per-row verdicts come
from the run (`rule_score` / `judge_score` and their `judge_details`), else from `answer`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from finbench.benchmarks.finmmr_rule import get_acc, truth_value, valid_extraction
from finbench.benchmarks.metrics import ACCURACY, Metric
from finbench.benchmarks.scorer import Scorer
from finbench.sandbox import LANDLOCK_NOTE, UNSAFE_NOTE
from finbench.scoring.stats import ScoreTable, error_mask, float_column, str_column

LABEL = "FinMMR (accuracy and execution rate, get_acc within 0.2%), addictedLL/FinMMR"


# ---- the score -------------------------------------------------------------------------------------
CHANNELS = ("acc", "execution_rate", "n")
# the benchmark's breakdowns, by which the execution rate is reported: benchmarks/finmmr.py declares the same
# (the registry reads them without importing this module; tests/test_registry_torch_free.py checks they agree)
GROUP_COLUMNS = ("difficulty", "language", "source", "subfield", "image_type")


def _details(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for text in str_column(df, "judge_details") if "judge_details" in df.columns else [""] * len(df):
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            found = {}
        out.append(found if isinstance(found, dict) else {})
    return out


def verdicts(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(acc, execution_rate, extracted text, source) per row: the judge's verdict where a cot run
    has one (the official extraction), else the rules' (the cot rule, the program's result, the
    constrained number), else get_acc applied to `answer` (answers extracted elsewhere)."""
    judged, ruled = float_column(df, "judge_score"), float_column(df, "rule_score")
    answers, golds = str_column(df, "answer"), str_column(df, "gold")
    acc, rate = np.zeros(len(df)), np.zeros(len(df))
    extracted, source = [""] * len(df), [""] * len(df)
    for i, details in enumerate(_details(df)):
        cot = isinstance(details.get("rules"), Mapping) and details["rules"].get("source") == "rule"
        for name, value in (("judge", judged[i] if cot else math.nan), ("rules", ruled[i])):
            info = details.get(name)
            if value == value and isinstance(info, Mapping):
                acc[i], rate[i] = value, float(info.get("execution_rate", 1))
                extracted[i], source[i] = str(info.get("extracted", "")), str(info.get("source", name))
                break
        else:
            acc[i] = get_acc(answers[i], truth_value(golds[i])) if valid_extraction(answers[i]) else 0
            rate[i], extracted[i], source[i] = float(valid_extraction(answers[i])), answers[i], "answer"
    return acc, rate, extracted, source


def statistics(sums: torch.Tensor) -> dict[str, torch.Tensor]:
    """Segment sums [..., S, 3] → accuracy and execution rate (get_statistics, on 0–1)."""
    acc, rate, n = sums.sum(-2).unbind(-1)
    return {"accuracy": acc / n, "execution_rate": rate / n}


def build_table(df: pd.DataFrame, variant: str = "official", device: str | torch.device = "cpu") -> ScoreTable:
    acc, rate, extracted, source = verdicts(df)
    has_error = error_mask(df)
    acc, rate = np.where(has_error, 0.0, acc), np.where(has_error, 0.0, rate)
    dev = torch.device(device)
    values = torch.from_numpy(np.stack([acc, rate, np.ones(len(df))], axis=1)).to(dev)
    sources = sorted({s for s, e in zip(source, has_error) if not e})
    notes = [f"answers read by {', '.join(SOURCE_NAMES.get(s, s) for s in sources)}"] if sources else []
    where = {d["rules"].get("sandbox") for d in _details(df) if isinstance(d.get("rules"), Mapping)}
    notes += [note for mode, note in (("landlock", LANDLOCK_NOTE), ("unsafe", UNSAFE_NOTE)) if mode in where]  # no jail
    return ScoreTable(ids=str_column(df, "id"), correct=values[:, 0].clone(), score=values[:, 0].clone(),
                      values=values, segments=torch.zeros(len(df), dtype=torch.int64, device=dev), n_segments=1,
                      statistic=statistics, headline=("accuracy", "execution_rate"), primary="accuracy",
                      info={"label": LABEL, "n_errors": int(has_error.sum()), "notes": notes,
                            "extracted": extracted, "execution_rate": rate, "sources": sources})


SOURCE_NAMES = {"rule": "the rule (the number after 'the answer is', else the last number; not the official "
                        "judge extraction)", "judge": "the --judge model with the official extraction prompt",
                "program": "the program run in the sandbox", "number": "the numeric grammar decoder",
                "answer": "get_acc on the given answers"}


def summary(df: pd.DataFrame, table: ScoreTable, estimates: Mapping[str, Any]) -> dict[str, Any]:
    """get_statistics' own numbers (×100, 2 places), and the execution rate by breakdown."""
    acc, rate = table.values[:, 0].cpu().numpy(), table.info["execution_rate"]
    n = max(len(df), 1)
    by_group: dict[str, dict[str, float]] = {}
    frame = pd.DataFrame({"rate": np.where(error_mask(df), 0.0, rate)}, index=df.index)
    for column in (c for c in GROUP_COLUMNS if c in df.columns):
        means = frame["rate"].groupby(df[column].astype(str)).mean()
        by_group[column] = {str(k): float(v) for k, v in means.items()}
    return {"official": {"avg_accuracy": round(float(acc.sum()) / n * 100, 2),
                         "avg_execution_rate": round(float(rate.sum()) / n * 100, 2)},
            "extraction": table.info["sources"], "execution_rate_by": by_group}


SCORER = Scorer(build_table=build_table, summary=summary, metrics=(ACCURACY, Metric("execution_rate", "execution rate")))
