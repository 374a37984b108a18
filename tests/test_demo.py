"""`finbench demo --benchmark famma|finmtm`: one command, offline, a tiny random model and synthetic
data written into the run folder in the benchmark's real layout; every part of the score shows up
in the console, report.html and report.md (FinMTM: objective, dialogue judged by the same tiny
model — whose unreadable replies leave it unscored, said so —, agent with F2)."""

from __future__ import annotations

import json
import re

import pytest
from helpers import cli as finbench

LAST = re.compile(r"^tiny-qwen2\.5-vl · (\w+) · constrained · .+ · n \d+ · \d+ errors?$")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


@pytest.mark.slow
def test_the_finmtm_demo_shows_objective_dialogue_agent_and_f2(home, tmp_path):
    out = tmp_path / "demo-finmtm"
    done = finbench("demo", "--benchmark", "finmtm", "--out", str(out), "--no-progress",
                    env={"FINBENCH_HOME": str(home), "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr[-3000:]
    data = next((out / "data").iterdir())
    assert {p.name for p in data.iterdir()} >= {"OQ", "MTQA", "Agent"} and (data / "OQ" / "SC.jsonl").is_file()
    results = json.loads((out / "results.json").read_text())
    scores = results["scores"]
    assert results["config"]["judge"] == str(home / "tiny-qwen2.5-vl")  # the demo's own tiny model judges
    # every session was judged (8 sessions, a turn call each and a session call), but the tiny
    # random-weight judge's replies hold no verdict the official reading can parse: each session is
    # a failed judgement (issue 41, fail closed) — counted and named, never a made-up score — and
    # every output says so in the dialogue part's place (test_judge.py shows its table from a judge
    # whose replies parse)
    dialogue = scores["dialogue"]
    assert dialogue["n"] == dialogue["n_unparsed"] == results["judge"]["n_unparsed_items"] == 8
    assert results["judge"]["n_judged"] == 8 and dialogue["n_judged"] == dialogue["n_scored"] == 0
    assert dialogue["score"] is None
    honest = "dialogue: no judge reply could be read (8 failed; none given a default score)"
    pages = {"console": done.stdout, "report.md": (out / "report.md").read_text(),
             "report.html": (out / "report.html").read_text()}
    assert scores["agent"]["n_scored"] == 6 and scores["agent"]["f2"] is not None and "f2" in scores["agent"]["ci"]
    for where, text in pages.items():
        for part in (honest, "FinMTM agent items", "tool F2 ×100"):
            assert part in " ".join(text.split()), (where, part)
        assert "final = (0.5·turn + 0.5·session)×10" not in text, where  # no table of fake scores
    assert "FinMTM dialogue sessions" in pages["report.md"] and "FinMTM dialogue sessions" in pages["report.html"]
    assert "RANDOM-WEIGHT" in done.stdout
    assert "--judge" not in done.stdout  # no --judge was given: the demo's own model judges
    last = done.stdout.strip().splitlines()[-1]
    assert LAST.match(last) and " · finmtm · " in last, last
    checked = finbench("data", "check", "--benchmark", "finmtm", str(data))
    assert checked.returncode == 0, checked.stdout[-2000:]


@pytest.mark.slow
def test_the_famma_demo_runs_offline_with_every_breakdown(home, tmp_path):
    out = tmp_path / "demo-famma"
    done = finbench("demo", "--benchmark", "famma", "--out", str(out), "--no-progress", "--verbose-tables",
                    env={"FINBENCH_HOME": str(home), "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr[-3000:]
    (data,) = (out / "data").rglob("release_basic.parquet")
    results = json.loads((out / "results.json").read_text())
    scores = results["scores"]
    # the live question without an answer is generated and stored, not scored (the masked one is decoded)
    assert scores["n_unscored"] == 1 and scores["n"] == results["n_questions"] - 1
    markdown = (out / "report.md").read_text()
    for column, groups in scores["breakdowns"].items():  # every FAMMA breakdown, with n and a Wilson CI
        assert f"by {column} (×100)" in done.stdout and f"## By {column}" in markdown
        for g in groups.values():
            assert g["ci"]["method"] == "wilson"
    assert "95% CI (Wilson) ×100" in markdown and "language×difficulty" in markdown
    assert LAST.match(done.stdout.strip().splitlines()[-1]) and " · famma · " in done.stdout.strip().splitlines()[-1]
    assert finbench("data", "check", "--benchmark", "famma", str(data)).returncode == 0


def test_an_unknown_demo_is_one_line(tmp_path):
    done = finbench("demo", "--benchmark", "finqa", "--out", str(tmp_path / "x"), env={"FINBENCH_HOME": str(tmp_path)})
    assert done.returncode == 2 and "the demo knows finmme, famma, finmtm" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_demo_refused_for_another_run_s_results_writes_nothing(tmp_path):
    """`finbench demo --benchmark famma --out runs/demo` where runs/demo holds FinMME's demo: the
    run's start-up refusal (another run's results), one line, and no OUT/data written first."""
    from typer.testing import CliRunner

    from finbench.cli import app
    from finbench.offline.tiny import make_tiny

    home = tmp_path / "home"
    make_tiny("qwen2.5-vl", home / "tiny-qwen2.5-vl")
    out = tmp_path / "demo"
    out.mkdir()
    previous = {"config": {"model": str(home / "tiny-qwen2.5-vl"), "benchmark": "finmme", "data": str(home / "x"),
                           "protocol": "constrained", "dtype": "float32"}}
    (out / "results.json").write_text(json.dumps(previous))
    done = CliRunner().invoke(app, ["demo", "--benchmark", "famma", "--out", str(out), "--no-progress"],
                              env={"FINBENCH_HOME": str(home)})
    assert done.exit_code == 2, done.output
    assert "holds the results of another run" in done.stderr and "benchmark 'finmme' → 'famma'" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]  # no data/ written
