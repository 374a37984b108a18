"""`finbench run`, `finbench demo` and `finbench sweep`: the commands that evaluate a model."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape

from finbench.app import api  # by module: a test stands in for api.evaluate
from finbench.benchmarks import BENCHMARKS
from finbench.app.track import EXPERIMENT, tracker
from finbench.cli.common import (comma_list, console, fail, home, one_line_errors, out_console, run_and_report,
                                 stops_in_one_line)
from finbench.config.options import Option, with_options
from finbench.config.run_options import OPTIONS, run_flags, sweep_flags
from finbench.core.types import DEFAULT_BENCHMARK  # the registry's default (finbench.benchmarks hands it on), without
from finbench.offline.demo import demo_data, demo_model, demo_options, demos
from finbench.report.console import print_comparison
from finbench.report.output import configure_output
from finbench.runner.lock import folder_lock
from finbench.studies import study_options  # the studies' flags (no torch: see finbench/studies)
# importing the registry: every command starts without torch

DEMO_NOTICE = ("[bold yellow]The demo model is a tiny RANDOM-WEIGHT Qwen2.5-VL built offline: its "
               "answers are chance level, so its score is chance level too.[/] It exercises the real "
               "path — data loading, preprocessing, constrained decoding, cache, scoring — end to end.")


DEMO_BENCHMARK_HELP = "A benchmark with a demo: synthetic data in that benchmark's own on-disk format."
DEMO_SIZES_HELP = "How much synthetic data (what it counts, and its default, per benchmark)."


class DemoCommand(typer.core.TyperCommand):
    """`demo --help` names every registered benchmark that has a demo and what --n-items counts for
    each (its `Demo.sizes`), read from the registry when help is asked for."""

    def format_help(self, ctx, formatter) -> None:
        demos = {name: b.demo for name, b in BENCHMARKS.items() if b.demo is not None}
        names = list(demos)
        listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
        for param in self.params:
            if param.name == "benchmark":
                param.help = f"{listed}: synthetic data in that benchmark's own on-disk format."
            elif param.name == "n_items":
                param.help = "How much synthetic data: " + ", ".join(d.sizes for d in demos.values()) + "."
        super().format_help(ctx, formatter)


class ProtocolsCommand(typer.core.TyperCommand):
    """`run --help` names every protocol a registered benchmark accepts, each
    with the benchmarks that take it where not all do, read from the registry when help is asked for."""

    def format_help(self, ctx, formatter) -> None:
        for param in self.params:
            if param.name == "protocol":
                param.help = protocols_help()
        super().format_help(ctx, formatter)


def protocols_help() -> str:
    """'constrained (every benchmark; the default), official (a, b), cot (c)': the registry's protocols."""
    names = list(dict.fromkeys(p for b in BENCHMARKS.values() for p in b.protocol_names))
    listed = []
    for name in names:
        takers = [n for n, b in BENCHMARKS.items() if name in b.protocol_names]
        default = "; the default" if name == OPTIONS["protocol"].default else ""
        listed.append(f"{name} ({'every benchmark' if len(takers) == len(BENCHMARKS) else ', '.join(takers)}{default})")
    return f"{', '.join(listed)}. `finbench benchmarks` says what each does."


PROGRESS_HELP = "Show progress bars (--no-progress: none at all, model loading included)."
VERBOSE_TABLES_HELP = ("Print every breakdown table, calibration and the selective curve (default: the headline and "
                       "the breakdown with the largest spread).")
OVERWRITE_HELP = ("Replace the results of another run (another model, benchmark, data or protocol) that --out holds "
                  "(default: refuse).")
CONFIG_HELP = ("A YAML or TOML file of this command's options: each key an option below (dashes or underscores); a "
               "flag given here overrides the file. A `runs:` list runs each entry into its own folder, the file's other "
               "keys shared (docs/config.md).")
PRINT_CONFIG_HELP = ("Print the resolved options as YAML (what the run folder's config.yaml holds) and stop: "
                     "nothing runs.")
TRACK_HELP = ("Record the finished run in an experiment tracker, as `finbench track` does: mlflow:URI, e.g. "
              "mlflow:sqlite:///runs/mlflow.db (the optional `track` extra).")
SWEEP_PRINT_CONFIG_HELP = ("Print the resolved options as YAML (what the sweep folder's config.yaml holds) and stop: "
                           "nothing runs.")
