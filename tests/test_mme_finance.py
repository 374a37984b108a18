"""MME-Finance: the loader on the official layout (and broken inputs), the official prompts and
judge rules restated by hand, the scorer on hand-computed cases, and a run through the CLI."""

from __future__ import annotations

import base64
import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from finbench.benchmarks import get_benchmark, mme_finance
from finbench.cli import app
from finbench.core.types import OPEN, SINGLE, Prediction
from finbench.offline import mme_finance_synthetic as synthetic
from finbench.scoring.tables import score_samples


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return synthetic.write_folder(tmp_path_factory.mktemp("mmfin"))


def test_the_official_layout_loads_all_three_sets(folder):
    questions = mme_finance.load_questions(folder)
    sets = pd.Series([q.meta["set"] for q in questions]).value_counts().to_dict()
    assert sets == {"MMfin": 8, "MMfin_CN": 8, "MMfin_Binary": 6}
    assert all(q.error is None for q in questions)
    binary = [q for q in questions if q.meta["set"] == "MMfin_Binary"]
    assert all(q.kind == SINGLE and q.options == ("是", "否") and q.gold in ("A", "B") for q in binary)
    assert {q.meta["language"] for q in questions if q.meta["set"] == "MMfin_CN"} == {"zh"}
    opened = [q for q in questions if q.kind == OPEN]
    assert all(q.images and q.images[0].startswith(b"\x89PNG") for q in opened)
    assert len({q.id for q in questions}) == len(questions)  # ids carry the set: no clash between sets


def _write_tsv(path, rows):
    pd.DataFrame(rows).to_csv(path, sep="\t", index=False)
    return path


def test_base64_images_and_broken_records_each_become_that_row_s_error(folder, tmp_path):
    png = (folder / "images" / "MMfin" / "mmfin_000.png").read_bytes()
    good = {"index": 1, "image": base64.b64encode(png).decode(), "question": "Q?", "answer": "42",
            "task_category": "OCR", "image_type": "Table", "image_style": "Computer Screenshot", "background": ""}
    rows = [good,
            {**good, "index": 2, "question": ""},
            {**good, "index": 3, "image": "", "image_path": "missing.png"},
            {**good, "index": 4, "image": "", "image_path": "../../etc/passwd"},
            {**good, "index": 5, "image": "!" * 80},
            {**good, "index": 6, "answer": ""},
            {**good, "index": 7, "image": "", "image_path": "['a.png'"}]
    questions = {q.id: q for q in mme_finance.load_questions(_write_tsv(tmp_path / "MMfin.tsv", rows))}
    assert questions["MMfin-1"].error is None and questions["MMfin-1"].images == (png,)
    expected = {"MMfin-2": "question is empty", "MMfin-3": "not found", "MMfin-4": "climbs out",
                "MMfin-5": "not base64", "MMfin-6": "answer is empty", "MMfin-7": "neither a path nor a list"}
    for qid, needle in expected.items():
        assert needle in (questions[qid].error or ""), (qid, questions[qid].error)
    binary = _write_tsv(tmp_path / "MMfin_Binary.tsv", [{**good, "answer": "也许"}])
    assert "not one of" in mme_finance.load_questions(binary)[0].error


