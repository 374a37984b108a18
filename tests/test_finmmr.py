"""FinMMR end to end: the 60 real validation items of ../shared/data/finmmr (read from there, never
copied) load, their official prompts are byte-identical to the published ones, they run under
each protocol on a tiny model with 0 errors; broken input becomes per-sample errors; `score
--predictions` (cot and pot, with --samples-out); the demo's synthetic data in the official layout."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import shared
from typer.testing import CliRunner

from finbench.benchmarks import finmmr
from finbench.benchmarks.records import DataError
from finbench.cli import app

REAL = shared("data", "finmmr")
needs_real = pytest.mark.skipif(not REAL.exists(), reason="../shared/data/finmmr (60 real items) is absent")


@pytest.fixture(scope="module")
def real():
    return finmmr.load_questions(REAL)


@needs_real
def test_the_60_real_items_load_with_every_field(real):
    assert len(real) == 60 and not [q.error for q in real if q.error]
    assert Counter((q.meta["difficulty"], q.meta["language"]) for q in real) == {
        (g, lang): 10 for g in ("easy", "medium", "hard") for lang in ("English", "Chinese")}
    records = {r["question_id"]: r for g in ("easy", "medium", "hard")
               for r in json.loads((REAL / "validation" / f"{g}_validation.json").read_text(encoding="utf-8"))}
    for q in real:
        record = records[q.id]
        assert q.text == record["question"] and q.fields["context"] == record["context"]
        assert q.fields["ground_truth"] == record["ground_truth"] and q.gold == str(record["ground_truth"])
        assert len(q.images) == len(record["images"]) and q.meta["source"] == record["source"]
        for name, data in zip(record["images"], q.images):
            assert data == (REAL / "images" / name.rsplit("/", 1)[-1]).read_bytes()
        assert q.fields["release"] == "validation"
    typed = [q for q in real if q.meta["image_type"]]
    assert typed and all(q.meta["image_type"] == "Tables" for q in typed)  # "['Tables']" as published


@needs_real
def test_official_prompts_are_byte_identical_to_the_published_ones(real):
    """Published (system_input, user_input) of the prompt files, and the same rebuilt from the
    record alone (no prompt file) — for all 60 items and both official protocols."""
    published = {}
    for g in ("easy", "medium", "hard"):
        for protocol in ("cot", "pot"):
            for item in json.loads((REAL / f"{g}_validation_{protocol}_prompt.json").read_text(encoding="utf-8")):
                published[(item["question_id"], protocol)] = (item["system_input"], item["user_input"])
    assert len(published) == 120
    for q in real:
        bare = dataclasses.replace(q, fields={**q.fields, "published": {}})
        for protocol in ("cot", "pot"):
            assert finmmr.official_prompt(bare, protocol) == published[(q.id, protocol)]
            request = finmmr.request(q, protocol)
            system, user = request.prompt.messages
            assert system["content"][0]["text"] == published[(q.id, protocol)][0]
            assert [p["type"] for p in user["content"]] == ["image"] * len(q.images) + ["text"]
            assert user["content"][-1]["text"] == published[(q.id, protocol)][1]


def test_broken_input_becomes_per_sample_errors(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"png")
    good = {"question_id": "easy-validation-1", "question": "Q?", "context": "", "images": "['./MultiFinance/images/a.png']",
            "ground_truth": 5, "grade": "Easy", "language": "English", "source": "S", "subfield": "x"}
    bad = [dict(good, question_id="easy-validation-2", ground_truth="5"),
           dict(good, question_id="easy-validation-3", images=["./MultiFinance/images/missing.png"]),
           dict(good, question_id="easy-validation-4", images="[not a list"),
           dict(good, question_id="easy-validation-5", question=""), 7]
    folder = tmp_path / "validation"
    folder.mkdir()
    (folder / "easy_validation.json").write_text(json.dumps([good, *bad]))
    questions = finmmr.load_questions(folder)
    assert [q.error is None for q in questions] == [True, False, False, False, False, False]
    assert questions[0].images == (b"png",)  # the string of a Python list, from the nearest images/
    assert "not a number" in questions[1].error and "not found" in questions[2].error
    assert "not a list" in questions[3].error and "empty" in questions[4].error and "object" in questions[5].error
    with pytest.raises(DataError, match="not found"):
        finmmr.load_questions(tmp_path / "nowhere")
    assert [q.id for q in finmmr.load_questions(folder, limit=1)] == ["easy-validation-1"]
    notes: list[str] = []  # the shared rule (records.select): under a filter an unreadable record is left out, named
    assert finmmr.load_questions(folder, question_types=["medium"], notes=notes) == []
    assert len(notes) == 1 and "easy_validation.json[5]" in notes[0]


def test_extractors_as_official():
    assert finmmr.rule_extraction("so 3 + 4 = 7. Therefore, the answer is 12.5%.") == "12.5%"
    assert finmmr.rule_extraction("values 3 and 4, total 1,234.5") == "1,234.5"
    assert finmmr.rule_extraction("no numbers") == ""
    assert finmmr.extract_program("x\n```python\ndef solution():\n    return 2\n```\n") == "def solution():\n    return 2"
    assert finmmr.extract_program("    a = 1\n    return a\n```") == "def solution():\n    a = 1\n    return a"
    assert finmmr.extract_program("return 3") == "def solution():\n    return 3"
    assert finmmr.extract_program("import argparse") == ""


@pytest.fixture(scope="module")
def predictions_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("finmmr-predictions")
    data = finmmr.load_questions(REAL / "validation" / "easy_validation.json")
    right = {q.id: q.fields["ground_truth"] for q in data}
    ids = sorted(right)
    pot = [{"id": i, "answer": f"```python\ndef solution():\n    return {right[i]!r}\n```"} for i in ids[:10]]
    pot += [{"id": ids[10], "answer": "    return 1 / 0"},
            {"id": ids[11], "answer": "def solution():\n    return open('x', 'w')"},
            {"id": ids[12], "answer": "    return 0"}]
    cot = [{"id": i, "answer": str(right[i])} for i in ids[:15]] + [{"id": ids[15], "answer": "None"}]
    for name, lines in (("pot", pot), ("cot", cot)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder, ids


@needs_real
def test_score_predictions_pot_runs_the_programs_and_writes_samples_out(predictions_files):
    folder, ids = predictions_files
    out = folder / "pot_samples.jsonl"
    done = CliRunner().invoke(app, ["score", "--benchmark", "finmmr", "--data", str(REAL / "validation" / "easy_validation.json"),
                                    "--predictions", str(folder / "pot.jsonl"), "--protocol", "pot",
                                    "--samples-out", str(out)])
    assert done.exit_code == 0, done.output
    scores = json.loads(done.output[done.output.index("{"):])
    # 10 right, 12 ran (open('x', 'w') writes in the jail's private /tmp, as in the official run), of 20
    assert scores["official"] == {"avg_accuracy": 50.0, "avg_execution_rate": 60.0}
    assert scores["accuracy"] == pytest.approx(0.5) and scores["execution_rate"] == pytest.approx(0.6)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 20 and {line["id"] for line in lines} == set(ids)
    by_id = {line["id"]: line for line in lines}
    assert all(by_id[i]["correct"] == 1.0 for i in ids[:10])
    assert by_id[ids[10]]["correct"] == 0.0 and by_id[ids[10]]["extracted"] == ""  # it raised
    assert by_id[ids[12]]["extracted"] == "0" and by_id[ids[12]]["correct"] == 0.0


@needs_real
def test_score_predictions_cot_and_a_wrong_protocol(predictions_files):
    folder, ids = predictions_files
    args = ["score", "--benchmark", "finmmr", "--data", str(REAL / "validation" / "easy_validation.json"),
            "--predictions", str(folder / "cot.jsonl")]
    done = CliRunner().invoke(app, [*args, "--protocol", "cot"])
    assert done.exit_code == 0, done.output
    scores = json.loads(done.output[done.output.index("{"):])
    assert scores["official"] == {"avg_accuracy": 75.0, "avg_execution_rate": 75.0}  # "None" is not valid
    refused = CliRunner().invoke(app, [*args, "--protocol", "official"])
    assert refused.exit_code != 0 and "cot" in refused.output


def _run(tiny_model, tiny_qwen_dir, tmp_path, protocol, data=REAL, **options):
    from finbench.runner.engine import run_benchmark
    from finbench.app.api import make_config

    config = make_config(model=str(tiny_qwen_dir), benchmark="finmmr", data=str(data), protocol=protocol,
                       out=str(tmp_path / protocol), device="cpu", dtype="float32", max_pixels=28 * 28 * 4,
                       max_new_tokens=6, bootstrap=10, **options)
    return run_benchmark(config, tiny_model, show_progress=False)


@needs_real
@pytest.mark.parametrize("protocol", ["constrained", "cot", "pot"])
def test_the_60_real_items_run_under_each_protocol_with_no_errors(tiny_model, tiny_qwen_dir, tmp_path, protocol):
    result = _run(tiny_model, tiny_qwen_dir, tmp_path, protocol)
    samples = pd.read_parquet(tmp_path / protocol / "samples.parquet")
    results = json.loads((tmp_path / protocol / "results.json").read_text())
    assert len(samples) == 60 and results["errors"]["count"] == 0
    scores = results["scores"]
    assert set(scores["breakdowns"]) >= {"difficulty", "language", "source", "subfield"}
    details = [json.loads(d)["rules"] for d in samples["judge_details"]]
    rate = sum(d["execution_rate"] for d in details) / 60
    assert scores["execution_rate"] == pytest.approx(rate)
    assert scores["accuracy"] == pytest.approx(samples["rule_score"].mean())
    assert scores["official"]["avg_accuracy"] == round(samples["rule_score"].sum() / 60 * 100, 2)
    expected_source = {"constrained": "number", "cot": "rule", "pot": "program"}[protocol]
    assert {d["source"] for d in details} == {expected_source} and scores["extraction"] == [expected_source]
    if protocol == "pot":  # a random model's text is no program: each failure has its reason
        assert all(d["reason"] for d in details if not d["execution_rate"])
    assert result.results["protocol"] == protocol


def test_the_demo_data_is_in_the_official_layout(tmp_path):
    from finbench.offline.finmmr_synthetic import demo_data

    data, written = demo_data(tmp_path)
    assert written and data.name == "validation" and (data.parents[1] / "images").is_dir()
    questions = finmmr.load_questions(data)
    assert len(questions) == 12 and not [q.error for q in questions if q.error]
    assert Counter(q.meta["difficulty"] for q in questions) == {"easy": 4, "medium": 4, "hard": 4}
    assert demo_data(tmp_path) == (data, False)


def test_cot_on_the_demo_data_with_the_official_judge_extraction(tiny_model, tiny_qwen_dir, tmp_path):
    from finbench.offline.finmmr_synthetic import demo_data

    data, _ = demo_data(tmp_path / "home")
    result = _run(tiny_model, tiny_qwen_dir, tmp_path, "cot", data=data, judge=str(tiny_qwen_dir),
                  judge_max_new_tokens=4)
    samples = result.samples
    assert len(samples) == 12 and result.results["errors"]["count"] == 0
    assert samples["judge_score"].notna().all()  # every cot answer went to the official extraction prompt
    assert result.results["scores"]["extraction"] == ["judge"]
    assert result.results["scores"]["accuracy"] == pytest.approx(samples["judge_score"].mean())


def test_samples_out_for_another_benchmark(synthetic_parquet, tmp_path):
    """--samples-out works for every benchmark: FinMME's letters, its per-question correctness."""
    from finbench.benchmarks import finmme

    questions = finmme.load_questions(synthetic_parquet)[:6]
    predictions = tmp_path / "pred.jsonl"
    answers = {q.id: (q.gold if k % 2 == 0 else "Z") for k, q in enumerate(questions)}
    predictions.write_text("".join(json.dumps({"id": i, "answer": a}) + "\n" for i, a in answers.items()))
    out = tmp_path / "samples.jsonl"
    done = CliRunner().invoke(app, ["score", "--benchmark", "finmme", "--data", str(synthetic_parquet), "--predictions",
                                    str(predictions), "--samples-out", str(out)])
    assert done.exit_code == 0, done.output
    lines = {json.loads(line)["id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert len(lines) == len(finmme.load_questions(synthetic_parquet))
    for k, q in enumerate(questions):
        assert lines[q.id]["answer"] == answers[q.id] and lines[q.id]["extracted"] is None
        if q.kind in ("single", "multi"):
            assert lines[q.id]["correct"] == (1.0 if k % 2 == 0 else 0.0)


def test_studies_leaderboard_and_compare_go_through_the_core(tiny_model, tiny_qwen_dir, tmp_path):
    """Circular evaluation does not apply (no options: one note); image ablation does; the
    leaderboard and compare read FinMMR runs like any other."""
    from finbench.offline.finmmr_synthetic import demo_data

    data, _ = demo_data(tmp_path / "home")
    first = _run(tiny_model, tiny_qwen_dir, tmp_path / "a", "constrained", data=data, permutations=2,
                 image_ablation=("blank",))
    assert any("no constrained choice item to rotate" in note for note in first.results["notes"])
    assert first.results["image_ablation"] and first.results["errors"]["count"] == 0
    _run(tiny_model, tiny_qwen_dir, tmp_path / "b", "constrained", data=data)
    board = CliRunner().invoke(app, ["leaderboard", str(tmp_path / "a" / "constrained"), str(tmp_path / "b" / "constrained"),
                                     "--out", str(tmp_path / "board.csv")])
    assert board.exit_code == 0, board.output
    table = pd.read_csv(tmp_path / "board.csv")
    assert set(table["benchmark"]) == {"finmmr"} and set(table["metric"].str.lower().str.contains("accuracy")) == {True}
    compared = CliRunner().invoke(app, ["compare", str(tmp_path / "a" / "constrained"), str(tmp_path / "b" / "constrained"),
                                        "--bootstrap", "20", "--out", str(tmp_path / "cmp.json")])
    assert compared.exit_code == 0, compared.output
    result = json.loads((tmp_path / "cmp.json").read_text())
    assert result["benchmark"] == "finmmr" and result["n_shared"] == 12
    assert set(result["comparisons"][0]["delta"]) == {"accuracy", "execution_rate"}


def test_the_judge_is_asked_for_cot_answers_only():
    from finbench.core.types import NUMERICAL, Prediction, Question

    question = Question(id="q", benchmark="finmmr", kind=NUMERICAL, text="How much?", gold="5", fields={"ground_truth": 5})
    cot = Prediction(id="q", answer="5", generated_text="3 + 2. Therefore, the answer is 5")
    (asked,) = finmmr.judge_requests(question, cot)
    system, user = asked.prompt.messages
    assert system["content"][0]["text"] == finmmr.EXTRACT_SYSTEM
    assert user["content"] == [{"type": "text", "text": "Question: How much?\nSolution: 3 + 2. Therefore, the answer is 5"}]
    program = Prediction(id="q", answer="def solution():\n    return 5", generated_text="    return 5")
    number = Prediction(id="q", answer="5", generated_text="5", confidence=0.4)
    assert finmmr.judge_requests(question, program) == [] and finmmr.judge_requests(question, number) == []
    assert finmmr.read_judgement(question, cot, ["5.0"]) == (1.0, {"source": "judge", "extracted": "5.0",
                                                                   "execution_rate": 1})
    assert finmmr.read_judgement(question, cot, ["None"])[0] == 0.0
