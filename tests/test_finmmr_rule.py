"""FinMMR's answer rule (benchmarks/finmmr_rule.py) against the official `get_acc`: a table of expected
values that always runs, and a differential test on thousands of generated adversarial answers
that runs the official evaluation_utils.py unchanged from a scratch copy of the public
repository (FINMMR_OFFICIAL, default /tmp/finmmr_official), skipped when it is absent."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import types
from pathlib import Path

import pytest

from finbench.benchmarks.finmmr_rule import (Opaque, get_acc, normalize, outcome_value, safe_eval,
                                             truth_value, valid_extraction)

OFFICIAL = Path(os.environ.get("FINMMR_OFFICIAL", "/tmp/finmmr_official")) / "evaluate/utils/evaluation_utils.py"

TABLE = [  # (answer, ground truth, official acc) — each line a rule or a quirk of the module docstring
    ("25.93", 25.93, 1), ("25.98", 25.93, 1), ("26.0", 25.93, 0), ("25.88", 25.93, 1), ("25.87", 25.93, 0),
    ("1,234.5", 1234.5, 0), ("1,234.5", 1, 1), ("$1,234.5 million", 1234.5, 1), ("1_000", 1000, 1), ("0x10", 16, 1), ("1e-3", 0.001, 1),
    ("2*3/2", 3, 1), ("(5, 6)", 5, 1), ("[5]", 5, 1), ("[]", 5, 0), ("('5',)", 5, 0), ("'5'", 5, 0),
    ("10^3", 1000, 0), ("10^3", 9, 1), ("x = 10^3", 1000, 0), ("1000", 1000, 1), ("5 usd", 5, 1), ("5 rmb", 5, 1), ("12.5%", 12.5, 1), ("12.5 %", 12.5, 1),
    ("x = 42", 42, 1), ("≈ 3.14", 3.14, 1), ("approximately 7", 7, 1), ("7 or 8", 7, 1), ("`9`", 9, 1),
    ("yes", True, 1), ("no", False, 1), ("not true", True, 1), ("True", 1, 1), ("abs", 5, 0), ("abs(-5)", 5, 1),
    ("{5}", 5, 0), ("1/0", 0, 0), ("", 5, 0), ("None", 0, 0), ("nan", 5, 0), ("inf", 5, 0), ("-5", -5, 1),
    ("5 apples", 5, 1), ("about 5", 5, 1), ("$5", 5, 1), ("5.", 5, 1), ("3 x 4", 12, 1), ("3 × 4", 12, 1),
    ("math.pow(10, 3)", 1000, 0), ("exit()", 0, 0), ("__import__('os').system('true')", 0, 0),
    ("9**9**9", 0, 0), ("'a' * 10**9", 0, 0), ("  42", 42, 1), ("\t42", 42, 1), ("42\n", 42, 1), ("5", "5", 0),
]


@pytest.mark.parametrize("answer,truth,expected", TABLE)
def test_answer_rule_table(answer, truth, expected):
    assert get_acc(answer, truth) == expected


def test_code_is_never_run(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.chdir(tmp_path)
    for text in (f"open({str(marker)!r}, 'w')", "__import__('os').remove('x')", "[c for c in ().__class__.__bases__]",
                 "(lambda: 1)()", "().__class__"):
        assert get_acc(text, 1) == 0
    assert not marker.exists()


def test_safe_eval_values():
    assert safe_eval("1_000 + 0x10") == 1016
    assert safe_eval("-(2 ** 3) // 3") == -3
    assert safe_eval("True or 5") is True and safe_eval("0 or 5") == 5
    assert isinstance(safe_eval("re"), Opaque) and normalize("math") is None
    assert normalize("10^3") == 9  # valid Python: 10 XOR 3
    assert normalize("x = 10^3") is None  # the clean-up's math.pow(10, 3) has no `math`: eval fails
    assert normalize("The answer is 5") is None and normalize("5 usd") == 5


def test_program_values_as_official():
    assert get_acc(outcome_value("float", "2.5"), 2.5) == 1
    assert get_acc(outcome_value("seq", "3", "int"), 3) == 1
    assert get_acc(outcome_value("seq", "3", "str"), 3) == 0  # a tuple's first element is not normalised
    assert get_acc(outcome_value("str", "3%"), 3) == 1  # a string result is normalised
    assert get_acc(outcome_value("other", "{3}"), 3) == 0
    assert get_acc(outcome_value("none", "None"), 0) == 0
    assert get_acc(outcome_value("int", "forged"), 0) == 0 and get_acc(outcome_value("float", "x"), 0) == 0
    assert truth_value("25.93") == 25.93 and truth_value("5") == 5 and truth_value("True") is True


# ---- differential: the official get_acc, unchanged ----------------------------------------------------
NUMBERS = ["5", "25.93", "1,234.5", "1234.5", "-3.2", "+7", ".5", "5.", "1_000", "0x10", "0b11", "1e-3", "2E5",
           "1.5e3", "0", "0.1", "100", "16", "1000", "12,000", "3.14159", "-0.001", "007", "1j", "2/3"]
AROUND = ["", " ", "$", "%", " %", " million", " billion", " usd", " USD", " rmb", "¥", "€", "£", "°", "元", " 元",
          ".", "..", " apples", " dollars", " x 2", " × 3", " or 9", "*2", "/4", "**2", "^2", " ", "`", "'", ")", "]"]
BEFORE = ["", "$", "¥", "x = ", "≈ ", "= ", "approximately ", "about ", "The answer is ", "(", "[", "-", "`", "约",
          "answer: ", "10^", "rmb ", "not ", "≈", "'", "abs(", "round(", "int(", "max(1, "]
WORDS = ["yes", "no", "true", "false", "True", "False", "None", "none", "nan", "inf", "re", "abs", "math.pi", "{5}",
         "{}", "[]", "()", "(5, 6)", "[3, 4]", "('5',)", "1/0", "2*3/2", "10^3", "10^-2", "3 x 4", "3 × 4",
         "5 or 6", "True or 5", "not 0", "1 < 2", "'abc'", "b'5'", "min(3, 4)", "divmod(7, 2)", "len('abc')",
         "str(5)", "float('5')", "int('x')", "-(-5)", "~5", "5 % 3", "7 // 2", "2 ** 10", "[5][0]", "'5'[0]"]


def adversarial_answers(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = list(WORDS)
    while len(out) < n:
        shape = rng.random()
        if shape < 0.6:
            text = rng.choice(BEFORE) + rng.choice(NUMBERS) + rng.choice(AROUND)
        elif shape < 0.8:
            text = rng.choice(WORDS) + rng.choice(AROUND)
        else:
            text = rng.choice(BEFORE) + rng.choice(NUMBERS) + rng.choice([" = ", " or ", " ", ", ", " x "]) + \
                   rng.choice(NUMBERS) + rng.choice(AROUND)
        out.append(text.upper() if rng.random() < 0.05 else text)
    return out


@pytest.fixture(scope="module")
def official_module():
    """evaluation_utils.py of the scratch copy, loaded unchanged (its LLM import stubbed)."""
    if not OFFICIAL.exists():
        pytest.skip(f"no scratch copy of the official FinMMR evaluator at {OFFICIAL}")
    stubs = {"utils": types.ModuleType("utils"), "utils.llm": types.ModuleType("utils.llm")}
    stubs["utils.llm"].LLM = object
    if importlib.util.find_spec("loguru") is None:
        stubs["loguru"] = types.ModuleType("loguru")
        stubs["loguru"].logger = types.SimpleNamespace(warning=lambda *a, **k: None)
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("finmmr_official_evaluation_utils", OFFICIAL)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    module.logger = types.SimpleNamespace(warning=lambda *a, **k: None)  # thousands of warnings otherwise
    return module


@pytest.fixture(scope="module")
def official_get_acc(official_module):
    def run(answer, truth):
        try:
            return official_module.get_acc(answer, truth)
        except BaseException:  # noqa: BLE001 — exit() ends the official evaluator: finbench scores 0
            return 0
    return run


TRUTHS = [5, 25.93, 1234.5, -3.2, 7, 0.5, 1000, 16, 0.001, 3, 12, 0, 100, 1.5, True, False, 200000.0, 0.1]


def test_answer_rule_equals_official_get_acc(official_get_acc):
    answers = adversarial_answers(4000, seed=3)
    rng = random.Random(7)
    differing = []
    for answer in answers:
        for truth in [rng.choice(TRUTHS), *_truths_of(answer)]:
            if get_acc(answer, truth) != official_get_acc(answer, truth):
                differing.append((answer, truth))
    assert not differing, differing[:20]
    assert len(answers) == 4000


def _truths_of(answer: str) -> list[float]:
    """Truths near what the answer says, so right answers are tested as often as wrong ones."""
    value = normalize(answer)
    value = value[0] if isinstance(value, (tuple, list)) and value else value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        return []
    return [value, value * 1.0019, value * 1.0021]


PIECES = ["```python\n", "```\n", "```", "def solution():\n", "    x = 1\n", "    return x\n", "return 2\n", "    ",
          "import argparse\n", "Here is the program:\n", "\n", "print(1)\n", "    # comment\n", "```py\n"]


def test_program_extraction_equals_official_extract_pot_answers(official_module):
    from finbench.benchmarks.finmmr import extract_program

    rng = random.Random(5)
    outputs = ["", "    return 1", "return 1", "x\n```python\ndef solution():\n    return 2\n```\n"]
    outputs += ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 7))) for _ in range(3000)]
    differing = [o for o in outputs if extract_program(o) != official_module.extract_pot_answers(o)]
    assert not differing, differing[:5]


def test_the_published_evaluations_are_reproduced():
    """The repository's own results/…/evaluation.json (validation splits, every model): get_acc on
    each stored extracted answer (cot) or str(executed_result) (pot) gives the stored acc."""
    import json

    files = sorted((OFFICIAL.parents[2] / "results").rglob("evaluation.json"))
    if not files:
        pytest.skip(f"no published evaluation.json under {OFFICIAL.parents[2] / 'results'}")
    compared = differing = 0
    for file in files:
        for record in json.loads(file.read_text(encoding="utf-8")):
            result, truth = record.get("result") or {}, record["ground_truth"]
            if "/cot/" in str(file):
                text = result.get("extracted_answer")
                ours = get_acc(text, truth) if text is not None and valid_extraction(text) else 0
            else:
                ours = get_acc(result.get("executed_result"), truth) if result.get("execution_rate") else 0
            compared += 1
            differing += ours != result.get("acc")
    assert compared > 1000 and differing == 0


BOMBS = ["sum([[0]*99999]*99999,[])", "'%0999999999d' % 0", "len('%0999999999d' % 0)", "9**9**9", "'a'*10**9",
         "[[0]*99999]*99999 == [[0]*99999]*99999", "min([[0]*99999]*99999)", "str([[0]*99999]*99999)",
         "round(5, -10**9)", "pow(3, 10**4000, 10**4000+1)", "sum([[0]]*99999, [])", "'%.999999f' % 1",
         "'%*d' % (10**9, 1)", "[0]*99999 in [[0]*99999]*99999", "1<<10**9", "10**4000 * 10**4000",
         "x = " + "9" * 900, "-" * 990 + "1", "42" + " " * 100_000]


def test_answer_bombs_are_refused_fast_with_bounded_memory():
    """A cot answer (or a program's string result) that asks for gigabytes or hours: 0, at once."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for bomb in BOMBS:
        started = time.monotonic()
        assert get_acc(bomb, 0) == 0 and get_acc(bomb, 42) == 0, bomb
        assert time.monotonic() - started < 3, bomb
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    assert safe_eval("sum([[1], [2]], [0])") == [0, 1, 2] and safe_eval("'%05.1f' % 2.25") == "002.2"
    assert safe_eval("str([1, (2, 3)])") == "[1, (2, 3)]" and safe_eval("round(1234.5678, -2)") == 1200.0
