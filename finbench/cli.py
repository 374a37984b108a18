"""`finbench` command line: run, demo, score, compare, sweep, report, leaderboard, data, models, benchmarks.

Configuration errors (unknown model, missing path, impossible quantization) end the command at
start-up with one clear line and exit code 2; per-sample problems never stop a run.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])
models_app = typer.Typer(no_args_is_help=True, help="Model utilities (tiny offline models).")
app.add_typer(models_app, name="models")
data_app = typer.Typer(no_args_is_help=True, help="Data utilities: check a local copy of a benchmark's data.")
app.add_typer(data_app, name="data")
console = Console(stderr=True, soft_wrap=True)
out_console = Console()

DEMO_NOTICE = ("[bold yellow]The demo model is a tiny RANDOM-WEIGHT Qwen2.5-VL built offline: its "
               "answers are chance level, so its score is chance level too.[/] It exercises the real "
               "path — data loading, preprocessing, constrained decoding, cache, scoring — end to end.")


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}")  # paths and values may hold [brackets]
    raise typer.Exit(2)


@contextlib.contextmanager
def _one_line_errors(where: str = "") -> Iterator[None]:
    """Bad input to a command (a damaged or missing file, an unwritable path, a value that does not
    apply) ends it with one line and exit code 2, not a traceback. ValueError covers JSON and Arrow
    decoding errors; OSError covers paths."""
    try:
        yield
    except (ValueError, OSError) as err:
        message = str(err).strip() or type(err).__name__
        _fail(f"{where}: {message}" if where else message)


def _home() -> Path:
    return Path(os.environ.get("FINBENCH_HOME", Path.home() / ".cache" / "finbench"))


@app.command()
def run(
    model: str = typer.Option(..., help="Hub id or local folder of the model."),
    benchmark: str = typer.Option("finmme", help="Benchmark name, or several: finmme,famma (one run folder each "
                                  "under --out, one loaded model, OUT/summary.json)."),
    data: List[str] = typer.Option([], help="Local data file/folder or hub id (default: the benchmark's hub set); "
                                   "with several benchmarks, BENCHMARK=SOURCE, repeatable."),
    limit: Optional[int] = typer.Option(None, help="Evaluate only the first N questions (after filters)."),
    domain: List[str] = typer.Option([], help="Keep only this knowledge domain (repeatable)."),
    question_type: List[str] = typer.Option([], help="Keep only this question type, e.g. single_choice (repeatable)."),
    batch_size: Optional[str] = typer.Option(None, help="Rows per batch, or 'auto' (start at 64, halve on "
                                             "out-of-memory). Default: 8 on the CPU, auto on CUDA."),
    token_budget: Optional[int] = typer.Option(None, help="Max padded tokens (text + image) per batch. Default: "
                                               "16384 on the CPU; on CUDA 768 per GiB of GPU memory (16384-98304)."),
    workers: Optional[int] = typer.Option(None, help="Preprocessing threads (image decode + processor), run ahead "
                                          "of the model. Default: 2 on the CPU; on CUDA one per two cores (2-8)."),
    protocol: str = typer.Option("constrained", help="constrained (logit-based) or official (generate + extract)."),
    dtype: str = typer.Option("auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16."),
    device: str = typer.Option("auto", help="auto, cpu, cuda, cuda:N."),
    quant: str = typer.Option("none", help="none, 8bit, 4bit (bitsandbytes), int8wo, int4wo (torchao weight-only), "
                              "fp8 (W8A8, CUDA capability >= 8.9). A checkpoint shipped quantized needs none."),
    quant_vision: bool = typer.Option(False, help="--quant the vision tower too (default: the language model only; "
                                      "the LM head always stays unquantized)."),
    allow_dequantized: bool = typer.Option(False, help="Run an FP8 checkpoint dequantized where FP8 matmuls cannot "
                                           "run (CPU, GPUs below capability 8.9); labelled +dequantized."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Free generation budget (official protocol, open answers, "
                                                  "sessions; default: each benchmark's official one)."),
    numeric_budget: int = typer.Option(12, help="Token budget of a constrained numerical answer."),
    max_pixels: Optional[int] = typer.Option(None, help="Cap on pixels per image for the processor."),
    device_preprocess: bool = typer.Option(False, help="Resize/normalise/patchify images on the model's device (Qwen)."),
    compile_vision: bool = typer.Option(False, help="torch.compile the vision tower's repeated blocks (fuses their "
                                        "fp32 norm and rotary work; compiled once, in the first batch)."),
    compile_lm: bool = typer.Option(False, help="torch.compile the language model's RMSNorm, MLP and rotary "
                                    "modules (attention and caches stay eager)."),
    fast_paths: bool = typer.Option(True, help="The exact CUDA fast paths (padded GEMM widths, mask-free prefill, "
                                    "static and graphed decode steps; none on the CPU). --no-fast-paths runs the "
                                    "reference paths (a check, or a workaround)."),
    profile: bool = typer.Option(False, help="Synchronise the GPU at every stage boundary so that results.json's "
                                 "stage and model-part seconds are exact (slower; off: no waits)."),
    device_map: Optional[str] = typer.Option(None, help="auto (or balanced, balanced_low_0, sequential): split a model too "
                                             "large for one GPU across the GPUs (accelerate); the batch loop is unchanged."),
    out: str = typer.Option("runs/latest", help="Run folder (results.json, samples.parquet, cache)."),
    cache: Optional[str] = typer.Option(None, help="SQLite cache path (default: OUT/cache.sqlite)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the confidence intervals (0 = none)."),
    seed: int = typer.Option(0, help="Seed of the bootstrap and of sampled generation."),
    think_budget: int = typer.Option(0, help="Thinking models: reasoning tokens before the constrained answer "
                                     "(0 = none; a thinking checkpoint then closes its block at once)."),
    judge: Optional[str] = typer.Option(None, help="Local model (folder or hub id) that judges open answers (FAMMA "
                                        "open questions, FinMTM sessions, MME-Finance): a vision-language model is "
                                        "shown the images the official judge sees; its verdicts are cached."),
    judge_max_new_tokens: Optional[int] = typer.Option(None, help="The judge's reply budget (default: each "
                                                       "benchmark's official one: FAMMA 64, FinMTM 4096, MME-Finance 3)."),
    permutations: int = typer.Option(0, help="Circular evaluation: ask every constrained choice item again with its "
                                     "options rotated, K orders in all (capped at its option count; 0 = off); "
                                     "results.json['circular'], variants.parquet."),
    image_ablation: str = typer.Option("", help="Image ablation: the same items again with every image blank, "
                                       "noise or none (removed); comma-separated; results.json['image_ablation']."),
    revision: Optional[str] = typer.Option(None, help="Hub branch, tag or commit of --model (in the cache key)."),
    trust_remote_code: bool = typer.Option(False, help="Allow the checkpoint's own Python code to run (off: "
                                           "nothing remote runs)."),
    attn_implementation: Optional[str] = typer.Option(None, help="sdpa, eager or flash_attention_2 (default: "
                                                      "flash-attn on CUDA when installed, else sdpa)."),
    chat_template: Optional[str] = typer.Option(None, help="File with a Jinja chat template replacing the "
                                                "checkpoint's."),
    system_prompt: Optional[str] = typer.Option(None, help="A system message put before every question."),
    gen_kwargs: str = typer.Option("", help="Free generation (official protocol, open answers): "
                                   "max_new_tokens=N,temperature=T,top_p=P,top_k=K; greedy by default."),
    log_prompts: bool = typer.Option(True, help="Keep each rendered prompt in samples.parquet "
                                     "(--no-log-prompts: only its SHA-256)."),
    progress: bool = typer.Option(True, help="Show progress bars (--no-progress: none at all, model loading "
                                  "included)."),
    verbose: bool = typer.Option(False, help="Show every library warning and log line (default: each warning "
                                 "once; all of them in run.log)."),
    verbose_tables: bool = typer.Option(False, "--verbose-tables", help="Print every breakdown table, calibration "
                                        "and the selective curve (default: the headline and the breakdown with "
                                        "the largest spread)."),
    overwrite: bool = typer.Option(False, help="Replace the results of another run (another model, benchmark, "
                                   "data or protocol) that --out holds (default: refuse)."),
) -> None:
    """Evaluate a model on one or more benchmarks; resumes from the cache if interrupted."""
    import shlex
    import sys

    from finbench.api import benchmark_names, data_sources, evaluate
    from finbench.runner.startup import parse_gen_kwargs

    _configure_output(progress, verbose)
    if batch_size is not None and batch_size != "auto" and not batch_size.isdigit():
        _fail(f"--batch-size {batch_size}: expected a positive integer or 'auto'")
    try:
        sources = data_sources(data, benchmark_names(benchmark)) if data else None
        options = dict(limit=limit, domains=tuple(domain), question_types=tuple(question_type),
                       batch_size=int(batch_size) if batch_size and batch_size.isdigit() else batch_size,
                       token_budget=token_budget, workers=workers,  # None: sized at start-up (runner/defaults.py)
                       protocol=protocol, dtype=dtype, device=device, quant=quant,
                       quant_vision=quant_vision, allow_dequantized=allow_dequantized,
                       max_new_tokens=max_new_tokens, numeric_budget=numeric_budget, max_pixels=max_pixels,
                       cache=cache, device_preprocess=device_preprocess, device_map=device_map,
                       compile_vision=compile_vision, compile_lm=compile_lm, profile=profile, fast_paths=fast_paths,
                       bootstrap=bootstrap, seed=seed,
                       think_budget=think_budget, judge=judge, judge_max_new_tokens=judge_max_new_tokens, revision=revision,
                       trust_remote_code=trust_remote_code, permutations=permutations, image_ablation=image_ablation,
                       attn_implementation=attn_implementation, chat_template=chat_template,
                       system_prompt=system_prompt, gen_kwargs=parse_gen_kwargs(gen_kwargs), log_prompts=log_prompts)
    except ValueError as err:
        _fail(str(err))
    command = shlex.join(["finbench", *sys.argv[1:]])
    _run_and_report(lambda: evaluate(model, benchmark, data=sources, out=out, overwrite=overwrite,
                                     show_progress=progress, console=console, command=command, **options),
                    verbose_tables)


def _configure_output(progress: bool, verbose: bool) -> None:
    """Quiet by default: library warnings go to run.log and are shown once each, the quantization
    libraries' (QUIET_LOGGERS, QUIET_WARNING_SOURCES) only in run.log; --no-progress turns off
    every progress bar (ours, transformers', huggingface_hub's, datasets')."""
    import logging
    import warnings

    if not progress:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        os.environ["TQDM_DISABLE"] = "1"
        try:
            import transformers

            transformers.utils.logging.disable_progress_bar()
        except ImportError:
            pass
        try:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        except ImportError:
            pass
    logging.captureWarnings(True)
    logging.raiseExceptions = False  # a log line that cannot be written (disk full) is no traceback on the console
    shown = logging.StreamHandler()
    shown.setFormatter(logging.Formatter("warning: %(message)s"))
    if not verbose:
        seen: set[str] = set()

        def once(record: logging.LogRecord) -> bool:
            text = record.getMessage().strip().splitlines()[-1] if record.getMessage().strip() else ""
            new = text not in seen
            seen.add(text)
            return new

        shown.addFilter(once)
        warnings.simplefilter("always")  # every occurrence reaches run.log; the console filter keeps one
        try:
            import transformers

            transformers.utils.logging.set_verbosity_error()
        except ImportError:
            pass
    logging.getLogger("py.warnings").addHandler(shown)
    if not verbose:
        from finbench.models.quant import keep_in_run_log, loguru_into_run_log

        shown.addFilter(_not_library_chatter)
        keep_in_run_log(QUIET_LOGGERS)  # their lines go to run.log (through finbench's log), not the console
        loguru_into_run_log()  # compressed-tensors logs through loguru


# Libraries that warn on every call (bitsandbytes: "MatMul8bitLt: inputs will be cast …" once per
# layer per batch, ~130 lines a run) or log through their own stderr handlers (torch's pytree
# deprecations when torchao loads, bitsandbytes' missing optional kernels). Kept in run.log only.
QUIET_WARNING_SOURCES = ("/bitsandbytes/", "/torchao/", "/compressed_tensors/")
QUIET_LOGGERS = ("bitsandbytes", "torchao", "torch.utils._pytree", "compressed_tensors")


def _not_library_chatter(record) -> bool:
    text = record.getMessage()
    return not any(source in text for source in QUIET_WARNING_SOURCES) and "MatMul8bitLt" not in text


@contextlib.contextmanager
def _stops_in_one_line() -> Iterator[None]:
    """A run that stops ends the command in one line: Ctrl-C or SIGTERM (handled as Ctrl-C: the
    batch in flight is dropped, every committed answer kept) says "N of M answers saved" and exits
    128 + the signal; a cache or outputs that stop taking writes (disk full, the run folder
    removed) say why and exit 1."""
    import signal

    from finbench.runner.engine import Interrupted, Stopped

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
    except (Interrupted, KeyboardInterrupt) as interrupted:  # the second: outside the batch loop
        message = str(interrupted) if isinstance(interrupted, Interrupted) else \
            "interrupted: the answers committed to the cache are kept; rerun the same command to resume"
        console.print(f"[bold yellow]{escape(message)}[/]")
        raise typer.Exit(128 + (received[0] if received else signal.SIGINT)) from None
    except Stopped as stopped:
        console.print(f"[bold red]error:[/] {escape(str(stopped))}")
        raise typer.Exit(1) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run_and_report(work, verbose_tables: bool = False, notice: str | None = None) -> None:
    """Run, then print each run's compact summary (report/console.py); the last line of all
    repeats model · benchmark · protocol · headline score [CI] · n · errors."""
    from finbench.api import MultiRunResult
    from finbench.report.console import last_line, print_run

    with _stops_in_one_line():
        try:
            result = work()
        except (ValueError, OSError, TypeError) as err:
            _fail(str(err))
    runs = list(result.runs.values()) if isinstance(result, MultiRunResult) else [result]
    if any(one.samples is None for one in runs):  # a data-parallel rank other than 0: rank 0 reports
        return
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


@app.command()
def demo(
    benchmark: str = typer.Option("finmme", help="finmme, famma, finmtm or mme-finance: synthetic data in that "
                                  "benchmark's own on-disk format."),
    out: Optional[str] = typer.Option(None, help="Run folder (default runs/demo for FinMME, runs/demo-BENCHMARK "
                                      "otherwise; FAMMA's and FinMTM's data are written into OUT/data)."),
    n_items: Optional[int] = typer.Option(None, help="How much synthetic data: FinMME items (72), FAMMA main "
                                          "questions of two sub-questions (12), FinMTM objective items per file (12), "
                                          "MME-Finance open questions per language (8)."),
    batch_size: Optional[int] = typer.Option(None, help="Rows per batch (default: sized to the device)."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    verbose: bool = typer.Option(False, help="Show every library warning and log line."),
    verbose_tables: bool = typer.Option(False, "--verbose-tables", help="Print every table."),
    overwrite: bool = typer.Option(False, help="Replace another run's results in --out."),
) -> None:
    """Build (once) a tiny random Qwen2.5-VL and synthetic data of a benchmark, then run the whole
    path offline: data loading, preprocessing, decoding, cache, judging, scoring, reports."""
    from finbench.api import evaluate
    from finbench.offline.demo import demo_data, demo_options, demos
    from finbench.offline.tiny import make_tiny

    _configure_output(progress, verbose)
    benchmark = benchmark.strip().lower()
    if benchmark not in demos():
        _fail(f"--benchmark {benchmark}: the demo knows {', '.join(demos())}")
    if n_items is not None and n_items < 1:
        _fail(f"--n-items {n_items}: expected a positive number of synthetic items")
    out = out or ("runs/demo" if benchmark == "finmme" else f"runs/demo-{benchmark}")

    home = _home()
    model_dir = home / "tiny-qwen2.5-vl"
    if not (model_dir / "config.json").exists():
        console.print(f"building tiny Qwen2.5-VL into {model_dir}", markup=False)
        make_tiny("qwen2.5-vl", model_dir)
    with _one_line_errors():
        data_path, wrote = demo_data(benchmark, home, Path(out), n_items, overwrite)
    if wrote:
        console.print(f"generated synthetic {benchmark} data into {data_path}", markup=False)
    out_console.print(DEMO_NOTICE)
    options = demo_options(benchmark, model_dir)
    _run_and_report(lambda: evaluate(str(model_dir), benchmark, data=str(data_path), batch_size=batch_size,
                                     dtype="float32", device="cpu", out=out, overwrite=overwrite,
                                     show_progress=progress, console=console, **options),
                    verbose_tables, notice=DEMO_NOTICE)


@app.command()
def score(
    run_dir: Optional[Path] = typer.Argument(None, help="A run folder with samples.parquet."),
    variant: str = typer.Option("official", help="official (the benchmark's code) or paper (the paper's formula)."),
    bootstrap: int = typer.Option(0, help="Bootstrap resamples for confidence intervals (0 = none)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    benchmark: str = typer.Option("finmme", help="Benchmark of --data/--predictions."),
    data: Optional[str] = typer.Option(None, help="Benchmark data, to score --predictions against."),
    predictions: Optional[Path] = typer.Option(None, help='JSONL of {"id": ..., "answer": "A,C"} per line.'),
    protocol: Optional[str] = typer.Option(None, help="The protocol that produced --predictions (FinMMR: cot, the "
                                                        "extracted answers; pot, the raw outputs with the program)."),
    samples_out: Optional[Path] = typer.Option(None, help="With --predictions: write one JSON line per question "
                                                            "(id, answer, extracted, correct) to this file."),
) -> None:
    """Score a finished run (tables + RUN_DIR/scores_<variant>.json), or raw answer strings
    against benchmark data (printed as JSON)."""
    from finbench.scoring.commands import score_command

    if bootstrap < 0:
        _fail(f"--bootstrap {bootstrap}: expected 0 (none) or a positive number of resamples")
    if run_dir is not None:
        if data is not None or predictions is not None:
            _fail(f"{run_dir}: --data and --predictions score answers from a file against benchmark data; a run "
                  "folder is scored from its own samples.parquet — give one or the other")
        if not (run_dir / "samples.parquet").exists():
            _fail(f"{run_dir}: no samples.parquet (is it a finbench run folder?)")
        with _one_line_errors(str(run_dir)):
            score_command(run_dir, variant, bootstrap, seed, console=out_console)
        return
    if data is not None and predictions is not None:
        with _one_line_errors():
            scores = score_predictions(benchmark, data, predictions, variant, bootstrap, seed, protocol, samples_out)
    else:
        _fail("give a RUN_DIR, or both --data and --predictions")
    print(json.dumps(scores, indent=2, default=str))


def score_predictions(benchmark_name: str, data: str, predictions: Path, variant: str,
                      n_bootstrap: int, seed: int, protocol: str | None = None, samples_out: Path | None = None) -> dict:
    """Score answer strings as an official extractor produced them against the benchmark's gold."""
    import math

    import pandas as pd

    from finbench.benchmarks import get_benchmark
    from finbench.scoring import score_samples
    from finbench.scoring.api import with_rule_verdicts, write_samples_out

    benchmark = get_benchmark(benchmark_name)
    questions = benchmark.load(data)
    answers, lines = {}, {}
    for n, line in enumerate(predictions.read_text().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise KeyError(f"a JSON {type(record).__name__}, not an object")
                qid = str(record["id"])
                answer = "" if record.get("answer") is None else str(record["answer"])
            except (json.JSONDecodeError, KeyError, RecursionError) as err:
                raise ValueError(f"{predictions}:{n}: expected {{\"id\": ..., \"answer\": ...}} ({err})") from None
            if qid in answers:  # which one would count? never the last one silently
                raise ValueError(f"{predictions}:{n}: id {qid!r} was already given on line {lines[qid]}; "
                                 "give one prediction per id")
            answers[qid], lines[qid] = answer, n
    unknown = set(answers) - {q.id for q in questions}
    if unknown:
        raise ValueError(f"{len(unknown)} prediction ids are not in the data, e.g. {sorted(unknown)[:3]}")
    samples = pd.DataFrame([{
        "id": q.id, "benchmark": q.benchmark, "kind": q.kind, "gold": q.gold, "answer": answers.get(q.id, ""),
        "n_options": len(q.options), "tolerance": math.nan if q.tolerance is None else q.tolerance,
        "error": q.error or ("" if q.id in answers else "no prediction"), **dict(q.meta)} for q in questions])
    if protocol is not None and protocol not in benchmark.protocol_names:
        raise ValueError(f"--protocol {protocol}: {benchmark.name} has {', '.join(benchmark.protocol_names)}")
    samples = with_rule_verdicts(samples, questions, benchmark.name, protocol or "")
    scores = score_samples(samples, benchmark=benchmark.name, variant=variant, n_bootstrap=n_bootstrap, seed=seed)
    if samples_out is not None:
        write_samples_out(samples_out, samples, benchmark.name, variant)
    unanswered = sum(q.id not in answers for q in questions)
    if unanswered:
        note = (f"{unanswered} of {len(questions)} questions have no prediction in {predictions.name}: they are "
                "scored as wrong (error 'no prediction')")
        scores["notes"] = list(scores.get("notes", [])) + [note]
        console.print(f"[yellow]note:[/] {escape(note)}")
    return scores


@app.command()
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
    from finbench.scoring.commands import compare_command

    if len(run_dirs) < 2:
        _fail("compare needs at least two run folders")
    if bootstrap < 0:
        _fail(f"--bootstrap {bootstrap}: expected 0 (none) or a positive number of resamples")
    for run_dir in run_dirs:
        if not (run_dir / "samples.parquet").exists():
            _fail(f"{run_dir}: no samples.parquet")
    with _one_line_errors():
        compare_command(run_dirs, out, bootstrap, seed, console=out_console,
                        allow_mixed_protocols=allow_mixed_protocols)


@app.command()
def sweep(
    model: Optional[str] = typer.Option(None, help="Hub id or local folder of the model (or use --models)."),
    models: Optional[str] = typer.Option(None, help="Comma-separated models (e.g. instruct,thinking checkpoints)."),
    quant: Optional[str] = typer.Option(None, help="Comma-separated --quant values: none,8bit,4bit,int8wo,int4wo,fp8 "
                                        "(pre-quantized checkpoints go in --models)."),
    quant_vision: bool = typer.Option(False, help="--quant the vision tower too."),
    allow_dequantized: bool = typer.Option(False, help="Run FP8 checkpoints dequantized where FP8 matmuls cannot "
                                           "run (labelled +dequantized)."),
    dtype: Optional[str] = typer.Option(None, help="Comma-separated dtypes, e.g. bfloat16,float16."),
    think_budget: Optional[str] = typer.Option(None, help="Comma-separated reasoning budgets, e.g. 0,256,1024."),
    benchmark: str = typer.Option("finmme", help="Benchmark name."),
    data: Optional[str] = typer.Option(None, help="Local data file/folder or hub id."),
    limit: Optional[int] = typer.Option(None, help="Evaluate only the first N questions."),
    batch_size: Optional[str] = typer.Option(None, help="Rows per batch, or 'auto' (start at 64, halve on "
                                             "out-of-memory). Default: sized to the device, as in `finbench run`."),
    device: str = typer.Option("auto", help="auto, cpu, cuda, cuda:N."),
    max_pixels: Optional[int] = typer.Option(None, help="Cap on pixels per image for the processor."),
    out: str = typer.Option("runs/sweep", help="Sweep folder: one run folder per variant, a shared cache, "
                            "sweep.json, report.html, report.md."),
    permutations: int = typer.Option(0, help="Circular evaluation in every variant (see `finbench run`)."),
    image_ablation: str = typer.Option("", help="Image ablation in every variant: blank,noise,none (see `finbench run`)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples (CIs and paired deltas)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    progress: bool = typer.Option(True, help="Show progress bars (--no-progress: none at all, model loading "
                                  "included)."),
    verbose: bool = typer.Option(False, help="Show every library warning and log line."),
) -> None:
    """Run one evaluation under several settings (quantization, dtype, thinking budget, models)
    and compare every variant against the first."""
    from finbench.sweep import parse_axis, run_sweep
    from finbench.types import RunConfig

    _configure_output(progress, verbose)
    if batch_size is not None and batch_size != "auto" and not batch_size.isdigit():
        _fail(f"--batch-size {batch_size}: expected a positive integer or 'auto'")
    with _stops_in_one_line(), _one_line_errors():
        model_list = parse_axis(models) or ([model] if model else [])
        if not model_list:
            raise ValueError("give --model or --models")
        if model and models:
            raise ValueError("give either --model or --models, not both")
        axes = {"model": model_list, "quant": parse_axis(quant), "dtype": parse_axis(dtype),
                "think_budget": parse_axis(think_budget, int)}
        base = RunConfig(model=model_list[0], benchmark=benchmark, data=data, limit=limit,
                         batch_size=int(batch_size) if batch_size and batch_size.isdigit() else batch_size,
                         device=device,
                         max_pixels=max_pixels, out=out, bootstrap=bootstrap, seed=seed,
                         quant_vision=quant_vision, allow_dequantized=allow_dequantized, permutations=permutations,
                         image_ablation=tuple(parse_axis(image_ablation)))
        summary = run_sweep(base, axes, out, show_progress=progress, console=console)
    from finbench.scoring.commands import print_comparison

    print_comparison({**summary["comparison"], "distributions": summary["distributions"],
                      "studies": {v["name"]: v.get("studies") or {} for v in summary["variants"]}}, console=out_console)
    out_console.print(f"wrote {Path(out) / 'sweep.json'}, {Path(out) / 'report.html'} and {Path(out) / 'report.md'}", markup=False)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run folder.")) -> None:
    """(Re)build RUN_DIR/report.html and report.md from results.json and samples.parquet (or a
    sweep folder's from its sweep.json)."""
    from finbench.report.html import write_report

    if (run_dir / "sweep.json").exists():
        from finbench.sweep import write_sweep

        with _one_line_errors(str(run_dir)):
            write_sweep(run_dir, json.loads((run_dir / "sweep.json").read_text()))
        out_console.print(f"wrote {run_dir / 'report.html'} and {run_dir / 'report.md'}", markup=False)
        return
    if not (run_dir / "results.json").exists() or not (run_dir / "samples.parquet").exists():
        _fail(f"{run_dir}: needs results.json and samples.parquet (is it a finbench run folder?)")
    with _one_line_errors(str(run_dir)):
        written = write_report(run_dir)
    out_console.print(f"wrote {written}", markup=False)


@app.command()
def leaderboard(
    run_dirs: List[Path] = typer.Argument(..., help="Run folders (a multi-benchmark or sweep folder stands for the "
                                          "run folders inside it)."),
    out: List[Path] = typer.Option([], help="Write the leaderboard to FILE.csv, FILE.md or FILE.html "
                                   "(sortable, with the per-domain breakdown); repeatable."),
    reference: Optional[Path] = typer.Option(None, help="The run the paired tests compare against (default: the "
                                             "first run of each benchmark)."),
) -> None:
    """One row per run: model, quant, thinking, protocol, benchmark, headline score with CI,
    accuracy, n, errors, samples/s, and paired-test stars against a reference run."""
    from finbench.leaderboard import FORMATS, build, print_board, write

    for path in out:
        if path.suffix not in FORMATS:
            _fail(f"--out {path}: the suffix says the format: {', '.join(FORMATS)}")
    with _one_line_errors():
        board = build(run_dirs, reference)
        written = [write(board, path) for path in out]
    print_board(board, out_console)
    for path in written:
        out_console.print(f"wrote {path}", markup=False)


@data_app.command("check")
def data_check(
    path: str = typer.Argument(..., help="A local copy of the data (file or folder), or a hub id in the local "
                               "Hugging Face cache."),
    benchmark: str = typer.Option("finmme", help="Benchmark whose format the data is in."),
) -> None:
    """Validate a benchmark's data without a model: every record's fields, every image, and the
    counts per split, task or domain and question type. Exit code 0: clean; 1: some records or
    images would be per-sample errors; 2: the data cannot be read at all."""
    from finbench.datacheck import check_data, print_check

    with _one_line_errors():
        report = check_data(benchmark, path)
    print_check(report, out_console)
    if not report["ok"]:
        raise typer.Exit(1)


class _MakeTinyCommand(typer.core.TyperCommand):
    """`make-tiny --help` lists the families; the list is read only when help is asked for, so that
    every other command starts without importing the model package (torch: seconds)."""

    def format_help(self, ctx, formatter) -> None:
        from finbench.offline.tiny import TINY_FAMILIES

        if "Families:" not in (self.help or ""):
            self.help = f"{self.help}\n\nFamilies: {', '.join(TINY_FAMILIES)}."
        super().format_help(ctx, formatter)


@models_app.command("make-tiny", cls=_MakeTinyCommand)
def make_tiny_command(
    family: str = typer.Argument(..., help="Architecture, one of the families listed above, e.g. qwen2.5-vl."),
    out_dir: Path = typer.Argument(..., help="Folder to write the model into."),
    seed: int = typer.Option(0, help="Weight seed."),
    thinking: bool = typer.Option(False, help="A thinking checkpoint: the chat template opens <think> (Qwen3-VL)."),
    force: bool = typer.Option(False, help="Write into a folder that already holds files."),
    quant: Optional[str] = typer.Option(None, help="Kernel-friendly widths (multiples of 128) in a quantization "
                                        "format's own layout: bf16 (for on-the-fly --quant), fp8-block128, bnb-8bit, "
                                        "bnb-4bit, torchao-int8wo, compressed-tensors-w8a16, awq-4bit, gptq-4bit."),
    like: Optional[Path] = typer.Option(None, help="A real checkpoint's folder (its weights are not needed): keep "
                                        "its tokenizer, chat template, processor settings, token ids and vocabulary "
                                        "size, shrink only widths and depths."),
) -> None:
    """Build a tiny random-weight model of a real architecture, offline, loadable like a checkpoint."""
    from finbench.offline.tiny import TINY_FAMILIES, make_tiny
    from finbench.offline.tiny_quant import TINY_QUANT_FORMATS

    if family not in TINY_FAMILIES:
        _fail(f"unknown family {family!r}; available: {', '.join(TINY_FAMILIES)}")
    if quant is not None and quant not in TINY_QUANT_FORMATS:
        _fail(f"--quant {quant}: tiny builds exist for {', '.join(TINY_QUANT_FORMATS)}")
    if quant is not None and (thinking or family == "deepseek-vl2"):
        _fail(f"--quant: tiny quantized builds are of the transformers families' instruct checkpoints"
              f"{'' if family != 'deepseek-vl2' else ' (deepseek-vl2 loads unquantized checkpoints only)'}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not force:
        _fail(f"{out_dir}: exists and is not an empty folder (pass --force to overwrite a model there)")
    if like is not None:
        from finbench.offline.like import make_tiny_like

        if thinking:
            _fail("--thinking: with --like the chat template is the checkpoint's own")
        if quant is not None:
            _fail(f"--quant {quant}: not with --like (a --like build keeps the checkpoint's files, in bf16)")
        with _one_line_errors():
            path = make_tiny_like(family, out_dir, like, seed=seed)
        out_console.print(f"wrote tiny {family} (random weights, the files of {like}) to {path}", markup=False)
        return
    with _one_line_errors():
        if quant is not None:
            from finbench.offline.tiny_quant import make_tiny_quantized

            path = make_tiny_quantized(family, out_dir, quant, seed=seed)
        else:
            path = make_tiny(family, out_dir, seed=seed, thinking=thinking)
    layout = f", {quant}" if quant else ""
    out_console.print(f"wrote tiny {family} (random weights{layout}) to {path}", markup=False)


@models_app.command("list")
def list_models() -> None:
    """Model families finbench can load, what each supports, and the released checkpoints
    (hub ids) of each architecture."""
    from rich.table import Table

    from finbench.models import FAMILIES

    table = Table("family", "model_type", "thinking", "quantization", "max images", "device preprocess",
                  "FLOP count")
    for column in table.columns:  # a narrow terminal folds a name onto two lines, never cuts it
        column.overflow = "fold"
    yes_no = {True: "yes", False: "no"}
    for family in FAMILIES:
        caps = family.capabilities
        table.add_row(family.family, ", ".join(family.model_types), yes_no[caps.thinking], ", ".join(caps.quantization),
                      "any" if caps.max_images is None else str(caps.max_images),
                      yes_no[caps.device_preprocessing], yes_no[caps.flop_count])
    out_console.print(table)
    out_console.print("released checkpoints (hub ids):", markup=False)
    for family in FAMILIES:  # one id per line: a hub id is never broken at the terminal's width
        for checkpoint in family.checkpoints:
            out_console.print(f"  {family.family}: {checkpoint}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def benchmarks() -> None:
    """Benchmarks finbench can run: data forms, protocols and metrics."""
    from finbench.benchmarks import BENCHMARKS, describe

    for benchmark in BENCHMARKS.values():
        info = describe(benchmark)
        out_console.print(f"[bold]{info['name']}[/]: {info['title']} (hub: {info['hub']})")
        for label in ("forms", "protocols", "metrics"):
            if info[label]:
                out_console.print(f"  {label}: {info[label]}", highlight=False)


if __name__ == "__main__":
    app()
