"""FAMMA: every published form loads the same questions, images sit where their placeholders are,
the live set is run but not scored, the official grouped call and its parsing, the rule judge, the
analyzer's breakdowns, and a run through the CLI."""

from __future__ import annotations

import ast
import base64
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import shared

from finbench.benchmarks import famma, get_benchmark, load_matching
from finbench.core.types import OPEN, SINGLE, Prediction
from finbench.offline import famma_synthetic as synthetic
from finbench.runner.run_requests import render
from finbench.scoring.tables import score_samples

# five real records (bench-script tests/test_data, Apache-2.0; see fixtures/famma/SOURCE.md)
MOCK = next((p for p in (Path(__file__).parent / "fixtures" / "famma" / "mock.json", shared("data", "famma", "mock.json"))
             if p.exists()), Path("mock.json"))
needs_mock = pytest.mark.skipif(not MOCK.exists(), reason="famma mock.json not present")


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    folder = tmp_path_factory.mktemp("famma")
    data = synthetic.records(MOCK if MOCK.exists() else None)
    return data, {
        "parquet": synthetic.write_parquet(folder / "hub" / "release_basic.parquet", data),
        "arrow": synthetic.write_arrow(folder / "cache" / "data-00000-of-00001.arrow", data),
        "downloader": synthetic.write_downloader_json(folder / "downloaded", data),
        "early": synthetic.write_early_json(folder / "early" / "famma.json", data),
    }


def signature(q):
    return (q.id, q.kind, q.text, q.options, q.gold, q.images, q.fields.get("context"),
            q.fields.get("image_slots"), q.error, dict(q.meta))


@needs_mock
def test_mock_json_loads_as_five_answered_multiple_choice_questions_with_images():
    questions = famma.load_questions(MOCK)
    raw = json.loads(MOCK.read_text())  # the reference: the file read directly
    assert [q.id for q in questions] == [r["question_id"] for r in raw]
    for q, r in zip(questions, raw):
        assert q.error is None and q.kind == SINGLE and q.meta["gold_status"] == "answered"
        assert q.gold == r["answers"] and q.options == tuple(ast.literal_eval(r["options"]))
        assert q.images == (base64.b64decode(r["image_1"]),)
        assert q.fields["context"] == r["context"] and q.text == r["question"]
        assert q.meta["subfield"] == "fixed income" and q.meta["difficulty"] == "hard"
    import io

    from PIL import Image

    assert Image.open(io.BytesIO(questions[0].images[0])).size[0] > 0  # a real JPEG


def test_every_form_loads_identically(forms):
    data, paths = forms
    loaded = {name: famma.load_questions(path) for name, path in paths.items()}
    reference = [signature(q) for q in loaded["parquet"]]
    assert len(reference) == len(data)
    for name, questions in loaded.items():
        assert [signature(q) for q in questions] == reference, name
    by_id = {q.id: q for q in loaded["downloader"]}
    assert by_id["english_2_1_r1"].options == ("left", "right", "neither")  # hub "A. left" prefixes stripped
    assert by_id["english_1_1_r1"].kind == OPEN and by_id["english_1_1_r1"].gold == "5"
    assert "unknown question_type" in by_id["english_5_1_r1"].error  # a bad record is its own error


def test_broken_inputs_become_per_question_errors(tmp_path):
    data = synthetic.records(None)[:2]
    path = synthetic.write_downloader_json(tmp_path / "dl", data)
    (tmp_path / "dl" / "images_release_basic" / "english_1_1_r1_image_1.jpg").unlink()
    questions = famma.load_questions(path)
    assert "not found" in questions[0].error and questions[1].error is None
    records = json.loads(path.read_text())
    records[1]["image_1"] = "@@not base64@@"
    records[1]["options"] = "['unclosed"
    path.write_text(json.dumps(records) + "")
    broken = famma.load_questions(path)[1]
    assert broken.error  # garbage image or options: an error, not an exception
    (tmp_path / "bad.jsonl").write_text('{"question_id": "x", "question_type": "open question", "question": "Why?"}\n'
                                        '{nope\n')
    rows = famma.load_questions(tmp_path / "bad.jsonl")
    assert rows[0].error is None and rows[0].meta["gold_status"] == "unanswered" and "malformed JSON" in rows[1].error
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "bad.jsonl").read_bytes())
    assert famma.load_questions(tmp_path / "bom.jsonl")[0].error is None  # a BOM is not part of record 1
    # a lone surrogate escape is valid JSON but not text: that record's error, naming the field
    (tmp_path / "surrogate.jsonl").write_text('{"question_id": "s", "question_type": "open question", '
                                              '"question": "bad \\udcff"}\n' + (tmp_path / "bad.jsonl").read_text())
    rows = famma.load_questions(tmp_path / "surrogate.jsonl")
    assert "field 'question' is not valid UTF-8" in rows[0].error and rows[1].error is None


