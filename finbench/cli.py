"""`finbench` command line: run, demo, score, compare, models, benchmarks.

Configuration errors (unknown model, missing path, impossible quantization) end the command at
start-up with one clear line and exit code 2; per-sample problems never stop a run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])
models_app = typer.Typer(no_args_is_help=True, help="Model utilities (tiny offline models).")
app.add_typer(models_app, name="models")
console = Console(stderr=True, soft_wrap=True)
out_console = Console()

DEMO_NOTICE = ("[bold yellow]The demo model is a tiny RANDOM-WEIGHT Qwen2.5-VL built offline: its "
               "answers are chance level, so its score is chance level too.[/] It exercises the real "
               "path — data loading, preprocessing, constrained decoding, cache, scoring — end to end.")


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


def _home() -> Path:
    return Path(os.environ.get("FINBENCH_HOME", Path.home() / ".cache" / "finbench"))


@app.command()
def run(
    model: str = typer.Option(..., help="Hub id or local folder of the model."),
    benchmark: str = typer.Option("finmme", help="Benchmark name."),
    data: Optional[str] = typer.Option(None, help="Local data file/folder or hub id (default: the benchmark's hub set)."),
    limit: Optional[int] = typer.Option(None, help="Evaluate only the first N questions (after filters)."),
    domain: List[str] = typer.Option([], help="Keep only this knowledge domain (repeatable)."),
    question_type: List[str] = typer.Option([], help="Keep only this question type, e.g. single_choice (repeatable)."),
    batch_size: str = typer.Option("8", help="Rows per batch, or 'auto' (start at 64, halve on out-of-memory)."),
    token_budget: int = typer.Option(16384, help="Max padded tokens (text + image) per batch."),
    workers: int = typer.Option(2, help="Preprocessing threads (image decode + processor), run ahead of the model."),
    protocol: str = typer.Option("constrained", help="constrained (logit-based) or official (generate + extract)."),
    dtype: str = typer.Option("auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16."),
    device: str = typer.Option("auto", help="auto, cpu, cuda, cuda:N."),
    quant: str = typer.Option("none", help="none, 8bit, 4bit (bitsandbytes)."),
    max_new_tokens: int = typer.Option(1280, help="Generation budget of the official protocol."),
    numeric_budget: int = typer.Option(12, help="Token budget of a constrained numerical answer."),
    max_pixels: Optional[int] = typer.Option(None, help="Cap on pixels per image for the processor."),
    device_preprocess: bool = typer.Option(False, help="Resize/normalise/patchify images on the model's device (Qwen)."),
    out: str = typer.Option("runs/latest", help="Run folder (results.json, samples.parquet, cache)."),
    cache: Optional[str] = typer.Option(None, help="SQLite cache path (default: OUT/cache.sqlite)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the confidence intervals (0 = none)."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Evaluate a model on a benchmark; resumes from the cache if interrupted."""
    from finbench.types import RunConfig

    if batch_size != "auto" and not batch_size.isdigit():
        _fail(f"--batch-size {batch_size}: expected a positive integer or 'auto'")
    config = RunConfig(model=model, benchmark=benchmark, data=data, protocol=protocol, limit=limit,
                       domains=tuple(domain), question_types=tuple(question_type),
                       batch_size=None if batch_size == "auto" else int(batch_size), token_budget=token_budget,
                       workers=workers,
                       dtype=dtype, device=device, quant=quant, max_new_tokens=max_new_tokens,
                       numeric_budget=numeric_budget, max_pixels=max_pixels, out=out, cache=cache,
                       device_preprocess=device_preprocess, bootstrap=bootstrap)
    _run_and_report(config, progress)


def _run_and_report(config, progress: bool) -> None:
    from finbench.runner.engine import run_benchmark
    from finbench.scoring.commands import print_scores

    try:
        result = run_benchmark(config, show_progress=progress, console=console)
    except (ValueError, FileNotFoundError) as err:
        _fail(str(err))
    print_scores(result.results["scores"], console=out_console)
    t = result.results["throughput"]
    rate = f"{t['samples_per_s']:.2f} samples/s" if t.get("samples_per_s") else "nothing computed (all cached)"
    out_console.print(f"{result.results['n_questions']} questions ({result.results['n_cached']} from cache, "
                      f"{result.results['n_computed']} computed) · {rate} · "
                      f"{result.results['errors']['count']} sample errors")
    out_console.print(f"wrote {result.out_dir / 'results.json'}, {result.out_dir / 'samples.parquet'} and "
                      f"{result.out_dir / 'report.html'}")


