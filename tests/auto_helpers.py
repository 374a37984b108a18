"""Shared by the generic family's tests (test_auto_family*.py): the eight tiny architectures, a
40-item FinMME file, a run through the CLI, and start-up refusals through typer's runner."""

from __future__ import annotations

import json

import pandas as pd
from helpers import cli

from finbench.offline.tiny import tiny_family_available

ARCHITECTURES = [a for a in ("gemma4", "glm46v", "internvl", "minicpmv4_6", "llama4", "mistral3", "smolvlm",
                             "llava_onevision") if tiny_family_available(a)]
N_ITEMS = 40


def write_finmme40(folder):
    from finbench.offline.finmme_synthetic import write_parquet

    return write_parquet(folder / "finmme40.parquet", n_items=N_ITEMS, seed=1)


def run(model, data, out, *args):
    """`finbench run` on the CPU in fp32 (no bootstrap); results.json and samples.parquet."""
    done = cli("run", "--model", str(model), "--data", str(data), "--out", str(out), "--device", "cpu",
               "--dtype", "float32", "--bootstrap", "0", "--no-progress", *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), pd.read_parquet(out / "samples.parquet")


def assert_same_probabilities(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Option probabilities (choice items) and answer confidences (every item) within 1e-5."""
    for x, y in zip(a["option_probs"], b["option_probs"]):
        assert len(x) == len(y) and all(abs(p - q) <= 1e-5 for p, q in zip(x, y))
    assert all(abs(p - q) <= 1e-5 for p, q in zip(a["confidence"], b["confidence"]))


def invoke(*args):
    """The CLI in this process as typer's runner answers (exit_code, output): start-up refusals."""
    from typer.testing import CliRunner

    from finbench.cli import app

    return CliRunner().invoke(app, list(args))
