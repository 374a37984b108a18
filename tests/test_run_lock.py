"""One writer per run folder (runner/lock.py): a second run, sweep or demo build into a folder in
use is refused in one line naming the first (or, for a shared FINBENCH_HOME, waits for it), and a
lock left by a process killed with -9 is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import ENV, cache_rows, cli

HOLD = """
import sys, time
from pathlib import Path
from finbench.runner.lock import folder_lock
with folder_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _run_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--model", str(model), "--data", str(data), "--out", str(out), "--dtype", "float32",
            "--device", "cpu", "--no-progress", *extra]


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "finbench.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def _wait_for(condition, process: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _one_error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:"), output
    return errors[0]


@pytest.mark.slow
def test_a_second_run_into_the_same_folder_is_refused_in_one_line_and_the_first_finishes_intact(
        tmp_path, tiny_qwen_dir, synthetic_parquet):
    out = tmp_path / "twin"
    args = _run_args(tiny_qwen_dir, synthetic_parquet, out, "--limit", "24", "--batch-size", "1")
    first = _start(args)
    _wait_for(lambda: (out / ".finbench.owner").is_file(), first)
    # refused at once, measured as what happened before the refusal — Python's own record of the
    # imports (-X importtime): no torch, so no model — never as seconds a loaded machine can stretch
    second = subprocess.run([sys.executable, "-X", "importtime", "-m", "finbench.cli", *args], capture_output=True,
                            text=True, env=ENV, timeout=600)
    imports = [text for text in second.stderr.splitlines() if text.startswith("import time:")]
    assert first.poll() is None, "the first run ended before the second was refused: the test proves nothing"
    assert second.returncode == 2 and imports, second.stderr[-2000:]
    assert not [text for text in imports if text.rstrip().endswith(("| torch", "| transformers"))], \
        "the second run imported torch before it was refused"
    line = _one_error_line(second.stdout + "\n".join(t for t in second.stderr.splitlines() if t not in imports))
    assert f"--out {out} is in use by another finbench run (pid {first.pid}, started " in line
    _, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr
    results = json.loads((out / "results.json").read_text())
    samples = pd.read_parquet(out / "samples.parquet")
    assert results["n_questions"] == 24 and len(samples) == 24 and results["errors"]["count"] == 0
    assert results["n_computed"] == 24 and not (out / ".finbench.owner").exists()


@pytest.mark.slow
def test_a_lock_left_by_a_run_killed_with_minus_9_is_taken_over(tmp_path, tiny_qwen_dir, synthetic_parquet):
    out = tmp_path / "killed"
    args = _run_args(tiny_qwen_dir, synthetic_parquet, out, "--limit", "24", "--batch-size", "1")
    first = _start(args)
    _wait_for(lambda: cache_rows(out / "cache.sqlite") >= 2, first)
    assert json.loads((out / ".finbench.owner").read_text())["pid"] == first.pid
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["n_questions"] == 24 and results["errors"]["count"] == 0
    took_over = [note for note in results["notes"] if "took over the lock" in note]
    assert len(took_over) == 1 and f"pid {first.pid}, started " in took_over[0]
    assert "took over the lock" in (out / "run.log").read_text()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_run_or_sweep_into_a_folder_held_by_another_process_is_refused_before_any_model_loads(
        tmp_path, tiny_qwen_dir, synthetic_parquet, command, monkeypatch):
    out = tmp_path / command
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out), "120"], stdout=subprocess.PIPE, text=True,
                              env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        import finbench.models

        def no_model(*args, **kwargs):
            raise AssertionError("a model was loaded")

        monkeypatch.setattr(finbench.models, "load_model", no_model)
        args = (_run_args(tiny_qwen_dir, synthetic_parquet, out) if command == "run" else
                ["sweep", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--dtype",
                 "float32,float16", "--device", "cpu", "--out", str(out), "--no-progress"])
        done = cli(*args)
        assert done.returncode == 2, done.stderr
        line = _one_error_line(done.stdout + done.stderr)
        assert f"--out {out} is in use by another finbench run (pid {holder.pid}, started " in line
        assert sorted(p.name for p in out.iterdir()) == [".finbench.lock", ".finbench.owner"]
    finally:
        holder.kill()
        holder.wait()


def test_a_folder_the_lock_made_for_a_refused_run_is_removed(tmp_path, tiny_qwen_dir):
    out = tmp_path / "new"
    done = cli(*_run_args(tiny_qwen_dir, tmp_path / "missing.parquet", out))
    assert done.returncode == 2 and not out.exists(), done.stderr


BUILD = """
import sys
from pathlib import Path
from finbench.offline.demo import demo_model
folder, built = demo_model(Path(sys.argv[1]))
print("built" if built else "reused", folder, flush=True)
"""


@pytest.mark.slow
def test_two_processes_sharing_finbench_home_build_the_demo_model_once(tmp_path):
    home = tmp_path / "home"
    builders = [subprocess.Popen([sys.executable, "-c", BUILD, str(home)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]
    outputs = [b.communicate(timeout=300) for b in builders]
    assert all(b.returncode == 0 for b in builders), outputs
    said = sorted(out.split()[0] for out, _ in outputs)
    assert said == ["built", "reused"], outputs
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(home / "tiny-qwen2.5-vl").model_type == "qwen2_5_vl"
    assert not (home / ".tiny-qwen2.5-vl.partial").exists()
