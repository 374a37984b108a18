"""The model's own parts (vision tower, position building, language model) are timed in every
run, and the model is left exactly as it was."""

from __future__ import annotations

from finbench.runner.engine import run_benchmark
from finbench.runner.timing import ModelParts
from finbench.types import RunConfig


def test_runs_report_vision_rope_and_language_model_seconds(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    base = tiny_model.model.model
    before = {name: vars(owner).get(method) for name, owner, method in
              (("visual", base.visual, "forward"), ("base", base, "get_rope_index"),
               ("lm", base.language_model, "forward"))}
    result = run_benchmark(RunConfig(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=8, bootstrap=0,
                                     dtype="float32", device="cpu", out=str(tmp_path / "run")), tiny_model,
                           show_progress=False)
    parts = result.results["throughput"]["model_parts_s"]
    assert set(parts) == {"vision", "rope_index", "language_model"} and all(v > 0 for v in parts.values())
    stages = result.results["throughput"]["stages_s"]
    assert parts["vision"] + parts["rope_index"] + parts["language_model"] <= sum(stages.values()) + 1e-3
    # the pipeline fill: the wait for the first preprocessed batch, part of the run's seconds
    throughput = result.results["throughput"]
    assert 0 < throughput["first_batch_wait_s"] < throughput["seconds"]
    after = {name: vars(owner).get(method) for name, owner, method in
             (("visual", base.visual, "forward"), ("base", base, "get_rope_index"),
              ("lm", base.language_model, "forward"))}
    assert before == after == {"visual": None, "base": None, "lm": None}  # nothing left wrapped


def test_a_model_without_the_parts_times_nothing():
    class Plain:
        model = object()

    with ModelParts(Plain()) as parts:
        pass
    assert parts.seconds == {}