def test_placeholders_place_images_in_text_order_and_groups_share_first_images(forms):
    _, paths = forms
    questions = {q.id: q for q in famma.load_questions(paths["parquet"])}
    q = questions["english_2_1_r1"]
    decoded = ["IMG1", "IMG2"]  # stand-ins for the decoded slot 1 and slot 2 images
    request = render(famma.BENCHMARK, famma.request(q, "constrained").prompt, decoded)
    parts = request.messages[0]["content"]
    # reference: scan the text for placeholders and list the slots in order of appearance
    text = f"Context: {q.fields['context']}\nQuestion: {q.text}\n"
    expected = [int(n) for n in re.findall(r"<image_(\d+)>", text)]
    assert expected == [2, 1] and list(request.images) == ["IMG2", "IMG1"]
    kinds = [p["type"] for p in parts]
    assert kinds == ["text", "image", "text", "image", "text"]
    assert parts[0]["text"].endswith("Compare <image_2>") and parts[2]["text"].startswith(" with <image_1>")
    assert "A. left" in parts[-1]["text"] and request.answer_prefix == "Answer:"
    # sub-question 2 has no context or images of its own: the first sub-question's are used
    second = questions["english_2_2_r1"]
    assert second.fields["context"] == q.fields["context"] and second.images == q.images
    # an image no placeholder names goes first; a placeholder without an image stays text
    lone = dataclasses.replace(q, images=q.images[:1], fields={**q.fields, "image_slots": (3,)})
    prompt = famma.request(lone, "constrained").prompt
    content = prompt.messages[0]["content"]
    assert sum(p["type"] == "image" for p in content) == len(prompt.images) == 1 and content[0]["type"] == "image"
    assert "<image_2>" in content[1]["text"] and "<image_1>" in content[1]["text"]


def test_unanswered_questions_run_and_are_reported_unscored(forms):
    _, paths = forms
    questions = {q.id: q for q in famma.load_questions(paths["early"])}
    live = questions["chinese_3_1_r2"]
    assert live.error is None and live.meta["gold_status"] == "unanswered"
    assert questions["french_4_1_r2"].fields["gold_text"] == "3.2%"  # base64 masking undone
    rows = [{"id": q.id, "benchmark": "famma", "kind": q.kind, "gold": q.gold, "answer": "x",
             "error": q.error or "", **dict(q.meta)} for q in questions.values()]
    out = score_samples(pd.DataFrame(rows), benchmark=get_benchmark("famma"))
    assert out["n_unscored"] == 1 and out["n"] == len(rows) - 1
    assert any("no gold answer" in n for n in out["notes"])


def test_official_prompt_groups_sub_questions_and_parsing_follows_the_official_repair(forms):
    _, paths = forms
    questions = {q.id: q for q in famma.load_questions(paths["downloader"])}
    first, second = questions["english_2_1_r1"], questions["english_2_2_r1"]
    a = famma.request(first, "official")
    b = famma.request(second, "official")
    assert a == b  # one request (so one cache key, one generation) per main question
    assert famma.request(first, "constrained") != famma.request(second, "constrained")
    text = a.prompt.messages[0]["content"][0]["text"]
    assert "'id': 'english_2_1_r1'" in text and "'id': 'english_2_2_r1'" in text and "'options': ['A. left'" in text
    assert "{{" not in text and text.startswith("You are a highly knowledgeable financial expert")
    assert [p["type"] for p in a.prompt.messages[0]["content"]] == ["text", "image", "image"]  # images after the text
    reply = 'Sure:\n```json\n{"english_2_1_r1": {"answer": "B", "explanation": "x"}, ' \
            '"english_2_2_r1": {"answer": "12%", "explanation": "y"},}\n```'
    assert famma.answer(first, reply, "official") == "B"
    assert famma.answer(second, reply, "official") == "12%"
    garbage = "I think the answer is B."  # nothing parses: no answers, the first keeps the text
    parsed = famma.parse_grouped_response(garbage, ["english_2_1_r1", "english_2_2_r1"])
    assert parsed == {"english_2_1_r1": {"answer": "", "explanation": garbage},
                      "english_2_2_r1": {"answer": "", "explanation": ""}}
    assert famma.answer(first, "", "official") == ""


