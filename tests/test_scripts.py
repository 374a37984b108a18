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


def test_gpu_check_sh_in_cpu_mode_writes_every_section(tmp_path):
    """scripts/gpu_check.sh end to end with TINY=1: the GEMM and attention benchmarks, then
    gpu_check.py's run, profile, baseline and A/B rows, each written as it finishes."""
    import os

    args = ["--n-items", "10", "--ab-items", "6", "--baseline-items", "2", "--quant-ab", "fp8,8bit",
            "--ab", "default,no-pad-widths,no-causal-prefill,no-static-decode,no-cuda-graphs,compile-vision,"
                    "compile-lm,no-cudnn-sdpa"]
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "TINY": "1", "OUT": str(tmp_path), "PYTHON": sys.executable,
                               "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for section in ("gemm", "attention", "gpu_check"):
        assert f"== {section} (limit" in done.stdout and f"== {section}: exit" not in done.stdout, done.stdout[-3000:]

    gemm = json.loads((tmp_path / "bench_gemm_tiny.json").read_text())
    shapes = {row["shape"]: row for row in gemm["shapes"]}
    assert {"vision gate/up 3420", "vision gate/up 3456 (padded)", "lm down"} <= set(shapes)
    assert all(row["tflops"] > 0 and row["kernels"] for row in gemm["shapes"])
    assert all("fp8" in row for row in gemm["shapes"])  # CPU: why there is no fp8 figure, never a made-up one
    assert gemm["sustained"]["tflops_per_second"]
    attention = json.loads((tmp_path / "bench_attention_tiny.json").read_text())
    variants = {row["variant"]: row for row in attention["results"]}
    for name in ("prefill masked (repeat_kv)", "prefill causal (no mask)", "decode one-query (grouped)"):
        assert variants[name]["device_s"] > 0 and variants[name]["host_new_shape_s"] > 0
    assert "error" in variants["prefill packed (varlen)"]  # the varlen kernel is CUDA's: recorded, not faked

    payload = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    sections, ab = payload["sections"], payload["ab"]
    assert not [name for name, section in {**sections, **ab}.items() if "error" in section]
    run = sections["run"]
    assert run["samples"] == 10 and run["sample_errors"] == 0 and run["samples_per_s"] > 0
    assert run["settings"] == {"batch_size": 8, "token_budget": 16384, "workers": 2}  # finbench run's, on the CPU
    fill, steady = run["fill_s"], run["steady_samples_per_s"]
    assert abs(steady - 10 / (run["seconds"] - fill)) < 1e-6
    assert abs(run["projected_finmme_minutes"] - (run["load_s"] + fill + 11_099 / steady) / 60) < 1e-6
    assert run["fingerprint"]["fast_paths"] == ["causal_prefill", "static_decode"]  # the CUDA paths, on the CPU
    assert run["fingerprint"]["padded_widths"] == {"Qwen2_5_VLMLP": [107, 128]}
    profile = sections["profile"]
    assert profile["items"] == run["final_max_batch"] and profile["prefill_mfu"] > 0
    assert {"vision", "language_model"} <= set(profile["prefill_parts_s"])
    assert "Self CPU" in (tmp_path / profile["file"]).read_text()
    assert sections["baseline"]["speedup"] == run["samples_per_s"] / sections["baseline"]["samples_per_s"]
    assert list(ab)[:2] == ["reference", "default"]
    assert ab["reference"]["fast_paths"] == [] and ab["reference"]["padded_widths"] == {}
    assert ab["no-pad-widths"]["padded_widths"] == {} and ab["default"]["padded_widths"] == {"Qwen2_5_VLMLP": [107, 128]}
    for name, row in ab.items():
        if name in ("reference", "quant-fp8"):
            continue
        assert row["compared"] == 6 and row["samples_per_s"] > 0, name
        if name != "quant-8bit":  # exact levers: the reference's answers (fp32)
            assert row["answers_equal"] == 6 and row["max_option_prob_diff"] <= 1e-4, (name, row)
    # fp8 is built (models/fp8.py) but needs an FP8 GPU: the CPU row says why, it never fakes a figure
    assert "--quant fp8" in ab["quant-fp8"]["skipped"] and "samples_per_s" not in ab["quant-fp8"]
    if compile_unavailable(torch.device("cpu")) is None:
        assert ab["compile-vision"]["compiled"] == ["Qwen2_5_VLVisionBlock"] and ab["compile-vision"]["compile_s"] > 0
        assert "Qwen2MLP" in ab["compile-lm"]["compiled"] and "Qwen2_5_VLVisionBlock" not in ab["compile-lm"]["compiled"]
    table = (tmp_path / "gpu_check_tiny.md").read_text()
    assert "| default |" in table and "| quant-fp8 |" in table and "through finbench run's defaults" in table


def test_a_section_over_its_limit_is_recorded_and_the_next_one_runs(tmp_path):
    import argparse
    import time

    gpu_check = _load("gpu_check")
    report = gpu_check.Report(tmp_path, "check", argparse.Namespace(budget=None, tiny=True, model="m"))
    assert report.section("slow", 0.2, lambda: time.sleep(5)) is None
    assert report.section("quick", 5, lambda: {"value": 1})["value"] == 1
    assert report.section("broken", 5, lambda: 1 / 0) is None
    written = json.loads((tmp_path / "check.json").read_text())["sections"]
    assert written["slow"]["error"] == "SectionTimeout: over its 0.2 s limit" and written["slow"]["section_s"] < 2
    assert written["quick"]["value"] == 1 and "ZeroDivisionError" in written["broken"]["error"]
    out_of_time = gpu_check.Report(tmp_path, "late", argparse.Namespace(budget=1, tiny=True, model="m"))
    time.sleep(0.1)
    assert out_of_time.section("late", 5, lambda: {"value": 1}) is None
    assert "budget ran out" in json.loads((tmp_path / "late.json").read_text())["sections"]["late"]["skipped"]


def test_bench_throughput_prints_both_rates_and_a_ratio_last():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_throughput.py"), "--n-items", "4"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"ratio: \d+\.\d\d", lines[-1])
    assert any(line.startswith("finbench  :") for line in lines)
    assert any(line.startswith("baseline  :") for line in lines)


def test_the_ab_rule_keeps_a_lever_that_pays_and_promotes_a_compiler_that_pays():
    gpu_check = _load("gpu_check")
    default = {"projected_finmme_minutes": 8.0}
    assert "keep it on" in gpu_check.verdict("no-pad-widths", {"projected_finmme_minutes": 9.5}, default)
    assert "should be off" in gpu_check.verdict("no-static-decode", {"projected_finmme_minutes": 7.5}, default)
    assert "make --compile-vision the CUDA default" in gpu_check.verdict(
        "compile-vision", {"projected_finmme_minutes": 7.0}, default)
    assert "leave --compile-lm opt-in" in gpu_check.verdict("compile-lm", {"projected_finmme_minutes": 8.2}, default)
    assert gpu_check.verdict("no-pad-widths", {"projected_finmme_minutes": None}, default) == ""  # no figure, no rule
