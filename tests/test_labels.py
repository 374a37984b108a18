"""Honest labels: summary.json on one labelled scale with the studies, baselines and calibration
the console prints; the leaderboard showing each benchmark's own headlines (MME-Finance's binary
accuracy, FinMTM's dialogue and agent parts) and readable at 80 columns; FinMTM's options lettered
once in the sample browser; `demo --help` naming every registered benchmark; the demo's
disclaimer printed once. References: the numbers of each run's results.json, read directly."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finbench.cli import app

FAMMA_MOCK = Path(__file__).parent / "fixtures" / "famma" / "mock.json"
COUNTS = re.compile(r"^n(_|$)")


def _invoke(*args: str, env: dict[str, str] | None = None):
    done = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output[-3000:]
    return done


@pytest.fixture(scope="module")
def demos(tiny_qwen_dir, tmp_path_factory):
    """A FinMTM and an MME-Finance demo run of one synthetic item per file/language, in-process,
    with the session's tiny model as the demo's model (nothing built)."""
    root = tmp_path_factory.mktemp("labels")
    home = root / "home"
    shutil.copytree(tiny_qwen_dir, home / "tiny-qwen2.5-vl")
    outputs = {}
    for name in ("finmtm", "mme-finance"):
        done = _invoke("demo", "--benchmark", name, "--n-items", "1", "--out", str(root / name), "--no-progress",
                       env={"FINBENCH_HOME": str(home)})
        outputs[name] = done.output
    return root, outputs


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_summary_json_is_on_one_labelled_scale_with_studies_baselines_and_calibration(tiny_model, synthetic_parquet,
                                                                                      tmp_path):
    import finbench

    runs = finbench.evaluate(tiny_model, "finmme,famma", data={"finmme": str(synthetic_parquet), "famma": str(FAMMA_MOCK)},
                             limit=6, permutations=2, bootstrap=50, max_new_tokens=3, out=tmp_path / "both")
    summary = json.loads((tmp_path / "both" / "summary.json").read_text())
    assert summary["scale"] == "fraction" and "0–1" in summary["scale_note"]
    for name, run in runs.runs.items():
        entry, results = summary["benchmarks"][name], _results(run.out_dir)
        scores = results["scores"]
        primary = scores["primary"]
        # the headline keeps its ×100 keys, says so, and repeats itself on the file's scale
        assert entry["headline"]["scale"] == "percent"
        assert entry["headline"]["value"] == pytest.approx(100 * scores[primary])
        assert entry["headline"]["fraction"]["value"] == pytest.approx(scores[primary])
        assert entry["headline"]["fraction"]["low"] == pytest.approx(scores["ci"][primary]["low"])
        for key, value in entry["scores"].items():  # every score 0–1; the rest are counts
            assert COUNTS.match(key) or value is None or 0.0 <= value <= 1.0, (name, key, value)
        # what the console prints beside the headline, from the same results.json blocks
        assert entry["studies"]["circular"] == results["circular"] and results["circular"]["k"] == 2
        assert entry["baselines"] == results["majority_baseline"] and entry["baselines"]["all"]
        assert entry["calibration"] == scores.get("calibration") and entry["selective"] == scores.get("selective")
    assert summary["benchmarks"]["finmme"]["calibration"]["n"] > 0  # constrained choice items: option probabilities


def test_the_summary_entry_leaves_out_the_x100_copies_and_names_the_parts_scales(demos):
    from finbench.app.api import run_summary

    root, _ = demos
    for name in ("finmtm", "mme-finance"):
        results = _results(root / name)
        entry = run_summary(results, root / name)
        assert not {"score_percent", "score_x20"} & set(entry["scores"]), entry["scores"]
        for key, value in entry["scores"].items():
            assert COUNTS.match(key) or value is None or 0.0 <= value <= 1.0, (name, key, value)
    mtm = run_summary(_results(root / "finmtm"), root / "finmtm")
    assert mtm["part_scales"]["dialogue"] == {"turn": "0–10", "session": "0–10", "score": "0–100"}
    assert mtm["part_scales"]["agent"]["f2"] == "fraction"


def _printed(board: dict, width: int) -> str:
    from rich.console import Console

    from finbench.app.leaderboard import print_board

    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    print_board(board, console)
    return console.export_text()


def test_the_leaderboard_shows_each_benchmarks_declared_headlines(demos):
    from finbench.app.leaderboard import build

    root, _ = demos
    board = build([root / "finmtm", root / "mme-finance"])
    rows = {r["benchmark"]: r for r in board["rows"]}
    mme, mtm = _results(root / "mme-finance")["scores"], _results(root / "finmtm")["scores"]
    shown = {h["metric"]: h for h in rows["mme-finance"]["headlines"]}
    balance = ["constant_baseline", "macro_recall", "min_recall"]  # the choice items' label balance, after the rule's own
    # a judge reply that cannot be read scores nothing (fail closed): the tiny demo judge's replies may
    # give the run no judge score, and then the board shows no "score" headline rather than a made-up one
    judged = ["score"] if mme["score"] is not None else []
    assert list(shown) == [*judged, "binary_accuracy", *balance]
    for key in balance:
        assert shown[key]["value"] == pytest.approx(100 * mme["label_balance"][key])
    assert shown["binary_accuracy"]["value"] == pytest.approx(100 * mme["binary_accuracy"])
    assert shown["binary_accuracy"]["n"] == mme["n_binary"]
    if judged:
        assert shown["score"]["value"] == pytest.approx(100 * mme["score"])
    shown = {h["metric"]: h for h in rows["finmtm"]["headlines"]}
    # likewise FinMTM's sessions: the tiny judge's unreadable replies leave the dialogue part unscored,
    # and the board then shows no dialogue score (test_judge.py shows it from a judge whose replies parse)
    dialogue = ["dialogue.score"] if mtm["dialogue"]["score"] is not None else []
    assert list(shown) == ["score", "accuracy", *dialogue, "agent.f2", *balance]
    if dialogue:
        assert shown["dialogue.score"]["value"] == pytest.approx(mtm["dialogue"]["score"])  # on its own 0–100 scale
    assert shown["agent.f2"]["value"] == pytest.approx(100 * mtm["agent"]["f2"])
    assert shown["agent.f2"]["low"] == pytest.approx(100 * mtm["agent"]["ci"]["f2"]["low"])
    text = " ".join(_printed(board, 120).split())
    for label in ("binary accuracy", *(["dialogue score"] if dialogue else []), "agent tool F2"):
        assert label in text, text
    from finbench.report.markdown import leaderboard_markdown

    markdown = leaderboard_markdown(board)
    binary = f"{100 * mme['binary_accuracy']:.2f}"  # beside the judge score, or the row's own metric without one
    assert (f"binary accuracy {binary}" if judged else f"| binary accuracy | {binary} [") in markdown
    assert "agent tool F2" in markdown


def test_the_console_leaderboard_is_whole_at_80_columns(demos):
    from finbench.app.leaderboard import build
    from finbench.report.format import interval_text

    root, _ = demos
    board = build([root / "finmtm", root / "mme-finance"])
    for long_names in (False, True):
        if long_names:
            for row in board["rows"]:
                row["run"] = f"{row['run']}-Qwen2.5-VL-7B-Instruct-8bit-think_budget-1024"
        printed = _printed(board, 80)
        assert "…" not in printed
        assert max(map(len, printed.splitlines())) <= 80
        cells = [c.strip() for line in printed.splitlines() for c in re.split(r"[│┃]", line)]
        for row in board["rows"]:
            for h in row["headlines"]:  # every number whole, in one cell
                assert interval_text(h["value"], h["low"], h["high"]) in cells, (h, printed)
            # the run's name wraps onto lines, never cut: its pieces in the first column spell it
            first = "".join(re.split(r"[│┃]", line)[1].strip() for line in printed.splitlines()
                            if line.startswith("│") and len(re.split(r"[│┃]", line)) > 2)
            assert row["run"] in first


def test_finmtm_options_are_lettered_once_in_the_sample_browser(demos):
    from finbench.report.html import option_label

    assert option_label("A", "Cash") == "A. Cash" and option_label("A", "A lot") == "A. A lot"
    assert option_label("B", "B. Cash") == "B. Cash" and option_label("C", "(C) Cash") == "(C) Cash"
    assert option_label("A", "B. Cash") == "A. B. Cash"  # another letter is the option's text
    root, _ = demos
    html = (root / "finmtm" / "report.html").read_text()
    rows = json.loads(re.search(r'<script[^>]*id="samples-data"[^>]*>(.*?)</script>', html, re.S).group(1))
    lettered = [r["options"] for r in rows if r["options"]]
    assert lettered, "the FinMTM demo has choice items"
    for options in lettered:
        for letter, option in zip("ABCDEFGHIJ", options):
            assert option.startswith(f"{letter}. ") and not re.match(rf"{letter}\. {letter}[.)]", option), option
    assert 'letters[k] + ". "' not in html  # the page adds no second letter
    html = (root / "mme-finance" / "report.html").read_text()  # options stored without letters get theirs
    rows = json.loads(re.search(r'<script[^>]*id="samples-data"[^>]*>(.*?)</script>', html, re.S).group(1))
    assert ["A. 是", "B. 否"] in [r["options"] for r in rows]


def test_demo_help_names_every_registered_benchmark(monkeypatch):
    from finbench.benchmarks import BENCHMARKS

    base = BENCHMARKS["finmme"]
    extra = dataclasses.replace(base, name="labels-toy", demo=dataclasses.replace(base.demo, sizes="toy items (3)"))
    monkeypatch.setitem(BENCHMARKS, "labels-toy", extra)
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", _invoke("demo", "--help").output).split())
    for name, benchmark in BENCHMARKS.items():
        assert name in text and benchmark.demo.sizes in text, (name, text)
    assert "finmmr" in text and "labels-toy" in text and "toy items (3)" in text


def test_the_demo_says_once_that_its_model_is_random_and_mme_finance_shows_x100(demos):
    root, outputs = demos
    for name, output in outputs.items():
        assert output.count("RANDOM-WEIGHT") == 1, output
    scores = _results(root / "mme-finance")["scores"]
    row = next(line for line in outputs["mme-finance"].splitlines() if "binary_accuracy" in line)
    assert f"{100 * scores['binary_accuracy']:.2f}" in row, row
