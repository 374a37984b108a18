"""The measurement scripts' logic, on tiny shapes on the CPU (their numbers are not asserted:
speed belongs in the scripts' own output, not in tests)."""

from __future__ import annotations

import importlib.util
import json
import os
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
    """scripts/gpu_check.sh end to end with TINY=1 and its own (smallest) tiny settings, in the H200
    plan's order: run, the quantized rows, think, the elementwise compile row, then the reference,
    the levers, the other compiler, the profile, the baseline and the GEMM and attention benchmarks,
    each written as it finishes. Run once: it is the suite's longest test."""
    import os

    args = ["--quant-ab", "fp8,8bit", "--ab", "no-pad-widths,no-causal-prefill,no-static-decode,"
                                              "no-cuda-graphs,compile-vision,compile-lm,no-cudnn-sdpa"]
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "TINY": "1", "OUT": str(tmp_path), "PYTHON": sys.executable,
                               "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "== gpu_check (outer limit" in done.stdout and "== gpu_check: exit" not in done.stdout, done.stdout[-3000:]

    gemm = json.loads((tmp_path / "bench_gemm_tiny.json").read_text())
    shapes = {row["shape"]: row for row in gemm["shapes"]}
    assert {"vision gate/up 3420", "vision gate/up 3456 (padded)", "lm down"} <= set(shapes)
    assert all(row["tflops"] > 0 and row["kernels"] for row in gemm["shapes"])
    # CPU: why, never a made-up figure; a width fp8 keeps in bf16 says so first (the tiny 3420 is 106)
    assert all("FP8 matmuls need a CUDA GPU" in row["fp8"] or "not in multiples of 16" in row["fp8"]
               for row in gemm["shapes"])
    assert "not in multiples of 16" in shapes["vision gate/up 3420"]["fp8"]
    assert gemm["sustained"]["tflops_per_second"]
    attention = json.loads((tmp_path / "bench_attention_tiny.json").read_text())
    variants = {row["variant"]: row for row in attention["results"]}
    for name in ("prefill masked (repeat_kv)", "prefill causal (no mask)", "decode one-query (grouped)"):
        assert variants[name]["device_s"] > 0 and variants[name]["host_new_shape_s"] > 0
    assert "error" in variants["prefill packed (varlen)"]  # the varlen kernel is CUDA's: recorded, not faked

    payload = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    sections, ab = payload["results"], payload["ab"]
    assert not [name for name, section in {**sections, **ab}.items() if "error" in section]
    # every section in run order with its limit, time and status; cheap rows, then fp8, then compilers
    order = [record["name"] for record in payload["sections"]]
    assert order == ["build", "run", "quant-fp8", "quant-8bit", "think", "compile-lm", "reference", "no-pad-widths", "no-causal-prefill", "no-static-decode", "no-cuda-graphs", "no-cudnn-sdpa",
                     "compile-vision", "profile", "baseline", "gemm", "attention"]
    statuses = {record["name"]: record["status"] for record in payload["sections"]}
    assert statuses.pop("quant-fp8") == "skipped" and set(statuses.values()) == {"done"}
    assert "quant-8bit" in ab and ab["quant-8bit"]["anchor"].startswith("the interleaved default runs")
    assert all(set(record) == {"name", "limit_s", "elapsed_s", "status"} for record in payload["sections"])
    think = sections["think"]
    assert think["batch"] == 2 and think["tokens"] > 0 and think["tokens_per_s"] > 0 and think["answers"] == 2
    assert think["roofline_fraction"] == think["roofline_ms_per_step"] / think["ms_per_step"] > 0
    run = sections["run"]
    assert run["samples"] == 4 and run["sample_errors"] == 0 and run["samples_per_s"] > 0
    assert run["settings"] == {"batch_size": 8, "token_budget": 16384, "workers": 2}  # finbench run's, on the CPU
    fill, steady = run["fill_s"], run["steady_samples_per_s"]
    assert abs(steady - 4 / (run["seconds"] - fill)) < 1e-6
    assert abs(run["projected_finmme_minutes"] - (run["load_s"] + fill + 11_099 / steady) / 60) < 1e-6
    assert run["fingerprint"]["fast_paths"] == ["causal_prefill", "static_decode"]  # the CUDA paths, on the CPU
    assert run["fingerprint"]["padded_widths"] == {"Qwen2_5_VLMLP": [107, 128]}
    profile = sections["profile"]
    assert profile["items"] == run["final_max_batch"] and profile["prefill_mfu"] > 0
    assert {"vision", "language_model"} <= set(profile["prefill_parts_s"])
    assert "Self CPU" in (tmp_path / profile["file"]).read_text()
    assert sections["baseline"]["speedup"] == run["samples_per_s"] / sections["baseline"]["samples_per_s"]
    assert list(ab)[:5] == ["quant-fp8", "quant-8bit", "compile-lm", "reference", "no-pad-widths"]
    assert ab["reference"]["fast_paths"] == [] and ab["reference"]["padded_widths"] == {}
    assert ab["no-pad-widths"]["padded_widths"] == {} and ab["no-causal-prefill"]["padded_widths"] == {"Qwen2_5_VLMLP": [107, 128]}
    for name, row in ab.items():
        if name in ("reference", "quant-fp8"):
            continue
        assert row["compared"] == 4 and row["samples_per_s"] > 0, name
        assert len(row["samples_per_s_runs"]) == len(row["default_samples_per_s_runs"]) == row["pairs"] == 2, name  # ABAB
        assert row["pairs_planned"] == 2 and row["vs_default"]["compared"] == 4, name
        assert row["minutes_spread"][0] <= row["projected_finmme_minutes"] <= row["minutes_spread"][1], name
        if name != "quant-8bit":  # exact levers: the reference's answers (fp32), and the default's
            assert row["answers_equal"] == 4 and row["max_option_prob_diff"] <= 1e-4, (name, row)
            assert row["vs_default"]["answers_equal"] == 4 and row["vs_default"]["max_option_prob_diff"] <= 1e-4, name
    # the elementwise compile row ran before the reference: its answers against the default runs
    assert ab["compile-lm"]["anchor"].startswith("the interleaved default runs")
    # fp8 is built (models/fp8.py) but needs an FP8 GPU: the CPU row says why, it never fakes a figure
    assert "--quant fp8" in ab["quant-fp8"]["skipped"] and "samples_per_s" not in ab["quant-fp8"]
    if compile_unavailable(torch.device("cpu")) is None:
        assert ab["compile-vision"]["compiled"] == ["Qwen2_5_VLVisionBlock"] and ab["compile-vision"]["compile_s"] > 0
        assert "Qwen2MLP" in ab["compile-lm"]["compiled"] and "Qwen2_5_VLVisionBlock" not in ab["compile-lm"]["compiled"]
    table = (tmp_path / "gpu_check_tiny.md").read_text()
    assert "| no-pad-widths |" in table and "| quant-fp8 |" in table and "through finbench run's defaults" in table


def test_a_section_over_its_limit_is_timed_out_even_through_a_handler_and_the_next_one_runs(tmp_path, monkeypatch):
    import argparse
    import contextlib
    import time

    gpu_check = _load("gpu_check")

    slept = []

    def swallowing():  # what runner/loop.py does with a failing batch: catch, retry, go on
        for _ in range(50):
            try:
                time.sleep(0.1)
                slept.append(1)
            except Exception:  # noqa: BLE001
                pass
        return {"value": "swallowed"}

    report = gpu_check.Report(tmp_path, "check", argparse.Namespace(budget=None, tiny=True, model="m"))
    assert report.section("slow", 0.2, swallowing) is None
    assert report.section("quick", 5, lambda: {"value": 1})["value"] == 1
    assert report.section("broken", 5, lambda: 1 / 0) is None
    assert report.section("not here", 5, lambda: {"skipped": "needs a GPU"}) is None
    payload = json.loads((tmp_path / "check.json").read_text())
    written = payload["results"]
    assert written["slow"]["error"] == "SectionTimeout: over its 0.2 s limit" and written["slow"]["section_s"] >= 0.2
    assert len(slept) < 50  # cut short through the handler: the 5 s of work never finished
    assert written["quick"]["value"] == 1 and "ZeroDivisionError" in written["broken"]["error"]
    assert [(r["name"], r["limit_s"], r["status"]) for r in payload["sections"]] == [
        ("slow", 0.2, "timed_out"), ("quick", 5, "done"), ("broken", 5, "failed"), ("not here", 5, "skipped")]
    # an alarm that comes late (the main thread inside one long C call) still makes it timed_out
    monkeypatch.setattr(sys.modules["gpucheck.report"], "deadline", lambda seconds: contextlib.nullcontext())
    late = gpu_check.Report(tmp_path, "late-work", argparse.Namespace(budget=None, tiny=True, model="m"))
    assert late.section("came back late", 0.05, lambda: time.sleep(0.2) or {"v": 1}) is None
    assert json.loads((tmp_path / "late-work.json").read_text())["sections"][0]["status"] == "timed_out"
    monkeypatch.undo()
    out_of_time = gpu_check.Report(tmp_path, "late", argparse.Namespace(budget=1, tiny=True, model="m"))
    time.sleep(0.1)
    assert out_of_time.section("late", 5, lambda: {"value": 1}) is None
    payload = json.loads((tmp_path / "late.json").read_text())
    assert "budget ran out" in payload["results"]["late"]["skipped"] and payload["sections"][0]["status"] == "skipped"


def test_the_h200_plan_puts_fp8_think_and_a_compile_row_inside_480_s():
    """`gpu_check.sh --plan` (no GPU, no torch): every section in run order with its limit; the
    figures that decide the defaults come first and the planned total, the sum of the limits
    listed, is at most 480 s."""
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), "--plan"], capture_output=True, text=True,
                          timeout=120, env={"PATH": os.environ["PATH"], "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^ *\d+\. (\S+) +(\d+) s ", done.stdout, re.M)
    [total] = re.findall(r"^total (\d+) s", done.stdout, re.M)
    names = [name for name, _ in rows]
    assert names[:7] == ["setup", "start", "build", "run", "quant-fp8", "think", "compile-lm"], done.stdout
    assert int(total) == sum(int(limit) for _, limit in rows) <= 480
    assert "no-cuda-graphs" in done.stdout.split(f"total {total} s")[1]  # a cheap row, while the budget lasts


