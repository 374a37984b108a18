"""The command line end to end: demo, score, compare, make-tiny, one-line errors — in this process
(helpers.cli), but for one bad configuration in a real process (nothing else may reach stderr)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import cli as finbench
from helpers import png_bytes, run_cli

from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark


def test_demo_runs_end_to_end_and_says_the_model_is_random(finmme_demo):
    out, done = finmme_demo
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["scores"]["finscore"] <= 1.0
    assert results["n_questions"] >= 60
    assert "RANDOM-WEIGHT" in done.stdout and "chance level" in done.stdout
    assert (out / "samples.parquet").exists()


# kill -9 mid-run then resume: tests/test_reliability.py kills the run at ten points, then resumes
# and compares with an uninterrupted run (the one-kill version that was here asserted a subset)


def test_score_raw_predictions_matches_a_hand_computed_finscore(tmp_path):
    image = {"bytes": png_bytes(32, 32, color=(0, 90, 200)), "path": "x.png"}
    rows = [
        ("q0", "Banking", "single_choice", ["1", "2", "3"], "A", None),
        ("q1", "Banking", "multiple_choice", ["1", "2", "3"], "AC", None),
        ("q2", "Bond Market", "numerical", [], "8.81%", 0.01),
        ("q3", "Bond Market", "multiple_choice", ["1", "2", "3"], "AB", None),
    ]
    frame = pd.DataFrame([{"id": i, "image": image, "question_text": "?", "question_type": t, "options": o,
                           "answer": a, "unit": "%", "tolerance": tol, "verified_caption": "", "related_sentences": "",
                           "knowledge_domain": d} for i, d, t, o, a, tol in rows])
    data = tmp_path / "finmme.parquet"
    frame.to_parquet(data)
    predictions = tmp_path / "pred.jsonl"
    predictions.write_text("\n".join(json.dumps(p) for p in [
        {"id": "q0", "answer": "A"}, {"id": "q1", "answer": "A,C"}, {"id": "q2", "answer": "8.7"},
        {"id": "q3", "answer": "A"}]))
    done = finbench("score", "--benchmark", "finmme", "--data", str(data), "--predictions", str(predictions))
    assert done.returncode == 0, done.stderr[-3000:]
    scores = json.loads(done.stdout)
    # Banking 2/2, Bond Market 0/2 → F = 0.5; multi-answer items q1 right, q3 wrong → P_H = 0.5
    assert scores["domain_accuracy"] == pytest.approx(0.5)
    assert scores["p_h"] == pytest.approx(0.5)
    assert scores["finscore"] == pytest.approx(0.25)
    assert scores["accuracy"] == pytest.approx(0.5)

    predictions.write_text(json.dumps({"id": "nope", "answer": "A"}))
    failed = finbench("score", "--data", str(data), "--predictions", str(predictions))
    assert failed.returncode == 2 and "not in the data" in failed.stderr


def test_score_and_compare_run_folders(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    for name, protocol in [("a", "constrained"), ("b", "official")]:
        run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=8, protocol=protocol,
                                max_new_tokens=4, dtype="float32", device="cpu", out=str(tmp_path / name)),
                      tiny_model, show_progress=False)
    scored = finbench("score", str(tmp_path / "a"), "--bootstrap", "200")
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "FinScore" in scored.stdout  # the table
    scores = json.loads((tmp_path / "a" / "scores_official.json").read_text())
    recorded = json.loads((tmp_path / "a" / "results.json").read_text())["scores"]
    assert scores["finscore"] == pytest.approx(recorded["finscore"])
    assert "ci" in json.dumps(scores)  # bootstrap intervals are present
    compared = finbench("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp.json"),
                        "--bootstrap", "200", "--allow-mixed-protocols")
    assert compared.returncode == 0, compared.stderr[-3000:]
    comparison = json.loads((tmp_path / "cmp.json").read_text())
    assert "mcnemar" in json.dumps(comparison).lower()
    missing = finbench("score", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "samples.parquet" in missing.stderr


def test_bad_configuration_is_one_line_and_exit_code_2(tmp_path, synthetic_parquet):
    done = run_cli("run", "--model", str(tmp_path / "no-model"), "--data", str(synthetic_parquet),
                   "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2
    assert "cannot load model" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "samples.parquet").exists()
    done = finbench("run", "--model", "x", "--batch-size", "lots")
    assert done.returncode == 2 and "--batch-size" in done.stderr


def test_models_make_tiny_writes_a_loadable_checkpoint(tmp_path):
    done = finbench("models", "make-tiny", "qwen2.5-vl", str(tmp_path / "tiny"))
    assert done.returncode == 0, done.stderr[-3000:]
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    model = load_model(str(tmp_path / "tiny"), LoadSpec(dtype="float32", device="cpu"))
    assert model.family == "qwen2.5-vl" and json.loads((tmp_path / "tiny" / "finbench_tiny.json").read_text())["seed"] == 0
    unknown = finbench("models", "make-tiny", "gpt-5", str(tmp_path / "x"))
    assert unknown.returncode == 2 and "unknown family" in unknown.stderr
