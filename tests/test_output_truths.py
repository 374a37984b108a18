"""What the reports say where a new user reads them (issue 55, items 2–6 and 12): readable group
names and a spread named only over groups large enough, with their intervals, and plot labels that
do not overlap; a sweep folder on the leaderboard compared against the sweep's own reference; a
board page with no missing value printed; a paired interval or an agreement statistic that says why
it says little; FCMR's image ablation said once, its label balance in answer sets, its two
baselines named; and at 80 columns every word printed whole (each one also a word at 200)."""

from __future__ import annotations

import html
import io
import json
import re

import numpy as np
import pytest
import torch
from helpers import gold_copy
from typer.testing import CliRunner

from finbench.app.api import make_config
from finbench.cli import app
from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark


@pytest.fixture(scope="module")
def sweep(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """A sweep folder whose reference (`quant-none`) sorts after its other variant (`quant-int4wo`,
    here the same answers set to the gold), with the sweep.json the sweep writes."""
    from finbench.app.sweep import SWEEP_FILE, summarize

    root = tmp_path_factory.mktemp("sweep")
    run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=24, dtype="float32",
                                 device="cpu", bootstrap=100, out=str(root / "quant-none")), tiny_model,
                  show_progress=False)
    gold_copy(root / "quant-none", root / "quant-int4wo", n_bootstrap=100)
    names = ["quant-none", "quant-int4wo"]
    (root / SWEEP_FILE).write_text(json.dumps(summarize([root / n for n in names], names, n_bootstrap=100)))
    return root


@pytest.fixture(scope="module")
def fcmr_run(tiny_model, tiny_qwen_dir, tmp_path_factory):
    """An FCMR run of the synthetic set in the official layout, with the image ablation `none`."""
    from finbench.offline.fcmr_synthetic import write_folder

    root = tmp_path_factory.mktemp("fcmr")
    data = write_folder(root / "data", n_per_grade=4)
    run_benchmark(make_config(model=str(tiny_qwen_dir), benchmark="fcmr", data=str(data), dtype="float32",
                              device="cpu", bootstrap=100, image_ablation=["none"], out=str(root / "run")),
                  tiny_model, show_progress=False)
    return root / "run", json.loads((root / "run" / "results.json").read_text())


def _console(width: int):
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, force_terminal=False)


# ---- item 2: breakdowns ------------------------------------------------------------------------
def test_fcmr_groups_are_named_in_words_not_python_dicts(fcmr_run):
    _, results = fcmr_run
    groups = results["scores"]["breakdowns"]["option_type"]
    assert "Text: Only Text; Table: Arithmetic; Chart: Ranking" in groups, list(groups)
    assert not [label for label in groups if "{" in label or "'" in label], list(groups)


def _group(n: int, right: int) -> dict:
    from finbench.scoring.stats import wilson_interval

    low, high = wilson_interval(torch.tensor([float(right)]), torch.tensor([float(n)]), 0.95)
    return {"n": n, "accuracy": right / n, "ci": {"low": float(low[0]), "high": float(high[0])}}


def test_the_spread_is_named_only_over_groups_large_enough_with_their_intervals():
    from finbench.report.console import print_scores

    SPREAD_MIN_N = 10  # the stated rule: groups of 10 or more questions

    scores = {"benchmark": "finmme", "label": "x", "n": 52, "headline": [], "accuracy": 0.5,
              "breakdowns": {"tiny": {"a": _group(2, 0), "b": _group(2, 2)},  # 0 vs 100 on two items each
                             "large": {"c": _group(24, 9), "d": _group(24, 15)}}}
    console = _console(200)
    print_scores(scores, console=console, verbose=False)
    text = console.file.getvalue()
    assert re.findall(r"by (\S+) \(×100\)", text) == ["large"], text
    assert f"groups ≥ {SPREAD_MIN_N} questions" in text  # the rule, stated
    d, c = scores["breakdowns"]["large"]["d"]["ci"], scores["breakdowns"]["large"]["c"]["ci"]
    assert (f"largest spread: d 62.50 [{100 * d['low']:.2f}, {100 * d['high']:.2f}] vs c 37.50 "
            f"[{100 * c['low']:.2f}, {100 * c['high']:.2f}]") in text, text
    # no breakdown with two groups that large: the table is shown, no spread is claimed
    console = _console(200)
    print_scores({**scores, "breakdowns": {"tiny": scores["breakdowns"]["tiny"]}}, console=console, verbose=False)
    text = console.file.getvalue()
    assert "the largest spread" not in text and f"no two groups of ≥ {SPREAD_MIN_N} questions: no spread named" in text


def test_breakdown_plot_labels_do_not_overlap_with_long_group_names():
    from test_report import layout_problems

    from finbench.report.plots import breakdown_figure

    long = ["{'Text+Table+Chart_1': 'arithmetic_and_Ranking', 'Text+Table+Chart_2': 'conditional_threshold_and_Trend', "
            f"'Text+Table+Chart_3': 'conditional_threshold_and_Ranking_{i}'}}" for i in range(8)]
    assert layout_problems(breakdown_figure("option_type", {name: _group(3, 1) for name in long})) == []


# ---- item 3: a sweep's reference ---------------------------------------------------------------
def test_a_sweep_folder_on_the_leaderboard_is_compared_against_the_sweeps_reference(sweep):
    from finbench.app.leaderboard import build

    rows = {r["run"]: r for r in build([sweep])["rows"]}
    assert rows["quant-none"]["reference"] == "(reference)"
    assert rows["quant-int4wo"]["reference"] == "quant-none" and rows["quant-int4wo"]["delta"] > 0


