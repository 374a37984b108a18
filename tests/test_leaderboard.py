"""`finbench leaderboard`: three runs → one row each (the numbers of their results.json), a mark
against the reference that is the clustered interval's verdict (never McNemar's, which stays a
secondary check restated with scipy), a CSV, a
Markdown table and a sortable HTML page checked in headless Chromium (no JS error, nothing cut at
a plot's edge, a click on a header sorts the rows)."""

from __future__ import annotations

import csv
import json
import re
import shutil

import pandas as pd
import pytest
from helpers import gold_copy
from test_report import layout_problems, open_page, plot_borders
from typer.testing import CliRunner

from finbench.benchmarks import get_benchmark
from finbench.cli import app
from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark
from finbench.scoring.tables import score_samples


@pytest.fixture(scope="module")
def three_runs(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """constrained, official (other answers) and a copy whose answers were all set to the gold."""
    root = tmp_path_factory.mktemp("board")
    for name, protocol in (("constrained", "constrained"), ("official", "official")):
        run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=24, protocol=protocol,
                                max_new_tokens=4, dtype="float32", device="cpu", bootstrap=200,
                                out=str(root / name)), tiny_model, show_progress=False)
    gold_copy(root / "constrained", root / "gold-copy")
    return root, [root / "constrained", root / "official", root / "gold-copy"]


def restated_holm_mcnemar(folders) -> list[float]:
    """Exact McNemar (scipy binomtest on the discordant questions of the stored correctness) of
    each run against the first, Holm's step-down over them."""
    from scipy.stats import binomtest

    correct = [pd.read_parquet(f / "samples.parquet").set_index("id")["correct"] > 0.5 for f in folders]
    raw = []
    for other in correct[1:]:
        b, c = int((correct[0] & ~other).sum()), int((~correct[0] & other).sum())
        raw.append(1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue)
    order = sorted(range(len(raw)), key=lambda i: raw[i])
    adjusted, running = [0.0] * len(raw), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(raw) - rank) * raw[i]))
        adjusted[i] = running
    return adjusted


def test_one_row_per_run_with_its_numbers_and_paired_stars(three_runs):
    from finbench.app.leaderboard import build

    _, folders = three_runs
    board = build(folders)
    rows = {r["run"]: r for r in board["rows"]}
    assert list(rows) == ["constrained", "official", "gold-copy"]
    for folder in folders:
        results = json.loads((folder / "results.json").read_text())
        row, scores = rows[folder.name], results["scores"]
        assert row["score"] == pytest.approx(100 * scores["finscore"]) and row["metric"] == "FinScore"
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(100 * scores["ci"]["finscore"]["low"]),
                                                   pytest.approx(100 * scores["ci"]["finscore"]["high"]))
        assert row["accuracy"] == pytest.approx(100 * scores["accuracy"]) and row["n"] == 24
        assert row["protocol"] == results["protocol"] and row["quant"] == "none" and row["thinking"] == "off"
        assert row["errors"] == results["errors"]["count"]
        assert set(row["domains"]) == set(scores["breakdowns"]["domain"])
    holm = restated_holm_mcnemar(folders)
    assert rows["constrained"]["reference"] == "(reference)"
    for name, p in zip(("official", "gold-copy"), holm):
        assert rows[name]["mcnemar_p_holm"] == pytest.approx(p)  # the secondary check, not the mark
        ci = rows[name]["comparison"]["ci_diff"]
        excludes_0 = ci["low"] is not None and (ci["low"] > 0 or ci["high"] < 0)
        assert rows[name]["significant"] is excludes_0 and rows[name]["mark"] == ("*" if excludes_0 else "")
        assert rows[name]["comparison"]["verdict"].startswith("significant" if excludes_0 else "not significant")
    assert rows["gold-copy"]["mark"] == "*"  # every answer right against a chance-level run
    # Δ is what the mark judges: the mean per-question score's difference (FinMME: accuracy's), not FinScore's
    assert rows["gold-copy"]["delta"] == pytest.approx(rows["gold-copy"]["accuracy"] - rows["constrained"]["accuracy"])
    assert any("different protocols" in note for note in board["notes"])
    # another reference: the deltas are taken against it
    again = {r["run"]: r for r in build(folders, reference=folders[2])["rows"]}
    assert again["gold-copy"]["reference"] == "(reference)" and again["constrained"]["reference"] == "gold-copy"


