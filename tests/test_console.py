"""What a run prints: a compact summary (headline, the breakdown with the largest spread, the parts
scored apart or one line saying why not, errors, throughput, where the files went), every table
with --verbose-tables, and a last line repeating model · benchmark · protocol · headline [CI] · n
· errors — with the numbers of results.json, and error counts that agree."""

from __future__ import annotations

import io
import json
import re
import shutil

import pytest
from test_finmtm import write_fixtures
from typer.testing import CliRunner

from finbench.benchmarks import get_benchmark
from finbench.cli import app
from finbench.report.console import throughput_line

LAST_LINE = re.compile(r"^(?P<model>\S+) · (?P<benchmark>\w+) · (?P<protocol>\w+) · (?P<label>.+?) "
                       r"(?P<value>\d+\.\d\d)(?: \[(?P<low>\d+\.\d\d), (?P<high>\d+\.\d\d)\])? · n (?P<n>\d+) · "
                       r"(?P<errors>\d+) errors?$")


def _run(*args: str, width: int = 100):
    done = CliRunner().invoke(app, ["run", *args, "--no-progress"], env={"COLUMNS": str(width)})
    assert done.exit_code == 0, done.output[-3000:]
    return done.output


@pytest.fixture(scope="module")
def finmme_outputs(tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("console") / "run"
    args = ["--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit", "24", "--dtype", "float32",
            "--device", "cpu", "--bootstrap", "200", "--out", str(out)]
    compact = _run(*args)
    verbose = _run(*args, "--verbose-tables")  # the same run again: served from the cache
    return out, compact, verbose


def test_the_last_line_repeats_what_was_run_and_its_headline(finmme_outputs, tiny_qwen_dir):
    out, compact, verbose = finmme_outputs
    results = json.loads((out / "results.json").read_text())
    scores = results["scores"]
    for output in (compact, verbose):
        match = LAST_LINE.match(output.strip().splitlines()[-1])
        assert match, output.strip().splitlines()[-1]
        assert (match["model"], match["benchmark"], match["protocol"]) == (tiny_qwen_dir.name, "finmme", "constrained")
        assert match["label"] == "FinScore" and match["value"] == f"{100 * scores['finscore']:.2f}"
        assert (match["low"], match["high"]) == (f"{100 * scores['ci']['finscore']['low']:.2f}",
                                                 f"{100 * scores['ci']['finscore']['high']:.2f}")
        assert int(match["n"]) == scores["n"] == 24 and int(match["errors"]) == results["errors"]["count"]


def test_the_compact_summary_shows_the_widest_breakdown_and_verbose_every_table(finmme_outputs):
    out, compact, verbose = finmme_outputs
    breakdowns = json.loads((out / "results.json").read_text())["scores"]["breakdowns"]

    def spread(groups):  # max − min accuracy over groups of ten or more questions, restated
        values = [g["accuracy"] for g in groups.values() if g["n"] >= 10]
        return max(values) - min(values) if len(values) > 1 else -1.0

    widest = max(breakdowns, key=lambda column: spread(breakdowns[column]))
    shown = re.findall(r"by (\S+) \(×100\)", compact)
    assert shown == [widest]
    assert ("the largest spread" in compact) == (spread(breakdowns[widest]) > 0)
    assert set(re.findall(r"by (\S+) \(×100\)", verbose)) == set(breakdowns)
    assert "calibration (" in verbose and "calibration (" not in compact
    assert len(compact.splitlines()) < 0.7 * len(verbose.splitlines())
    assert "variant:" not in compact  # the scoring rule is never shown as if it were the protocol
    assert "protocol constrained, scored by the benchmark's official rule" in " ".join(compact.split())
    assert f"wrote {out / 'results.json'}" in compact  # where the files went
    assert "all from cache; computed earlier in this folder at" in verbose  # the rerun says whose rate it shows


def test_error_counts_agree_and_an_unscored_part_is_one_line(tiny_qwen_dir, tmp_path):
    """FinMTM's fixture: one objective item without its image (scored, as wrong), one unreadable
    line (an error outside every scored part), two sessions and no --judge."""
    data = write_fixtures(tmp_path / "finmtm")
    output = _run("--model", str(tiny_qwen_dir), "--benchmark", "finmtm", "--data", str(data), "--dtype", "float32",
                  "--device", "cpu", "--max-new-tokens", "3", "--bootstrap", "50", "--out", str(tmp_path / "run"))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    scores, errors = results["scores"], results["errors"]["count"]
    flat = " ".join(output.split())
    assert f"{scores['n']} scored questions, {scores['n_errors']} of them with an error (scored as wrong)" in flat
    assert f"errors: {errors} of {results['n_questions']} samples" in flat
    assert LAST_LINE.match(output.strip().splitlines()[-1])["errors"] == str(errors) == "2"
    unscored = [line for line in output.splitlines() if line.startswith("dialogue:")]
    assert unscored == ["dialogue: 2 dialogue sessions generated and stored, not scored: no judge verdicts "
                        "(run with --judge MODEL)"]
    assert "FinMTM agent items" in output and "tool F2 ×100" in output  # the agent part: replayed, scored


def test_counts_are_spelled_for_one_and_a_cached_rate_is_only_this_folders():
    results = {"n_questions": 1, "n_cached": 0, "n_computed": 1, "throughput": {"samples_per_s": 2.5}}
    assert throughput_line(results).startswith("1 question (0 from cache, 1 computed)")
    cached = {**results, "n_cached": 1, "n_computed": 0,
              "throughput": {"samples_per_s": 2.5, "all_from_cache": True, "computed_by": "2026-12-01T10:00:00+00:00"}}
    assert throughput_line(cached).endswith("computed earlier in this folder at 2.50 samples/s, run started "
                                            "2026-12-01T10:00:00+00:00")


def test_a_rerun_takes_the_rate_of_this_folders_own_run_only(finmme_outputs, tmp_path):
    """previous_throughput: the folder's last results must be of the same model, benchmark, data
    and protocol; answers that came from a shared cache were not computed at another run's rate."""
    from dataclasses import replace

    from finbench.runner.outputs import previous_throughput
    from finbench.app.api import make_config

    out, _, _ = finmme_outputs
    results = json.loads((out / "results.json").read_text())
    config = make_config(**{**results["config"], "domains": (), "question_types": (), "gen_kwargs": ()})
    kept = previous_throughput(out, results["fingerprint"], config)
    assert kept["samples_per_s"] == results["throughput"]["samples_per_s"] and kept["all_from_cache"]
    assert kept["computed_by"] == results["throughput"].get("computed_by") or results["provenance"]["started"]
    for changed in (replace(config, benchmark="famma"), replace(config, protocol="official"),
                    replace(config, data=str(tmp_path / "other.parquet"))):
        assert previous_throughput(out, results["fingerprint"], changed) is None
    other = dict(results["fingerprint"], weights="another digest")
    assert previous_throughput(out, other, config) is None


def test_comparison_rows_keep_whole_run_names_at_80_columns():
    from rich.console import Console

    from finbench.report.console import print_comparison

    runs = ["think_budget-0", "think_budget-256", "think_budget-1024"]
    result = {"label": "FinMME official FinScore", "n_shared": 72, "headline": ["finscore", "domain_accuracy", "p_h",
                                                                                  "accuracy"],
              "runs": runs, "baseline": runs[0], "primary": "finscore", "bootstrap": {"n_resamples": 1000},
              "scores": {r: {"finscore": 0.1, "domain_accuracy": 0.3, "p_h": 0.7, "accuracy": 0.3} for r in runs},
              "comparisons": [{"run": r, "delta": {m: {"value": -0.0139, "ci": {"low": -0.0417, "high": 0.0139}}
                                                   for m in ("finscore", "accuracy")},
                               "mcnemar": {"baseline_only": 3, "run_only": 2, "p": 0.5}, "p_holm": 1.0}
                              for r in runs[1:]],
              "distributions": {"reference": runs[0], "items": "single-choice items",
                                "runs": {r: {"n": 30, "kl_mean": 0.01, "agreement": 0.9, "gold_shift_mean": 0.01}
                                         for r in runs[1:]}}}
    console = Console(file=io.StringIO(), width=80)
    print_comparison(result, console)
    lines = console.file.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    for run in runs[1:]:  # each table names each variant whole, on one line (a tight table pads less)
        assert sum(1 for line in lines if re.search(rf"^│ ?{re.escape(run)}\s+│", line)) == 3, run


def test_a_demo_folder_copied_elsewhere_reports_the_same_last_line(finmme_outputs, tmp_path):
    """The last line is built from results.json alone (`finbench report` and a copied folder agree)."""
    from finbench.report.console import last_line

    out, compact, _ = finmme_outputs
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert last_line(json.loads((copy / "results.json").read_text())) == compact.strip().splitlines()[-1]


def test_a_breakdown_of_one_group_is_one_line_not_a_table():
    from rich.console import Console
    from test_scoring_other import famma_frame

    from finbench.scoring.tables import score_samples
    from finbench.report.console import print_scores

    frame = famma_frame(40, 3)
    frame["subfield"] = "equity"  # every question in one subfield
    scores = score_samples(frame, benchmark=get_benchmark("famma"), n_bootstrap=0)
    console = Console(file=io.StringIO(), width=100)
    print_scores(scores, console)
    text = console.file.getvalue()
    g = scores["breakdowns"]["subfield"]["equity"]
    assert "by subfield (×100)" not in text
    assert f"by subfield: one group, equity (n 40, accuracy {100 * g['accuracy']:.2f} [" in text
    assert "by language (×100)" in text  # the others keep their tables


def test_a_run_of_agent_items_only_prints_no_table_of_dashes():
    """`--domain agent`: no objective item, so no headline table of '—' with n = 0; the agent part
    with its n, F2 and CIs instead."""
    import pandas as pd
    from rich.console import Console
    from test_parts import agent_rows

    from finbench.scoring.tables import score_samples
    from finbench.report.console import print_scores

    scores = score_samples(pd.DataFrame(agent_rows(6, 1)), benchmark=get_benchmark("finmtm"), n_bootstrap=100)
    console = Console(file=io.StringIO(), width=100)
    print_scores(scores, console, verbose=False)
    text = console.file.getvalue()
    assert "—" not in text and "n = 0" not in text
    assert "no item of this run is scored by this rule" in text
    assert "tool F2 ×100" in text and f"{100 * scores['agent']['f2']:.2f}" in text and "6 of 6 scored" in text


def binary_frame(answers: str) -> "pd.DataFrame":
    """MME-Finance binary items (是/否 as options A/B), gold ABABABAB, answered `answers`."""
    import pandas as pd

    return pd.DataFrame([{"id": f"b{k}", "benchmark": "mme-finance", "kind": "single", "gold": "AB"[k % 2],
                          "answer": a, "options": ["是", "否"], "judge_score": float("nan"), "error": "",
                          "option_probs": [0.6, 0.4] if a == "A" else [0.4, 0.6],  # read by the letter decoder
                          "task_category": "Binary"} for k, a in enumerate(answers)])


def test_every_headline_metric_is_shown_x100_and_an_mme_finance_comparison_prints():
    """The caption says 'values × 100': MME-Finance's binary accuracy and F1 (0–1, like every
    headline metric) are printed ×100 too; and comparing two MME-Finance runs (no `accuracy`
    among its headline metrics) prints its deltas instead of failing on a missing key."""
    from rich.console import Console

    from finbench.report.console import print_comparison, print_scores
    from finbench.scoring.tables import compare_runs, score_samples

    first, second = binary_frame("AAAAAAAA"), binary_frame("ABABABAA")
    scores = score_samples(first, benchmark=get_benchmark("mme-finance"))
    assert scores["headline"] == ["binary_accuracy", "binary_f1"] and scores["binary_accuracy"] == 0.5
    console = Console(file=io.StringIO(), width=120)
    print_scores(scores, console)
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in console.file.getvalue().splitlines()
            if line.count("│") >= 3}
    assert {k: rows[k] for k in scores["headline"]} == {"binary_accuracy": "50.00", "binary_f1": f"{100 * scores['binary_f1']:.2f}"}

    result = compare_runs([first, second], ["all-yes", "better"], benchmark=get_benchmark("mme-finance"), n_bootstrap=50)
    console = Console(file=io.StringIO(), width=160)
    print_comparison(result, console)
    text = console.file.getvalue()
    delta = result["comparisons"][0]["delta"]["binary_accuracy"]["value"]
    assert delta == pytest.approx(7 / 8 - 1 / 2)
    assert "Δ binary_accuracy [CI]" in text and f"{100 * delta:.2f} [" in text and " 87.50 │" in text


