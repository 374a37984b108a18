"""The model's own parts (vision tower, position building, language model) are timed in every
run, and the model is left exactly as it was."""

from __future__ import annotations

from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark
from finbench.runner.timing import ModelParts


def test_runs_report_vision_and_language_model_seconds(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    """The adapter times its own modules with forward hooks (nothing wrapped or replaced on them)
    and removes every hook when the run ends."""
    base = tiny_model.model.model
    modules = (base.visual, base.language_model)
    hooks = [(dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in modules]
    result = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=8, bootstrap=0,
                                     dtype="float32", device="cpu", out=str(tmp_path / "run")), tiny_model,
                           show_progress=False)
    parts = result.results["throughput"]["model_parts_s"]
    assert set(parts) == {"vision", "language_model"} and all(v > 0 for v in parts.values())
    stages = result.results["throughput"]["stages_s"]
    assert parts["vision"] + parts["language_model"] <= sum(stages.values()) + 1e-3
    # the pipeline fill: the wait for the first preprocessed batch, part of the run's seconds
    throughput = result.results["throughput"]
    assert 0 < throughput["first_batch_wait_s"] < throughput["seconds"]
    assert [(dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in modules] == hooks == [({}, {})] * 2
    assert all("forward" not in vars(m) for m in modules)  # nothing left wrapped


def test_a_part_clock_counts_a_module_called_inside_itself_once_and_survives_a_raise():
    import torch

    from finbench.models.part_timing import PartClock

    class Twice(torch.nn.Module):
        def forward(self, x, inner=True):
            return self(x, inner=False) if inner else x + 1

    class Fails(torch.nn.Module):
        def forward(self, x):
            raise ValueError("no")

    ticks = []
    clock = PartClock(lambda: ticks.append(1))
    twice, fails = Twice(), Fails()
    with clock.hooks([("twice", twice), ("fails", fails)]):
        assert int(twice(torch.zeros(1))) == 1
        assert len(ticks) == 2  # one outer call timed: synchronised at its start and end only
        try:
            fails(torch.zeros(1))
        except ValueError:
            pass
        twice(torch.zeros(1))
    assert set(clock.seconds) == {"twice", "fails"} and clock.seconds["twice"] > 0 and clock.seconds["fails"] > 0
    assert not twice._forward_hooks and not twice._forward_pre_hooks and not fails._forward_hooks


def test_a_model_without_the_parts_times_nothing():
    import torch

    class Plain:
        device = torch.device("cpu")

        def timed_parts(self, clock):
            return clock.hooks([])

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

        def timed_parts(self, clock):
            raise AssertionError("a CUDA run without --profile must not time the model's parts")

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