def test_filters_and_limit_keep_the_whole_main_question(forms):
    _, paths = forms
    opened = famma.load_questions(paths["parquet"], question_types=["open question"])
    assert {q.meta["question_type"] for q in opened if not q.error} == {"open question"}
    second = {q.id: q for q in opened}["english_2_2_r1"]
    assert "Compare <image_2>" in second.fields["context"] and len(second.images) == 2  # from sub-question 1
    assert [e["id"] for e in second.fields["group"]] == ["english_2_1_r1", "english_2_2_r1"]
    assert [q.id for q in famma.load_questions(paths["parquet"], limit=2)] == \
        [q.id for q in famma.load_questions(paths["parquet"])][:2]
    equity = famma.load_questions(paths["parquet"], domains=["equity"])
    assert {q.id for q in equity} == {"english_2_1_r1", "english_2_2_r1"}
    with pytest.raises(ValueError, match=r"famma: no questions matched.*--domain Equity: the data has .*equity"):
        load_matching(famma.BENCHMARK, paths["parquet"], None, ["Equity"], [])  # subfields are matched as written


@pytest.mark.parametrize("answers, gold", [("B", "B"), ("B.", "B"), ("(B)", "B"), ("A, C", "AC"),
                                           ("barbell", "B"), ("B. barbell", "B"), ("D", None), ("zzz", None)])
def test_multiple_choice_gold_spellings(answers, gold):
    record = {"question_id": "g", "question_type": "multiple-choice", "question": "?", "context": "",
              "options": "['bullet', 'barbell', 'equal']", "answers": answers}
    question = famma.record_to_question(record, 0)
    if gold is None:  # a gold naming no option, or one beyond the list: this question's error
        assert question.error and question.meta["gold_status"] == "unreadable"
    else:
        assert question.error is None and question.gold == gold


def test_rule_verdict_numbers_and_option_text(forms):
    _, paths = forms
    questions = {q.id: q for q in famma.load_questions(paths["parquet"])}
    numeric, choice, live = questions["english_1_1_r1"], questions["english_2_1_r1"], questions["chinese_3_1_r2"]
    cases = [(numeric, "The coupon is $5.00.", 1.0), (numeric, "5.04", 1.0), (numeric, "5.2", 0.0),
             (numeric, "about five", 0.0), (numeric, "", 0.0), (questions["english_2_2_r1"], "12.5", 1.0),
             (choice, "B", 1.0), (choice, "(B)", 1.0), (choice, "right", 1.0), (choice, "Right.", 1.0),
             (choice, "A", 0.0), (choice, "left", 0.0), (live, "anything", None)]
    for question, answer, expected in cases:
        assert famma.rule_verdict(question, answer) == expected, (question.id, answer)


