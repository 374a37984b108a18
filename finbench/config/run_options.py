"""Every option of a run, declared once (finbench/config/options.py `Option`): its flag and help
text for `finbench run` (and `finbench sweep` where `sweep`/`axis` says so), its API keyword and
coercion (`finbench.api.make_config`), its start-up check (runner/startup.py `validate_options`),
the RunConfig spec that holds it (finbench/config/specs.py), and whether it is part of the run's
identity (`RUN_IDENTITY`). Torch-free: the commands build their parameters from this table before
anything heavy loads. Each study declares its own option in its file (finbench/studies/)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from finbench.benchmarks import get_benchmark
import finbench.config.option_checks as checks
from finbench.config.options import Option
from finbench.config.specs import RunConfig
from finbench.core.sources import SERVED_READINGS
from finbench.core.types import DEFAULT_BENCHMARK, DEFAULT_PROTOCOL

UNSAFE_SANDBOX_HELP = ("Where this machine gives neither the kernel jail nor Landlock for model-written programs "
                       "(FinMMR pot), run them anyway in plain limited processes (named in the results; default: "
                       "refuse at start-up).")
SERVED_HELP = "(default: the only one its /v1/models lists)."
LOAD, DECODE, BATCHING, OUTPUT, JUDGING = "load", "decode", "batching", "output", "judging"

RUN_OPTIONS: list[Option] = [
    Option("model", ..., "Hub id or local folder of the model, or the URL of a server that serves it (http(s)://"
           "HOST:PORT/v1: vLLM, SGLang, transformers serve; docs/scale.md).", identity=True,
           axis=True),  # sweep's axis is its own --model and --models
    Option("served_model", None, "Which model a served --model (or --judge) answers with " + SERVED_HELP, spec=LOAD),
    Option("api_key_env", None, "Environment variable holding the served model's API key (sent as a bearer token; "
           "never on the command line, never written).", spec=LOAD),
    Option("in_flight", None, "Requests in flight to a served model (default: 64 for vLLM and SGLang, 4 for other "
           "servers).", int, spec=LOAD, check=checks.at_least("--in-flight", 1)),
    Option("request_timeout", 600.0, "Seconds a served model's request may take (then retried).", float, spec=LOAD,
           check=checks.request_timeout),
    Option("served_thinking", False, "Ask a served model to think (chat_template_kwargs enable_thinking; off by "
           "default, as finbench renders hybrid models).", bool, spec=LOAD),
    Option("served_reading", "auto", "How a served model's choices are read: auto (the first reading a start-up probe "
           "finds working: token logprobs on vLLM, top logprobs on SGLang, else the decision endpoint), logprobs or "
           "decision (docs/scale.md).", spec=LOAD,
           check=checks.one_of("--served-reading", SERVED_READINGS, ", ".join(SERVED_READINGS))),
    Option("family", None, "Model family (`finbench models list`); auto: the generic one. Default: the family of the "
           "checkpoint's model_type, else auto.", spec=LOAD),
    Option("benchmark", DEFAULT_BENCHMARK, "Benchmark name, or several: finmme,famma or repeated (one run folder "
           "each under --out, one loaded model, OUT/summary.json).", identity=True, run=False, sweep=True,
           sweep_help="Benchmark name."),
    Option("data", None, "Local data file/folder or hub id (default: the benchmark's hub set); with several "
           "benchmarks, BENCHMARK=SOURCE, repeatable.", parse=str, check=checks.data, identity=True, run=False,
           sweep=True, sweep_help="Local data file/folder or hub id."),
    Option("limit", None, "Evaluate only the first N questions (after filters).", int,
           check=checks.at_least("--limit", 1), sweep=True, sweep_help="Evaluate only the first N questions."),
    Option("domains", (), "Keep only this knowledge domain (repeatable).", many=True, commas=False, flag="--domain"),
    Option("question_types", (), "Keep only this question type, e.g. single_choice (repeatable).", many=True,
           commas=False, flag="--question-type"),
    Option("batch_size", None, "Rows per batch, or 'auto' (start at 64, halve on out-of-memory). Default: 8 on the "
           "CPU, auto on CUDA.", parse=checks.batch_size, check=checks.positive_batch, spec=BATCHING, sweep=True,
           sweep_help="Rows per batch, or 'auto' (start at 64, halve on out-of-memory). Default: sized to the "
           "device, as in `finbench run`."),
    Option("token_budget", None, "Max padded tokens (text + image) per batch. Default: 16384 on the CPU; on CUDA 768 "
           "per GiB of GPU memory (16384-98304).", int, check=checks.at_least("--token-budget", 1), spec=BATCHING),
    Option("workers", None, "Preprocessing threads (image decode + processor), run ahead of the model. Default: 2 on "
           "the CPU; on CUDA one per two cores (2-8).", int, check=checks.at_least("--workers", 1), spec=BATCHING),
    Option("protocol", DEFAULT_PROTOCOL, "constrained (logit-based) or official (generate + extract).",
           check=checks.protocol, identity=True),
    Option("dtype", "auto", "auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16.", check=checks.dtype,
           spec=LOAD, identity=True, axis=True, sweep_help="Comma-separated (or repeated) dtypes, e.g. bfloat16,float16."),
    Option("device", "auto", "auto, cpu, cuda, cuda:N.", check=checks.device, spec=LOAD, sweep=True),
    Option("quant", "none", "none, 8bit, 4bit (bitsandbytes), int8wo, int4wo (torchao weight-only), fp8 (W8A8, CUDA "
           "capability >= 8.9). A checkpoint shipped quantized needs none.", check=checks.quant, spec=LOAD,
           identity=True, axis=True, sweep_help="Comma-separated (or repeated) --quant values: none,8bit,4bit,int8wo,"
           "int4wo,fp8 (pre-quantized checkpoints go in --models)."),
    Option("quant_vision", False, "--quant the vision tower too (default: the language model only; the LM head always "
           "stays unquantized).", bool, spec=LOAD, sweep=True, sweep_help="--quant the vision tower too."),
    Option("allow_dequantized", False, "Run an FP8 checkpoint dequantized where FP8 matmuls cannot run (CPU, GPUs "
           "below capability 8.9); labelled +dequantized.", bool, spec=LOAD, sweep=True,
           sweep_help="Run FP8 checkpoints dequantized where FP8 matmuls cannot run (labelled +dequantized)."),
    Option("max_new_tokens", None, "Free generation budget (official protocol, open answers, sessions; default: each "
           "benchmark's official one).", int, check=checks.at_least("--max-new-tokens", 1), spec=DECODE),
    Option("numeric_budget", 12, "Token budget of a constrained numerical answer.", int,
           check=checks.at_least("--numeric-budget", 1), spec=DECODE),
    Option("max_pixels", None, "Cap on pixels per image for the processor.", int,
           check=checks.at_least("--max-pixels", 1), spec=LOAD, sweep=True),
    Option("device_preprocess", False, "Resize/normalise/patchify images on the model's device (Qwen).", bool,
           spec=LOAD),
    Option("compile_vision", False, "torch.compile the vision tower's repeated blocks (fuses their fp32 norm and "
           "rotary work; compiled once, in the first batch).", bool, spec=LOAD),
    Option("compile_lm", False, "torch.compile the language model's RMSNorm, MLP and rotary modules (attention and "
           "caches stay eager).", bool, spec=LOAD),
    Option("fast_paths", True, "The exact CUDA fast paths (padded GEMM widths, mask-free prefill, static and graphed "
           "decode steps; none on the CPU). --no-fast-paths runs the reference paths (a check, or a workaround).",
           bool, spec=LOAD),
    Option("profile", False, "Synchronise the GPU at every stage boundary so that results.json's stage and "
           "model-part seconds are exact (slower; off: no waits).", bool, spec=BATCHING),
    Option("device_map", None, "auto (or balanced, balanced_low_0, sequential): split a model too large for one GPU "
           "across the GPUs (accelerate); the batch loop is unchanged.", check=checks.device_map, spec=LOAD),
    Option("out", "runs/latest", "Run folder (results.json, samples.parquet, cache).", parse=str, check=checks.out,
           spec=OUTPUT, sweep=True, sweep_default="runs/sweep", sweep_help="Sweep folder: one run folder per "
           "variant, a shared cache, sweep.json, report.html, report.md."),
    Option("cache", None, "SQLite cache path (default: OUT/cache.sqlite).", parse=str, spec=OUTPUT),
    Option("bootstrap", 1000, "Bootstrap resamples for the confidence intervals (0 = none).", int,
           check=checks.at_least("--bootstrap", 0), spec=OUTPUT, sweep=True,
           sweep_help="Bootstrap resamples (CIs and paired deltas)."),
    Option("seed", 0, "Seed of the bootstrap and of sampled generation.", int, spec=OUTPUT, sweep=True,
           sweep_help="Bootstrap seed."),
    Option("think_budget", 0, "Thinking models: reasoning tokens before the constrained answer (0 = none; a thinking "
           "checkpoint then closes its block at once).", int, check=checks.think_budget, spec=DECODE, identity=True,
           axis=True, sweep_help="Comma-separated (or repeated) reasoning budgets, e.g. 0,256,1024."),
    Option("judge", None, "Local model (folder or hub id, or a server's URL) that judges the open answers of the "
           "benchmarks whose official evaluation asks a judge (`finbench benchmarks`): a vision-language model is "
           "shown the images the official judge sees; its verdicts are cached.", check=checks.judge, spec=JUDGING,
           identity=True),
    Option("judge_max_new_tokens", None, "The judge's reply budget (default: each benchmark's official one).", int,
           check=checks.at_least("--judge-max-new-tokens", 1), spec=JUDGING),
    Option("judge_served_model", None, "Which model a served --judge answers with " + SERVED_HELP, spec=JUDGING),
    Option("revision", None, "Hub branch, tag or commit of --model (in the cache key).", spec=LOAD, identity=True),
    Option("trust_remote_code", False, "Allow the checkpoint's own Python code to run (off: nothing remote runs).",
           bool, spec=LOAD),
    Option("attn_implementation", None, "sdpa, eager or flash_attention_2 (default: flash-attn on CUDA when "
           "installed, else sdpa).", spec=LOAD),
    Option("chat_template", None, "File with a Jinja chat template replacing the checkpoint's.", parse=str,
           check=checks.chat_template, spec=DECODE, identity=True),
    Option("system_prompt", None, "A system message put before every question.", spec=DECODE, identity=True),
    Option("gen_kwargs", (), "Free generation (official protocol, open answers): max_new_tokens=N,temperature=T,"
           "top_p=P,top_k=K (comma-separated or repeated); greedy by default.", many=True,
           parse=checks.generation_settings, check=checks.gen_kwargs, spec=DECODE),
    Option("log_prompts", True, "Keep each rendered prompt in samples.parquet (--no-log-prompts: only its SHA-256).",
           bool, spec=DECODE),
    Option("unsafe_sandbox", False, UNSAFE_SANDBOX_HELP, bool),
]
OPTIONS = {option.name: option for option in RUN_OPTIONS}
RUN_IDENTITY = tuple(option.name for option in RUN_OPTIONS if option.identity)


def _think_budget_protocol(config: RunConfig) -> None:
    if config.decode.think_budget > 0 and config.protocol not in get_benchmark(config.benchmark).constrained_protocols:
        raise ValueError("--think-budget applies to the constrained protocol (official generates freely)")


def _quant_vision_quant(config: RunConfig) -> None:
    if config.load.quant_vision and config.load.quant == "none":
        raise ValueError("--quant-vision applies with --quant (8bit, 4bit, int8wo, int4wo, fp8)")


# what one option's declaration cannot check alone; the served options' own are sources.py `check_sources`
CROSS_CHECKS: list[Callable[[RunConfig], None]] = [_think_budget_protocol, _quant_vision_quant]


def run_flags() -> list[Option]:
    """The options `finbench run` takes from this table (the rest it writes itself)."""
    return [option for option in RUN_OPTIONS if option.run]


def sweep_flags() -> list[Option]:
    """`finbench sweep`'s flags from this table: its plain options with one value for every
    variant, then its axes (several values, comma-separated or repeated; --model and --models are
    the sweep's own)."""
    plain = [dataclasses.replace(o, help=o.sweep_help or o.help, default=o.sweep_default or o.default)
             for o in RUN_OPTIONS if o.sweep]
    axes = [dataclasses.replace(o, help=o.sweep_help or o.help, default=(), kind=str, many=True, parse=None)
            for o in RUN_OPTIONS if o.axis and o.name != "model"]
    return plain + axes


def coerce(options: dict[str, Any]) -> dict[str, Any]:
    """Each declared option's value as RunConfig holds it (the rest as given: `RunConfig.flat` refuses
    an unknown one)."""
    return {name: OPTIONS[name].coerce(value) if name in OPTIONS else value for name, value in options.items()}


def check_options(config: RunConfig) -> None:
    """Every declared option's own check, then the checks across options (one ValueError line)."""
    for option in RUN_OPTIONS:
        if option.check is not None:
            option.check(config.option(option.name), config)
    for check in CROSS_CHECKS:
        check(config)