def test_an_outer_sigterm_writes_the_running_section_timed_out_and_the_rest_skipped(tmp_path):
    """The outer limit's SIGTERM inside a section: that section `timed_out` (the same SectionTimeout
    as its own limit), every later one `skipped`, the check stopped."""
    import argparse
    import os
    import signal
    import time

    gpu_check = _load("gpu_check")
    report = gpu_check.Report(tmp_path, "check", argparse.Namespace(budget=None, tiny=True, model="m"),
                              [("first", 5), ("killed", 5), ("later", 5)])
    assert [r["status"] for r in json.loads((tmp_path / "check.json").read_text())["sections"]] == ["pending"] * 3

    def killed():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    with report.stop_on_term():
        assert report.section("first", 5, lambda: {"v": 1})["v"] == 1
        assert report.section("killed", 5, killed) is None
        assert report.section("later", 5, lambda: {"v": 2}) is None
    report.finish()
    payload = json.loads((tmp_path / "check.json").read_text())
    assert [(r["name"], r["status"]) for r in payload["sections"]] == [
        ("first", "done"), ("killed", "timed_out"), ("later", "skipped")]
    assert "SIGTERM" in payload["results"]["killed"]["error"] and "SIGTERM" in payload["results"]["later"]["skipped"]


def test_a_killed_tiny_check_has_every_section_written_the_running_one_timed_out(tmp_path):
    """A SIGKILL (no handler runs) while `run` runs: the check's file lists every planned section;
    `--mark-killed`, which gpu_check.sh runs after a non-zero exit, writes `run` timed_out and the
    sections never reached skipped."""
    import os
    import signal
    import time

    args = [sys.executable, str(SCRIPTS / "gpu_check.py"), "--tiny", "--out", str(tmp_path), "--n-items", "8",
            "--ab-items", "4", "--baseline-items", "1", "--no-run-reports", "--no-benches"]
    check = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    path, started = tmp_path / "gpu_check_tiny.json", time.monotonic()
    try:
        while time.monotonic() - started < 300:
            if path.exists() and any(r["name"] == "run" and r["status"] == "running"
                                     for r in json.loads(path.read_text())["sections"]):
                break
            time.sleep(0.05)
        check.send_signal(signal.SIGKILL)
    finally:
        check.wait(60)
    written = json.loads(path.read_text())["sections"]
    assert [r["status"] for r in written][:2] == ["done", "running"]
    marked = subprocess.run([sys.executable, str(SCRIPTS / "gpu_check.py"), "--out", str(tmp_path), "--mark-killed"],
                            capture_output=True, text=True, timeout=120)
    assert marked.returncode == 0, marked.stderr
    payload = json.loads(path.read_text())
    statuses = [(r["name"], r["status"]) for r in payload["sections"]]
    assert statuses[:3] == [("build", "done"), ("run", "timed_out"), ("quant-fp8", "skipped")], statuses
    assert [r["name"] for r in payload["sections"]][-3:] == ["compile-vision", "profile", "baseline"]
    assert {status for _, status in statuses[2:]} == {"skipped"}
    assert payload["results"]["run"]["error"] == "killed by the outer time limit"
    assert "| run | – | 0.0 | timed_out |" in (tmp_path / "gpu_check_tiny.md").read_text()