def test_the_delta_cell_and_its_mark_judge_the_same_difference(three_runs):
    """Issue 41: the "Δ vs ref" cell showed FinScore's difference while its "*" judged the paired
    difference of the mean per-question score: two numbers in one cell. FinScore is a weighted
    score, not a per-question mean, so the cell now shows the difference its mark judges (`diff`,
    with its clustered interval), named by the headline metric it equals (FinMME: accuracy)."""
    from finbench.app.leaderboard import build
    from finbench.report.markdown import leaderboard_markdown

    _, folders = three_runs
    board = build(folders)
    rows = {r["run"]: r for r in board["rows"]}
    for name in ("official", "gold-copy"):
        row, compared = rows[name], rows[name]["comparison"]
        assert row["delta"] == pytest.approx(100 * compared["diff"])
        ci = compared["ci_diff"]
        assert ci["low"] is not None and ci["low"] <= compared["diff"] <= ci["high"]  # the mark's interval is the cell's
        assert row["significant"] is (ci["low"] > 0 or ci["high"] < 0)
        assert row["delta_metric"] == "accuracy"
    gold, base = rows["gold-copy"], rows["constrained"]
    assert gold["score"] - base["score"] != pytest.approx(gold["delta"], abs=1e-6)  # FinScore's Δ: another number
    cell = next(line for line in leaderboard_markdown(board).splitlines() if line.startswith("| gold-copy |"))
    assert cell.endswith(f"| {gold['delta']:+.2f} * (accuracy) |")


