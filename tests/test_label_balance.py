"""The biases raw accuracy hides, for every registered benchmark: each demo (one in-process run per
benchmark, the fewest items, the session's tiny model) has in results.json the constant-answer
baseline, the macro-recall over gold labels and the lowest per-label recall of its choice items,
recomputed here from samples.parquet by a plain loop over rows; plus a hand-made case."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from finbench.cli import app

ANSWER_TYPE = {"finchart-bench": "task"}  # what the benchmark declares; every other one splits by kind
SEVEN = ("finmme", "famma", "finmtm", "mme-finance", "finmmr", "finchart-bench", "fcmr")


@pytest.fixture(scope="module")
def demo_runs(tiny_qwen_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("balance")
    home = root / "home"
    shutil.copytree(tiny_qwen_dir, home / "tiny-qwen2.5-vl")
    for name in SEVEN:
        size = ["--n-items", "8"] if name == "finmme" else ["--n-items", "1"]
        done = CliRunner().invoke(app, ["demo", "--benchmark", name, *size, "--out", str(root / name), "--no-progress"],
                                  env={"FINBENCH_HOME": str(home)}, catch_exceptions=False)
        assert done.exit_code == 0, done.output[-3000:]
    return root


def restated(samples: pd.DataFrame, type_column: str) -> dict | None:
    """The three numbers by a loop over rows: choice items (single, multi) with a gold answer."""
    counts, hits = Counter(), Counter()
    for row in samples.itertuples(index=False):
        row = row._asdict()
        if row["kind"] not in ("single", "multi") or not row["gold"]:
            continue
        label = (str(row.get(type_column) or row["kind"]), row["gold"])
        counts[label] += 1
        hits[label] += float(row["correct"])
    if not counts:
        return None
    n = sum(counts.values())
    most = defaultdict(int)
    for (kind, _), c in counts.items():
        most[kind] = max(most[kind], c)
    recalls = {label: hits[label] / c for label, c in counts.items()}
    return {"n": n, "constant_baseline": sum(most.values()) / n, "macro_recall": sum(recalls.values()) / len(recalls),
            "min_recall": min(recalls.values()), "accuracy": sum(hits.values()) / n}


@pytest.mark.slow
def test_every_benchmark_s_demo_has_the_three_numbers_recomputed_from_its_samples(demo_runs):
    from finbench.benchmarks import BENCHMARKS

    assert set(SEVEN) <= set(BENCHMARKS)
    with_choice = 0
    for name in SEVEN:
        out = demo_runs / name
        samples = pd.read_parquet(out / "samples.parquet")
        results = json.loads((out / "results.json").read_text())
        found = results["scores"]["label_balance"]
        expected = restated(samples, ANSWER_TYPE.get(name, "kind"))
        if expected is None:  # FinMMR: numerical items only
            assert found["n"] == 0 and "no choice items" in found["note"], name
            continue
        with_choice += 1
        for key, value in expected.items():
            assert found[key] == pytest.approx(value), (name, key)
        assert found["answer_type"] == ANSWER_TYPE.get(name, "kind")
        assert "constant answer" in (out / "report.md").read_text() and "macro-recall" in (out / "report.html").read_text()
    assert with_choice == 6


def test_a_skewed_key_shows_at_a_glance():
    """Always answering C on a key that is C 6 times in 10: 60 % accuracy, constant baseline 60 %,
    macro-recall 25 % (only C recalled, of four labels), lowest recall 0 — TF apart as its own type."""
    from finbench.report.balance import balance_line
    from finbench.scoring.balance import label_balance

    gold = list("CCCCCCABDD") + ["A", "A", "B"]
    rows = pd.DataFrame({"kind": ["single"] * 13, "gold": gold, "task": ["MC"] * 10 + ["TF"] * 3})
    correct = torch.tensor([1.0] * 6 + [0.0] * 4 + [1.0, 1.0, 0.0])
    found = label_balance(rows, correct, "task")
    assert found["constant_baseline"] == pytest.approx((6 + 2) / 13)
    assert found["by_type"]["MC"]["macro_recall"] == pytest.approx(0.25)
    assert found["by_type"]["MC"]["constant_answer"] == "C" and found["by_type"]["TF"]["constant_answer"] == "A"
    assert found["macro_recall"] == pytest.approx((0 + 0 + 1 + 0 + 1 + 0) / 6)
    assert found["min_recall"] == 0.0 and found["min_recall_label"] == "MC A"
    line = balance_line({"scores": {"label_balance": found}})
    assert "constant answer 61.54 (always MC C, TF A)" in line and "lowest label recall 0.00 (MC A)" in line