def test_the_official_set_decides_binary_and_tsv_image_references_resolve(folder, tmp_path):
    """MMfin/MMfin_CN items are judged whatever their answer (a bare "Yes" included); a short
    `image` field is the index of the row holding the image (VLMEvalKit), a list literal holds
    several; the data check and the run's data fingerprint read the TSVs."""
    from finbench.app.datacheck import check_data
    from finbench.runner.provenance import data_fingerprint

    png = (folder / "images" / "MMfin" / "mmfin_000.png").read_bytes()
    other = (folder / "images" / "MMfin" / "mmfin_001.png").read_bytes()
    encoded, encoded_other = base64.b64encode(png).decode(), base64.b64encode(other).decode()
    good = {"index": 1, "image": encoded, "question": "Is revenue rising?", "answer": "Yes", "task_category": "OCR",
            "image_type": "Table", "image_style": "Computer Screenshot", "background": ""}
    rows = [good, {**good, "index": 2, "image": "1"}, {**good, "index": 3, "image": "9"},
            {**good, "index": 4, "image": str([encoded, encoded_other])}]
    data = tmp_path / "data"
    data.mkdir()
    _write_tsv(data / "MMfin.tsv", rows)
    questions = {q.id: q for q in mme_finance.load_questions(data)}
    assert questions["MMfin-1"].kind == OPEN and questions["MMfin-1"].meta["question_type"] == "open"
    assert questions["MMfin-1"].gold == "Yes" and questions["MMfin-1"].error is None
    assert questions["MMfin-2"].images == (png,) and questions["MMfin-2"].error is None
    assert "names no row" in questions["MMfin-3"].error
    assert questions["MMfin-4"].images == (png, other)
    # without an official set's file name, a yes/no answer is binary
    _write_tsv(tmp_path / "mine.tsv", [good])
    [loose] = mme_finance.load_questions(tmp_path / "mine.tsv")
    assert loose.kind == SINGLE and loose.options == ("Yes", "No") and loose.gold == "A"
    # filters apply before images are read: a filtered-out row with a missing file is no error
    _write_tsv(data / "MMfin.tsv", rows + [{**good, "index": 5, "image": "", "image_path": "gone.png",
                                            "task_category": "Image Caption"}])
    assert {q.id for q in mme_finance.load_questions(data, domains=["OCR"])} == {f"MMfin-{i}" for i in (1, 2, 3, 4)}
    with (data / "MMfin.tsv").open("ab") as tsv:  # a line that is not UTF-8 and one with too few fields
        tsv.write(b"6\t\xff\xfeQ?\tYes\tOCR\tTable\tComputer Screenshot\t\t\nonly\ttwo\n")
    loaded = mme_finance.load_questions(data)
    assert [q.error for q in loaded[:5]] == [None, None, questions["MMfin-3"].error, None, loaded[4].error]
    # a line with too few fields reads them empty, as pandas pads them (VLMEvalKit): here "question is empty"
    assert "is not valid UTF-8 (byte 0xff" in loaded[5].error and "question is empty" in loaded[6].error
    report = check_data("mme-finance", data)
    assert report["files"] == [str(data / "MMfin.tsv")] and report["n_records"] == 7 and report["n_errors"] == 4
    fingerprint = data_fingerprint(str(data), lambda path: str(path.stat().st_size))
    assert list(fingerprint["files"]) == [str(data / "MMfin.tsv")] and fingerprint["digest"]


def test_the_official_answer_prompt_restated(folder):
    """MMfin.build_prompt for an OCR item with a background, written out by hand ("/n" is the
    fork's own, a slash and an n)."""
    question = next(q for q in mme_finance.load_questions(folder)
                    if q.meta["set"] == "MMfin" and q.meta["task_category"] == "OCR" and q.fields["background"])
    expected = ("You are a financial expert who is well-versed in various financial charts and has extensive "
                "financial knowledge. Now you are given a image and corresponding question. Please answer this "
                f"question./nThis is question: {question.text}/nHere are the answer requirements: The answer should "
                "conduct an Optical Character Recognition (OCR) analysis on the content asked about. Just answer the "
                "question with a single word or phrase if possible. No irrelevant information should be included.\n"
                f"This is background: {question.fields['background']}")
    assert mme_finance.official_text(question) == expected
    request = mme_finance.request(question, "official")
    content = request.prompt.messages[0]["content"]
    assert [p["type"] for p in content] == ["image", "text"] and content[1]["text"] == expected
    assert request.max_new_tokens == 2048 and request == mme_finance.request(question, "constrained")
    zh = next(q for q in mme_finance.load_questions(folder) if q.meta["set"] == "MMfin_CN")
    assert mme_finance.official_text(zh).startswith("你是一位精通各种金融图表且拥有广泛金融知识的金融专家。现在给你一张图像和相应的问题。"
                                                     "请回答这个问题。/n这是问题：" + zh.text + "/n这是答案的一些要求：")


def test_binary_items_are_the_bare_question_officially_and_letters_constrained(folder):
    question = next(q for q in mme_finance.load_questions(folder) if q.meta["set"] == "MMfin_Binary")
    official = mme_finance.request(question, "official")
    assert official.prompt.messages[0]["content"] == [{"type": "image"}, {"type": "text", "text": question.text}]
    constrained = mme_finance.request(question, "constrained")
    assert constrained.n_options == 2 and constrained.prompt.answer_prefix == "Answer:"
    assert "A. 是\nB. 否\n" in constrained.prompt.messages[0]["content"][-1]["text"]


