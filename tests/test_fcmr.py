"""FCMR end to end: the 30 real items of ../shared/data/fcmr (read from there, never copied) load with
chart, table and text; exact-set and per-statement scoring against a hand restatement; the official
extraction rule; both protocols and the image ablation through `finbench run` on a tiny model with 0
errors; broken input becomes per-sample errors; the full public set (when a checkout is given in
FINBENCH_FULL_DATA) is read by `finbench data check` with the published counts."""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import cli, shared

from finbench.benchmarks import fcmr, get_benchmark
from finbench.scoring.tables import score_samples

REAL = shared("data", "fcmr")
needs_real = pytest.mark.skipif(not REAL.exists(), reason="../shared/data/fcmr (30 real items) is absent")
FULL = Path(os.environ.get("FINBENCH_FULL_DATA", "/nonexistent")) / "FCMR"


@needs_real
def test_the_30_real_items_load_with_chart_table_and_text():
    questions = fcmr.load_questions(REAL)
    assert len(questions) == 30 and not [q.error for q in questions if q.error]
    assert Counter(q.meta["difficulty"] for q in questions) == {"easy": 10, "medium": 10, "hard": 10}
    by_id = {q.id: q for q in questions}
    for grade in ("easy", "medium", "hard"):
        folder = REAL / "dataset" / grade
        with open(folder / f"{grade}_data.csv", newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                q = by_id[f"{grade}/{row['anchor_num']}"]
                assert q.images == ((folder / "chart_images" / row["filename"]).read_bytes(),)
                table = (folder / f"{grade}_test_table_modality" / f"table_modality_{row['anchor_num']}.csv").read_text()
                text = (folder / f"{grade}_test_text_modality_chunk" /
                        f"anchor_table_test_{row['anchor_num']}_text.txt").read_text()
                assert q.fields["table"] == table and q.fields["text"] == text
                assert q.options[ord(q.gold) - ord("A")] == row["correct_answer"]  # the gold set, as published
                prompt = fcmr.request(q, "constrained").prompt.messages[0]["content"][1]["text"]
                assert table.strip() in prompt and text.strip() in prompt and row["option3"] in prompt
                assert q.meta["chart_type"] == row["chart_type"] and q.meta["option_type"] == row["option_type"]
                assert q.meta["modality_order_type"] == (row.get("modality_order_type") or None)


def test_the_official_extraction_rule():
    cases = {"Answer: 1, 3": "1, 3", "so 2 is false.\nAnswer: [1,3]": "1, 3", "answer: none": "none",
             "Answer: None of them": "none", "Statements 1 and 2.\nANSWER: 2 and 3": "2, 3", "1.5 million": "",
             "Answer: 13": "", "Answer: 3, 1, 3": "1, 3", "I think 2": "2", "": "", "Answer:\nAnswer: 1": "1",
             "1 is true. Answer: none": "none"}
    for text, expected in cases.items():
        assert fcmr.extract_official(text) == expected, text


def _row(i: int, gold: str, answer: str, letters: bool) -> dict:
    return {"id": str(i), "kind": "single", "gold": gold, "answer": answer, "error": "",
            "option_probs": [0.125] * 8 if letters else [], "difficulty": "easy"}


def test_exact_set_and_per_statement_accuracy_against_a_restatement():
    sets = {s: {int(x) for x in s.split(", ")} if s != "none" else set() for s in fcmr.SETS}
    rows, exact, statements = [], [], []
    for i, (gold, said) in enumerate([(g, s) for g in fcmr.SETS for s in fcmr.SETS]):
        letters = i % 2 == 0
        rows.append(_row(i, "ABCDEFGH"[fcmr.SETS.index(gold)], "ABCDEFGH"[fcmr.SETS.index(said)] if letters else said,
                         letters))
        exact.append(sets[gold] == sets[said])
        statements.append(sum((k in sets[gold]) == (k in sets[said]) for k in (1, 2, 3)))
    rows.append(_row(64, "A", "", False))  # unreadable: wrong in both
    exact.append(False)
    statements.append(0)
    scores = score_samples(pd.DataFrame(rows), get_benchmark("fcmr"))
    assert scores["accuracy"] == pytest.approx(sum(exact) / 65)
    assert scores["statement_accuracy"] == pytest.approx(sum(statements) / (3 * 65))
    assert scores["n_unreadable"] == 1


def test_broken_input_becomes_per_sample_errors(tmp_path):
    from finbench.offline.fcmr_synthetic import write_folder

    root = write_folder(tmp_path / "d", n_per_grade=4)
    data = root / "dataset" / "easy" / "easy_data.csv"
    rows = list(csv.reader(data.open(encoding="utf-8")))
    rows[1][2] = "4"  # not one of the eight sets
    rows[2][1] = "missing.png"
    rows[3][0] = "x"
    data.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n", encoding="utf-8")
    (root / "dataset" / "easy" / "easy_test_text_modality_chunk" / f"anchor_table_test_{rows[4][0]}_text.txt").unlink()
    questions = fcmr.load_questions(root, question_types=["easy"])
    assert len(questions) == 4 and all(q.error for q in questions), [q.error for q in questions]
    assert "not one of" in questions[0].error and "does not exist" in questions[1].error
    assert not [q.error for q in fcmr.load_questions(root, question_types=["hard"]) if q.error]


@needs_real
@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["constrained", "official"])
def test_the_30_real_items_run_under_each_protocol_with_no_errors(tiny_qwen_dir, tmp_path, protocol):
    out = tmp_path / protocol
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "fcmr", "--data", str(REAL), "--protocol", protocol,
               "--out", str(out), "--device", "cpu", "--dtype", "float32", "--max-new-tokens", "4", "--bootstrap", "20",
               "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    samples = pd.read_parquet(out / "samples.parquet")
    results = json.loads((out / "results.json").read_text())
    assert len(samples) == 30 and results["errors"]["count"] == 0
    scores = results["scores"]
    assert set(scores["breakdowns"]) == {"difficulty", "option_type", "modality_order_type", "chart_type"}
    assert scores["accuracy"] == pytest.approx(samples["correct"].mean())
    assert 0 <= scores["statement_accuracy"] <= 1


