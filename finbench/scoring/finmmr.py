"""FinMMR scoring, restated from addictedLL/FinMMR @ d8b12cc: `evaluate/utils/evaluation_utils.py`
(`get_acc`, `normalize`, `within_eps`) and `evaluate/evaluate.py` (`eval_cot`, `eval_pot`,
`get_statistics`) — reproduced without `eval`.

The answer rule (`get_acc`): a string answer is `normalize`d — first read as a Python expression
(the official `eval`; here `safe_eval`, an `ast` walk over literals and arithmetic with size
limits), else cleaned up (lower case, trailing dots, currency and scale words, the text after the
last `=` or `≈`, backquotes, %, $, °, yes/no/true/false, "approximately", the part before " or ",
a unit before or after the number, `10^n`, " x "/" × " as *, thousands commas) and read again;
a tuple or list counts by its first element; a bool is compared exactly; a number is right
within 0.2% of the ground truth (`within_eps`). Quirks kept, as the official code has them:
- "1,234.5" is valid Python, the tuple (1, 234.5): it counts as 1; "10^3" is 10 XOR 3 = 9;
- when the clean-up runs, `10^3` becomes `math.pow(10, 3)`, which the official `eval` cannot
  resolve (`math` is not imported there): "x = 10^3" scores 0;
- "usd" loses "us" first (the list is applied in order), so "5 usd" is read as "5 d" → 5;
- any "true"/"false" inside the text makes the answer that boolean ("not true" → True);
- the first element of a tuple is not normalised again ("('5',)" → '5', a string: 0);
- an expression that is valid Python but not a number ('abs', a set, a string) scores 0.
Where `safe_eval` differs from `eval` (documented, rare in answers): names other than True,
False and None are an object of the official module (scoring 0) when it defines them, else a
NameError; calls only to abs, round, min, max, sum, int, float, pow, len, bool, complex, str and
divmod; attributes, comprehensions, f-strings, lambdas fail (so the clean-up runs); work is bounded
before each step (sandbox/safe_eval.py: integers above 10^4,000, strings or lists above 10^5
items, format widths, `sum` of sequences, `round` digits, more than 2,000 nodes or 10^6 items made
fail instead of being computed); an answer longer than 1,000 characters scores 0 unread; `exit()`
(which ends the official evaluator) scores 0. An answer that is code scores 0 and runs nothing.

Statistics (`get_statistics`): accuracy = mean acc, execution rate = mean execution_rate, ×100
rounded to 2 places in `official`; a per-sample error scores 0 on both. Per-row verdicts come
from the run (`rule_score` / `judge_score` and their `judge_details`), else from `answer`.
"""

from __future__ import annotations

import builtins
import json
import math
import re
from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from finbench.sandbox import LANDLOCK_NOTE, UNSAFE_NOTE
from finbench.sandbox.safe_eval import MAX_TEXT, EvalFailed, Opaque
from finbench.sandbox.safe_eval import safe_eval as bounded_eval
from finbench.benchmarks.metrics import ACCURACY, Metric
from finbench.scoring.stats import Scorer, ScoreTable, error_mask, float_column, str_column

LABEL = "FinMMR (accuracy and execution rate, get_acc within 0.2%), addictedLL/FinMMR"
RELATIVE_TOLERANCE = 0.002  # within_eps
MONEY = ("£", "€", "¥", "million", "billion", "thousand", "us", "usd", "rmb")  # removed in this order
UNIT_AFTER = r"[-+]?(?:[\d,]*\.*\d+) [^0-9 ]+$"
UNIT_AFTER_NUMBER = r"([-+]?(?:[\d,]*\.*\d+)) [^0-9 ]+$"
UNIT_BEFORE = r"[^0-9 ]+ [-+]?(?:[\d,]*\.*\d+)$"
UNIT_BEFORE_NUMBER = r"[^0-9 ]+ ([-+]?(?:[\d,]*\.*\d+))$"
SUFFIX = r"[-+]?(?:[\d,]*\.*\d+)[^\d]{1,2}$"
SUFFIX_NUMBER = r"([-+]?(?:[\d,]*\.*\d+))[^\d]{1,2}$"
PREFIX = r"[^-+\d]{1,2}(?:[\d,]*\.*\d+)$"
PREFIX_NUMBER = r"[^-+\d]{1,2}((?:[\d,]*\.*\d+))$"
PLAIN_NUMBER = r"^[-+]?(\d{1,3}(,\d{3})*|(\d+))(\.\d+)?$"  # is_number
# names the official `eval` resolves inside evaluation_utils.py: its imports and functions, builtins
MODULE_NAMES = frozenset({"re", "LLM", "logger", "within_eps", "is_number", "is_scientific_number",
                          "contain_num_and_str", "normalize", "get_acc", "extract_cot_answers",
                          "extract_pot_answers", "__name__", "__doc__", "__file__", "__builtins__", "__loader__",
                          "__spec__", "__package__", "__cached__"}) | frozenset(dir(builtins))


