"""FinMMR's answer rule, restated from addictedLL/FinMMR @ d8b12cc
`evaluate/utils/evaluation_utils.py` (`get_acc`, `normalize`, `within_eps`) without `eval`;
torch-free, read by the benchmark's verdicts (benchmarks/finmmr.py) and by its score
(scoring/finmmr.py).

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
"""

from __future__ import annotations

import builtins
import re
from typing import Any

from finbench.sandbox.safe_eval import MAX_TEXT, EvalFailed, Opaque
from finbench.sandbox.safe_eval import safe_eval as bounded_eval

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