def test_an_ab_row_cut_by_its_limit_keeps_the_pairs_it_finished(tmp_path):
    """Interleaved pairs of 0.1-s runs under a 0.75-s limit: the row is `timed_out` and keeps the
    finished pairs' rates and minutes, with their count and the count planned."""
    import argparse
    import time
    from types import SimpleNamespace

    import pandas as pd

    gpu_check = _load("gpu_check")
    samples = pd.DataFrame({"id": ["a", "b"], "answer": ["A", "B"], "option_probs": [[0.9, 0.1], [0.2, 0.8]],
                            "confidence": [0.9, 0.8]})

    class Runs:
        args, load_s, headline, reference_samples = SimpleNamespace(ab_items=2), 1.0, object(), None

        def run(self, adapter, name, n_items):
            time.sleep(0.1)
            return SimpleNamespace(samples=samples, results={"throughput": {"samples": 2, "seconds": 0.1,
                                                                            "samples_per_s": 20.0}})

    check = Runs()
    check.report = gpu_check.Report(tmp_path, "check", argparse.Namespace(budget=None, tiny=True, model="m"))
    row = lambda: gpu_check.interleaved(check, "row", lambda i: check.run(None, f"v{i}", 2), 20)[0]  # noqa: E731
    assert check.report.section("row", 0.75, row, check.report.payload["ab"]) is None
    payload = json.loads((tmp_path / "check.json").read_text())
    kept = payload["ab"]["row"]
    assert payload["sections"][0]["status"] == "timed_out" and kept["error"].startswith("SectionTimeout")
    assert 1 <= kept["pairs"] <= 3 and kept["pairs_planned"] == 20
    assert len(kept["samples_per_s_runs"]) == len(kept["default_samples_per_s_runs"]) == kept["pairs"]
    assert kept["projected_finmme_minutes"] == (1.0 + 11_099 / 20.0) / 60 and kept["vs_default"]["answers_equal"] == 2
    assert f"cut after {kept['pairs']} of 20 pairs" in (tmp_path / "check.md").read_text()