def test_the_judge_prompt_and_reply_rules_restated(folder):
    question = next(q for q in mme_finance.load_questions(folder)
                    if q.meta["set"] == "MMfin" and q.meta["task_category"] == "Entity Recognition")
    text = mme_finance.judge_prompt_text(question, "Q1, Q2")
    assert text.startswith("\nYou are a financial expert who is well-versed in various financial charts")
    assert "\nThis is an objective question. Please give a score:" in text
    assert "Here are the prediction requirements: The answer should  contain recognition results" in text
    assert "What sections are included in this document?" in text  # the category's first worked example
    assert text.endswith(f"\n{question.text} | Q1 <AND> Q2 <AND> Q3 <AND> Q4 | Q1, Q2 | ")
    [request] = mme_finance.judge_requests(question, Prediction(id=question.id, answer="Q1, Q2"))
    assert [p["type"] for p in request.prompt.messages[0]["content"]] == ["text", "image"]  # the judge sees it
    assert request.prompt.images == (0,) and request.max_new_tokens == 3
    binary = next(q for q in mme_finance.load_questions(folder) if q.kind == SINGLE)
    assert mme_finance.judge_requests(binary, Prediction(id=binary.id, answer="A")) == []
    for reply, score in [("5", 5), (" 3\n", 3), ("Score: 4", 4), ("7", None), ("10 then 2", 2), ("", None),
                         ("-1", None), ("correctness 6 or 0", 0)]:
        assert mme_finance.judge_score(reply) == score, reply
    assert mme_finance.read_judgement(question, None, ["7"]) == (0.0, {"score": None, "parsed": False})


def test_scores_restated_on_hand_computed_cases():
    rows = [  # open: judged 5 and 3, an error (scores 0), one unjudged (left out)
        {"id": "o1", "kind": OPEN, "gold": "x", "answer": "x", "judge_score": 5.0, "error": "", "task_category": "OCR"},
        {"id": "o2", "kind": OPEN, "gold": "x", "answer": "y", "judge_score": 3.0, "error": "", "task_category": "OCR"},
        {"id": "o3", "kind": OPEN, "gold": "x", "answer": "", "judge_score": math.nan, "error": "model error: boom",
         "task_category": "Image Caption"},
        {"id": "o4", "kind": OPEN, "gold": "x", "answer": "z", "judge_score": math.nan, "error": "",
         "task_category": "Image Caption"},
    ]
    binary = [("A", "A"), ("B", "A"), ("A", "B"), ("B", "是\n"), ("A", "是。")]  # (gold letter, answer)
    rows += [{"id": f"b{k}", "kind": SINGLE, "gold": g, "answer": a, "options": ["是", "否"], "option_probs": [0.5, 0.5],
              "judge_score": math.nan,
              "error": "", "task_category": "Binary"} for k, (g, a) in enumerate(binary)]
    out = score_samples(pd.DataFrame(rows), benchmark=get_benchmark("mme-finance"))
    assert out["score"] == pytest.approx((5 + 3 + 0) / 3 / 5) and out["score_x20"] == pytest.approx(53.3333, abs=1e-3)
    assert out["n_unjudged"] == 1 and any("no judge score" in n for n in out["notes"])
    # truths 是 否 是 否 是; predictions 是 是 否 "是\n" (not stripped: neither) 是 ("。" stripped)
    assert out["binary_accuracy"] == pytest.approx(2 / 5)
    tp, fp, fn = 2, 1, 1  # b0, b4 | b1 | b2 (b3's "是\n" counts nowhere)
    assert out["binary_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert out["breakdowns"]["task_category"]["OCR"]["score"] == pytest.approx(0.8)


def test_benchmarks_lists_mme_finance_and_a_run_through_the_cli(tiny_qwen_dir, folder, tmp_path):
    listed = CliRunner().invoke(app, ["benchmarks"])
    assert listed.exit_code == 0 and "mme-finance" in listed.output and "MME-Finance" in listed.output
    out = tmp_path / "run"
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", "mme-finance", "--data",
                                    str(folder), "--out", str(out), "--dtype", "float32", "--device", "cpu",
                                    "--max-new-tokens", "4", "--bootstrap", "20", "--no-progress"])
    assert done.exit_code == 0, done.output
    results = json.loads((out / "results.json").read_text())
    samples = pd.read_parquet(out / "samples.parquet")
    assert results["errors"]["count"] == 0 and len(samples) == 22
    binary = samples[samples["kind"] == SINGLE]
    assert binary["answer"].isin(["A", "B"]).all() and (binary["option_probs"].map(len) == 2).all()
    assert (samples.loc[samples["kind"] == OPEN, "n_generated_tokens"] <= 4).all()
    assert results["scores"]["n_binary"] == 6 and results["scores"]["n_unjudged"] == 16
    assert results["scores"]["binary_accuracy"] == pytest.approx((binary["answer"] == binary["gold"]).mean())


