"""A command says something at once (issue 55, item 9): a run or demo whose progress reaches a
pipe prints its first line before torch is imported (the seconds of a cold start, even when every
answer is cached), and a sweep into a folder another process holds is refused before torch is
imported. Each check reads the order of events in one stream — the line against Python's own
`-X importtime` records of the imports — never the wall time."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import ENV

TORCH_IMPORTED = re.compile(r"^import time:.*\|\s+torch$")


def _piped(*args: str, env: dict) -> tuple[int, list[str]]:
    """`python -X importtime -m finbench.cli ARGS`, stdout and stderr in one pipe: its lines."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "finbench.cli", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, timeout=900)
    return done.returncode, done.stdout.splitlines()


def _first(lines: list[str], found) -> int:
    return next((i for i, text in enumerate(lines) if found(text)), len(lines))


@pytest.mark.slow
def test_a_piped_run_says_its_first_line_before_torch_is_imported(tmp_path, tiny_qwen_dir, synthetic_parquet):
    """`run` (the demo and a judged rerun start the same way: app/api.py `evaluate`)."""
    code, lines = _piped("run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit", "4",
                         "--device", "cpu", "--dtype", "float32", "--bootstrap", "0", "--out", str(tmp_path / "out"),
                         env=ENV)
    assert code == 0, "\n".join(line for line in lines if not line.startswith("import time:"))[-3000:]
    said = _first(lines, lambda text: text.startswith("loading "))
    torch = _first(lines, TORCH_IMPORTED.match)
    assert said < torch < len(lines), (said, torch)


HOLD = """
import sys, time
from pathlib import Path
from finbench.runner.lock import folder_lock
with folder_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
def test_a_sweep_into_a_held_folder_is_refused_before_torch_is_imported(tmp_path, tiny_qwen_dir, synthetic_parquet):
    out = tmp_path / "sweep"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, lines = _piped("sweep", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--dtype",
                             "float32,bfloat16", "--device", "cpu", "--out", str(out), env=ENV)
    finally:
        holder.kill()
        holder.wait()
    said = [text for text in lines if text.strip() and not text.startswith("import time:")]
    assert code == 2 and len(said) == 1 and said[0].startswith(f"error: --out {out} is in use"), said
    assert not any(TORCH_IMPORTED.match(text) for text in lines), "torch was imported before the refusal"