def test_a_20_second_budget_cuts_the_later_sections_and_no_done_section_overruns(tmp_path):
    """gpu_check.py as gpu_check.sh calls it with `--budget 20` passed through, the smallest settings."""
    gpu_check = _load("gpu_check")
    payload = gpu_check.main(["--tiny", "--out", str(tmp_path), "--budget", "20", "--n-items", "4", "--ab-items", "4",
                              "--baseline-items", "1", "--think-batch", "2", "--think-budget", "4", "--pairs", "3"])
    records = payload["sections"]
    assert json.loads((tmp_path / "gpu_check_tiny.json").read_text())["sections"] == records
    assert records[0]["name"] == "build" and records[0]["status"] == "done"
    assert any(r["status"] in ("timed_out", "skipped") for r in records[1:])
    assert all(r["elapsed_s"] <= r["limit_s"] + 1 for r in records if r["status"] == "done")
    assert all(r["limit_s"] <= 20 for r in records if r["limit_s"])
    spent = 0.0
    for record in records:  # each section's limit is cut to what the budget had left when it started
        assert record["limit_s"] is None or record["status"] == "skipped" or record["limit_s"] <= 20 - spent, record
        spent += record["elapsed_s"]


def test_bench_throughput_prints_both_rates_and_a_ratio_last(capsys):
    ratio = _load("bench_throughput").main(["--n-items", "4"])  # in this process: its main is the script
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"ratio: \d+\.\d\d", lines[-1]) and lines[-1] == f"ratio: {ratio:.2f}"
    assert any(line.startswith("finbench  :") for line in lines)
    assert any(line.startswith("baseline  :") for line in lines)