def test_famma_without_a_judge_says_how_many_answers_finbenchs_own_rules_scored():
    """No --judge: the open answers are decided by finbench's rules, not FAMMA's LLM judge. The
    caption (and report.md) say so, with the counts of `correct_sources`; with a judge verdict on
    every open answer it is the benchmark's official rule alone."""
    import numpy as np
    from rich.console import Console
    from test_scoring_other import famma_frame

    from finbench.report.markdown import run_markdown
    from finbench.scoring.tables import score_samples
    from finbench.report.console import print_scores

    frame = famma_frame(40, 5)
    is_open = (frame["kind"] == "open").to_numpy()
    frame["judge_score"] = np.nan
    frame["rule_score"] = np.where(is_open, 1.0, np.nan)
    scores = score_samples(frame, benchmark=get_benchmark("famma"), n_bootstrap=0)
    sources = scores["correct_sources"]
    own = sources["rules"] + sources["rule_fallback"]
    assert own == int(is_open.sum()) > 0
    console = Console(file=io.StringIO(), width=400)
    print_scores(scores, console)
    expected = (f"scored by the benchmark's official rule for {40 - own} of 40 answers; the other {own} by "
                "finbench's own rules")
    assert expected in " ".join(console.file.getvalue().split())
    assert expected in " ".join(run_markdown({"scores": scores, "protocol": "constrained", "benchmark": "famma", "config": {"model": "m"},
                                                    "n_questions": 40, "errors": {"count": 0}}).split())

    frame["judge_score"] = np.where(is_open, 1.0, np.nan)
    judged = score_samples(frame, benchmark=get_benchmark("famma"), n_bootstrap=0)
    console = Console(file=io.StringIO(), width=400)
    print_scores(judged, console)
    text = " ".join(console.file.getvalue().split())
    assert "scored by the benchmark's official rule;" in text and "own rules" not in text