SWEEP_TRACK_HELP = ("Record the finished sweep in an experiment tracker, as `finbench track` does: one parent run, a "
                    "child per variant. mlflow:URI, e.g. mlflow:sqlite:///runs/mlflow.db (the optional `track` "
                    "extra).")


def run_takes() -> list[Option]:
    """`finbench run`'s declared options: every RunConfig option it takes (config/run_options.py), every study's."""
    return run_flags() + study_options()


def sweep_takes() -> list[Option]:
    """`finbench sweep`'s declared options: its options and axes, the studies every variant runs."""
    return sweep_flags() + study_options(sweep=True)


@with_options(run_takes)  # a --config file's keys are typed by the same declarations (cli/config_file.py)
def run(
    benchmark: List[str] = typer.Option([DEFAULT_BENCHMARK], help=OPTIONS["benchmark"].help),
    data: List[str] = typer.Option([], help=OPTIONS["data"].help),
    progress: bool = typer.Option(True, help=PROGRESS_HELP),
    verbose: bool = typer.Option(False, help="Show every library warning and log line (default: each warning "
                                 "once; all of them in run.log)."),
    verbose_tables: bool = typer.Option(False, "--verbose-tables", help=VERBOSE_TABLES_HELP),
    overwrite: bool = typer.Option(False, help=OVERWRITE_HELP),
    config: Optional[str] = typer.Option(None, help=CONFIG_HELP),
    print_config: bool = typer.Option(False, "--print-config", help=PRINT_CONFIG_HELP),
    track: Optional[str] = typer.Option(None, help=TRACK_HELP),
    *, options: dict[str, Any],
) -> Optional[dict[str, Any]]:
    """Evaluate a model on one or more benchmarks; resumes from the cache if interrupted."""
    import sys

    configure_output(progress, verbose)
    benchmark, model = comma_list(benchmark), options.pop("model")
    try:
        sources = api.data_sources(data, api.benchmark_names(benchmark)) if data else None
        target = tracker(track)  # before the run: a tracker that cannot take it is refused now
        if print_config:  # printed by the command (cli/config_file.py)
            return api.resolved_options(model, benchmark, data=sources, **options)
    except (ValueError, TypeError) as err:
        fail(str(err))
    command = shlex.join(["finbench", *sys.argv[1:]])
    result = run_and_report(lambda: api.evaluate(model, benchmark, data=sources, overwrite=overwrite,
                                                 show_progress=progress, console=console, command=command, **options),
                            verbose_tables)
    if target is not None and result is not None:
        track_folders(target, [one.out_dir for one in (result if isinstance(result, api.MultiRunResult) else [result])])
    return None


