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


def test_stage_times_wait_for_the_device_only_when_profiling(monkeypatch):
    """Without --profile a CUDA run never waits for the device at a stage boundary (the GPU would
    idle while the host catches up); with it, twice per stage. Neither times the model's parts
    unsynchronised: without --profile a CUDA run times none, and says its stages are host times."""
    import torch

    from finbench.runner.timing import StageTimer, Throughput

    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: waits.append(1))
    for synchronize, expected in ((False, 0), (True, 2)):
        waits.clear()
        timer = StageTimer(torch.device("cuda"), synchronize=synchronize)
        with timer.stage("forward"):
            pass
        assert len(waits) == expected and timer.synchronized is synchronize
    assert StageTimer(torch.device("cpu"), synchronize=False).synchronized  # the CPU's times are exact anyway

    class CudaAdapter:
        device = torch.device("cuda")

        def timed_parts(self):
            raise AssertionError("a CUDA run without --profile must not wrap the model's parts")

    with ModelParts(CudaAdapter(), synchronize=False) as parts:
        pass
    assert parts.seconds == {}
    throughput = Throughput(StageTimer(torch.device("cuda"), synchronize=False))
    throughput.flops = 1e12
    throughput.timer.seconds["forward"] = 1.0
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 0)
    summary = throughput.summary(CudaAdapter(), 1, 1.0, 8)
    assert summary["prefill_tflops_per_s"] is None and summary["stages_synchronized"] is False
    throughput.timer = StageTimer(torch.device("cuda"), synchronize=True)
    throughput.timer.seconds["forward"] = 1.0
    assert throughput.summary(CudaAdapter(), 1, 1.0, 8)["prefill_tflops_per_s"] == 1.0