def test_the_ab_rule_decides_only_outside_the_spread_of_the_interleaved_runs():
    gpu_check = _load("gpu_check")

    def row(mine, low, high, base=8.0, base_low=7.9, base_high=8.1):
        return {"projected_finmme_minutes": mine, "minutes_spread": [low, high], "default_minutes": base,
                "default_minutes_spread": [base_low, base_high]}

    assert "keep it on" in gpu_check.verdict("no-pad-widths", row(9.5, 9.3, 9.7))
    assert "should be off" in gpu_check.verdict("no-static-decode", row(7.5, 7.4, 7.6))
    assert "make --compile-vision the CUDA default" in gpu_check.verdict("compile-vision", row(7.0, 6.9, 7.2))
    assert "leave --compile-lm opt-in" in gpu_check.verdict("compile-lm", row(8.6, 8.2, 9.0))
    assert gpu_check.verdict("quant-fp8", row(6.0, 5.9, 6.1)).startswith("pays")
    # the spreads overlap: no verdict either way, however far apart the medians
    for name in ("no-cuda-graphs", "compile-lm", "quant-fp8"):
        assert gpu_check.verdict(name, row(7.0, 6.5, 7.95)).startswith("within noise"), name
        assert gpu_check.verdict(name, row(9.0, 8.05, 9.5)).startswith("within noise"), name
    assert gpu_check.verdict("no-pad-widths", {"projected_finmme_minutes": None}) == ""  # no figure, no rule
    assert gpu_check.verdict("default", row(8.0, 7.9, 8.1)) == ""
    # a row whose samples failed timed error paths: no verdict, the failure named (once every fp8
    # sample failed on the H200 and the row read "pays")
    failed = {**row(6.0, 5.9, 6.1), "sample_errors": 16, "first_error": "model error: RuntimeError: boom"}
    assert gpu_check.verdict("quant-fp8", failed) == "no verdict: 16 samples failed (model error: RuntimeError: boom)"