def demo(
    benchmark: str = typer.Option(DEFAULT_BENCHMARK, help=DEMO_BENCHMARK_HELP),  # the names: DemoCommand
    out: Optional[str] = typer.Option(None, help=f"Run folder (default runs/demo for {DEFAULT_BENCHMARK}, "
                                      "runs/demo-BENCHMARK otherwise; data a benchmark's demo does not keep in "
                                      "FINBENCH_HOME is written into OUT/data)."),
    n_items: Optional[int] = typer.Option(None, help=DEMO_SIZES_HELP),
    batch_size: Optional[int] = typer.Option(None, help="Rows per batch (default: sized to the device)."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    verbose: bool = typer.Option(False, help="Show every library warning and log line."),
    verbose_tables: bool = typer.Option(False, "--verbose-tables", help="Print every table."),
    overwrite: bool = typer.Option(False, help="Replace another run's results in --out."),
) -> None:
    """Build (once) a tiny random Qwen2.5-VL and synthetic data of a benchmark, then run the whole
    path offline: data loading, preprocessing, decoding, cache, judging, scoring, reports."""

    configure_output(progress, verbose)
    benchmark = benchmark.strip().lower()
    if n_items is not None and n_items < 1:
        fail(f"--n-items {n_items}: expected a positive number of synthetic items")
    if benchmark not in demos():  # the registry (no torch)
        fail(f"--benchmark {benchmark}: the demo knows {', '.join(demos())}")
    out = out or ("runs/demo" if benchmark == DEFAULT_BENCHMARK else f"runs/demo-{benchmark}")

    folder = home()
    # two demos sharing FINBENCH_HOME: the second waits while the first builds, then reuses what it built
    with one_line_errors(), folder_lock(folder, "FINBENCH_HOME", wait=True):
        model_dir, _ = demo_model(folder, lambda path: console.print(f"building tiny Qwen2.5-VL into {path}",
                                                                     markup=False))
        data_path, wrote = demo_data(benchmark, folder, Path(out), n_items, overwrite)
    if wrote:
        console.print(f"generated synthetic {benchmark} data into {data_path}", markup=False)
    options = demo_options(benchmark, model_dir)
    run_and_report(lambda: api.evaluate(str(model_dir), benchmark, data=str(data_path), batch_size=batch_size,
                                        dtype="float32", device="cpu", out=out, overwrite=overwrite,
                                        show_progress=progress, console=console, **options),
                   verbose_tables, notice=DEMO_NOTICE)  # once, above the last line: the score it qualifies


@with_options(sweep_takes)
def sweep(
    model: Optional[str] = typer.Option(None, help="Hub id or local folder of the model (or use --models)."),
    models: List[str] = typer.Option([], help="Comma-separated (or repeated) models, e.g. instruct,thinking "
                                     "checkpoints."),
    progress: bool = typer.Option(True, help=PROGRESS_HELP),
    verbose: bool = typer.Option(False, help="Show every library warning and log line."),
    config: Optional[str] = typer.Option(None, help=CONFIG_HELP),
    print_config: bool = typer.Option(False, "--print-config", help=SWEEP_PRINT_CONFIG_HELP),
    track: Optional[str] = typer.Option(None, help=SWEEP_TRACK_HELP),
    *, options: dict[str, Any],
) -> Optional[dict[str, Any]]:
    """Run one evaluation under several settings (quantization, dtype, thinking budget, models)
    and compare every variant against the first."""
    configure_output(progress, verbose)
    # a folder that exists is locked first, before the sweep's modules (numpy, pandas, torch) load:
    # a second sweep into it is refused at once; run_sweep takes the same lock again (this thread
    # holds it). A folder not there yet is no one's: run_sweep makes and locks it after the checks.
    # --print-config writes nothing, so it takes no lock.
    out = Path(options["out"])
    early_lock = folder_lock(out) if out.is_dir() and not print_config else contextlib.nullcontext()
    with stops_in_one_line(), one_line_errors(), early_lock:
        from finbench.app.sweep import parse_axis, run_sweep, sweep_document

        target = tracker(track)
        model_list = parse_axis(comma_list(models)) or ([model] if model else [])
        if not model_list:
            raise ValueError("give --model or --models")
        if model and models:
            raise ValueError("give either --model or --models, not both")
        axes = {"model": model_list, **{name: parse_axis(comma_list(options.pop(name)), OPTIONS[name].kind)
                                        for name in [o.name for o in sweep_flags() if o.axis]}}
        base = api.make_config(model_list[0], **options)
        if print_config:  # printed by the command (cli/config_file.py)
            return sweep_document(base, axes, check=True)
        summary = run_sweep(base, axes, options["out"], show_progress=progress, console=console)
    print_sweep(summary, Path(options["out"]))
    if target is not None:
        track_folders(target, [options["out"]])
    return None


def track_folders(target: tuple[str, str], folders: list[Any]) -> None:
    """`--track`: the finished run's folders into the tracker; a failure says how to retry (exit 1)."""
    from finbench.app.track import track

    to, uri = target
    try:
        lines = track(folders, to, uri, EXPERIMENT)
    except (ValueError, OSError) as err:
        retry = shlex.join(["finbench", "track", *map(str, folders), "--to", to, "--uri", uri])
        console.print(f"[bold red]error:[/] not tracked: {escape(str(err))} — the run is complete; retry with "
                      f"`{escape(retry)}`", emoji=False)
        raise typer.Exit(1) from None
    for line in lines:
        console.print(line, markup=False, highlight=False)


def print_sweep(summary: dict[str, Any], out: Path) -> None:
    """The sweep's comparison, where it wrote it, and each variant that did not run (exit 1)."""
    print_comparison({**summary["comparison"], "distributions": summary["distributions"],
                      "studies": {v["name"]: v.get("studies") or {} for v in summary["variants"]}}, console=out_console)
    out_console.print(f"wrote {out / 'sweep.json'}, {out / 'report.html'} and {out / 'report.md'}", markup=False)
    for failure in summary.get("failed", []):  # the finished variants are compared above; these are not
        console.print(f"[bold red]error:[/] variant {escape(failure['variant'])} did not run: {escape(failure['error'])}")
    if summary.get("failed"):
        raise typer.Exit(1)
