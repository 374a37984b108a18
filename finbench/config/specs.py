"""What a `finbench run` is asked to do: `RunConfig`, what is evaluated at the top (model,
benchmark, data, protocol, limit, filters) and how in five typed specs (`LoadSpec`, `DecodeSpec`,
`BatchSpec`, `OutputSpec`, `JudgeSpec`) and the studies' options. Each field of a spec is a flat
option name, as results.json records it (`RunConfig.record`), and each field that is a run option
declares it here, once: `name: type = option(default, help, parse=…, check=…, …)`
(finbench/config/options.py) — its flag, help, coercion, start-up check, sweep flag or axis and
part in the run's identity; finbench/config/run_options.py derives the table from these fields.
Adding an option is adding one such field to one spec. Frozen dataclasses, torch-free."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import finbench.config.option_checks as checks
from finbench.config.options import option  # a field's declaration (RunConfig's `option` method comes after its fields)
from finbench.core.sources import SERVED_READINGS
from finbench.core.types import DEFAULT_BENCHMARK, DEFAULT_PROTOCOL

SERVED_HELP = "(default: the only one its /v1/models lists)."


@dataclass(frozen=True)
class LoadSpec:
    """How the model is loaded (or, for a served --model, reached): what finbench's loader or the
    served adapter takes."""

    # a served --model (http(s)://HOST:PORT/v1, models/served.py): the key itself is never in a config
    served_model: str | None = option(None, "Which model a served --model (or --judge) answers with " + SERVED_HELP)
    api_key_env: str | None = option(None, "Environment variable holding the served model's API key (sent as a "
                                     "bearer token; never on the command line, never written).")
    in_flight: int | None = option(None, "Requests in flight to a served model (default: 64 for vLLM and SGLang, 4 "
                                   "for other servers).", check=checks.at_least("--in-flight", 1))
    request_timeout: float = option(600.0, "Seconds a served model's request may take (then retried).",
                                    check=checks.request_timeout)
    served_thinking: bool = option(False, "Ask a served model to think (chat_template_kwargs enable_thinking; off "
                                   "by default, as finbench renders hybrid models).")
    served_reading: str = option("auto", "How a served model's choices are read: auto (the first reading a start-up "
                                 "probe finds working: token logprobs on vLLM, top logprobs on SGLang, else the "
                                 "decision endpoint), logprobs or decision (docs/scale.md).",
                                 check=checks.one_of("--served-reading", SERVED_READINGS, ", ".join(SERVED_READINGS)))
    dtype: str = option("auto", "auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16.", check=checks.dtype,
                        identity=True, axis=True,
                        sweep_help="Comma-separated (or repeated) dtypes, e.g. bfloat16,float16.")
    device: str = option("auto", "auto, cpu, cuda, cuda:N.", check=checks.device, sweep=True)
    device_map: str | None = option(None, "auto (or balanced, balanced_low_0, sequential): split a model too large "
                                    "for one GPU across the GPUs (accelerate); the batch loop is unchanged.",
                                    check=checks.device_map)
    family: str | None = option(None, "Model family (`finbench models list`); auto: the generic one. Default: the "
                                "family of the checkpoint's model_type, else auto.")
    quant: str = option("none", "none, 8bit, 4bit (bitsandbytes), int8wo, int4wo (torchao weight-only), fp8 (W8A8, "
                        "CUDA capability >= 8.9). A checkpoint shipped quantized needs none.", check=checks.quant,
                        identity=True, axis=True, sweep_help="Comma-separated (or repeated) --quant values: none,8bit,"
                        "4bit,int8wo,int4wo,fp8 (pre-quantized checkpoints go in --models).")
    quant_vision: bool = option(False, "--quant the vision tower too (default: the language model only; the LM head "
                                "always stays unquantized).", sweep=True, sweep_help="--quant the vision tower too.")
    allow_dequantized: bool = option(False, "Run an FP8 checkpoint dequantized where FP8 matmuls cannot run (CPU, "
                                     "GPUs below capability 8.9); labelled +dequantized.", sweep=True,
                                     sweep_help="Run FP8 checkpoints dequantized where FP8 matmuls cannot run "
                                     "(labelled +dequantized).")
    max_pixels: int | None = option(None, "Cap on pixels per image for the processor.",
                                    check=checks.at_least("--max-pixels", 1), sweep=True)
    device_preprocess: bool = option(False, "Resize/normalise/patchify images on the model's device (Qwen).")
    compile_vision: bool = option(False, "torch.compile the vision tower's repeated blocks (fuses their fp32 norm "
                                  "and rotary work; compiled once, in the first batch).")  # models/compile.py
    compile_lm: bool = option(False, "torch.compile the language model's RMSNorm, MLP and rotary modules (attention "
                              "and caches stay eager).")
    fast_paths: bool = option(True, "The exact CUDA fast paths (padded GEMM widths, mask-free prefill, static and "
                              "graphed decode steps; none on the CPU). --no-fast-paths runs the reference paths (a "
                              "check, or a workaround).")  # models/fast_paths.py
    # loading arguments in the cache key (runner/keys.py `model_arguments`)
    revision: str | None = option(None, "Hub branch, tag or commit of --model (in the cache key).", identity=True)
    trust_remote_code: bool = option(False, "Allow the checkpoint's own Python code to run (off: nothing remote "
                                     "runs).")
    attn_implementation: str | None = option(None, "sdpa, eager or flash_attention_2 (default: flash-attn on CUDA "
                                             "when installed, else sdpa).")


@dataclass(frozen=True)
class DecodeSpec:
    """What the model is asked and how its answers are decoded (in the requests, so in the cache key)."""

    max_new_tokens: int | None = option(None, "Free generation budget (official protocol, open answers, sessions; "
                                        "default: each benchmark's official one).",
                                        check=checks.at_least("--max-new-tokens", 1))
    numeric_budget: int = option(12, "Token budget of a constrained numerical answer.",
                                 check=checks.at_least("--numeric-budget", 1))
    think_budget: int = option(0, "Thinking models: reasoning tokens before the constrained answer (0 = none; a "
                               "thinking checkpoint then closes its block at once).", check=checks.think_budget,
                               identity=True, axis=True,
                               sweep_help="Comma-separated (or repeated) reasoning budgets, e.g. 0,256,1024.")
    chat_template: str | None = option(None, "File with a Jinja chat template replacing the checkpoint's.", parse=str,
                                       check=checks.chat_template, identity=True)
    system_prompt: str | None = option(None, "A system message put before every question.", identity=True)
    # sorted (key, value) pairs: part of a generated request, so of its cache key
    gen_kwargs: tuple[tuple[str, Any], ...] = option((), "Free generation (official protocol, open answers): "
                                                     "max_new_tokens=N,temperature=T,top_p=P,top_k=K (comma-separated "
                                                     "or repeated); greedy by default.",
                                                     parse=checks.generation_settings, check=checks.gen_kwargs)
    log_prompts: bool = option(True, "Keep each rendered prompt in samples.parquet (--no-log-prompts: only its "
                               "SHA-256).")


@dataclass(frozen=True)
class BatchSpec:
    """How the questions are batched; None: sized to the device at start-up (runner/defaults.py), and
    then named in RunConfig.sized."""

    batch_size: int | str | None = option(None, "Rows per batch, or 'auto' (start at 64, halve on out-of-memory). "
                                          "Default: 8 on the CPU, auto on CUDA.", parse=checks.batch_size,
                                          check=checks.positive_batch, sweep=True,
                                          sweep_help="Rows per batch, or 'auto' (start at 64, halve on "
                                          "out-of-memory). Default: sized to the device, as in `finbench run`.")
    token_budget: int | None = option(None, "Max padded tokens (text + image) per batch. Default: 16384 on the CPU; "
                                      "on CUDA 768 per GiB of GPU memory (16384-98304).",
                                      check=checks.at_least("--token-budget", 1))
    workers: int | None = option(None, "Preprocessing threads (image decode + processor), run ahead of the model. "
                                 "Default: 2 on the CPU; on CUDA one per two cores (2-8).",
                                 check=checks.at_least("--workers", 1))
    profile: bool = option(False, "Synchronise the GPU at every stage boundary so that results.json's stage and "
                           "model-part seconds are exact (slower; off: no waits).")


@dataclass(frozen=True)
class OutputSpec:
    """Where the run writes, and the seeds and resamples of what it reports."""

    out: str = option("runs/latest", "Run folder (results.json, samples.parquet, cache).", parse=str,
                      check=checks.out, sweep=True, sweep_default="runs/sweep", sweep_help="Sweep folder: one run "
                      "folder per variant, a shared cache, sweep.json, report.html, report.md.")
    cache: str | None = option(None, "SQLite cache path (default: OUT/cache.sqlite).", parse=str)
    seed: int = option(0, "Seed of the bootstrap and of sampled generation.", sweep=True, sweep_help="Bootstrap seed.")
    bootstrap: int = option(1000, "Bootstrap resamples for the confidence intervals (0 = none).",
                            check=checks.at_least("--bootstrap", 0), sweep=True,
                            sweep_help="Bootstrap resamples (CIs and paired deltas).")


@dataclass(frozen=True)
class JudgeSpec:
    """The judge of open answers (FAMMA, FinMTM sessions)."""

    judge: str | None = option(None, "Local model (folder or hub id, or a server's URL) that judges the open answers "
                               "of the benchmarks whose official evaluation asks a judge (`finbench benchmarks`): a "
                               "vision-language model is shown the images the official judge sees; its verdicts are "
                               "cached.", check=checks.judge, identity=True)
    judge_max_new_tokens: int | None = option(None, "The judge's reply budget (default: each benchmark's official "
                                              "one).", check=checks.at_least("--judge-max-new-tokens", 1))
    judge_served_model: str | None = option(None, "Which model a served --judge answers with " + SERVED_HELP)


# RunConfig's parts: attribute → spec (each field of a spec is a flat option name, as results.json records it)
SPECS = {"load": LoadSpec, "decode": DecodeSpec, "batching": BatchSpec, "output": OutputSpec, "judging": JudgeSpec}
SPEC_OF = {f.name: part for part, spec in SPECS.items() for f in fields(spec)}  # option name → its spec


@dataclass(frozen=True)
class RunConfig:
    """Everything a `finbench run` was asked to do: what is evaluated at the top, how in its specs.
    `RunConfig.flat(model, **options)` builds one from the flat option names, `replaced(**options)`
    changes some, `option(name)` reads one and `record()` is the flat dict results.json holds."""

    # `run=False`: `finbench run` writes its own flag (several benchmarks, BENCHMARK=SOURCE data);
    # the model is a sweep axis, as its own --model and --models
    model: str = option(help="Hub id or local folder of the model, or the URL of a server that serves it (http(s)://"
                        "HOST:PORT/v1: vLLM, SGLang, transformers serve; docs/scale.md).", identity=True, axis=True)
    benchmark: str = option(DEFAULT_BENCHMARK, "Benchmark name, or several: finmme,famma or repeated (one run folder "
                            "each under --out, one loaded model, OUT/summary.json).", identity=True, run=False,
                            sweep=True, sweep_help="Benchmark name.")
    data: str | None = option(None, "Local data file/folder or hub id (default: the benchmark's hub set); with "
                              "several benchmarks, BENCHMARK=SOURCE, repeatable.", parse=str, check=checks.data,
                              identity=True, run=False, sweep=True, sweep_help="Local data file/folder or hub id.")
    # read beside --data by the benchmarks that declare them (Benchmark.data_options): a column spec, an image folder
    data_spec: str | None = option(None, "A YAML file naming which of the data's columns hold what (the question, "
                                   "options, answer, images, breakdowns; benchmarks that read one: `finbench "
                                   "benchmarks`, docs/own-data.md).", parse=str, check=checks.existing_file("--spec"),
                                   identity=True, sweep=True, flag="--spec")
    image_root: str | None = option(None, "The folder the data's relative image paths are read from (besides the "
                                    "data file's own folder).", parse=str,
                                    check=checks.existing_folder("--image-root"), identity=True, sweep=True)
    protocol: str = option(DEFAULT_PROTOCOL, "constrained (logit-based) or official (generate + extract).",
                           check=checks.protocol, identity=True)
    limit: int | None = option(None, "Evaluate only the first N questions (after filters).",
                               check=checks.at_least("--limit", 1), sweep=True,
                               sweep_help="Evaluate only the first N questions.")
    # filters taken whole (a domain may hold a comma), one per repeated flag
    domains: tuple[str, ...] = option((), "Keep only this knowledge domain (repeatable).", commas=False,
                                      flag="--domain")
    question_types: tuple[str, ...] = option((), "Keep only this question type, e.g. single_choice (repeatable).",
                                             commas=False, flag="--question-type")
    load: LoadSpec = LoadSpec()
    decode: DecodeSpec = DecodeSpec()
    batching: BatchSpec = BatchSpec()
    output: OutputSpec = OutputSpec()
    judging: JudgeSpec = JudgeSpec()
    unsafe_sandbox: bool = option(False, "Where this machine gives neither the kernel jail nor Landlock for "
                                  "model-written programs (FinMMR pot), run them anyway in plain limited processes "
                                  "(named in the results; default: refuse at start-up).")  # finbench/sandbox
    # the studies (finbench/studies/): more requests, same run. (option name, value) pairs, sorted,
    # one per registered study (`finbench.api.make_config` fills them); a study reads its own with
    # `study.value(config)`, its option's default when absent
    studies: tuple[tuple[str, Any], ...] = ()
    sized: tuple[str, ...] = ()  # the settings start-up sized to the device (batch_size, token_budget, workers)

    @classmethod
    def flat(cls, model: str, **options: Any) -> "RunConfig":
        """A RunConfig from flat option names (each spec's field by its own name); an unknown name
        is a TypeError."""
        top, parts = _split(options)
        return cls(model=model, **top, **{part: SPECS[part](**given) for part, given in parts.items()})

    def replaced(self, **options: Any) -> "RunConfig":
        """`dataclasses.replace` by flat option names."""
        top, parts = _split(options)
        return replace(self, **top, **{part: replace(getattr(self, part), **given) for part, given in parts.items()})

    def option(self, name: str) -> Any:
        """The value of the option `name` (a top-level field or a spec's)."""
        return getattr(getattr(self, SPEC_OF[name]), name) if name in SPEC_OF else getattr(self, name)

    def record(self) -> dict[str, Any]:
        """The flat dict results.json writes under "config": every field, the specs' and the studies'
        flattened (each study's option a field of its own: "permutations": 0, …)."""
        def items(field_name: str, part: Any) -> Any:
            if field_name in SPECS:
                return part.items()
            return part if field_name == "studies" else [(field_name, part)]

        return {name: value for field_name, part in asdict(self).items() for name, value in items(field_name, part)}


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Flat options as (top-level fields, spec → its fields)."""
    parts: dict[str, dict[str, Any]] = {}
    for name in [n for n in options if n in SPEC_OF]:
        parts.setdefault(SPEC_OF[name], {})[name] = options[name]
    return {n: v for n, v in options.items() if n not in SPEC_OF}, parts
