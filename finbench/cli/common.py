"""What every command shares: the Typer apps, the two consoles (stderr for messages, stdout for
results), and how a command ends — one line and exit code 2 for bad input, one line and 128 +
the signal for a stopped run, 1 when every sample failed.

An option given twice never loses a value silently (click keeps only the last): one that takes a
list is declared repeatable (`List[str]`, read as one comma list by `comma_list`: `--probe a
--probe b` is `--probe a,b`), and every other one given twice is refused in one line before any
work — by the apps' group (`OneValueGroup`), for every command and every option, those added
later included, none named here."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Sequence

import typer
from rich.console import Console
from rich.markup import escape

from finbench.app.api import MultiRunResult
from finbench.core.encodable import escape_streams
from finbench.report.console import last_line, print_run


HELP = ("`finbench` command line: run, demo, score, compare, sweep, report, leaderboard, track, data, models, "
        "benchmarks, judge-agreement.")

console = Console(stderr=True, soft_wrap=True)
out_console = Console()


def fail(message: str) -> None:
    # paths and values may hold [brackets] and :codes: ("--track wandb:x:" is no emoji)
    console.print(f"[bold red]error:[/] {escape(message)}", emoji=False)
    raise typer.Exit(2)


def repeated_option(command: typer.core.TyperCommand, name: str, args: Sequence[str],
                    parent: typer.Context) -> str | None:
    """The refusal of a single-valued option that `args` give more than once (the parser would keep
    the last silently), or None. The command's own parser reads `args`, so `--opt=value`, a flag's
    `--no-` form and values that look like options count as the command will see them; an error
    in `args` is left to the command's own parse to report."""
    context = type(parent)(command, info_name=name, parent=parent, resilient_parsing=True)
    _, _, order = command.make_parser(context).parse_args(list(args))
    counts = Counter(param for param in order if isinstance(param, typer.core.TyperOption) and param.expose_value
                     and not param.multiple and not param.count)
    for param, times in counts.items():
        if times > 1:
            flag = "/".join(param.opts + param.secondary_opts)
            return (f"{flag} is given {times} times: it takes one value, and all but the last would be dropped "
                    "— give it once")
    return None


class OneValueGroup(typer.core.TyperGroup):
    """The apps' group: before a command runs, a single-valued option given twice is refused in one
    line (`repeated_option`)."""

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, typer.core.TyperGroup):
            refusal = repeated_option(command, name or "", rest, ctx)
            if refusal:
                fail(refusal)
        return name, command, rest

    def invoke(self, ctx: typer.Context):
        escape_streams(sys.stdout, sys.stderr)  # a reply's lone surrogate printed escaped, never a crash
        return super().invoke(ctx)


def comma_list(values: Sequence[str]) -> str:
    """A list option as one comma-separated text, whether given once as a comma list or repeated
    (`--probe a --probe b` is `--probe a,b`)."""
    return ",".join(values)


app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP, cls=OneValueGroup)
models_app = typer.Typer(no_args_is_help=True, help="Model utilities (tiny offline models).", cls=OneValueGroup)
app.add_typer(models_app, name="models")
data_app = typer.Typer(no_args_is_help=True, help="Data utilities: check a local copy of a benchmark's data.",
                       cls=OneValueGroup)
app.add_typer(data_app, name="data")


@contextlib.contextmanager
def one_line_errors(where: str = "") -> Iterator[None]:
    """Bad input to a command (a damaged or missing file, an unwritable path, a value that does not
    apply) ends it with one line and exit code 2, not a traceback. ValueError covers JSON and Arrow
    decoding errors; OSError covers paths."""
    try:
        yield
    except (ValueError, OSError) as err:
        message = str(err).strip() or type(err).__name__
        fail(f"{where}: {message}" if where else message)


def home() -> Path:
    return Path(os.environ.get("FINBENCH_HOME", Path.home() / ".cache" / "finbench"))


@contextlib.contextmanager
def stops_in_one_line() -> Iterator[None]:
    """A run that stops ends the command in one line: Ctrl-C or SIGTERM (handled as Ctrl-C: the
    batch in flight is dropped, every committed answer kept) says "N of M answers saved" and exits
    128 + the signal; a cache or outputs that stop taking writes (disk full, the run folder
    removed) say why and exit 1."""
    import signal
    import sys

    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (an embedding caller): keep the process's own handling
        previous = None
    try:
        yield
    except Exception as err:
        # the runner's stops exist once it is imported (torch): a command refused before that has none
        engine = sys.modules.get("finbench.runner.engine")
        if engine is not None and isinstance(err, engine.Interrupted):
            console.print(f"[bold yellow]{escape(str(err))}[/]")
            raise typer.Exit(128 + (received[0] if received else signal.SIGINT)) from None
        if engine is not None and isinstance(err, engine.Stopped):
            console.print(f"[bold red]error:[/] {escape(str(err))}")
            raise typer.Exit(1) from None
        raise
    except KeyboardInterrupt:  # outside the batch loop
        message = "interrupted: the answers committed to the cache are kept; rerun the same command to resume"
        console.print(f"[bold yellow]{escape(message)}[/]")
        raise typer.Exit(128 + (received[0] if received else signal.SIGINT)) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_and_report(work, verbose_tables: bool = False, notice: str | None = None) -> Any:
    """Run, then print each run's compact summary (report/console.py); the last line of all
    repeats model · benchmark · protocol · headline score [CI] · n · errors. Returns what `work`
    returned (None on a data-parallel rank other than 0, which prints nothing)."""
    with stops_in_one_line():
        try:
            result = work()
        except (ValueError, OSError, TypeError) as err:
            fail(str(err))

    runs = list(result.runs.values()) if isinstance(result, MultiRunResult) else [result]
    if any(one.samples is None for one in runs):  # a data-parallel rank other than 0: rank 0 reports
        return None
    failed = []
    for one in runs:
        if len(runs) > 1:
            out_console.rule(f"[bold]{one.results['benchmark']}")
        print_run(one.results, one.out_dir, out_console, verbose_tables)
        for note in one.results.get("notes", []):
            console.print(f"[yellow]note:[/] {escape(note)}")
        if one.results["errors"]["count"] == one.results["n_questions"]:
            failed.append(one)
    if isinstance(result, MultiRunResult):
        out_console.print(f"wrote {result.out_dir / 'summary.json'}", markup=False)
    for one in failed:
        console.print(f"[bold red]error:[/] every one of the {one.results['n_questions']} samples failed; "
                      f"see {escape(str(one.out_dir / 'results.json'))} (errors.by_message)")
    if notice:
        out_console.print(notice)
    for one in runs:
        out_console.print(last_line(one.results), markup=False, highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)
    return result
