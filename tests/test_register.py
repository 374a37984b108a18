"""Adding a benchmark is its own files plus one registration call: ToyBench (tests/toybench.py: a
loader, a request, a scoring rule with one part scored apart, a synthetic data writer and a demo)
registered through `finbench.benchmarks.register` runs end to end through `finbench run`,
`score`, `report`, `leaderboard` and `demo`, and every place shows its declared part — while no
file under finbench/ knows its name. References: accuracies restated from samples.parquet."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import toybench
from typer.testing import CliRunner

from finbench.cli import app

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
PART_TITLE = "ToyBench hard items (scored apart)"


@pytest.fixture
def registered():
    from finbench.benchmarks import BENCHMARKS, register

    assert register(toybench.BENCHMARK) is toybench.BENCHMARK
    try:
        yield toybench.BENCHMARK
    finally:
        BENCHMARKS.pop(toybench.NAME)  # the other tests see the built-in registry only


def invoke(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    return result


def restated(samples: pd.DataFrame) -> tuple[float, float]:
    """(accuracy, hard-item accuracy), in plain pandas: an answer is right when it is the gold."""
    right = (samples["answer"].astype(str) == samples["gold"].astype(str)) & (samples["error"].astype(str) == "")
    return float(right.mean()), float(right[samples["level"] == "hard"].mean())


def test_no_file_under_finbench_knows_the_toy_benchmark():
    assert [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".j2", ".json", ".toml"}
            and toybench.NAME in p.read_text(encoding="utf-8", errors="replace").lower()] == []


def test_register_refuses_a_second_benchmark_of_the_same_name(registered):
    from finbench.benchmarks import get_benchmark, register

    assert get_benchmark("ToyBench") is registered
    with pytest.raises(ValueError, match="already registered"):
        register(dataclasses.replace(registered, title="another"))
    with pytest.raises(ValueError, match="lower case"):
        register(dataclasses.replace(registered, name="Toy,Bench"))


def test_a_registered_benchmark_runs_scores_reports_and_ranks_end_to_end(registered, tiny_qwen_dir, tmp_path):
    data = toybench.write_data(tmp_path / "data")
    out = tmp_path / "run"
    ran = invoke("run", "--model", str(tiny_qwen_dir), "--benchmark", "toybench", "--data", str(data), "--out", str(out),
                 "--dtype", "float32", "--device", "cpu", "--no-progress", "--bootstrap", "200")
    results = json.loads((out / "results.json").read_text())
    samples = pd.read_parquet(out / "samples.parquet")
    accuracy, hard = restated(samples)
    assert results["benchmark"] == "toybench" and len(samples) == 9 and results["errors"]["count"] == 0
    assert results["scores"]["accuracy"] == pytest.approx(accuracy)
    part = results["scores"]["hard"]
    assert part["n"] == part["n_scored"] == 3 and part["accuracy"] == pytest.approx(hard)
    assert part["ci"]["accuracy"]["low"] <= hard <= part["ci"]["accuracy"]["high"]
    assert set(results["scores"]["breakdowns"]) == {"topic", "level"}
    assert PART_TITLE in ran.output and "hard accuracy ×100" in ran.output  # the console draws the declared part

    scored = invoke("score", str(out), "--bootstrap", "100")
    scores = json.loads((out / "scores_official.json").read_text())
    assert scores["accuracy"] == pytest.approx(accuracy) and scores["hard"]["accuracy"] == pytest.approx(hard)
    assert PART_TITLE in scored.output and f"{100 * hard:.2f}" in scored.output

    (out / "report.html").unlink()
    (out / "report.md").unlink()
    invoke("report", str(out))
    markdown = (out / "report.md").read_text()
    assert f"## {PART_TITLE}" in markdown and f"| hard accuracy ×100 | {100 * hard:.2f} |" in markdown
    assert PART_TITLE in (out / "report.html").read_text()

    board = tmp_path / "board.csv"
    invoke("leaderboard", str(out), "--out", str(board))
    row, = csv.DictReader(board.open())
    assert row["benchmark"] == "toybench" and float(row["score"]) == pytest.approx(100 * accuracy)
    by_level = samples.assign(right=samples["answer"] == samples["gold"]).groupby("level")["right"].mean()
    assert {k: float(v) for k, v in row.items() if k.startswith("level:")} == \
        pytest.approx({f"level:{level}": 100 * float(v) for level, v in by_level.items()}, abs=1e-4)  # leaderboard_breakdown


@pytest.mark.slow
def test_the_demo_of_a_registered_benchmark_writes_its_data_and_runs(registered, tiny_qwen_dir, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(tiny_qwen_dir, home / "tiny-qwen2.5-vl")  # the demo's model, already built
    demo = invoke("demo", "--benchmark", "toybench", "--out", str(tmp_path / "demo"), "--no-progress",
                  env={"FINBENCH_HOME": str(home)})
    results = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert results["benchmark"] == "toybench" and results["n_questions"] == 9
    assert (home / "toybench-9" / "toy.jsonl").is_file()  # Demo(in_home=True): the data is kept in FINBENCH_HOME
    assert f"generated synthetic toybench data into {home / 'toybench-9'}" in demo.output
    assert results["scores"]["accuracy"] == pytest.approx(restated(pd.read_parquet(tmp_path / "demo" / "samples.parquet"))[0])


def test_the_headline_falls_back_on_the_first_declared_part_with_a_headline(registered):
    from finbench.report.format import headline_score

    scores = {"benchmark": "toybench", "primary": "accuracy", "accuracy": None, "n": 0,
              "hard": {"n": 4, "n_scored": 4, "accuracy": 0.25, "ci": {"accuracy": {"low": 0.1, "high": 0.5}}}}
    assert headline_score(scores) == {"metric": "hard.accuracy", "label": "hard-item accuracy", "value": 25.0,
                                      "low": 10.0, "high": 50.0, "n": 4}
    assert headline_score({**scores, "benchmark": "not-registered"})["value"] is None  # no declared part: no fallback
