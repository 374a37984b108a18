"""FinMME loading, prompts and the official extraction rule (no model needed)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import finmme_record, png_bytes
from PIL import Image

from finbench.benchmarks import finmme
from finbench.core.types import MULTI, NUMERICAL, SINGLE
from finbench.runner.run_requests import render


def _record(**overrides):
    return finmme_record("q1", **{"image": {"bytes": png_bytes(), "path": "q1.png"}, "tolerance": None,
                                  "knowledge_domain": "Stock Market", **overrides})


@pytest.mark.parametrize("raw, expected", [
    (["1.5%", "2.0%", "3.5%"], ("1.5%", "2.0%", "3.5%")),
    ('["x", "y"]', ("x", "y")),  # JSON list literal in a string
    ("['x', 'y']", ("x", "y")),  # python list literal in a string
    ({"B": "y", "A": "x"}, ("x", "y")),  # letter → text dict, any key order
    (["A. x", "B. y", "C. z"], ("x", "y", "z")),  # letter prefixes stripped when they run A, B, C
    (["(A) x", "(B) y"], ("x", "y")),
    (["A. x", "C. y"], ("A. x", "C. y")),  # not a clean A, B run: kept as published
])
def test_parse_options_accepts_every_published_form(raw, expected):
    assert finmme.parse_options(raw) == expected


@pytest.mark.parametrize("raw, kind, n, expected", [
    ("C", SINGLE, 4, "C"),
    ("ACD", MULTI, 4, "ACD"),
    ("A,C,D", MULTI, 4, "ACD"),
    ("D, a", MULTI, 4, "AD"),
    ("['B', 'A']", MULTI, 4, "AB"),
    ("8.81%", NUMERICAL, 0, "8.81"),
    ("-3.5", NUMERICAL, 0, "-3.5"),
])
def test_parse_gold_is_canonical(raw, kind, n, expected):
    assert finmme.parse_gold(raw, kind, n) == expected


@pytest.mark.parametrize("raw, kind, n", [("E", SINGLE, 4), ("AB", SINGLE, 4), ("", MULTI, 4), ("n/a", NUMERICAL, 0)])
def test_parse_gold_rejects_bad_answers(raw, kind, n):
    with pytest.raises(ValueError):
        finmme.parse_gold(raw, kind, n)


@pytest.mark.parametrize("overrides, message", [
    ({"image": {"bytes": None, "path": None}}, "image"),
    ({"image": None}, "missing image"),
    ({"options": []}, "empty option list"),
    ({"options": "not a list ["}, "bad record"),
    ({"answer": "Z"}, "no option letter"),
    ({"question_type": "essay"}, "unknown question_type"),
])
def test_malformed_record_becomes_a_per_sample_error(overrides, message):
    question = finmme.record_to_question(_record(**overrides), 0)
    assert question.error is not None and message in question.error
    assert question.id == "q1"


def test_load_questions_from_parquet_jsonl_with_filters_and_limit(tmp_path):
    records = [_record(id=f"q{i}", knowledge_domain=d, question_type=t, answer=a, options=o, tolerance=tol)
               for i, (d, t, a, o, tol) in enumerate([
                   ("Banking", "single_choice", "A", ["1", "2"], None),
                   ("Banking", "multiple_choice", "A,B", ["1", "2", "3"], None),
                   ("Bond Market", "numerical", "8.81%", [], 0.01),
                   ("Bond Market", "single_choice", "B", {"A": "1", "B": "2"}, None)])]
    parquet = tmp_path / "finmme.parquet"
    frame = pd.DataFrame(records)
    frame["options"] = frame["options"].map(json.dumps)  # one storage type per column, as in a real file
    frame.to_parquet(parquet)
    questions = finmme.load_questions(parquet)
    assert [q.kind for q in questions] == [SINGLE, MULTI, NUMERICAL, SINGLE]
    assert [q.gold for q in questions] == ["A", "AB", "8.81", "B"]
    assert questions[2].tolerance == 0.01 and questions[0].tolerance is None
    assert questions[0].images[0] == records[0]["image"]["bytes"]
    assert [q.id for q in finmme.load_questions(parquet, domains=["Bond Market"])] == ["q2", "q3"]
    assert [q.id for q in finmme.load_questions(parquet, question_types=["single_choice"], limit=1)] == ["q0"]
    jsonl = tmp_path / "finmme.jsonl"
    jsonl.write_text("\n".join(json.dumps({**r, "image": {"bytes": None, "path": str(parquet)}}) for r in records[:1]))
    # a path that is not an image loads fine and fails later, per sample, at decode time
    assert finmme.load_questions(jsonl)[0].images[0] == parquet.read_bytes()


def test_official_prompt_is_eval_py_byte_for_byte():
    question = finmme.record_to_question(_record(), 0)
    request = render(finmme.BENCHMARK, finmme.request(question, "official").prompt, [Image.new("RGB", (2000, 500))])
    content = request.messages[0]["content"]
    assert [part["type"] for part in content] == ["text", "image"]  # text first, then the image
    assert content[0]["text"] == (
        "Please answer this single choice question about the image. The caption of the image is A bar chart.. "
        "The related sentences are Sales grew..\n Please answer the question directly. The answer MUST be of "
        "the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem "
        "(the single letter of the correct answer, A, B, C, D, etc.).\nQuestion: Which bar is highest?\n"
        "Options: ['10', '20', '30', '40']")
    assert request.images[0].size == (1024, 256)  # shrunk to fit 1024×1024, aspect kept
    assert request.answer_prefix == ""


def test_constrained_prompt_lists_lettered_options_and_ends_with_answer_prefix():
    question = finmme.record_to_question(_record(), 0)
    request = render(finmme.BENCHMARK, finmme.request(question, "constrained").prompt, [Image.new("RGB", (20, 20))])
    text = request.messages[0]["content"][-1]["text"]
    assert "A. 10\nB. 20\nC. 30\nD. 40\n" in text
    assert request.answer_prefix == "Answer:"


@pytest.mark.parametrize("output, extracted", [
    ("Answer: B", "B"),
    ("The answer is clear.\nanswer : c", "c"),
    ("Answer: A, C", "A,"),  # quirk: only the first whitespace-free token → read as {A}
    ("Answer: A,C", "A,C"),
    ("**Answer:** B", "**"),  # quirk: the token is '**' (normalised to '' when judged → wrong)
    ("Answer: $\\boxed{8.81}$", "$\\boxed{8.81}$"),  # normalised once, when judged
    ("no answer here", ""),
    ("", ""),
])
def test_official_extraction_quirks(output, extracted):
    assert finmme.extract_official(output) == extracted


def test_local_parquet_loads_without_the_datasets_package(tmp_path, monkeypatch):
    """The GPU machine's image has pyarrow but not `datasets`: plain parquet must still load,
    to the same questions."""
    import sys

    frame = pd.DataFrame([_record(id=f"q{i}") for i in range(3)])
    path = tmp_path / "finmme.parquet"
    frame.to_parquet(path)
    with_datasets = finmme.load_questions(path)
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    without = finmme.load_questions(path)
    assert [(q.id, q.gold, q.options, q.images) for q in without] == \
           [(q.id, q.gold, q.options, q.images) for q in with_datasets]
    with pytest.raises(ValueError, match="needs the `datasets` package"):  # one start-up line
        finmme.load_questions("owner/hub-set")
