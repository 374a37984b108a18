"""What a `finbench run` is asked to do: `RunConfig`, what is evaluated at the top (model,
benchmark, data, protocol, limit, filters) and how in five typed specs (`LoadSpec`, `DecodeSpec`,
`BatchSpec`, `OutputSpec`, `JudgeSpec`) and the studies' options. Each field of a spec is a flat
option name, as results.json records it (`RunConfig.record`); the options themselves (flags, help,
checks) are declared in finbench/config/run_options.py. Frozen dataclasses, torch-free."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from finbench.core.types import DEFAULT_BENCHMARK, DEFAULT_PROTOCOL


@dataclass(frozen=True)
class LoadSpec:
    """How the model is loaded (or, for a served --model, reached): what finbench's loader or the
    served adapter takes."""

    # a served --model (http(s)://HOST:PORT/v1, models/served.py): which of its models, the variable
    # holding its API key (the key itself is never in a config), requests in flight (None: sized to
    # the server) and the seconds each may take
    served_model: str | None = None
    api_key_env: str | None = None
    in_flight: int | None = None
    request_timeout: float = 600.0
    served_thinking: bool = False  # chat_template_kwargs enable_thinking (off: as finbench renders hybrid models)
    served_reading: str = "auto"  # how a served model's choices are read: auto, logprobs or decision
    dtype: str = "auto"
    device: str = "auto"
    device_map: str | None = None  # "auto": split a model larger than one GPU across GPUs (accelerate)
    family: str | None = None  # --family: a model family by name ("auto": the generic one); None: by model_type
    quant: str = "none"  # an on-the-fly format (models/quant.py); a pre-quantized checkpoint needs none
    quant_vision: bool = False  # --quant-vision: quantize the vision tower too (default: the language model only)
    allow_dequantized: bool = False  # run an FP8 checkpoint dequantized where FP8 matmuls cannot run (labelled)
    max_pixels: int | None = None
    device_preprocess: bool = False  # resize/normalise/patchify images on the model's device
    compile_vision: bool = False  # torch.compile the vision tower's repeated blocks (models/compile.py)
    compile_lm: bool = False  # torch.compile the language model's RMSNorm, MLP and rotary modules
    fast_paths: bool = True  # the exact CUDA fast paths (models/fast_paths.py); False: the reference paths
    # loading arguments in the cache key (runner/keys.py `model_arguments`)
    revision: str | None = None  # hub branch, tag or commit of --model
    trust_remote_code: bool = False  # run the checkpoint's own Python code (off: nothing remote runs)
    attn_implementation: str | None = None  # sdpa, eager, flash_attention_2 (None: flash-attn on CUDA if installed, else sdpa)


@dataclass(frozen=True)
class DecodeSpec:
    """What the model is asked and how its answers are decoded (in the requests, so in the cache key)."""

    max_new_tokens: int | None = None  # free generation budget (None: the benchmark's official one)
    numeric_budget: int = 12  # tokens for a constrained numerical answer
    think_budget: int = 0  # reasoning tokens before a constrained answer (thinking models; 0 = none)
    chat_template: str | None = None  # path of a Jinja chat template replacing the checkpoint's
    system_prompt: str | None = None  # a system message before every question
    gen_kwargs: tuple[tuple[str, Any], ...] = ()  # free generation: max_new_tokens, temperature, top_p, top_k
    log_prompts: bool = True  # samples.parquet keeps each rendered prompt (False: its SHA-256 only)


@dataclass(frozen=True)
class BatchSpec:
    """How the questions are batched; None: sized to the device at start-up (runner/defaults.py), and
    then named in RunConfig.sized."""

    batch_size: int | str | None = None  # rows per batch; "auto": start at 64, halve on out-of-memory
    token_budget: int | None = None  # max total tokens (text + image) per batch
    workers: int | None = None  # preprocessing threads
    profile: bool = False  # synchronise the device at stage boundaries (exact per-stage times, slower)


@dataclass(frozen=True)
class OutputSpec:
    """Where the run writes, and the seeds and resamples of what it reports."""

    out: str = "runs/latest"
    cache: str | None = None  # SQLite path; default <out>/cache.sqlite
    seed: int = 0
    bootstrap: int = 1000  # resamples for the confidence intervals in results.json (0 = none)


@dataclass(frozen=True)
class JudgeSpec:
    """The judge of open answers (FAMMA, FinMTM sessions)."""

    judge: str | None = None  # local chat model (or a server's URL) that judges open answers
    judge_max_new_tokens: int | None = None  # the judge's reply budget (None: the benchmark's official one)
    judge_served_model: str | None = None  # which model a served --judge answers with


# RunConfig's parts: attribute → spec (each field of a spec is a flat option name, as results.json records it)
SPECS = {"load": LoadSpec, "decode": DecodeSpec, "batching": BatchSpec, "output": OutputSpec, "judging": JudgeSpec}
SPEC_OF = {f.name: part for part, spec in SPECS.items() for f in fields(spec)}  # option name → its spec


@dataclass(frozen=True)
class RunConfig:
    """Everything a `finbench run` was asked to do: what is evaluated at the top, how in its specs.
    `RunConfig.flat(model, **options)` builds one from the flat option names, `replaced(**options)`
    changes some, `option(name)` reads one and `record()` is the flat dict results.json holds."""

    model: str
    benchmark: str = DEFAULT_BENCHMARK
    data: str | None = None
    # read beside --data by the benchmarks that declare them (Benchmark.data_options): a column spec, an image folder
    data_spec: str | None = None
    image_root: str | None = None
    protocol: str = DEFAULT_PROTOCOL
    limit: int | None = None
    domains: tuple[str, ...] = ()
    question_types: tuple[str, ...] = ()
    load: LoadSpec = LoadSpec()
    decode: DecodeSpec = DecodeSpec()
    batching: BatchSpec = BatchSpec()
    output: OutputSpec = OutputSpec()
    judging: JudgeSpec = JudgeSpec()
    unsafe_sandbox: bool = False  # model-written programs without a kernel jail where none can be built (finbench/sandbox)
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
