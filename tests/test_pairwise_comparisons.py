"""Comparisons on the questions each pair shares (issue 49, item 7): `finbench leaderboard A B C` and
`finbench compare A B C` compare each run with the reference on the questions THOSE TWO answered,
and say how many; a comparison of runs that share no question is refused in one line, not printed
as McNemar p = 1."""

from __future__ import annotations

import json

import pytest
from helpers import cli

from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model, tiny_qwen_dir, synthetic_parquet):
    """a: the first 12 FinMME items; b: 3 single-choice items; c: 3 numerical items — b and c share
    no question, each shares 3 with a."""
    root = tmp_path_factory.mktemp("pairwise")
    for name, options in (("a", {"limit": 12}), ("b", {"limit": 3, "question_types": ("single_choice",)}),
                          ("c", {"limit": 3, "question_types": ("numerical",)})):
        config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), dtype="float32", device="cpu",
                                out=str(root / name), bootstrap=0, **options)
        run_benchmark(config, tiny_model, show_progress=False)
    return root


def test_the_leaderboard_compares_each_run_with_the_reference_on_what_they_share(runs, tmp_path):
    """Each pair's paired difference is over the questions both runs answered (leaderboard.py): b
    and c sharing nothing with each other leaves each its own comparison with a."""
    out = tmp_path / "board.csv"
    done = cli("leaderboard", str(runs / "a"), str(runs / "b"), str(runs / "c"), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    import csv

    rows = {r["run"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert rows["a"]["reference"] == "(reference)"
    for name in ("b", "c"):
        assert rows[name]["n_shared"] == "3" and rows[name]["delta"] != "", rows[name]


def test_compare_reports_each_pair_on_its_own_shared_questions(runs, tmp_path):
    out = tmp_path / "abc.json"
    done = cli("compare", str(runs / "a"), str(runs / "b"), str(runs / "c"), "--bootstrap", "20", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [(c["run"], c["n"]) for c in result["comparisons"]] == [("b", 3), ("c", 3)]
    assert all(c["delta"]["accuracy"]["value"] is not None for c in result["comparisons"])
    assert result["n_shared"] == 0 and "3 shared with the baseline" in done.stdout


def test_a_comparison_of_runs_that_share_no_question_is_refused_in_one_line(runs):
    done = cli("compare", str(runs / "b"), str(runs / "c"), "--bootstrap", "20")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "c and b share no scored question" in lines[0], done.stderr
    assert "McNemar" not in done.stdout


def test_the_leaderboard_says_when_a_run_shares_nothing_with_its_reference(runs, tmp_path):
    out = tmp_path / "board.csv"
    done = cli("leaderboard", str(runs / "b"), str(runs / "c"), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "c: no scored question in common with the reference b: not compared" in done.stdout + done.stderr
