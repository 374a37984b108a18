"""`finbench score`, `compare`, `judge-agreement`, `report` and `leaderboard`: what finished run folders hold, scored,
compared and drawn again (CPU only, no model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from finbench.app.leaderboard import FORMATS, build, print_board, write
from finbench.benchmarks import check_protocol, get_benchmark
from finbench.cli.common import console, fail, one_line_errors, out_console
from finbench.config.run_options import OPTIONS
from finbench.core.types import DEFAULT_BENCHMARK
from finbench.report.html import write_report


def score(
    run_dir: Optional[Path] = typer.Argument(None, help="A run folder with samples.parquet."),
    variant: str = typer.Option("official", help="official (the benchmark's code) or paper (the paper's formula)."),
    bootstrap: int = typer.Option(0, help="Bootstrap resamples for confidence intervals (0 = none)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    benchmark: str = typer.Option(DEFAULT_BENCHMARK, help="Benchmark of --data/--predictions."),
    data: Optional[str] = typer.Option(None, help="Benchmark data, to score --predictions against."),
    predictions: Optional[Path] = typer.Option(None, help='JSONL of {"id": ..., "answer": "A,C"} per line.'),
    protocol: Optional[str] = typer.Option(None, help="The protocol that produced --predictions (default: "
                                                        "constrained), read as a run under it reads its outputs: a "
                                                        "choice item's letters; a reply in the benchmark's "
                                                        "documented form, read by its rule; or an answer a run "
                                                        "stored, as it is."),
    samples_out: Optional[Path] = typer.Option(None, help="With --predictions: write one JSON line per question "
                                                            "(id, answer, extracted, correct) to this file."),
    unsafe_sandbox: bool = typer.Option(False, help=OPTIONS["unsafe_sandbox"].help),
) -> None:
    """Score a finished run (tables + RUN_DIR/scores_<variant>.json), or raw answer strings
    against benchmark data (printed as JSON)."""
    if bootstrap < 0:
        fail(f"--bootstrap {bootstrap}: expected 0 (none) or a positive number of resamples")
    if run_dir is not None:
        if data is not None or predictions is not None:
            fail(f"{run_dir}: --data and --predictions score answers from a file against benchmark data; a run "
                 "folder is scored from its own samples.parquet — give one or the other")
        if not (run_dir / "samples.parquet").exists():
            fail(f"{run_dir}: no samples.parquet (is it a finbench run folder?)")
        from finbench.cli.score_commands import score_command  # after the checks: a refusal imports no torch

        with one_line_errors(str(run_dir)):
            score_command(run_dir, variant, bootstrap, seed, console=out_console)
        return
    if data is not None and predictions is not None:
        with one_line_errors():
            check_protocol(get_benchmark(benchmark), protocol)  # a typo refused before the scorer's imports
            from finbench.cli.score_commands import predictions_command

            scores = predictions_command(get_benchmark(benchmark), data, predictions, variant, bootstrap, seed,
                                         console=console, protocol=protocol, samples_out=samples_out,
                                         unsafe_sandbox=unsafe_sandbox)
    else:
        fail("give a RUN_DIR, or both --data and --predictions")
    print(json.dumps(scores, indent=2, default=str))


def compare(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders; the first is the baseline."),
    out: Optional[Path] = typer.Option(None, help="Write the comparison JSON here."),
    bootstrap: int = typer.Option(1000, help="Paired bootstrap resamples."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    allow_mixed_protocols: bool = typer.Option(False, help="Compare runs made with different protocols "
                                                               "(e.g. constrained vs official)."),
) -> None:
    """Paired comparison of runs on the same questions (McNemar, paired bootstrap, flips).
    Runs are compared on the questions they share; a note says how many each leaves out."""
    if len(run_dirs) < 2:
        fail("compare needs at least two run folders")
    _check_runs(run_dirs, bootstrap)
    from finbench.cli.score_commands import compare_command  # after the checks: a refusal imports no torch

    with one_line_errors():
        compare_command(run_dirs, out, bootstrap, seed, console=out_console,
                        allow_mixed_protocols=allow_mixed_protocols)


def judge_agreement(
    run_dirs: List[Path] = typer.Argument(..., help="Two run folders of the same answers, each judged (--judge)."),
    out: Optional[Path] = typer.Option(None, help="Write the agreement JSON here (nothing is written without it)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the CIs (0 = none)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """How far two judges agree on the questions both judged (Cohen's kappa for verdicts,
    Krippendorff's alpha for 0–5 scores, with bootstrap CIs), and each run's rules vs its judge."""
    if len(run_dirs) != 2:
        fail("judge-agreement compares exactly two run folders")
    _check_runs(run_dirs, bootstrap)
    from finbench.cli.score_commands import judge_agreement_command  # after the checks: a refusal imports no torch

    with one_line_errors():
        judge_agreement_command(run_dirs, out, bootstrap, seed, console=out_console)


def _check_runs(run_dirs: List[Path], bootstrap: int) -> None:
    """What compare and judge-agreement refuse before any import: a bad --bootstrap, a folder that is no run."""
    if bootstrap < 0:
        fail(f"--bootstrap {bootstrap}: expected 0 (none) or a positive number of resamples")
    for run_dir in run_dirs:
        if not (run_dir / "samples.parquet").exists():
            fail(f"{run_dir}: no samples.parquet")


def report(run_dir: Path = typer.Argument(..., help="A run folder.")) -> None:
    """(Re)build RUN_DIR/report.html and report.md from results.json and samples.parquet (or a
    sweep folder's from its sweep.json)."""
    if (run_dir / "sweep.json").exists():
        from finbench.app.sweep import write_sweep

        with one_line_errors(str(run_dir)):
            write_sweep(run_dir, json.loads((run_dir / "sweep.json").read_text()))
        out_console.print(f"wrote {run_dir / 'report.html'} and {run_dir / 'report.md'}", markup=False)
        return
    if not (run_dir / "results.json").exists() or not (run_dir / "samples.parquet").exists():
        fail(f"{run_dir}: needs results.json and samples.parquet (is it a finbench run folder?)")
    with one_line_errors(str(run_dir)):
        written = write_report(run_dir)
    out_console.print(f"wrote {written}", markup=False)


def leaderboard(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders (a multi-benchmark or sweep folder stands for the "
                                          "run folders inside it)."),
    out: List[Path] = typer.Option([], help="Write the leaderboard to FILE.csv, FILE.md or FILE.html "
                                   "(sortable, with the per-domain breakdown); repeatable."),
    reference: Optional[Path] = typer.Option(None, help="The run the paired tests compare against (default: the "
                                             "first run of each benchmark; of a sweep folder, the sweep's own reference)."),
) -> None:
    """One row per run: model, quant, thinking, protocol, benchmark, headline score with CI,
    accuracy, n, errors, samples/s, and the difference from a reference run, marked "*" where its
    clustered interval excludes 0."""
    for run_dir in run_dirs:  # before the board's imports (torch): a mistyped folder is refused at once
        if not run_dir.exists():
            fail(f"{run_dir}: not a finbench run folder (no results.json), nor a folder of run folders")

    for path in out:
        if path.suffix not in FORMATS:
            fail(f"--out {path}: the suffix says the format: {', '.join(FORMATS)}")
    with one_line_errors():
        board = build(run_dirs, reference)
        written = [write(board, path) for path in out]
    print_board(board, out_console)
    for path in written:
        out_console.print(f"wrote {path}", markup=False)
