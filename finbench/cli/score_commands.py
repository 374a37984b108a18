"""What `finbench score` and `finbench compare` print: the scoring of finished run folders
(finbench/app/runs.py computes and writes; nothing here scores) drawn as rich tables
(report/console.py), plus the lines under them. Imported only after the CLI's own checks, so that a
refusal imports no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from rich.markup import escape

from finbench.app.runs import compare_run_dirs, load_samples, score_run, write_json
from finbench.benchmarks.metrics import OFFICIAL
from finbench.core.encodable import write_text
from finbench.report.console import as_console, print_comparison, print_scores
from finbench.scoring.agreement import agreement_lines, judge_agreement
from finbench.scoring.predictions import score_predictions


def score_command(run_dir: Path, variant: str = OFFICIAL.name, n_bootstrap: int = 1000, seed: int = 0,
                  console: Any = None) -> dict[str, Any]:
    """Score RUN_DIR/samples.parquet, write RUN_DIR/scores_<variant>.json, print the tables."""
    scores, path = score_run(Path(run_dir), variant, n_bootstrap, seed)
    print_scores(scores, console)
    as_console(console).print(f"wrote {path}")
    return scores


def compare_command(run_dirs: Sequence[Path], out: Path | None = None, n_bootstrap: int = 1000, seed: int = 0,
                    console: Any = None, allow_mixed_protocols: bool = False) -> dict[str, Any]:
    """Compare runs against the first (baseline); print tables, and write the JSON to `out` when
    given (nothing is written into a run folder unasked)."""
    result = compare_run_dirs(run_dirs, n_bootstrap, seed, allow_mixed_protocols)
    print_comparison({**result, "written_to": str(out) if out is not None else None}, console)
    names = result["runs"]
    for name, agreed in result["agreement"].items():
        largest = agreed["max_prob_diff"]
        as_console(console).print(
            f"{escape(name)} vs {escape(names[0])}: same answer on {agreed['agree']} of {agreed['n']} shared answered "
            f"items; largest option-probability difference {'–' if largest is None else f'{largest:.3g}'}"
            + (f" ({escape(agreed['max_prob_diff_id'])})" if largest is not None else ""))
    if out is not None:
        as_console(console).print(f"wrote {write_json(Path(out), result)}", markup=False, soft_wrap=True)
    return result


def predictions_command(benchmark: Any, data: str, predictions: Path, variant: str = OFFICIAL.name,
                        n_bootstrap: int = 0, seed: int = 0, console: Any = None, protocol: str | None = None,
                        samples_out: Path | None = None, unsafe_sandbox: bool = False) -> dict[str, Any]:
    """`finbench score --data --predictions`: the scores of answers from a file, with a note on
    `console` saying how many questions had none (scoring/predictions.py `score_predictions`)."""
    scores, note = score_predictions(benchmark, data, predictions, variant, n_bootstrap, seed, protocol=protocol,
                                     samples_out=samples_out, unsafe_sandbox=unsafe_sandbox)
    if note is not None and console is not None:
        console.print(f"[yellow]note:[/] {escape(note)}")
    return scores


def judge_agreement_command(run_dirs: Sequence[Path], out: Path | None = None, n_bootstrap: int = 1000, seed: int = 0,
                            console: Any = None) -> dict[str, Any]:
    """`finbench judge-agreement RUN_A RUN_B`: print the agreement, and write its JSON to `out`
    when given (nothing is written into a run folder unasked, as `compare`)."""
    run_dirs = [Path(d) for d in run_dirs]
    if len(run_dirs) != 2:
        raise ValueError("judge-agreement compares exactly two run folders")
    result = judge_agreement([load_samples(d) for d in run_dirs], [d.name or str(d) for d in run_dirs],
                             n_bootstrap, seed)
    con = as_console(console)
    for line in agreement_lines(result):
        con.print(line, markup=False, soft_wrap=True)
    if out is not None:
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")  # a reader never sees half a file
        write_text(partial, json.dumps(result, indent=2, ensure_ascii=False))
        partial.replace(target)
        con.print(f"wrote {target}", markup=False, soft_wrap=True)
    return result