@pytest.mark.slow
def test_the_judge_is_a_vision_language_model_shown_the_chart(tiny_model, tiny_qwen_dir, folder, tmp_path, monkeypatch):
    """Open items are judged by the --judge VLM with the official judge prompt and the item's image
    (text first, then the image, as the fork's judge call); scores 0–5, cached like answers."""
    from finbench.runner.engine import run_benchmark
    from finbench.app.api import make_config

    seen = []
    original = tiny_model.prepare
    monkeypatch.setattr(tiny_model, "prepare", lambda requests: (seen.extend(requests), original(requests))[1])
    config = make_config(model=str(tiny_qwen_dir), benchmark="mme-finance", data=str(folder), out=str(tmp_path / "run"),
                       device="cpu", dtype="float32", max_new_tokens=3, judge=str(tiny_qwen_dir), bootstrap=0)
    result = run_benchmark(config, tiny_model, show_progress=False)
    judged = [r for r in seen if "Compare the ground truth and prediction" in r.messages[0]["content"][0].get("text", "")
              or "比较真实答案和人工智能模型的预测结果" in r.messages[0]["content"][0].get("text", "")]
    assert len(judged) == 16
    assert all([p["type"] for p in r.messages[0]["content"]] == ["text", "image"] and len(r.images) == 1 for r in judged)
    samples = result.samples
    opened = samples[samples["kind"] == OPEN]
    parsed = opened["judge_score"].notna()  # a reply without a 0–5 score fails closed: no score, named
    assert opened.loc[parsed, "judge_score"].isin([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).all()
    assert sorted(opened.loc[~parsed, "id"]) == sorted(result.results["judge"]["unparsed_items"])
    expected = opened.loc[parsed, "judge_score"].mean() / 5 if parsed.any() else None
    assert result.results["scores"]["score"] == (pytest.approx(expected) if parsed.any() else None)
    assert result.results["judge"]["sees_images"] and result.results["judge"]["n_shown_images"] == 16
    again = run_benchmark(config, tiny_model, show_progress=False)
    assert again.results["judge"]["n_cached"] == 16 and again.results["judge"]["n_computed"] == 0


@pytest.mark.slow
def test_the_demo_runs_offline_with_no_errors(tmp_path):
    from helpers import cli

    out = tmp_path / "demo"
    done = cli("demo", "--benchmark", "mme-finance", "--out", str(out), "--no-progress",
               env={"FINBENCH_HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["errors"]["count"] == 0 and results["n_questions"] == 22
    # the demo judges itself; the tiny judge's replies that hold no score are failed judgements, counted
    assert results["judge"]["sees_images"] and results["scores"]["n_unjudged"] == results["judge"]["n_unparsed_items"]
    assert (out / "data").is_dir() and done.stdout.strip().splitlines()[-1].startswith("tiny-qwen2.5-vl · mme-finance")


@pytest.mark.slow
def test_an_answer_given_without_the_chart_is_still_judged_with_it(tiny_model, tiny_qwen_dir, folder, tmp_path,
                                                                   monkeypatch):
    """Image ablation `none` asks open items with no image; their answers are judged as the
    official judge would: shown the item's chart."""
    from finbench.runner.engine import run_benchmark
    from finbench.app.api import make_config

    seen = []
    original = tiny_model.prepare
    monkeypatch.setattr(tiny_model, "prepare", lambda requests: (seen.extend(requests), original(requests))[1])
    config = make_config(model=str(tiny_qwen_dir), benchmark="mme-finance", data=str(folder), out=str(tmp_path / "run"),
                       device="cpu", dtype="float32", max_new_tokens=3, judge=str(tiny_qwen_dir), bootstrap=0,
                       image_ablation=("none",))
    result = run_benchmark(config, tiny_model, show_progress=False)
    asked = [r for r in seen if "Please answer this question." in r.messages[0]["content"][-1].get("text", "")
             or "请回答这个问题。" in r.messages[0]["content"][-1].get("text", "")]
    assert sum(1 for r in asked if not r.images) == 16  # the ablated askings: no image at all
    judged = [r for r in seen if "Compare the ground truth and prediction" in r.messages[0]["content"][0].get("text", "")
              or "比较真实答案和人工智能模型的预测结果" in r.messages[0]["content"][0].get("text", "")]
    assert judged and all(len(r.images) == 1 for r in judged)  # base and ablated answers, each with its chart
    # 32 calls (16 base, 16 ablated); one asked per distinct request (an ablated answer that repeats
    # the base one, with the same chart, is the same request)
    assert result.results["judge"]["n_calls"] == 32 and len(judged) == result.results["judge"]["n_computed"]
    assert result.results["image_ablation"]["none"]["n"] >= 16
