"""The engine's replay mode (runner/replay.py): a run served from the cache alone, its model gone.

Reference: the same run computed by the model (its samples.parquet), not the replay's own code
path. Then the broken inputs: a question not in the cache, a folder that records no run."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from finbench.app.api import make_config
from finbench.runner.engine import run_benchmark
from finbench.runner.replay import Replay


def _config(tiny_qwen_dir, synthetic_parquet, out, limit):
    return make_config(model=str(tiny_qwen_dir), data=str(synthetic_parquet), dtype="float32", device="cpu",
                       out=str(out), bootstrap=0, limit=limit)


def test_a_replay_gives_the_computed_answers_without_a_model(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    computed = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", 6), tiny_model,
                             show_progress=False)
    replay = Replay.from_run(str(tmp_path / "gone-model"), tmp_path / "run")
    assert replay.fingerprint == computed.results["fingerprint"]
    again = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", 6), None,
                          show_progress=False, replay=replay)
    columns = ["id", "answer", "confidence", "correct", "sample_key"]
    pd.testing.assert_frame_equal(again.samples[columns], computed.samples[columns])
    assert again.results["fingerprint"] == computed.results["fingerprint"]
    assert again.results["n_cached"] == 6 and again.results["n_computed"] == 0
    assert again.results["throughput"]["all_from_cache"]
    assert again.results["scores"]["accuracy"] == computed.results["scores"]["accuracy"]


def test_a_replay_with_a_question_not_in_the_cache_fails_in_one_line(tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                                       tmp_path):
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", 3), tiny_model, show_progress=False)
    before = (tmp_path / "run" / "results.json").read_text()
    replay = Replay.from_run("gone-model", tmp_path / "run")
    with pytest.raises(ValueError) as refused:
        run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", 5), None, show_progress=False,
                      replay=replay)
    message = str(refused.value)
    assert "\n" not in message and "'gone-model' is missing" in message and "2 question(s)" in message
    assert (tmp_path / "run" / "results.json").read_text() == before  # nothing computed, nothing rewritten


def test_a_folder_that_records_no_run_cannot_be_replayed(tmp_path):
    with pytest.raises(ValueError, match="records no earlier run"):
        Replay.from_run("gone-model", tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"benchmark": "finmme"}))  # no fingerprint
    with pytest.raises(ValueError, match="records no earlier run"):
        Replay.from_run("gone-model", tmp_path)
