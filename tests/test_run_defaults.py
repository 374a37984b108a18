"""What `finbench run` uses when --batch-size, --token-budget and --workers are not given: the
long-standing CPU defaults on the CPU, and on CUDA what scripts/gpu_check.py measures, from one
function (runner/defaults.py `sized_defaults`) that both call."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from finbench.cli import app
from finbench.runner.defaults import run_defaults, sized_defaults

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


def _cli_options(monkeypatch, *args):
    """The options `finbench run ARGS` hands to `evaluate` (which is replaced: nothing runs)."""
    captured = {}

    def evaluate(model, benchmark, **options):
        captured.update(options)
        raise ValueError("captured")

    monkeypatch.setattr("finbench.api.evaluate", evaluate)
    done = CliRunner().invoke(app, ["run", "--model", "m", "--no-progress", *args])
    assert done.exit_code == 2 and "captured" in done.output, done.output
    return {k: captured[k] for k in ("batch_size", "token_budget", "workers")}


def _gpu_check():
    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_finbench_run_on_cuda_picks_what_gpu_check_measures(fake_cuda, monkeypatch):
    gpu_check = _gpu_check()
    measured = gpu_check.run_settings(gpu_check.parse_args([]))
    assert _cli_options(monkeypatch) == measured == {"batch_size": None, "token_budget": 98304, "workers": 8}
    assert run_defaults("cuda") == run_defaults("auto") == measured
    # what is given is kept, in the CLI and in the check alike
    given = ["--batch-size", "16", "--token-budget", "4096", "--workers", "3"]
    assert _cli_options(monkeypatch, *given) == {"batch_size": 16, "token_budget": 4096, "workers": 3}
    assert gpu_check.run_settings(gpu_check.parse_args(given)) == {"batch_size": 16, "token_budget": 4096, "workers": 3}
    assert _cli_options(monkeypatch, "--device", "cpu") == sized_defaults("cpu")


def test_finbench_run_on_the_cpu_keeps_the_old_defaults(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _cli_options(monkeypatch) == {"batch_size": 8, "token_budget": 16384, "workers": 2}
    assert _cli_options(monkeypatch, "--batch-size", "auto")["batch_size"] is None
    # broken: a device that is not there sizes nothing (start-up then refuses it in one line)
    assert run_defaults("cuda:7") == sized_defaults("cpu")