# ---- item 4: the board page ------------------------------------------------------------------
def _page_text(path) -> str:
    text = re.sub(r"<script.*?</script>|<style.*?</style>|<img[^>]*>", "", path.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def test_the_board_page_prints_no_missing_value_and_a_whole_header(sweep, fcmr_run, tmp_path):
    from finbench.app.leaderboard import build, write

    board = build([sweep, fcmr_run[0]])
    text = _page_text(write(board, tmp_path / "board.html"))
    assert "None" not in text and "(p ," not in text and "; ." not in text, text
    assert board["mark"] in text  # the header says what Δ and its mark are
    compared = next(r for r in board["rows"] if r["run"] == "quant-int4wo")
    verdict = "significant *" if compared["significant"] else "n.s."
    assert f"{verdict} (McNemar–Holm p " in text and f"n {compared['n_shared']})" in text


# ---- item 5: intervals and agreement that say why they say little -------------------------------
def test_a_paired_interval_on_two_items_says_why_it_says_little():
    from finbench.scoring.clustered import paired_difference
    from finbench.studies.cells import interval

    paired = paired_difference(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0]), torch.tensor([0, 1]))
    text = interval(paired)
    assert text.startswith(", 95% CI +100.00 … +100.00 (")
    assert "only 2 clusters" in text and "every item moved by the same amount" in text
    many = paired_difference(torch.tensor([1.0, 0.0] * 20), torch.tensor([0.0, 0.0] * 20), torch.arange(40))
    assert "(" not in interval(many)  # enough clusters and a spread: no caveat


def test_an_agreement_without_a_value_says_why():
    from finbench.scoring.agreement import agreement, agreement_lines

    same = agreement(np.ones(4), np.ones(4), torch.arange(4), n_bootstrap=0)
    line = agreement_lines({"runs": ["a", "b"], "n_shared": 4, "n_judged_by_both": 4, "judges": same,
                            "rule_vs_judge": {}})[0]
    assert "kappa – (undefined: every verdict of both is the same" in line and "raw agreement 1.00" in line, line


# ---- item 6: FCMR's studies and balance ----------------------------------------------------------
def test_fcmr_image_ablation_says_accuracy_once_and_its_table_has_no_duplicate_columns(fcmr_run):
    from finbench.report.studies import study_lines, study_sections

    _, results = fcmr_run
    line = next(x for x in study_lines(results) if x.startswith("image ablation none"))
    assert line.count("accuracy") == 1, line
    section = next(s for s in study_sections(results) if s["id"] == "image-ablation")
    header, row = section["tables"][0]["header"], section["tables"][0]["rows"][0]
    assert row[2] == "accuracy" and not [h for h in header if "accuracy" in h], header


def test_fcmr_label_balance_names_the_answer_sets_and_both_baselines_say_what_they_are(fcmr_run):
    from finbench.benchmarks.fcmr import SETS
    from finbench.report.balance import balance_line
    from finbench.report.studies import baseline_line

    _, results = fcmr_run
    found = results["scores"]["label_balance"]
    assert found.get("label_texts") == {letter: text for letter, text in zip("ABCDEFGH", SETS)
                                    if letter in found["by_type"]["single"]["recall"]}
    line = balance_line(results)
    named = re.findall(r"\b([A-H]) = (none|[123](?:, [123])*)\b", line)
    assert len(named) == 2 and all(SETS["ABCDEFGH".index(a)] == b for a, b in named), line
    assert "one answer per kind" in line  # the constant answer: one per answer type
    assert baseline_line(results).startswith(f"best prior baseline per {results['majority_baseline']['column']}: ")


# ---- item 12: 80 columns -------------------------------------------------------------------------
BOX = "│┃━─┏┓┗┛┡┩╇┼┳┻├┤└┘┴┬┌┐╰╯╭╮═║╞╡╪"


def _words(text: str) -> set[str]:
    return set(re.findall(rf"[^\s{BOX}]+", text))


def _command(args: list[str], width: int) -> str:
    done = CliRunner().invoke(app, args, env={"COLUMNS": str(width)})
    assert done.exit_code == 0, done.output[-3000:]
    return done.output


def _sweep_report(folder, width: int, monkeypatch) -> str:
    from finbench.cli import evaluate

    console = _console(width)
    monkeypatch.setattr(evaluate, "out_console", console)
    evaluate.print_sweep(json.loads((folder / "sweep.json").read_text()), folder)
    return console.file.getvalue()


def test_every_word_printed_at_80_columns_is_a_word_at_200(sweep, fcmr_run, monkeypatch):
    commands = {"leaderboard": ["leaderboard", str(sweep), str(fcmr_run[0])], "models list": ["models", "list"],
                "score --variant paper": ["score", str(sweep / "quant-none"), "--variant", "paper", "--bootstrap", "50"]}
    outputs = {name: (_command(args, 80), _command(args, 200)) for name, args in commands.items()}
    outputs["sweep report"] = (_sweep_report(sweep, 80, monkeypatch), _sweep_report(sweep, 200, monkeypatch))
    for name, (narrow, wide) in outputs.items():
        cut = sorted(_words(narrow) - _words(wide))
        assert not cut, f"{name}: words cut at 80 columns: {cut}\n{narrow}"
