"""FinChart-Bench end to end: the 60 real items of ../shared/data/finchart-bench (read from there,
never copied) load with their charts; the official prompts are the README's f-strings byte for byte;
the official answer rule equals an independent restatement of the README's comparison on thousands
of generated answers; both protocols run through `finbench run` on a tiny model with 0 errors;
broken input becomes per-sample errors; the full public set (when a checkout is given in
FINBENCH_FULL_DATA) is read by `finbench data check` with the published counts."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import cli, shared

from finbench.benchmarks import finchart_bench, get_benchmark
from finbench.scoring.tables import score_samples

REAL = shared("data", "finchart-bench")
needs_real = pytest.mark.skipif(not REAL.exists(), reason="../shared/data/finchart-bench (60 real items) is absent")
FULL = Path(os.environ.get("FINBENCH_FULL_DATA", "/nonexistent")) / "FinChart-Bench"


@pytest.fixture(scope="module")
def real():
    return finchart_bench.load_questions(REAL)


def _records(task: str) -> list[dict]:
    return json.loads((REAL / f"{task}_data.json").read_text(encoding="utf-8"))


@needs_real
def test_the_60_real_items_load_with_their_charts(real):
    assert len(real) == 60 and not [q.error for q in real if q.error]
    assert Counter(q.meta["task"] for q in real) == {"MC": 20, "TF": 20, "QA": 20}
    by_id = {q.id: q for q in real}
    for task in ("MC", "TF", "QA"):
        for record in _records(task):
            q = by_id[f"{task}/{record['image']}"]
            stem, ext = os.path.splitext(record["image"])  # the README's own resolution of the file
            assert q.images == ((REAL / f"{task}_images" / (stem.rsplit("_", 1)[0] + ext)).read_bytes(),)
            assert q.text == record["question"]
            assert q.meta["official_answer"] == (str(record["answer"]).lower() if task != "QA" else str(record["answer"]))
            if task == "MC":
                assert q.options == tuple(record["choices"][k] for k in "ABCD") and q.gold == record["answer"]
            if task == "TF":
                assert q.options == ("True", "False") and q.gold == {"True": "A", "False": "B"}[record["answer"]]
            if task == "QA":
                assert float(q.gold) == float(record["answer"]) and q.kind == "numerical"
    shared = Counter(q.meta["chart"] for q in real)
    assert all(q.meta["chart"].endswith(".jpg") and "_q" not in q.meta["chart"] for q in real) and max(shared.values()) >= 1


@needs_real
def test_official_prompts_are_the_readme_f_strings(real):
    """The README's three f-strings, written out here, on every real item's raw JSON."""
    by_id = {q.id: q for q in real}
    for task in ("MC", "TF", "QA"):
        for item in _records(task):
            question = item["question"]
            if task == "MC":
                choice = item["choices"]
                prompt = f"""Question: {question}\nChoice: {choice}\nOutput correct label only in this format: 'Result = [[ label ]]'"""
            elif task == "QA":
                prompt = f"""Question: {question}\nOutput correct answer only in this format: 'Result = [[ answer ]]'"""
            else:
                prompt = f"""Question: {question}\nOutput true or false label only in this format: 'Result = [[ label ]]'"""
            request = finchart_bench.request(by_id[f"{task}/{item['image']}"], "official")
            (message,) = request.prompt.messages
            assert [p["type"] for p in message["content"]] == ["image", "text"]
            assert message["content"][1]["text"] == prompt


def _readme_rule(text: str, task: str, gold) -> bool:
    """Independent restatement: find the last '[[', then the ']]' after it that closes the first
    complete pair from the right; the README then compares `p == gt` (gt lower-cased, or float)."""
    end = text.rfind("]]")
    while end != -1:
        start = text.rfind("[[", 0, end)
        if start != -1:
            inner = text[start + 2:end]
            if "]]" not in inner:
                break
        end = text.rfind("]]", 0, end)
    if end == -1 or start == -1:
        return False
    reading = inner.strip()
    if task == "QA":
        try:
            return float(reading) == float(gold)
        except ValueError:
            return False
    return reading.lower() == str(gold).lower()


def _answers(rng: random.Random, task: str, gold) -> str:
    labels = {"MC": ["A", "b", "C", "d", "c", "E", "AB", "3Q'14"], "TF": ["True", "false", "TRUE", "yes", "Fals"],
              "QA": ["140", "140.0", "140.00", "1.4e2", "139.9", "-140", "140%", "$140", "1,400", "nan", "2.6", "0"]}[task]
    if rng.random() < 0.3:
        labels.append(str(gold))
    parts = []
    for _ in range(rng.randint(0, 3)):
        label = rng.choice(labels)
        pad = rng.choice(["", " ", "  ", "\t"])
        parts.append(rng.choice([f"Result = [[{pad}{label}{pad}]]", f"[[{pad}{label}{pad}]]", f"Result=[[{label}]]",
                                 f"The answer is {label}", f"Result = [ {label} ]", f"'Result = [[ label ]]' then [[{label}]]"]))
    return rng.choice([" ", "\n", ". "]).join(parts)


def test_the_official_rule_equals_the_readme_comparison_on_thousands_of_answers():
    rng = random.Random(40)
    rows, expected = [], []
    for n in range(3000):
        task = ("MC", "TF", "QA")[n % 3]
        gold = {"MC": rng.choice("ABCD"), "TF": rng.choice(["True", "False"]), "QA": rng.choice([140, 2.6, 0, 140.0])}[task]
        text = _answers(rng, task, gold)
        expected.append(_readme_rule(text, task, gold))
        official = str(gold).lower() if task != "QA" else str(gold)
        rows.append({"id": str(n), "kind": "numerical" if task == "QA" else "single", "task": task,
                     "gold": str(gold) if task == "QA" else "X", "official_answer": official,
                     "answer": finchart_bench.answer(None, text, "official"), "option_probs": [], "error": ""})
    for text, reading in (("Result = [[ C ]]", "C"), ("[[ c ]]", "c"), ("[[ 140.0 ]]", "140.0"), ("[[140]]", "140"),
                          ("Result = [[ A ]] Result = [[ B ]]", "B"), ("no result", "")):
        assert finchart_bench.extract_official(text) == reading
    from finbench.scoring.finchart_bench import build_table

    got = build_table(pd.DataFrame(rows)).correct.numpy().astype(bool).tolist()
    assert sum(expected) > 300 and len(expected) - sum(expected) > 300  # both verdicts well represented
    assert got == expected


def test_constrained_letters_and_the_tolerance_variant_beside_the_exact_rule():
    from finbench.scoring.finchart_bench import build_table

    rows = pd.DataFrame([
        {"id": "1", "kind": "single", "task": "MC", "gold": "C", "official_answer": "3q'14", "answer": "C", "option_probs": [.1, .2, .6, .1]},
        {"id": "2", "kind": "single", "task": "TF", "gold": "B", "official_answer": "false", "answer": "A", "option_probs": [.6, .4]},
        {"id": "3", "kind": "numerical", "task": "QA", "gold": "140", "official_answer": "140", "answer": "139.5", "option_probs": []},
        {"id": "4", "kind": "numerical", "task": "QA", "gold": "2.6", "official_answer": "2.6", "answer": "2.6", "option_probs": []},
        {"id": "5", "kind": "numerical", "task": "QA", "gold": "140", "official_answer": "140", "answer": "150", "option_probs": []}])
    rows["error"] = ""
    scores = score_samples(rows, get_benchmark("finchart-bench"))
    assert scores["mc_accuracy"] == 1.0 and scores["tf_accuracy"] == 0.0
    assert scores["qa_accuracy"] == pytest.approx(1 / 3) and scores["qa_accuracy_tolerance"] == pytest.approx(2 / 3)
    assert scores["accuracy"] == pytest.approx(2 / 5)  # the exact rule, never the tolerance, in the headline
    assert build_table(rows).correct.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]


def test_broken_input_becomes_per_sample_errors(tmp_path):
    (tmp_path / "MC_images").mkdir()
    (tmp_path / "MC_images" / "c1.jpg").write_bytes(b"jpg")
    good = {"image": "c1_q1.jpg", "question": "Q?", "choices": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer": "B"}
    bad = [dict(good, image="c1_q2.jpg", answer="E"), dict(good, image="missing_q1.jpg"),
           dict(good, image="c1_q3.jpg", choices={"A": "a"}), dict(good, image="c1_q4.jpg", question=""),
           dict(good, image="../../x_q1.jpg"), dict(good, image="c1_q5.jpg", answer=""), 7,
           dict(good, image="c1_q6.jpg", answer="c")]
    (tmp_path / "MC_data.json").write_text(json.dumps([good, *bad]), encoding="utf-8")
    questions = finchart_bench.load_questions(tmp_path)
    assert len(questions) == 9 and not questions[0].error and questions[0].gold == "B"
    assert all(q.error for q in questions[1:8]), [q.error for q in questions]
    assert questions[8].gold == "C" and questions[8].meta["official_answer"] == "c"  # the README lower-cases it
    assert "not a letter" in questions[1].error or "neither a letter" in questions[1].error
    assert "does not exist" in questions[2].error and "climbs out" in questions[5].error
    with pytest.raises(ValueError, match="no MC_data.json"):
        finchart_bench.load_questions(tmp_path / "MC_images")


@needs_real
@pytest.mark.parametrize("protocol", ["constrained", "official"])
def test_the_60_real_items_run_under_each_protocol_with_no_errors(tiny_qwen_dir, tmp_path, protocol):
    out = tmp_path / protocol
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finchart-bench", "--data", str(REAL),
               "--protocol", protocol, "--out", str(out), "--device", "cpu", "--dtype", "float32",
               "--max-new-tokens", "6", "--bootstrap", "20", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet")
    results = json.loads((out / "results.json").read_text())
    assert len(samples) == 60 and results["errors"]["count"] == 0
    scores = results["scores"]
    by_task = samples.groupby("task")["correct"].mean()
    for task in ("MC", "TF", "QA"):
        assert scores[f"{task.lower()}_accuracy"] == pytest.approx(by_task[task])
    assert scores["accuracy"] == pytest.approx(samples["correct"].mean())
    assert scores["clustered"]["by"] == "chart" and samples["cluster"].nunique() < 60
    assert "choice items (n 40" in done.stdout  # the label balance line: MC and TF


def test_the_demo_data_is_in_the_official_layout(tmp_path):
    from finbench.offline.finchart_bench_synthetic import demo_data

    data, written = demo_data(tmp_path)
    assert written and {p.name for p in data.iterdir()} == {"MC_data.json", "TF_data.json", "QA_data.json",
                                                           "MC_images", "TF_images", "QA_images"}
    questions = finchart_bench.load_questions(data)
    assert len(questions) == 18 and not [q.error for q in questions if q.error]
    assert len(finchart_bench.load_questions(data, question_types=["TF"])) == 6
    assert demo_data(tmp_path) == (data, False)


@pytest.mark.skipif(not FULL.exists(), reason="set FINBENCH_FULL_DATA to a folder holding a FinChart-Bench checkout")
def test_the_full_public_set_reads_with_the_published_counts():
    done = cli("data", "check", "--benchmark", "finchart-bench", str(FULL))
    assert done.returncode == 0, done.stdout[-2000:]
    assert "7019 records" in done.stdout and "ok: every record loads" in done.stdout
    from finbench.app.datacheck import check_data

    report = check_data("finchart-bench", FULL)
    assert report["n_errors"] == 0 and report["counts"]["task"] == {"MC": 2350, "TF": 2384, "QA": 2285}
