"""The one loader prologue (records.open_table, records.select) through every benchmark: one rule for
a broken record under --domain and --question-type, --limit before any image is read, and FAMMA's
groups and bytes (issue 27 item 5, issue 29 items 8 and 9)."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from finbench.benchmarks import BENCHMARKS, famma
from finbench.benchmarks.famma import record as famma_record_module
from finbench.cli import app

MALFORMED = b'{"id": "broken", "question": '


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 24), (20, 120, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


def famma_record(qid: str, main: int, sub: int = 1, **overrides) -> dict:
    record = {"question_id": qid, "context": "Sales by year. <image_1>", "question": "Which year is highest?",
              "options": ["2021", "2022", "2023"], "image_1": "img.png", "answers": "B",
              "question_type": "multiple-choice", "subfield": "equity", "language": "english",
              "topic_difficulty": "easy", "main_question_id": main, "sub_question_id": sub, "is_arithmetic": 0,
              "release": "release_basic", "explanation": ""}
    record.update(overrides)
    return record


# benchmark → (file name, two readable records: the first of (domain, question type), the second of
# another domain and type; the domain and the type the filters ask for)
CASES = {
    "finmme": ("finmme.jsonl", [
        {"id": "keep", "question_text": "Which bar?", "question_type": "single_choice", "options": ["a", "b"],
         "answer": "A", "image": "img.png", "knowledge_domain": "Banking"},
        {"id": "other", "question_text": "How much?", "question_type": "numerical", "answer": "3",
         "image": "img.png", "knowledge_domain": "Insurance"}], "Banking", "single_choice"),
    "famma": ("famma.jsonl", [famma_record("keep", 1),
                              famma_record("other", 2, question_type="open question", options=None,
                                           answers="3", subfield="banking")], "equity", "multiple-choice"),
    "finmtm": ("SC.jsonl", [
        {"id": "keep", "messages": [{"role": "user", "content": [{"type": "text", "text": "Which?\nA. x\nB. y"}]}],
         "choices": [{"message": {"content": [{"text": '{"answer": ["A"]}'}]}}]},
        {"session_id": "other", "task_type": "L1", "turns": [{"turn_id": 1, "question": "Why?", "gold_answer": "x"}],
         "image_paths": ["img.png"]}], "objective", "single"),
    "mme-finance": ("mme.jsonl", [
        {"index": 1, "question": "What is shown?", "answer": "A bar chart", "task_category": "OCR",
         "image_path": "img.png"},
        {"index": 2, "question": "Is it rising?", "answer": "Yes", "task_category": "Reasoning",
         "image_path": "img.png"}], "OCR", "open"),
}


def write_case(tmp_path, name: str):
    """A folder with the two readable records and, between them, one line that cannot be read."""
    file_name, records, domain, question_type = CASES[name]
    folder = tmp_path / name
    folder.mkdir()
    (folder / "img.png").write_bytes(png())
    lines = [json.dumps(records[0]).encode(), MALFORMED, json.dumps(records[1]).encode()]
    (folder / file_name).write_bytes(b"\n".join(lines) + b"\n")
    return folder, f"{folder / file_name}:2", domain, question_type


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_broken_record_under_a_filter_has_one_outcome_in_every_loader(name, tmp_path):
    """The rule (records.py): without a filter the unreadable line is its error; under --domain or
    --question-type it is left out, and a note names it."""
    benchmark = BENCHMARKS[name]
    folder, broken, domain, question_type = write_case(tmp_path, name)
    everything = benchmark.load(str(folder))
    assert len(everything) == 3
    unread = {q.id: q for q in everything}[broken]
    assert "malformed JSON" in unread.error
    for domains, question_types, flag in (([domain], [], "--domain"), ([], [question_type], "--question-type")):
        notes: list[str] = []
        kept = benchmark.load(str(folder), None, domains, question_types, notes=notes)
        assert [q.id for q in kept] == [everything[0].id]  # the matching record; the other and the broken one out
        left_out = [n for n in notes if broken in n]
        assert len(left_out) == 1 and left_out[0].startswith(f"1 record(s) left out by {flag}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_limit_counts_the_broken_record_in_data_order(name, tmp_path):
    benchmark = BENCHMARKS[name]
    folder, broken, _, _ = write_case(tmp_path, name)
    assert [q.id for q in benchmark.load(str(folder), 2)][1] == broken


def famma_folder(tmp_path, records: list[dict], name: str = "famma.json"):
    folder = tmp_path / "famma"
    folder.mkdir(exist_ok=True)
    for n in range(8):
        (folder / f"q{n}.png").write_bytes(png())
    (folder / name).write_text(json.dumps(records))
    return folder


def test_famma_limit_and_filters_read_only_the_chosen_questions_images(tmp_path, monkeypatch):
    records = [famma_record(f"q{n}", main=n, image_1=f"q{n}.png", subfield="equity" if n >= 4 else "banking")
               for n in range(6)]
    folder = famma_folder(tmp_path, records)
    read: list[str] = []
    real = famma_record_module.image_bytes

    def counting(value, *args, **kwargs):
        if isinstance(value, str) and value.endswith(".png"):
            read.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(famma_record_module, "image_bytes", counting)
    questions = famma.load_questions(folder, limit=2)
    assert [q.id for q in questions] == ["q0", "q1"] and all(len(q.images) == 1 for q in questions)
    assert read == ["q0.png", "q1.png"]  # not the other four questions' images
    read.clear()
    assert [q.id for q in famma.load_questions(folder, domains=["equity"])] == ["q4", "q5"]
    assert read == ["q4.png", "q5.png"]


def test_famma_limit_inside_a_main_question_still_groups_all_of_it(tmp_path):
    records = [famma_record("m1", main=7, image_1="q1.png"),
               famma_record("m2", main=7, sub=2, context="", image_1=None, question="And the lowest?")]
    folder = famma_folder(tmp_path, records)
    (only,) = famma.load_questions(folder, limit=1)
    assert only.id == "m1" and [e["id"] for e in only.fields["group"]] == ["m1", "m2"]


def _run(folder, out, tiny_qwen_dir, *extra: str):
    result = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", "famma", "--data",
                                      str(folder), "--out", str(out), "--device", "cpu", "--dtype", "float32",
                                      "--max-new-tokens", "4", "--bootstrap", "0", "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return (pd.read_parquet(out / "samples.parquet").set_index("id"),
            json.loads((out / "results.json").read_text()))


def test_a_broken_first_sub_question_is_its_own_error_and_the_rest_are_asked(tiny_qwen_dir, tmp_path):
    """Issue 29 item 8: under the official grouped call, the first sub-question's image file is
    missing; the two readable ones are asked as their group, the broken one is its error."""
    records = [famma_record("first", main=3, image_1="gone.png"),
               famma_record("second", main=3, sub=2, context="", image_1=None, question="And 2021?"),
               famma_record("third", main=3, sub=3, context="", image_1=None, question="And 2023?")]
    folder = famma_folder(tmp_path, records)
    notes: list[str] = []
    loaded = {q.id: q for q in famma.load_questions(folder, notes=notes)}
    assert "not found" in loaded["first"].error and not loaded["second"].error and not loaded["third"].error
    assert [e["id"] for e in loaded["second"].fields["group"]] == ["second", "third"]
    assert loaded["second"].fields["context"] == "Sales by year. <image_1>"  # the first one's context still reads
    assert any("first → second" in n for n in notes)
    samples, results = _run(folder, tmp_path / "run", tiny_qwen_dir, "--protocol", "official")
    assert "gone.png" in samples.loc["first", "error"] and samples.loc["first", "correct"] == 0.0
    for qid in ("second", "third"):
        assert samples.loc[qid, "error"] == "" and samples.loc[qid, "correct"] in (0.0, 1.0)
    assert samples.loc["second", "raw_output"] == samples.loc["third", "raw_output"]  # one grouped call
    assert results["scores"]["n"] == 3 and results["scores"]["n_errors"] == 1


@pytest.mark.parametrize("bad", [
    pytest.param(lambda data: data.replace(b"Which year is highest?", b"Which ye\xe9r?", 1), id="byte-in-a-value"),
    pytest.param(lambda data: data.replace(b'"question": "Which', b'"qu\xe9stion": "Which', 1), id="byte-in-a-name"),
    pytest.param(lambda data: data.replace(b"Which year is highest?", b"Which \xed\xa0\x80?", 1), id="encoded-surrogate"),
])
def test_a_bad_byte_in_one_record_of_a_json_array_is_that_record_s_error(bad, tiny_qwen_dir, tmp_path):
    """Issue 29 item 9: one invalid UTF-8 sequence inside the second of three records."""
    records = [famma_record(f"r{n}", main=n, image_1=f"q{n}.png") for n in range(3)]
    folder = famma_folder(tmp_path, [])
    text = b",".join(json.dumps(r).encode() for r in records)
    first_end = len(json.dumps(records[0]).encode()) + 1
    (folder / "famma.json").write_bytes(b"[" + text[:first_end] + bad(text[first_end:]) + b"]")
    origin = f"{folder / 'famma.json'}[1]"
    samples, results = _run(folder, tmp_path / "run", tiny_qwen_dir)
    assert list(samples.index) == ["r0", origin, "r2"]
    assert "not UTF-8 at byte" in samples.loc[origin, "error"] and samples.loc[origin, "correct"] == 0.0
    assert results["scores"]["n"] == 3 and results["scores"]["n_errors"] == 1
