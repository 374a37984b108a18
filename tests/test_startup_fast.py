"""A bad option is refused before torch or transformers is imported, with one line and exit code 2
(every command used to take 5-12 s to say so); the console of a tiny run is quiet: no library
progress bar, no deprecation warning, the demo's disclaimer once.

Each check runs the command line in a fresh interpreter (a test process has torch imported long
ago) and asserts on what happened — the one error line, `sys.modules` after the command — never on
wall time; the seconds are printed for the record (`pytest -s`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import ENV

# the command line's main, in-process, then what it imported: one JSON line after the CLI's own output
PROBE = """
import json, sys
from finbench.cli import app
try:
    app(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
else:
    code = 0
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "transformers", "torchao", "bitsandbytes")
                                                 if m in sys.modules)}))
"""


def _probe(*args: str, cwd=None) -> tuple[dict, str, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=300)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    *_, last = done.stdout.strip().splitlines()
    return json.loads(last), done.stderr, seconds


@pytest.mark.parametrize("args, message", [
    (["run", "--model", "x", "--quant", "3bit"], "--quant 3bit: expected one of none, 8bit"),
    (["run", "--model", "x", "--dtype", "fp99"], "--dtype fp99: expected one of auto"),
    (["run", "--model", "x", "--device", "tpu"], "--device tpu: expected auto, cpu, cuda or cuda:N"),
    (["run", "--model", "x", "--batch-size", "0"], "--batch-size 0: must be a positive integer"),
    (["run", "--model", "x", "--permutations", "1"], "--permutations 1: give 2 or more orders"),
    (["run", "--model", "x", "--samples", "0"], "--samples 0: give the number of samples"),
    (["run", "--model", "x", "--probe", "bogus"], "--probe bogus: unknown probe 'bogus'"),
    (["run", "--model", "x", "--judge", "/no/such/judge"], "--judge /no/such/judge: no such model folder"),
    (["run", "--model", "x", "--data", "/no/such.parquet"], "--data /no/such.parquet: no such file"),
    (["run", "--model", "x", "--quant-vision"], "--quant-vision applies with --quant"),
    (["run", "--model", "x", "--benchmark", "finmmx"], "unknown benchmark 'finmmx'; known: custom, famma, fcmr, finchart-bench, finmme"),
    (["run", "--model", "x", "--benchmark", "finmme,finmmx"], "unknown benchmark 'finmmx'"),
    (["run", "--model", "x", "--benchmark", "finmmr", "--protocol", "cott"],
     "--protocol cott: expected one of constrained, cot, pot"),
    (["sweep", "--model", "x", "--quant", "none,3bit"], "--quant 3bit: expected one of"),
    (["sweep", "--model", "x", "--quant", "none,8bit", "--permutations", "-1"], "--permutations -1"),
    (["demo", "--n-items", "0"], "--n-items 0: expected a positive number"),
    (["demo", "--benchmark", "finmmx"], "--benchmark finmmx: the demo knows finmme"),
    (["score", "--benchmark", "finmmr", "--data", "/no/data", "--predictions", "/no/p.jsonl", "--protocol", "cott"],
     "--protocol cott: finmmr has constrained, cot, pot"),
    (["score", "--benchmark", "finmmx", "--data", "/no/data", "--predictions", "/no/p.jsonl"],
     "unknown benchmark 'finmmx'"),
    (["score", "/no/such/run"], "/no/such/run: no samples.parquet"),
    (["compare", "/no/a", "/no/b"], "/no/a: no samples.parquet"),
    (["leaderboard", "/no/such/run"], "/no/such/run: not a finbench run folder"),
])
def test_a_bad_option_is_one_line_before_torch_is_imported(tmp_path, args, message):
    result, stderr, seconds = _probe(*args, cwd=tmp_path)
    print(f"finbench {' '.join(args)}: refused in {seconds:.2f} s")
    assert result["code"] == 2, stderr
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and message in " ".join(" ".join(lines).split()), stderr
    assert not any(line.startswith(("warning", "Traceback")) for line in lines), stderr
    assert result["heavy"] == [], f"imported {result['heavy']} before refusing"
    assert not (tmp_path / "runs").exists()  # nothing written


def test_the_pure_checks_agree_with_the_loaders_names():
    """The dtype and quant names start-up checks without torch are the ones the loader and
    quantizer act on (models/loading.py, models/quant.py)."""
    import torch

    from finbench.models.loading import resolve_dtype
    from finbench.models.quant import FORMATS
    from finbench.core.types import DTYPE_NAMES, QUANT_CHOICES

    for name in DTYPE_NAMES:
        assert isinstance(resolve_dtype(name, torch.device("cpu")), torch.dtype)
    with pytest.raises(ValueError, match="--dtype fp99"):
        resolve_dtype("fp99", torch.device("cpu"))
    assert set(QUANT_CHOICES) == {"none", *FORMATS}


@pytest.mark.slow
def test_a_tiny_run_prints_no_library_bar_or_warning_and_the_disclaimer_once(tmp_path):
    from helpers import run_cli

    done = run_cli("demo", "--n-items", "4", "--out", str(tmp_path / "d"),  # a terminal, as a user has
                   env={**ENV, "FINBENCH_HOME": str(tmp_path / "home"), "COLUMNS": "200", "FORCE_COLOR": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    assert "Loading weights" not in console and "Deprecat" not in console and "register_constant" not in console
    assert console.count("RANDOM-WEIGHT") == 1
    assert done.stderr.index("loading ") < done.stderr.index("evaluating")  # the first line before the work
