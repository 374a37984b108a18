"""The measurement scripts' logic, on tiny shapes on the CPU (their numbers are not asserted:
speed belongs in the scripts' own output, not in tests)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import torch

from finbench.models.compile import compile_unavailable

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_cpu_mode_writes_every_figure(tmp_path):
    gpu_check = _load("gpu_check")
    reports = gpu_check.main(["--tiny", "--out", str(tmp_path), "--models", "qwen2.5-vl-7b,qwen2.5-vl-3b",
                              "--n-items", "10", "--n-quant-items", "4", "--baseline-items", "2",
                              "--workers", "2", "--quant", "8bit", "--profile-items", "3"])
    payload = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    assert payload["failures"] == []
    assert all(report["sample_errors"] == 0 for report in payload["reports"])
    ab = payload["reports"][0]["ab"]  # the A/B reruns of the first model
    assert ab["no-cudnn-sdpa"]["samples_per_s"] > 0  # a no-op switch on the CPU
    if compile_unavailable(torch.device("cpu")) is None:
        assert ab["compile-vision"]["samples_per_s"] > 0 and ab["compile-vision"]["compile_and_warmup_s"] > 0
        assert ab["compile-vision"]["compiled"] == {"Qwen2_5_VLVisionBlock": 2}
    else:  # a failed variant is recorded, not fatal
        assert "--compile-vision" in ab["compile-vision"]["error"]
    assert "ab" not in payload["reports"][1]  # the first model only
    assert "baseline" not in payload["reports"][1]
    assert payload["reports"][0]["vision_kernel_calls"]["padded"] > 0  # CPU: the padded SDPA path
    assert payload["reports"][0]["profile"] == "gpu_profile_qwen2.5-vl-7b.txt"
    assert "Self CPU" in (tmp_path / "gpu_profile_qwen2.5-vl-7b.txt").read_text()
    assert [(r["model"], r["quant"]) for r in payload["reports"]] == [
        ("qwen2.5-vl-7b", "none"), ("qwen2.5-vl-3b", "none"), ("qwen2.5-vl-3b", "8bit")]
    for report in reports:
        assert report["samples"] == (10 if report["quant"] == "none" else 4)
        assert report["samples_per_s"] > 0 and report["prefill_flops_total"] > 0
        assert abs(report["projected_finmme_minutes"] - 11_099 / report["samples_per_s"] / 60) < 1e-6
        wait = report["first_batch_wait_s"]
        steady = report["samples"] / (report["seconds"] - wait)
        assert abs(report["projected_finmme_minutes_fill_once"] - (wait + 11_099 / steady) / 60) < 1e-6
        assert report["prefill_mfu"] == report["prefill_tflops_per_s"] / 790.0
    assert reports[0]["speedup_vs_baseline"] == reports[0]["samples_per_s"] / reports[0]["baseline"]["samples_per_s"]
    # the 7B-shaped model (scaled down here) has the 7B structure: GQA and separate embeddings
    assert reports[0]["parameters"] != reports[1]["parameters"]
    assert "| qwen2.5-vl-7b | none |" in (tmp_path / "gpu_check_tiny.md").read_text()


def test_bench_throughput_prints_both_rates_and_a_ratio_last():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_throughput.py"), "--n-items", "4"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"ratio: \d+\.\d\d", lines[-1])
    assert any(line.startswith("finbench  :") for line in lines)
    assert any(line.startswith("baseline  :") for line in lines)