def test_an_ab_row_counts_the_variant_runs_failed_samples():
    import pandas as pd

    _load("gpu_check")  # puts scripts/ on the path for its package gpucheck
    from gpucheck.ab import failed_samples

    samples = pd.DataFrame({"error": ["", None, "model error: RuntimeError: boom", "x"]})
    assert failed_samples(samples) == {"sample_errors": 2, "first_error": "model error: RuntimeError: boom"}
    assert failed_samples(samples.iloc[:2]) == {"sample_errors": 0, "first_error": None}


def test_bench_gemm_times_the_production_fp8_layer(monkeypatch):
    """bench_gemm's fp8 callables on the CPU (torch._scaled_mm runs there): `layer` is the module
    `--quant fp8` builds (fused quantization), equal to the unfused one and to its GEMM alone."""
    import finbench.models.fp8 as fp8

    bench_gemm = _load("bench_gemm")
    monkeypatch.setattr(fp8, "fp8_matmul_unavailable", lambda device: None)
    torch.manual_seed(0)
    a, b = torch.randn(24, 64, dtype=torch.bfloat16), torch.randn(64, 48, dtype=torch.bfloat16) / 8
    calls = bench_gemm.fp8_layers(a, b)
    assert {"layer", "layer_unfused", "gemm", "torchao"} <= set(calls)
    linear = torch.nn.Linear(64, 48, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(b.t())
    production = fp8.Fp8Linear.from_linear(linear)
    want = production(a)
    assert torch.equal(calls["layer"](), want) and torch.equal(calls["layer_unfused"](), want)
    assert torch.equal(calls["gemm"](), want)


def test_bench_gemm_s_decoder_layer_row_times_the_quantize_loaded_layers(monkeypatch):
    """The goal's figure (fp8 ≤ 0.6× bf16 for the LM's linears): one decoder layer's seven linears
    in bf16 and after `quantize_loaded(..., "fp8")` (shared q/k/v and gate/up quantization)."""
    import finbench.models.fp8 as fp8
    from finbench.models import quant

    bench_gemm = _load("bench_gemm")
    cpu = torch.device("cpu")
    row = bench_gemm.layer_row(cpu, torch.bfloat16, True, bench_gemm.timer(cpu), 1)
    assert "FP8 matmuls need a CUDA GPU" in row["fp8"] and row["bf16_seconds"] > 0  # CPU: why, no figure
    monkeypatch.setattr(fp8, "fp8_matmul_unavailable", lambda device: None)
    shared = []
    real = quant.quantize_loaded
    monkeypatch.setattr(quant, "quantize_loaded", lambda model, *a, **k: (real(model, *a, **k), shared.extend(
        {id(m.activation) for m in model.modules() if isinstance(m, fp8.Fp8Linear) and m.activation})))
    row = bench_gemm.layer_row(cpu, torch.bfloat16, True, bench_gemm.timer(cpu), 1)
    assert row["fp8_vs_bf16"] == row["fp8_seconds"] / row["bf16_seconds"] and row["tokens"] == 512
    assert len(shared) == 2  # q/k/v (with o) share one quantizer, gate/up another


def test_a_compile_row_switches_its_compiled_modules_off_for_the_interleaved_default_runs():
    gpu_check = _load("gpu_check")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    model[1].compile(dynamic=True)  # nothing is compiled before the first call
    compiled = gpu_check.compiled_modules(model)
    assert list(compiled) == [model[1]]
    gpu_check.set_compiled(compiled, False)
    assert model[1]._compiled_call_impl is None and gpu_check.compiled_modules(model) == {}
    gpu_check.set_compiled(compiled, True)
    assert model[1]._compiled_call_impl is compiled[model[1]]
    gpu_check.uncompiled(model)
    assert gpu_check.compiled_modules(model) == {}


def test_the_fp8_row_quantizes_the_seeded_weights_in_memory_and_runs_interleaved(tmp_path, monkeypatch):
    """The `quant-fp8` row on the CPU (torch._scaled_mm runs there; only the GPU check is lifted):
    the same seeded weights quantized by `quantize_loaded` in memory — no checkpoint written — and
    three (default, fp8) pairs, compared answer by answer with the reference."""
    from finbench.models import quant

    gpu_check = _load("gpu_check")
    monkeypatch.setattr(quant, "quant_unavailable", lambda name, device: None)
    args = gpu_check.parse_args(["--tiny", "--out", str(tmp_path), "--n-items", "4", "--ab-items", "4",
                                 "--baseline-items", "0", "--no-run-reports"])
    check = gpu_check.Check(args, tmp_path / "work")
    (tmp_path / "work").mkdir()
    check.report = gpu_check.Report(tmp_path, "check", args)
    check.build()
    gpu_check.ab_section(check, "reference")
    row = gpu_check.quant_section(check, "fp8")
    assert row["quant"] == "fp8" and row["compared"] == 4 and row["pairs"] == 3
    assert len(row["samples_per_s_runs"]) == len(row["default_samples_per_s_runs"]) == 3
    assert row["load_s"] > check.load_s and not (tmp_path / "work" / "checkpoint").exists()
    assert 0 < row["memory_gib"] * 2**30 < sum(p.numel() * 4 for p in check.unpadded_model().parameters())
    # --no-run-reports (gpu_check.sh's tiny setting): every run writes its samples and results, no report
    runs = sorted((tmp_path / "work").glob("run-*"))
    assert len(runs) >= 7 and all((run / "samples.parquet").is_file() and (run / "results.json").is_file()
                                  and not (run / "report.html").exists() for run in runs), runs
    from finbench.report import html

    assert html.write_report.__name__ == "write_report"  # put back after each run


def test_coverage_sim_runs_on_a_few_benchmarks():
    """scripts/coverage_sim.py on 200 simulated benchmarks (its coverage numbers are the script's
    output, quoted in docs/statistics.md, not asserted here)."""
    found = _load("coverage_sim").simulate(10, 3, 200, 0.6, 0.3, 0)
    assert 0 <= found["normal"] <= found["t"] <= 1 and found["t_multiplier"] > 2.2


def test_bench_gemm_names_a_width_fp8_keeps_in_bf16_instead_of_raising():
    # the vision MLP's published width 3420 is no multiple of 16: _scaled_mm raised on the H200
    # and took the whole GEMM section with it; --quant fp8 keeps such a layer in bf16
    import torch

    fp8_layers = _load("bench_gemm").fp8_layers
    reason = fp8_layers(torch.randn(4, 64), torch.randn(64, 3420))
    assert reason == "64x3420 is not in multiples of 16: --quant fp8 keeps such a layer in bf16"
    assert "CUDA GPU" in fp8_layers(torch.randn(4, 64), torch.randn(64, 3456))  # a fitting width: the device decides


def test_the_checks_items_are_distinct_requests_past_the_64_generated_ones(tmp_path):
    # copies of the 64 generated items were equal requests, answered once each: 7 of every 8 rows
    # of the H200's 512-item run cost nothing and its rate read 8 times too high
    import hashlib

    import pandas as pd
    from transformers import AutoTokenizer

    _load("gpu_check")
    from gpucheck.build import make_items

    from finbench.offline.tiny import make_tiny

    tokenizer = AutoTokenizer.from_pretrained(make_tiny("qwen2.5-vl", tmp_path / "tiny"))
    items = pd.read_parquet(make_items(tmp_path / "items.parquet", 130, (64, 48), tokenizer, 80))
    assert len(items) == items["id"].nunique() == 130
    images = items["image"].map(lambda image: hashlib.sha256(image["bytes"]).hexdigest())
    assert images.nunique() == 130  # the request's key holds the image bytes: each copy its own
