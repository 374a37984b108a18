"""`finbench run`, `finbench demo` and `finbench sweep`: the commands that evaluate a model."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from finbench.cli.common import (UNSAFE_SANDBOX_HELP, comma_list, console, fail, home, one_line_errors, out_console,
                                 run_and_report, stops_in_one_line)
# the registry's defaults (finbench.benchmarks hands them on), without importing the registry: every command
# starts without torch
from finbench.types import DEFAULT_BENCHMARK, DEFAULT_PROTOCOL

DEMO_NOTICE = ("[bold yellow]The demo model is a tiny RANDOM-WEIGHT Qwen2.5-VL built offline: its "
               "answers are chance level, so its score is chance level too.[/] It exercises the real "
               "path — data loading, preprocessing, constrained decoding, cache, scoring — end to end.")


DEMO_BENCHMARK_HELP = "A benchmark with a demo: synthetic data in that benchmark's own on-disk format."
DEMO_SIZES_HELP = "How much synthetic data (what it counts, and its default, per benchmark)."


class DemoCommand(typer.core.TyperCommand):
    """`demo --help` names every registered benchmark that has a demo and what --n-items counts for
    each (its `Demo.sizes`), read from the registry only when help is asked for, so that the
    command itself starts without importing it."""

    def format_help(self, ctx, formatter) -> None:
        from finbench.benchmarks import BENCHMARKS

        demos = {name: b.demo for name, b in BENCHMARKS.items() if b.demo is not None}
        names = list(demos)
        listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
        for param in self.params:
            if param.name == "benchmark":
                param.help = f"{listed}: synthetic data in that benchmark's own on-disk format."
            elif param.name == "n_items":
                param.help = "How much synthetic data: " + ", ".join(d.sizes for d in demos.values()) + "."
        super().format_help(ctx, formatter)


def run(
    model: str = typer.Option(..., help="Hub id or local folder of the model, or the URL of a server that serves "
                              "it (http(s)://HOST:PORT/v1: vLLM, SGLang, transformers serve; docs/scale.md)."),
    served_model: Optional[str] = typer.Option(None, help="Which model a served --model (or --judge) answers with "
                                               "(default: the only one its /v1/models lists)."),
    api_key_env: Optional[str] = typer.Option(None, help="Environment variable holding the served model's API key "
                                              "(sent as a bearer token; never on the command line, never written)."),
    in_flight: Optional[int] = typer.Option(None, help="Requests in flight to a served model (default: 64 for vLLM "
                                            "and SGLang, 4 for other servers)."),
    request_timeout: float = typer.Option(600.0, help="Seconds a served model's request may take (then retried)."),
    served_thinking: bool = typer.Option(False, help="Ask a served model to think (chat_template_kwargs "
                                         "enable_thinking; off by default, as finbench renders hybrid models)."),
    served_reading: str = typer.Option("auto", help="How a served model's choices are read: auto (logprobs on "
                                       "vLLM and SGLang, else the decision endpoint), logprobs or decision."),
    family: Optional[str] = typer.Option(None, help="Model family (`finbench models list`); auto: the generic one. "
                                         "Default: the family of the checkpoint's model_type, else auto."),
    benchmark: List[str] = typer.Option([DEFAULT_BENCHMARK], help="Benchmark name, or several: finmme,famma or "
                                        "repeated (one run folder each under --out, one loaded model, "
                                        "OUT/summary.json)."),
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
    protocol: str = typer.Option(DEFAULT_PROTOCOL, help="constrained (logit-based) or official (generate + extract)."),
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
    judge: Optional[str] = typer.Option(None, help="Local model (folder or hub id, or a server's URL) that judges the open answers of "
                                        "the benchmarks whose official evaluation asks a judge (`finbench benchmarks`): "
                                        "a vision-language model is shown the images the official judge sees; its "
                                        "verdicts are cached."),
    judge_max_new_tokens: Optional[int] = typer.Option(None, help="The judge's reply budget (default: each "
                                                       "benchmark's official one)."),
    judge_served_model: Optional[str] = typer.Option(None, help="Which model a served --judge answers with "
                                                     "(default: the only one its /v1/models lists)."),
    permutations: int = typer.Option(0, help="Circular evaluation: ask every constrained choice item again with its "
                                     "options rotated, K orders in all (capped at its option count; 0 = off); "
                                     "results.json['circular'], variants.parquet."),
    image_ablation: List[str] = typer.Option([], help="Image ablation: the same items again with every image blank, "
                                             "noise or none (removed); comma-separated or repeated; "
                                             "results.json['image_ablation']."),
    samples: int = typer.Option(1, help="Repeated sampling: every generated request K times, seeds seed…seed+K−1, "
                                "sampled as --gen-kwargs says (a temperature is needed); results.json['sampling']."),
    probe: List[str] = typer.Option([], help="Contamination probes of the constrained single-answer choice items: "
                              "none-of-the-above (the gold option's text replaced by \"None of the above\"), "
                              "open-ended (asked without options); comma-separated or repeated; "
                              "results.json['probes']."),
    revision: Optional[str] = typer.Option(None, help="Hub branch, tag or commit of --model (in the cache key)."),
    trust_remote_code: bool = typer.Option(False, help="Allow the checkpoint's own Python code to run (off: "
                                           "nothing remote runs)."),
    attn_implementation: Optional[str] = typer.Option(None, help="sdpa, eager or flash_attention_2 (default: "
                                                      "flash-attn on CUDA when installed, else sdpa)."),
    chat_template: Optional[str] = typer.Option(None, help="File with a Jinja chat template replacing the "
                                                "checkpoint's."),
    system_prompt: Optional[str] = typer.Option(None, help="A system message put before every question."),
    gen_kwargs: List[str] = typer.Option([], help="Free generation (official protocol, open answers): "
                                         "max_new_tokens=N,temperature=T,top_p=P,top_k=K (comma-separated or "
                                         "repeated); greedy by default."),
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
    unsafe_sandbox: bool = typer.Option(False, help=UNSAFE_SANDBOX_HELP),
) -> None:
    """Evaluate a model on one or more benchmarks; resumes from the cache if interrupted."""
    import shlex
    import sys

    from finbench.api import benchmark_names, data_sources, evaluate
    from finbench.report.output import configure_output
    from finbench.runner.gen_kwargs import parse_gen_kwargs

    configure_output(progress, verbose)
    if batch_size is not None and batch_size != "auto" and not batch_size.isdigit():
        fail(f"--batch-size {batch_size}: expected a positive integer or 'auto'")
    benchmark = comma_list(benchmark)
    try:
        sources = data_sources(data, benchmark_names(benchmark)) if data else None
        options = dict(family=family, served_model=served_model, api_key_env=api_key_env, in_flight=in_flight,
                       request_timeout=request_timeout, served_thinking=served_thinking, served_reading=served_reading,
                       judge_served_model=judge_served_model, limit=limit, domains=tuple(domain),
                       question_types=tuple(question_type),
                       batch_size=int(batch_size) if batch_size and batch_size.isdigit() else batch_size,
                       token_budget=token_budget, workers=workers,  # None: sized at start-up (runner/defaults.py)
                       protocol=protocol, dtype=dtype, device=device, quant=quant,
                       quant_vision=quant_vision, allow_dequantized=allow_dequantized,
                       max_new_tokens=max_new_tokens, numeric_budget=numeric_budget, max_pixels=max_pixels,
                       cache=cache, device_preprocess=device_preprocess, device_map=device_map,
                       compile_vision=compile_vision, compile_lm=compile_lm, profile=profile, fast_paths=fast_paths,
                       bootstrap=bootstrap, seed=seed,
                       think_budget=think_budget, judge=judge, judge_max_new_tokens=judge_max_new_tokens, revision=revision,
                       trust_remote_code=trust_remote_code, permutations=permutations,
                       image_ablation=comma_list(image_ablation), samples=samples, probes=comma_list(probe),
                       attn_implementation=attn_implementation, chat_template=chat_template,
                       system_prompt=system_prompt, gen_kwargs=parse_gen_kwargs(comma_list(gen_kwargs)), log_prompts=log_prompts,
                       unsafe_sandbox=unsafe_sandbox)
    except ValueError as err:
        fail(str(err))
    command = shlex.join(["finbench", *sys.argv[1:]])
    run_and_report(lambda: evaluate(model, benchmark, data=sources, out=out, overwrite=overwrite,
                                    show_progress=progress, console=console, command=command, **options),
                   verbose_tables)


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
    from finbench.api import evaluate
    from finbench.offline.demo import demo_data, demo_model, demo_options, demos
    from finbench.runner.lock import folder_lock
    from finbench.report.output import configure_output

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
    run_and_report(lambda: evaluate(str(model_dir), benchmark, data=str(data_path), batch_size=batch_size,
                                    dtype="float32", device="cpu", out=out, overwrite=overwrite,
                                    show_progress=progress, console=console, **options),
                   verbose_tables, notice=DEMO_NOTICE)  # once, above the last line: the score it qualifies


def sweep(
    model: Optional[str] = typer.Option(None, help="Hub id or local folder of the model (or use --models)."),
    models: List[str] = typer.Option([], help="Comma-separated (or repeated) models, e.g. instruct,thinking "
                                     "checkpoints."),
    quant: List[str] = typer.Option([], help="Comma-separated (or repeated) --quant values: none,8bit,4bit,int8wo,"
                                    "int4wo,fp8 (pre-quantized checkpoints go in --models)."),
    quant_vision: bool = typer.Option(False, help="--quant the vision tower too."),
    allow_dequantized: bool = typer.Option(False, help="Run FP8 checkpoints dequantized where FP8 matmuls cannot "
                                           "run (labelled +dequantized)."),
    dtype: List[str] = typer.Option([], help="Comma-separated (or repeated) dtypes, e.g. bfloat16,float16."),
    think_budget: List[str] = typer.Option([], help="Comma-separated (or repeated) reasoning budgets, e.g. 0,256,1024."),
    benchmark: str = typer.Option(DEFAULT_BENCHMARK, help="Benchmark name."),
    data: Optional[str] = typer.Option(None, help="Local data file/folder or hub id."),
    limit: Optional[int] = typer.Option(None, help="Evaluate only the first N questions."),
    batch_size: Optional[str] = typer.Option(None, help="Rows per batch, or 'auto' (start at 64, halve on "
                                             "out-of-memory). Default: sized to the device, as in `finbench run`."),
    device: str = typer.Option("auto", help="auto, cpu, cuda, cuda:N."),
    max_pixels: Optional[int] = typer.Option(None, help="Cap on pixels per image for the processor."),
    out: str = typer.Option("runs/sweep", help="Sweep folder: one run folder per variant, a shared cache, "
                            "sweep.json, report.html, report.md."),
    permutations: int = typer.Option(0, help="Circular evaluation in every variant (see `finbench run`)."),
    image_ablation: List[str] = typer.Option([], help="Image ablation in every variant: blank,noise,none (see "
                                             "`finbench run`)."),
    probe: List[str] = typer.Option([], help="Contamination probes in every variant: none-of-the-above,open-ended "
                                    "(see `finbench run`)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples (CIs and paired deltas)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    progress: bool = typer.Option(True, help="Show progress bars (--no-progress: none at all, model loading "
                                  "included)."),
    verbose: bool = typer.Option(False, help="Show every library warning and log line."),
) -> None:
    """Run one evaluation under several settings (quantization, dtype, thinking budget, models)
    and compare every variant against the first."""
    from finbench.report.output import configure_output
    from finbench.sweep import parse_axis, run_sweep
    from finbench.types import RunConfig

    configure_output(progress, verbose)
    if batch_size is not None and batch_size != "auto" and not batch_size.isdigit():
        fail(f"--batch-size {batch_size}: expected a positive integer or 'auto'")
    with stops_in_one_line(), one_line_errors():
        model_list = parse_axis(comma_list(models)) or ([model] if model else [])
        if not model_list:
            raise ValueError("give --model or --models")
        if model and models:
            raise ValueError("give either --model or --models, not both")
        axes = {"model": model_list, "quant": parse_axis(comma_list(quant)), "dtype": parse_axis(comma_list(dtype)),
                "think_budget": parse_axis(comma_list(think_budget), int)}
        base = RunConfig(model=model_list[0], benchmark=benchmark, data=data, limit=limit,
                         batch_size=int(batch_size) if batch_size and batch_size.isdigit() else batch_size,
                         device=device,
                         max_pixels=max_pixels, out=out, bootstrap=bootstrap, seed=seed,
                         quant_vision=quant_vision, allow_dequantized=allow_dequantized, permutations=permutations,
                         image_ablation=tuple(parse_axis(comma_list(image_ablation))),
                         probes=tuple(parse_axis(comma_list(probe))))
        summary = run_sweep(base, axes, out, show_progress=progress, console=console)
    from finbench.scoring.commands import print_comparison

    print_comparison({**summary["comparison"], "distributions": summary["distributions"],
                      "studies": {v["name"]: v.get("studies") or {} for v in summary["variants"]}}, console=out_console)
    out_console.print(f"wrote {Path(out) / 'sweep.json'}, {Path(out) / 'report.html'} and {Path(out) / 'report.md'}", markup=False)
    for failure in summary.get("failed", []):  # the finished variants are compared above; these are not
        console.print(f"[bold red]error:[/] variant {escape(failure['variant'])} did not run: {escape(failure['error'])}")
    if summary.get("failed"):
        raise typer.Exit(1)