def test_the_command_writes_csv_markdown_and_a_sortable_page(three_runs, tmp_path):
    root, folders = three_runs
    out = [tmp_path / "board.csv", tmp_path / "board.md", tmp_path / "board.html"]
    done = CliRunner().invoke(app, ["leaderboard", *map(str, folders), *(a for p in out for a in ("--out", str(p)))],
                              env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert all(p.exists() for p in out) and "gold-copy" in done.output and "**" not in done.output
    assert "significant at α = 0.05 (two-sided) by its clustered" in " ".join(done.output.split())
    with open(out[0], newline="") as handle:
        lines = list(csv.DictReader(handle))
    assert [line["run"] for line in lines] == ["constrained", "official", "gold-copy"]
    finscore = json.loads((folders[2] / "results.json").read_text())["scores"]["finscore"]
    assert float(lines[2]["score"]) == pytest.approx(100 * finscore, abs=1e-3) and lines[2]["mark"] == "*"
    assert lines[2]["significant"] == "True" and "p_holm" not in lines[2]
    assert any(key.startswith("domain:") for key in lines[0])
    assert "| gold-copy |" in out[1].read_text() and "accuracy ×100 by domain" in out[1].read_text()
    assert "Secondary check, not the verdict (exact McNemar" in out[1].read_text()

    page = out[2]
    html = page.read_text()
    assert "http://" not in html and "https://" not in html
    dom, errors = open_page(page, tmp_path / "chromium", screenshot=tmp_path / "board.png")
    assert errors == [] and 'data-ready="1"' in dom and dom.count('class="run-row"') == 3
    borders = plot_borders(dom)
    assert borders == {"finmme headline": True}
    # a click on "score ×100" sorts the rows by score, highest first
    clicking = tmp_path / "clicked.html"
    clicking.write_text(html.replace("</body>", "<script>document.querySelectorAll('#leaderboard th')[7].click();"
                                                "</script></body>"))
    dom, errors = open_page(clicking, tmp_path / "chromium")
    assert errors == []
    table = re.search(r'<table id="leaderboard".*?</table>', dom, re.S).group(0)
    order = re.findall(r'<tr class="run-row"><td class="text"><a href="[^"]*">([^<]+)</a>', table)
    scores = {r: json.loads((root / r / "results.json").read_text())["scores"]["finscore"] for r in order}
    assert order == sorted(order, key=lambda r: -scores[r]) and 'data-sorted="7:desc"' in table


def test_the_mark_is_the_interval_verdict_where_mcnemar_disagrees(three_runs, tmp_path):
    """Twelve questions the variant alone gets right, all in one of three clusters: exact McNemar
    (12 discordant pairs, one way) says p < 0.001 — three stars before — while the clustered
    t(2) interval of the difference, restated here, includes 0. The board marks nothing, as the
    verdict under it says, and names McNemar only as a secondary check in report.md."""
    import io

    import numpy as np
    from rich.console import Console
    from scipy.stats import t

    from finbench.app.leaderboard import build, print_board
    from finbench.report.markdown import leaderboard_markdown

    _, folders = three_runs
    runs = [tmp_path / "reference", tmp_path / "variant"]
    for run, right in zip(runs, (0, 12)):
        shutil.copytree(folders[0], run)
        samples = pd.read_parquet(run / "samples.parquet")
        samples["cluster"] = ["a"] * 12 + ["b"] * 6 + ["c"] * 6
        samples["answer"] = [g if i < right else "" for i, g in enumerate(samples["gold"])]
        samples["correct"] = [1.0 if i < right else 0.0 for i in range(len(samples))]
        samples.to_parquet(run / "samples.parquet")
        results = json.loads((run / "results.json").read_text())
        results["scores"] = score_samples(samples, benchmark=get_benchmark("finmme"))
        (run / "results.json").write_text(json.dumps(results))
    assert restated_holm_mcnemar(runs)[0] < 0.001
    diff = np.array([1.0] * 12 + [0.0] * 12)
    sums = np.array([(diff[:12] - diff.mean()).sum(), (diff[12:18] - diff.mean()).sum(), (diff[18:] - diff.mean()).sum()])
    se = np.sqrt(3 / 2 * (sums ** 2).sum()) / 24  # cluster-robust, small-sample factor G/(G−1)
    assert diff.mean() - t.ppf(0.975, 2) * se < 0  # the restated t(2) interval includes 0

    board = build(runs)
    row = board["rows"][1]
    assert row["mcnemar_p_holm"] < 0.001 and row["comparison"]["se_diff"] == pytest.approx(se)
    assert row["comparison"]["ci_diff"]["low"] == pytest.approx(max(-1.0, diff.mean() - t.ppf(0.975, 2) * se))
    assert row["significant"] is False and row["mark"] == ""
    assert row["comparison"]["verdict"].startswith("not significant")
    shown = io.StringIO()
    print_board(board, Console(file=shown, width=200, color_system=None))
    line = next(line for line in shown.getvalue().splitlines() if line.startswith("│ variant"))
    assert "*" not in line and "variant vs reference: Δ score +50.00 points" in shown.getvalue()
    assert "not significant" in shown.getvalue()
    markdown = leaderboard_markdown(board)
    assert not next(line for line in markdown.splitlines() if line.startswith("| variant |")).endswith("* |")
    assert "Secondary check, not the verdict (exact McNemar" in markdown


def test_the_leaderboard_plot_fits_with_long_run_names(three_runs):
    from finbench.app.leaderboard import build
    from finbench.report.html import leaderboard_figure

    _, folders = three_runs
    rows = build(folders)["rows"]
    for row in rows:
        row["run"] = f"{row['run']}-Qwen2.5-VL-7B-Instruct-8bit-think_budget-1024"
    assert layout_problems(leaderboard_figure(rows)) == []


def test_bad_leaderboard_input_is_one_line(three_runs, tmp_path):
    _, folders = three_runs
    runner = CliRunner()
    cases = [([str(tmp_path)], "not a finbench run folder"),
             ([str(folders[0]), "--out", str(tmp_path / "board.txt")], "the suffix says the format"),
             ([str(folders[0]), str(folders[1]), "--reference", str(tmp_path)], "not one of the run folders"),
             ([str(folders[0]), str(folders[0])], "named twice")]
    for args, message in cases:
        done = runner.invoke(app, ["leaderboard", *args])
        assert done.exit_code == 2 and message in done.output, (args, done.output)
    # a folder of run folders (a multi-benchmark or sweep folder) stands for the runs inside
    from finbench.app.leaderboard import run_folders

    assert run_folders([folders[0].parent]) == sorted(folders)