def test_mme_finance_small_sample_note_counts_the_binary_items_only():
    """The binary accuracy rests on the binary items, not on every scored question."""
    import pandas as pd
    from rich.console import Console

    from finbench.scoring.tables import score_samples
    from finbench.report.console import print_scores

    binary = binary_frame("ABAB")
    open_items = pd.DataFrame([{"id": f"o{k}", "benchmark": "mme-finance", "kind": "open", "gold": "x", "answer": "y",
                                "options": [], "judge_score": 3.0, "error": "", "task_category": "OCR"}
                               for k in range(20)])
    scores = score_samples(pd.concat([binary, open_items], ignore_index=True), benchmark=get_benchmark("mme-finance"),
                           n_bootstrap=200)
    assert scores["n_binary"] == 4 and scores["n"] == 24
    console = Console(file=io.StringIO(), width=400)
    print_scores(scores, console)
    notes = [line for line in console.file.getvalue().splitlines() if line.startswith("note: the CI of binary")]
    assert notes and all("rests on 4 binary items" in line for line in notes)


# ---- lines that fit: titles, footnotes and help at the terminal's width (issue 42) ------------------
def _printed(scores: dict, width: int, verbose: bool) -> list[str]:
    from rich.console import Console

    from finbench.report.console import print_scores

    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    print_scores(scores, console=console, verbose=verbose)
    return console.file.getvalue().splitlines()


