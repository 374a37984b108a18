"""What `finbench run` uses when --batch-size, --token-budget and --workers are not given: the
long-standing CPU defaults on the CPU, and on CUDA what scripts/gpu_check.py measures, from one
function (runner/defaults.py `sized_defaults`) that both call."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from finbench.cli import app
from finbench.runner.defaults import run_defaults, size_to_device, sized_defaults

GIB = 2**30


def test_the_cpu_keeps_its_defaults_and_cuda_is_sized_to_the_gpu():
    assert sized_defaults("cpu") == {"batch_size": 8, "token_budget": 16384, "workers": 2}
    assert sized_defaults("cpu", 140 * GIB, 64) == sized_defaults("cpu")  # the device decides, not the machine
    h200 = sized_defaults("cuda", int(139.8 * GIB), 16)
    assert h200 == {"batch_size": None, "token_budget": 98304, "workers": 8}  # what the H200 check ran
    assert sized_defaults("cuda", int(79.2 * GIB), 12) == {"batch_size": None, "token_budget": 57344, "workers": 6}
    assert sized_defaults("cuda", 24 * GIB, 4)["token_budget"] == 16384 and sized_defaults("cuda", 24 * GIB, 2)[
        "workers"] == 2
    assert sized_defaults("cuda", 1024 * GIB, 256) == h200  # never beyond what was measured
    assert sized_defaults("cuda", None, 16) == sized_defaults("cpu")  # memory unknown: the safe ones


@pytest.fixture
def fake_cuda(monkeypatch):
    """This process believes it has one 140 GiB GPU and 16 cores."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(
        total_memory=int(139.8 * GIB), name="Fake H200"))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)


class Sized(Exception):
    """Raised by the recorder once a run's settings are sized: nothing else runs."""


def _sized_config(monkeypatch, call):
    """The config `call()` sizes at start-up (runner/defaults.py `size_to_device`, wherever it is
    called from); the run stops right there."""
    from finbench.runner import defaults, engine

    seen = []

    def recorder(config, device):
        seen.append(size_to_device(config, device))
        raise Sized()

    monkeypatch.setattr(defaults, "size_to_device", recorder)
    monkeypatch.setattr(engine, "size_to_device", recorder)
    try:
        call()
    except Sized:
        pass
    assert len(seen) == 1, "the settings were not sized at start-up"
    return seen[0]


def _settings(config):
    return {k: config.option(k) for k in ("batch_size", "token_budget", "workers")}


def _cli_options(monkeypatch, *args):
    """The settings `finbench run ARGS` runs with (stopped once they are sized: nothing runs)."""
    def call():
        done = CliRunner().invoke(app, ["run", "--model", "m", "--no-progress", *args])
        raise done.exception
    return _settings(_sized_config(monkeypatch, call))


def _gpu_check():
    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_finbench_run_on_cuda_picks_what_gpu_check_measures(fake_cuda, monkeypatch):
    gpu_check = _gpu_check()
    measured = gpu_check.run_settings(gpu_check.parse_args([]))
    assert measured == {"batch_size": None, "token_budget": 98304, "workers": 8}  # None: auto, in the check
    assert _cli_options(monkeypatch) == {**measured, "batch_size": "auto"}
    assert run_defaults("cuda") == run_defaults("auto") == measured
    # what is given is kept, in the CLI and in the check alike
    given = ["--batch-size", "16", "--token-budget", "4096", "--workers", "3"]
    assert _cli_options(monkeypatch, *given) == {"batch_size": 16, "token_budget": 4096, "workers": 3}
    assert gpu_check.run_settings(gpu_check.parse_args(given)) == {"batch_size": 16, "token_budget": 4096, "workers": 3}
    assert _cli_options(monkeypatch, "--device", "cpu") == sized_defaults("cpu")


def test_finbench_run_on_the_cpu_keeps_the_old_defaults(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _cli_options(monkeypatch) == {"batch_size": 8, "token_budget": 16384, "workers": 2}
    assert _cli_options(monkeypatch, "--batch-size", "auto")["batch_size"] == "auto"
    # broken: a device that is not there sizes nothing (start-up then refuses it in one line)
    assert run_defaults("cuda:7") == sized_defaults("cpu")


H200 = {"batch_size": "auto", "token_budget": 98304, "workers": 8}
SIZED = ["batch_size", "token_budget", "workers"]


def test_every_entry_point_sizes_its_settings_to_the_simulated_gpu(fake_cuda, monkeypatch, tiny_qwen_dir,
                                                                  synthetic_parquet, tmp_path):
    """`finbench run`, `finbench sweep`, `finbench.evaluate` and `finbench demo` leave what is not
    given to start-up, which sizes it to the device: the same values through each, named in
    `sized`; a given setting is kept and not named."""
    import finbench
    from finbench.app.sweep import run_sweep
    from finbench.config.specs import RunConfig

    def cli(*args):
        def call():
            raise CliRunner().invoke(app, list(args)).exception
        return _sized_config(monkeypatch, call)

    run = cli("run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--out", str(tmp_path / "r"),
              "--no-progress")
    evaluate = _sized_config(monkeypatch, lambda: finbench.evaluate(str(tiny_qwen_dir), "finmme",
                                                                    data=str(synthetic_parquet), out=tmp_path / "e"))
    sweep_cli = cli("sweep", "--model", str(tiny_qwen_dir), "--quant", "none,8bit", "--data", str(synthetic_parquet),
                    "--out", str(tmp_path / "s"), "--no-progress")
    sweep = _sized_config(monkeypatch, lambda: run_sweep(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet)),
                                                         {"dtype": ["float32", "bfloat16"]}, tmp_path / "s2"))
    for config in (run, evaluate, sweep_cli, sweep):
        assert _settings(config) == H200 and list(config.sized) == SIZED
    given = _sized_config(monkeypatch, lambda: finbench.evaluate(str(tiny_qwen_dir), "finmme", data=str(synthetic_parquet),
                                                                 out=tmp_path / "g", batch_size=4, workers=3))
    assert _settings(given) == {"batch_size": 4, "token_budget": 98304, "workers": 3} and given.sized == ("token_budget",)
    # the demo runs on the CPU whatever the machine has: sized to the CPU, the same three named
    monkeypatch.setenv("FINBENCH_HOME", str(tmp_path / "home"))
    demo = cli("demo", "--out", str(tmp_path / "d"), "--no-progress", "--n-items", "8")
    assert _settings(demo) == sized_defaults("cpu") and list(demo.sized) == SIZED


def test_results_json_names_what_was_sized(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    import finbench

    results, _ = finbench.evaluate(tiny_model, "finmme", data=str(synthetic_parquet), out=tmp_path / "run", limit=2,
                                   device="cpu", dtype="float32", bootstrap=0, workers=1)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())["config"]
    assert saved["sized"] == ["batch_size", "token_budget"] == list(results["config"]["sized"])
    assert (saved["batch_size"], saved["token_budget"], saved["workers"]) == (8, 16384, 1)