def safe_eval(text: str) -> Any:
    """The value the official `eval(text)` has in evaluation_utils.py (its names resolve to an
    object no rule accepts), with the work bounded before each step (sandbox/safe_eval.py)."""
    return bounded_eval(text, MODULE_NAMES)


def normalize(prediction: str) -> Any:
    """The official `normalize`: the answer read as an expression, else cleaned up and read
    again (None when that fails too)."""
    try:
        return safe_eval(prediction)
    except EvalFailed:
        pass
    text = prediction.strip().lower().rstrip(".")
    for money in MONEY:
        text = text.replace(money, "")
    for mark in ("=", "≈"):
        if mark in text:
            text = text.split(mark)[-1].strip()
    for mark in ("`", "%", "$", "°"):
        text = text.replace(mark, "")
    if text in ("true", "yes", "false", "no"):
        text = "True" if text in ("true", "yes") else "False"
    if "true" in text or "false" in text:
        text = "True" if "true" in text else "False"
    if "approximately" in text:
        text = text.replace("approximately", "").strip()
    if " or " in text:
        text = text.split(" or ")[0]
    for whole, number in ((UNIT_AFTER, UNIT_AFTER_NUMBER), (UNIT_BEFORE, UNIT_BEFORE_NUMBER),
                          (SUFFIX, SUFFIX_NUMBER), (PREFIX, PREFIX_NUMBER)):
        if re.match(whole, text):
            text = re.search(number, text).group(1)
    if "10^" in text:
        text = re.sub(r"10\^(-?\d+)", r"math.pow(10, \1)", text)
    text = text.replace(" x ", "*").replace(" × ", "*")
    if re.match(PLAIN_NUMBER, text):
        text = text.replace(",", "")
    try:
        return safe_eval(text or "None")
    except EvalFailed:
        return None


def within_eps(prediction: Any, truth: Any) -> bool:
    eps = abs(truth) * RELATIVE_TOLERANCE
    return bool(prediction >= truth - eps and prediction <= truth + eps)  # the official `if …: return True`


def get_acc(prediction: Any, truth: Any) -> int:
    """1 when `prediction` (a string, or a program's value) is the ground truth by the official
    rule, else 0 (the official scores 0 for whatever raises, a non-numeric truth included)."""
    try:
        if not isinstance(truth, (int, float, bool)):
            return 0
        if isinstance(prediction, str):
            if len(prediction) > MAX_TEXT:  # hostile input: not read (module docstring)
                return 0
            prediction = normalize(prediction)
        if isinstance(prediction, (tuple, list)):
            prediction = prediction[0]
        if prediction is None:
            return 0
        if isinstance(truth, bool) or isinstance(prediction, bool):
            return int(prediction == truth)
        return int(within_eps(prediction, truth))
    except Exception:  # noqa: BLE001 — as the official: any comparison that raises is wrong
        return 0


def valid_extraction(text: str) -> bool:
    """eval_cot's `vailid`: an extracted answer counts (execution_rate 1) when it is non-empty
    and does not contain "none"."""
    return bool(text) and "none" not in text.lower()


def truth_value(gold: str) -> Any:
    """The ground truth as the JSON had it (int, float or bool), from `Question.gold`."""
    text = (gold or "").strip()
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text  # not a number: the official assertion fails, every answer scores 0


def outcome_value(kind: str, value: str, first_kind: str = "") -> Any:
    """A sandboxed program's result (finbench/sandbox `Outcome`) as the official `exec` returned
    it to `get_acc`: numbers, bools and None exactly, strings as text, a sequence by its first
    element, anything else an object no rule accepts."""
    if kind == "seq":
        return [outcome_value(first_kind, value)] if first_kind else []
    try:  # the text came from the program's process: a forged one is an object no rule accepts
        return {"int": lambda: int(value, 0), "float": lambda: float(value), "bool": lambda: value == "True",
                "none": lambda: None, "str": lambda: value}.get(kind, Opaque)()
    except ValueError:
        return Opaque()


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