@needs_real
def test_the_image_ablation_applies(tiny_qwen_dir, tmp_path):
    """The paper's own control: the same items without the chart (its table and text still shown)."""
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "fcmr", "--data", str(REAL), "--limit", "2",
               "--out", str(tmp_path / "run"), "--device", "cpu", "--dtype", "float32", "--bootstrap", "0",
               "--image-ablation", "none", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["image_ablation"]["none"]["n"] == 2 and "image ablation none" in done.stdout


def test_the_demo_data_is_in_the_official_layout(tmp_path):
    from finbench.offline.fcmr_synthetic import demo_data

    data, written = demo_data(tmp_path)
    assert written and (data / "dataset" / "hard" / "hard_data.csv").is_file()
    questions = fcmr.load_questions(data)
    assert len(questions) == 12 and not [q.error for q in questions if q.error]
    assert len({q.gold for q in questions}) == 8
    assert demo_data(tmp_path) == (data, False)


@pytest.mark.skipif(not FULL.exists(), reason="set FINBENCH_FULL_DATA to a folder holding an FCMR checkout")
def test_the_full_public_set_reads_with_the_published_counts():
    done = cli("data", "check", "--benchmark", "fcmr", str(FULL))
    assert done.returncode == 0 and "2199 records" in done.stdout, done.stdout[-2000:]
    from finbench.app.datacheck import check_data

    report = check_data("fcmr", FULL)
    assert report["n_errors"] == 0 and report["counts"]["difficulty"] == {"easy": 757, "medium": 728, "hard": 714}