def test_at_120_columns_titles_and_the_selective_footnote_are_not_cut_into_centred_fragments(finmme_outputs):
    out, _, _ = finmme_outputs
    scores = json.loads((out / "results.json").read_text())["scores"]
    compact = _printed(scores, 120, verbose=False)
    title = next(line for line in compact if line.lstrip().startswith("by "))
    assert title.startswith("by ") and title.rstrip().endswith("--verbose-tables or report.html"), compact
    verbose = _printed(scores, 120, verbose=True)
    assert any(line.startswith("selective prediction (answer only when confidence > τ; ×100)") for line in verbose)
    footnote = " ".join(scores["selective_items"].split())
    start = verbose.index(next(line for line in verbose if line.startswith(footnote[:30])))
    said = verbose[start:start + 2]
    assert " ".join(" ".join(said).split()).startswith(footnote[:110]), said  # whole phrases, up to 120 a line
    assert all(len(line) <= 120 for line in verbose)


def test_the_largest_spread_is_not_claimed_where_every_group_is_equal(finmme_outputs):
    out, _, _ = finmme_outputs
    scores = json.loads((out / "results.json").read_text())["scores"]
    for groups in scores["breakdowns"].values():
        for group in groups.values():
            group["accuracy"], group["n"] = 0.0, 12  # groups large enough to be compared, all equal
    text = "\n".join(_printed(scores, 120, verbose=False))
    assert "the largest spread" not in text and "no breakdown's groups of 10 or more questions differ" in text


@pytest.mark.parametrize("width", [80, 120])
def test_help_wraps_each_command_s_sentence_at_the_panel_not_at_the_docstring_s_line_ends(width):
    from finbench import cli

    done = CliRunner().invoke(app, ["--help"], env={"COLUMNS": str(width)})
    lines = done.output.splitlines()
    top = next(i for i, line in enumerate(lines) if "Commands" in line)
    panel = lines[top + 1:next(i for i in range(top + 1, len(lines)) if lines[i].startswith("╰"))]
    column = panel[0].index(panel[0].split()[2])  # where the descriptions start
    room = len(panel[0]) - 2 - column - 1  # inside the border, less its padding
    entries: list[list[str]] = []
    for line in panel:
        if line[2:column].strip():
            entries.append([])
        entries[-1].append(line[column:-1].rstrip())
    commands = {c.name: c for c in cli.app.registered_commands}
    assert len(entries) >= 10
    for entry in entries:
        for text, following in zip(entry, entry[1:]):  # greedy: the next word did not fit on this line
            assert len(text) + 1 + len(following.split()[0]) > room, entry
    demo = commands.get("demo") or next(c for c in cli.app.registered_commands if c.callback.__name__ == "demo")
    assert " ".join(demo.callback.__doc__.split("\n\n")[0].split()) in " ".join(" ".join(e) for e in entries)