def test_verdicts_and_breakdowns_match_the_official_analyzer():
    rng = np.random.default_rng(0)
    n = 400
    verdicts = rng.choice(np.array(["correct", "incorrect", "Correct", True, False, 1, None], dtype=object), n)
    df = pd.DataFrame({
        "id": [f"q{i}" for i in range(n)], "benchmark": "famma", "kind": OPEN, "gold": "g", "answer": "free text",
        "error": "", "gold_status": "answered",
        "language": rng.choice(["english", "chinese", "french"], n),
        "difficulty": rng.choice(["easy", "medium", "hard"], n),
        "subfield": rng.choice(np.array(["equity", "", None], dtype=object), n),
        "is_arithmetic": rng.choice(np.array(["1", "0", None], dtype=object), n)})
    judge = famma.read_judgement  # the verdict as our judge path reads it …
    df["judge_score"] = [judge(famma.Question(id=i, benchmark="famma", kind=OPEN, text=""), None,
                               [json.dumps({i: v})])[0] for i, v in zip(df["id"], verdicts)]
    # … and as analyzer.py maps it: 1 if x == 'correct' or x is True else 0
    df["ref"] = [1 if (v == "correct" or v is True) else 0 for v in verdicts]
    assert (df["judge_score"] == df["ref"]).all()
    out = score_samples(df.drop(columns=["ref"]), benchmark=get_benchmark("famma"))
    assert out["accuracy"] == pytest.approx(df["ref"].mean())
    got = out["breakdowns"]
    # None and "" are different subfield labels
    from finbench.kernels.segments import MISSING_LABEL

    assert set(got["subfield"]) == {"equity", "", MISSING_LABEL}
    assert got["subfield"][""]["n"] == int((df["subfield"] == "").sum())
    assert got["subfield"][MISSING_LABEL]["n"] == int(df["subfield"].isna().sum())
    for split, flag in (("arithmetic", "1"), ("non-arithmetic", "0")):
        part = df[df["is_arithmetic"] == flag]  # analyzer.py: df[df['is_arithmetic'] == '1']
        assert got["arithmetic"][split]["accuracy"] == pytest.approx(part["ref"].mean())
        for column in ("language", "difficulty"):
            for value, mean in part.groupby(column)["ref"].mean().items():
                assert got[f"arithmetic×{column}"][f"{split}|{value}"]["accuracy"] == pytest.approx(mean)
        for (lang, diff), mean in part.groupby(["language", "difficulty"])["ref"].mean().items():
            assert got["arithmetic×language×difficulty"][f"{split}|{lang}|{diff}"]["accuracy"] == pytest.approx(mean)
    for (lang, diff), mean in df.groupby(["language", "difficulty"])["ref"].mean().items():
        assert got["language×difficulty"][f"{lang}|{diff}"]["accuracy"] == pytest.approx(mean)
    # unparseable judge replies are 0, as the analyzer maps anything else
    q = famma.Question(id="z", benchmark="famma", kind=OPEN, text="")
    assert famma.read_judgement(q, None, ["no json here"])[0] == 0.0
    assert famma.read_judgement(q, None, ['```json\n{"z": "correct"}\n```'])[0] == 1.0


def test_judge_prompt_is_the_official_one_without_options():
    q = famma.Question(id="q1", benchmark="famma", kind=SINGLE, text="Pick one", options=("x", "y"), gold="A",
                       meta={"question_type": "multiple-choice"},
                       fields={"gold_text": "A", "context": "ctx", "raw_options": "['x', 'y']"})
    official_reply = '{"q1": {"answer": "x", "explanation": "because"}}'
    requests = famma.judge_requests(q, Prediction(id="q1", answer="x", generated_text=official_reply))
    prompts = [r.prompt.messages[0]["content"][-1]["text"] for r in requests]
    assert [r.prompt.images for r in requests] == [()]  # the official judge is called without images
    assert requests[0].max_new_tokens == famma.JUDGE_MAX_NEW_TOKENS
    assert len(prompts) == 1 and "'student_answer': 'x'" in prompts[0] and "'ground_truth': 'A'" in prompts[0]
    assert "'student_explanation': 'because'" in prompts[0] and "['x', 'y']" not in prompts[0]  # the quirk
    assert famma.judge_requests(q, Prediction(id="q1", answer="A")) == []  # constrained letters: exact match
    unanswered = famma.Question(id="q2", benchmark="famma", kind=OPEN, text="?", fields={"gold_text": ""})
    assert famma.judge_requests(unanswered, Prediction(id="q2", answer="x", generated_text="x")) == []


@pytest.mark.slow
def test_famma_run_through_the_cli_writes_results_and_report(tiny_qwen_dir, forms, tmp_path):
    from typer.testing import CliRunner

    from finbench.cli import app

    _, paths = forms
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", "famma",
                                      "--data", str(paths["parquet"]), "--out", str(out), "--device", "cpu",
                                      "--dtype", "float32", "--max-new-tokens", "8", "--bootstrap", "50",
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    samples = pd.read_parquet(out / "samples.parquet")
    assert (out / "report.html").exists()
    assert len(samples) == results["n_questions"] == 11
    scores = results["scores"]
    assert scores["n_unscored"] == 1 and scores["n"] == 10 and scores["n_errors"] == 1
    live = samples.set_index("id").loc["chinese_3_1_r2"]
    assert live["error"] == "" and live["raw_output"] != "" and np.isnan(live["correct"])  # run, not scored
    opened = samples[samples["kind"] == OPEN]
    assert (opened["n_generated_tokens"] > 0).all() or (opened["error"] != "").any()
    assert scores["correct_sources"]["rules"] == int(((samples["kind"] == OPEN) & (samples["gold_status"] == "answered")).sum())
    assert "arithmetic×subfield" in scores["breakdowns"]
