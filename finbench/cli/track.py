"""`finbench track`: finished run folders recorded in the experiment tracker a team already uses."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from finbench.app.track import EXPERIMENT, TARGETS, track as record
from finbench.cli.common import one_line_errors, out_console

TO_HELP = f"The tracker: {', '.join(TARGETS)} (the optional `track` extra)."
URI_HELP = ("Its store: sqlite:///PATH/mlflow.db (its artifacts go beside it, into mlartifacts/), another database, "
            "or a tracking server's http(s)://HOST:PORT; never a ./mlruns folder.")


def track(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders, sweep folders (one parent run, a child per "
                                          "variant) or a several-benchmark run's folder (each benchmark's run)."),
    to: str = typer.Option(..., "--to", help=TO_HELP),
    uri: str = typer.Option(..., "--uri", help=URI_HELP),
    experiment: str = typer.Option(EXPERIMENT, help="The experiment the runs are recorded in (made if new)."),
) -> None:
    """Record finished run folders in an experiment tracker: their options as params, results.json's
    numbers as metrics, results.json, report.html and samples.parquet as artifacts. A folder tracked
    again updates its one tracked run; every folder is checked before anything is written."""
    with one_line_errors():
        lines = record(run_dirs, to, uri, experiment)
    for line in lines:
        out_console.print(line, markup=False, highlight=False, soft_wrap=True)