@app.command()
def demo(
    out: str = typer.Option("runs/demo", help="Run folder."),
    n_items: int = typer.Option(72, help="Synthetic FinMME items to generate."),
    batch_size: int = typer.Option(8, help="Rows per batch."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Build (once) a tiny random Qwen2.5-VL and a synthetic FinMME set, then run the whole path."""
    from finbench.benchmarks.finmme_synthetic import write_parquet
    from finbench.models.tiny import make_tiny
    from finbench.types import RunConfig

    home = _home()
    model_dir = home / "tiny-qwen2.5-vl"
    if not (model_dir / "config.json").exists():
        console.print(f"building tiny Qwen2.5-VL into {model_dir}")
        make_tiny("qwen2.5-vl", model_dir)
    data_path = home / f"finmme-synthetic-{n_items}.parquet"
    if not data_path.exists():
        console.print(f"generating {n_items} synthetic FinMME items into {data_path}")
        write_parquet(data_path, n_items=n_items)
    out_console.print(DEMO_NOTICE)
    config = RunConfig(model=str(model_dir), benchmark="finmme", data=str(data_path), batch_size=batch_size,
                       dtype="float32", device="cpu", out=out)
    _run_and_report(config, progress)
    out_console.print(DEMO_NOTICE)


@app.command()
def score(
    run_dir: Optional[Path] = typer.Argument(None, help="A run folder with samples.parquet."),
    variant: str = typer.Option("official", help="official (the benchmark's code) or paper (the paper's formula)."),
    bootstrap: int = typer.Option(0, help="Bootstrap resamples for confidence intervals (0 = none)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    benchmark: str = typer.Option("finmme", help="Benchmark of --data/--predictions."),
    data: Optional[str] = typer.Option(None, help="Benchmark data, to score --predictions against."),
    predictions: Optional[Path] = typer.Option(None, help='JSONL of {"id": ..., "answer": "A,C"} per line.'),
) -> None:
    """Score a finished run (tables + RUN_DIR/scores_<variant>.json), or raw answer strings
    against benchmark data (printed as JSON)."""
    from finbench.scoring.commands import score_command

    if run_dir is not None:
        if not (run_dir / "samples.parquet").exists():
            _fail(f"{run_dir}: no samples.parquet (is it a finbench run folder?)")
        score_command(run_dir, variant, bootstrap, seed, console=out_console)
        return
    if data is not None and predictions is not None:
        try:
            scores = score_predictions(benchmark, data, predictions, variant, bootstrap, seed)
        except (ValueError, FileNotFoundError) as err:
            _fail(str(err))
    else:
        _fail("give a RUN_DIR, or both --data and --predictions")
    print(json.dumps(scores, indent=2, default=str))


def score_predictions(benchmark_name: str, data: str, predictions: Path, variant: str,
                      n_bootstrap: int, seed: int) -> dict:
    """Score answer strings as an official extractor produced them against the benchmark's gold."""
    import math

    import pandas as pd

    from finbench.benchmarks import get_benchmark
    from finbench.scoring import score_samples

    benchmark = get_benchmark(benchmark_name)
    questions = benchmark.load_questions(data)
    answers = {}
    for n, line in enumerate(predictions.read_text().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                answers[str(record["id"])] = "" if record.get("answer") is None else str(record["answer"])
            except (json.JSONDecodeError, KeyError) as err:
                raise ValueError(f"{predictions}:{n}: expected {{\"id\": ..., \"answer\": ...}} ({err})") from None
    unknown = set(answers) - {q.id for q in questions}
    if unknown:
        raise ValueError(f"{len(unknown)} prediction ids are not in the data, e.g. {sorted(unknown)[:3]}")
    samples = pd.DataFrame([{
        "id": q.id, "benchmark": q.benchmark, "kind": q.kind, "gold": q.gold, "answer": answers.get(q.id, ""),
        "n_options": len(q.options), "tolerance": math.nan if q.tolerance is None else q.tolerance,
        "error": q.error or ("" if q.id in answers else "no prediction"), **dict(q.meta)} for q in questions])
    return score_samples(samples, benchmark=benchmark.SCORER, variant=variant, n_bootstrap=n_bootstrap, seed=seed)


@app.command()
def compare(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders; the first is the baseline."),
    out: Optional[Path] = typer.Option(None, help="Write the comparison JSON here."),
    bootstrap: int = typer.Option(1000, help="Paired bootstrap resamples."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """Paired comparison of runs on the same questions (McNemar, paired bootstrap, flips)."""
    from finbench.scoring.commands import compare_command

    if len(run_dirs) < 2:
        _fail("compare needs at least two run folders")
    for run_dir in run_dirs:
        if not (run_dir / "samples.parquet").exists():
            _fail(f"{run_dir}: no samples.parquet")
    try:
        compare_command(run_dirs, out, bootstrap, seed, console=out_console)
    except ValueError as err:
        _fail(str(err))


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run folder.")) -> None:
    """(Re)build RUN_DIR/report.html from results.json and samples.parquet."""
    from finbench.report.html import write_report

    if not (run_dir / "results.json").exists() or not (run_dir / "samples.parquet").exists():
        _fail(f"{run_dir}: needs results.json and samples.parquet (is it a finbench run folder?)")
    out_console.print(f"wrote {write_report(run_dir)}")


@models_app.command("make-tiny")
def make_tiny_command(
    family: str = typer.Argument(..., help="Architecture, e.g. qwen2.5-vl."),
    out_dir: Path = typer.Argument(..., help="Folder to write the model into."),
    seed: int = typer.Option(0, help="Weight seed."),
) -> None:
    """Build a tiny random-weight model of a real architecture, offline, loadable like a checkpoint."""
    from finbench.models.tiny import TINY_FAMILIES, make_tiny

    if family not in TINY_FAMILIES:
        _fail(f"unknown family {family!r}; available: {', '.join(TINY_FAMILIES)}")
    path = make_tiny(family, out_dir, seed=seed)
    out_console.print(f"wrote tiny {family} (random weights) to {path}")


@models_app.command("list")
def list_models() -> None:
    """Model families finbench can load."""
    from finbench.models import FAMILIES

    for family in FAMILIES:
        out_console.print(f"{family.family}: model_type {', '.join(family.model_types)}")


@app.command()
def benchmarks() -> None:
    """Benchmarks finbench can run."""
    from finbench.benchmarks import BENCHMARKS

    for name, module in BENCHMARKS.items():
        out_console.print(f"{name}: {module.__doc__.strip().splitlines()[0]} (hub: {module.HUB_ID})")


if __name__ == "__main__":
    app()
