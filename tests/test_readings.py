"""Answers read as the official rule reads them (issue 49, items 1 and 2): FCMR's documented reading
of free replies, and no control character that turns a wrong answer right — in process, through
`finbench score --predictions` and through a run."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import cli
from scripted import Scripted

from finbench.benchmarks import fcmr, finchart_bench, get_benchmark
from finbench.scoring.tables import score_samples


# ---- item 1: FCMR -----------------------------------------------------------------------------------
def test_fcmr_reads_the_set_after_the_last_answer_as_models_punctuate_it():
    """docs/benchmarks.md, FCMR `official`: "the set is read from the rest of the line after the
    **last** `Answer:` (else from the last non-empty line): the numbers 1–3 standing alone in it
    (`1, 3`, `1 and 3`, `[1,3]`; not `13` or `1.5`), or, with none of them, the word `none`".
    A sentence's period ends a number; it does not make "2." a decimal."""
    cases = {
        "Answer: 2.": "2",
        "Answer: 2, 3.": "2, 3",
        "Final answer: 1, 2.": "1, 2",
        "Answer: 1.5": "",
        "Answer: 1.": "1",
        "Answer: 1 (final answer: 3)": "3",
        "**Answer:** 2.": "2",
        "**Answer**: 1, 3.": "1, 3",
        "*Answer*: 3": "3",
        "Answer： 1，3。": "1, 3",
        "Statement 2 holds.\nAnswer: 1, 2\nOn reflection, statement 1 is false.\nAnswer: 2.": "2",
        "Answer: none.": "none",
        "ANSWER:\n1 and 3.": "1, 3",
        "Answer: 13.": "",
        "Answer: [1,3].": "1, 3",
        "So 1 and 2 hold. Answer: 0.2": "",
        "The true statements are 2 and 3.": "2, 3",
    }
    for text, expected in cases.items():
        assert fcmr.extract_official(text) == expected, text


# ---- item 2: no control character turns a wrong answer right ----------------------------------------
def _finchart_rows(answers: list[str], letters: bool) -> pd.DataFrame:
    rows = [{"id": str(k), "kind": "single", "task": "MC", "gold": "C", "official_answer": "c", "answer": a,
             "letters": letters, "error": ""} for k, a in enumerate(answers)]
    return pd.DataFrame(rows)


def test_finchart_compares_python_strings_as_the_readme_does():
    """FinChart-Bench README, "How to test": `answer = item["answer"].lower()` and
    `correct = sum(p == gt for p, gt in zip(predict, ground_truth))` — Python strings, so
    "c\\x00" is not "c" (numpy's fixed-width strings drop a trailing NUL and would call it right)."""
    read = [finchart_bench.extract_official(t) for t in ("Result = [[ C\x00 ]]", "Result = [[ C ]]", "[[ c\x00]]")]
    assert read == ["C\x00", "C", "c\x00"]
    scores = score_samples(_finchart_rows(read, letters=False), get_benchmark("finchart-bench"))
    assert scores["mc_accuracy"] == pytest.approx(1 / 3)
    letter = score_samples(_finchart_rows(["C\x00", "C"], letters=True), get_benchmark("finchart-bench"))
    assert letter["mc_accuracy"] == pytest.approx(1 / 2)


def test_fcmr_set_masks_compare_python_strings():
    """FCMR (the paper's exact match of the answer set): an answer is right iff it is the gold set;
    "C\\x00" is no letter of the eight sets, "2\\x00" no set (numpy would read C and 2)."""
    rows = [{"id": str(k), "kind": "single", "gold": "C", "answer": a, "letters": letters, "error": "",
             "option_probs": [0.125] * 8 if letters else []}
            for k, (a, letters) in enumerate([("C\x00", True), ("2\x00", False), ("C", True), ("2", False)])]
    scores = score_samples(pd.DataFrame(rows), get_benchmark("fcmr"))
    assert scores["accuracy"] == pytest.approx(2 / 4) and scores["n_unreadable"] == 2


def test_an_error_of_any_text_is_an_error():
    """SPEC, Errors: "each becomes a per-sample error with a clear message, is stored, counted" —
    an error that is one NUL is still an error (numpy's strings measure it 0 long)."""
    from finbench.scoring.stats import error_mask

    assert error_mask(pd.DataFrame({"error": ["\x00", "", "x"]})).tolist() == [True, False, True]


def test_score_predictions_reads_no_control_character_as_right(tmp_path):
    """`score --predictions` under `--protocol official` reads the README's reply form and compares
    as the README does; under the default protocol the letters as a constrained run stores them."""
    data, _ = get_benchmark("finchart-bench").demo.write(tmp_path / "data", None)
    mc = [q for q in finchart_bench.load_questions(data) if q.meta["task"] == "MC"]
    for protocol, form in (("official", "Result = [[ {} ]]"), (None, "{}")):
        path = tmp_path / f"{protocol}.jsonl"
        lines = [{"id": q.id, "answer": form.format(q.gold + ("\x00" if k % 2 else ""))} for k, q in enumerate(mc)]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        done = cli("score", "--benchmark", "finchart-bench", "--data", str(data), "--predictions", str(path),
                   *(["--protocol", protocol] if protocol else []))
        assert done.returncode == 0, done.stderr[-2000:]
        scored = json.loads(done.stdout)
        assert scored["mc_accuracy"] == pytest.approx(sum(1 for k in range(len(mc)) if k % 2 == 0) / len(mc))


def test_a_run_reads_no_control_character_as_right(tiny_model, tmp_path):
    """A run's official replies to the true/false items, "Result = [[ label ]]" with the gold label,
    right; the same with a NUL after the label, wrong."""
    from finbench.app.api import make_config
    from finbench.runner.engine import run_benchmark

    data, _ = get_benchmark("finchart-bench").demo.write(tmp_path / "data", None)
    labels = {q.text.strip(): q.meta["official_answer"] for q in finchart_bench.load_questions(data)
              if q.meta["task"] == "TF"}  # one label per statement (the demo's MC questions share their text)
    for nul, expected in (("", 1.0), ("\x00", 0.0)):
        def reply(prompt: str) -> str:
            label = next(v for k, v in labels.items() if k in prompt)
            return f"Result = [[ {label.upper()}{nul} ]]"

        config = make_config(model=tiny_model.source, benchmark="finchart-bench", data=str(data), protocol="official",
                             question_types=("TF",), out=str(tmp_path / f"run{len(nul)}"), device="cpu",
                             dtype="float32", bootstrap=0, max_pixels=28 * 28 * 16)
        result = run_benchmark(config, model=Scripted(tiny_model, reply, f"nul{len(nul)}"), show_progress=False)
        assert result.results["scores"]["accuracy"] == expected
