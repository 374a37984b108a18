"""Start-up: every check that can fail a run, before any work and before anything is written.

In order, each once: the options (`validate`); the data; what the model's family declares it can
honour (`check_family`, from config.json read once into the record the loader takes: no weights
read); the one loader (`load_for_run`, used by `run`, the API, multi-benchmark runs and `sweep`;
`load_judge_for_run` for --judge); what only the loaded checkpoint can tell (its answer
vocabulary, its thinking block). Then the run folder, with run.log (`RunLog`) from the start.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finbench.benchmarks import get_benchmark
from finbench.runner.gen_kwargs import GENERATION_KEYS
from finbench.sandbox import refuse_without_jail
from finbench.sources import is_served
from finbench.types import AUTO, DTYPE_NAMES, QUANT_CHOICES, Question, RunConfig

if TYPE_CHECKING:
    from finbench.runner.distributed import World

# torch and the model packages are imported by the checks that need them, after every check that
# needs none (the registry of benchmarks imports neither): a bad option is refused in a fraction of
# a second (tests/test_startup_fast.py)

log = logging.getLogger("finbench")
DEVICE_MAPS = (None, "auto", "balanced", "balanced_low_0", "sequential")
LOADING_OPTIONS = ("revision", "trust_remote_code", "attn_implementation", "chat_template")


def validate(config: RunConfig) -> None:
    """Every option checked before any work: a bad one is one ValueError line. First what the
    options alone decide (`validate_options`), then what needs the registry, torch or a package."""
    validate_options(config)
    refusal = get_benchmark(config.benchmark).recognise(config.data)  # another benchmark's data: one line, now
    if refusal:
        raise ValueError(refusal)
    refuse_without_jail(config.protocol in get_benchmark(config.benchmark).program_protocols, config.unsafe_sandbox,
                        f"--protocol {config.protocol}")  # programs need the kernel jail (finbench/sandbox)
    _validate_device(config.device)
    if config.quant != "none":  # fp8 off CUDA, a missing package
        from finbench.models.loading import resolve_device
        from finbench.models.quant import quant_unavailable

        unavailable = quant_unavailable(config.quant, resolve_device(config.device))
        if unavailable:
            raise ValueError(unavailable)


def validate_options(config: RunConfig) -> None:
    """What the options and the registry of benchmarks decide, with no library imported (a sweep
    checks every variant's before any variant's library checks)."""
    from finbench.runner.study_options import check_options
    from finbench.sources import check_sources, looks_like_path

    names = get_benchmark(config.benchmark).protocol_names  # the registry (its scorers are imported when scoring)
    if config.protocol not in names:
        raise ValueError(f"--protocol {config.protocol}: expected one of {', '.join(names)}")
    if config.batch_size not in (None, AUTO) and not (isinstance(config.batch_size, int) and config.batch_size >= 1):
        raise ValueError(f"--batch-size {config.batch_size}: must be a positive integer or 'auto'")
    if config.think_budget < 0:
        raise ValueError(f"--think-budget {config.think_budget}: must be 0 (no reasoning) or a positive token count")
    if config.think_budget > 0 and config.protocol not in get_benchmark(config.benchmark).constrained_protocols:
        raise ValueError("--think-budget applies to the constrained protocol (official generates freely)")
    at_least = {"--limit": (config.limit, 1), "--token-budget": (config.token_budget, 1),
                "--workers": (config.workers, 1), "--max-new-tokens": (config.max_new_tokens, 1),
                "--numeric-budget": (config.numeric_budget, 1), "--max-pixels": (config.max_pixels, 1),
                "--bootstrap": (config.bootstrap, 0), "--think-budget": (config.think_budget, 0),
                "--judge-max-new-tokens": (config.judge_max_new_tokens, 1)}
    for option, (value, low) in at_least.items():
        if value is not None and value < low:
            raise ValueError(f"{option} {value}: must be at least {low}")
    if not DEVICE_NAME.fullmatch(config.device):
        raise ValueError(f"--device {config.device}: expected auto, cpu, cuda or cuda:N")
    if config.dtype != "auto" and config.dtype not in DTYPE_NAMES:  # the name only (auto is decided at load)
        raise ValueError(f"--dtype {config.dtype}: expected one of auto, {', '.join(DTYPE_NAMES)}")
    if config.quant not in QUANT_CHOICES:
        raise ValueError(f"--quant {config.quant}: expected one of {', '.join(QUANT_CHOICES)}")
    if config.quant_vision and config.quant == "none":
        raise ValueError("--quant-vision applies with --quant (8bit, 4bit, int8wo, int4wo, fp8)")
    if config.device_map not in DEVICE_MAPS:
        raise ValueError(f"--device-map {config.device_map}: expected auto, balanced, balanced_low_0 or sequential")
    if config.chat_template and not Path(config.chat_template).is_file():
        raise ValueError(f"--chat-template {config.chat_template}: no such file")
    for key, value in config.gen_kwargs:
        if key not in GENERATION_KEYS:
            raise ValueError(f"--gen-kwargs: unknown key {key!r} (known: {', '.join(GENERATION_KEYS)})")
        if key in ("max_new_tokens", "top_k") and value < 1 or key in ("temperature", "top_p") and value < 0:
            raise ValueError(f"--gen-kwargs: {key}={value} is out of range")
    if config.data is not None and not Path(config.data).exists() and looks_like_path(config.data, DATA_SUFFIXES):
        raise ValueError(f"--data {config.data}: no such file or folder")  # anything else is a hub id ("owner/name")
    check_options(config)  # the studies: --permutations, --image-ablation, --samples, --probe
    check_sources(config)  # --judge, and a served model's options (sources.py)
    check_writable(Path(config.out))


DEVICE_NAME = re.compile(r"auto|(cpu|mps|cuda)(:\d+)?")
DATA_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json")


def _validate_device(device: str) -> None:
    """Whether the CUDA device named is there (torch is imported only when one is named)."""
    if not device.startswith("cuda"):
        return
    import torch

    resolved = torch.device(device)
    if not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available on this machine")
    if resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def check_writable(out_dir: Path) -> None:
    """The run folder can be made (or is a writable folder) — checked without making it."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ValueError(f"--out {out_dir}: cannot write there ({existing} is not a folder)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out_dir}: cannot write there (permission denied on {existing})")


def check_family(config: RunConfig, model: Any = None) -> Any:
    """What the model's family does not declare (models/contract.py), refused once from config.json
    read once (the `Checkpoint` returned, for the loader); with a loaded `model`, its capabilities."""
    if is_served(config.model) and model is None:  # a server's model: its options were checked with the rest
        return None
    from finbench.models import read_checkpoint, refusal
    from finbench.models.base import resolve_device
    from finbench.models.quant import quant_refusal

    checkpoint = declared = None
    if model is not None:
        capabilities, family = model.capabilities, model.family
    else:
        checkpoint = read_checkpoint(config.model, config.family)
        capabilities, family, declared = checkpoint.capabilities, checkpoint.family.family, checkpoint.declared
    refused = refusal(capabilities, family, **_refusal_options(config),
                      prequantized=declared.label if declared else None)
    if model is None:  # the checkpoint's own format: its package, FP8 where it would be dequantized
        refused = refused or quant_refusal(config.model, config.quant, resolve_device(config.device),
                                           config.allow_dequantized, declared=declared)
    if refused:
        raise ValueError(refused)
    return checkpoint


def _refusal_options(config: RunConfig) -> dict[str, Any]:
    """The options of `config` a family may not declare (models/contract.py `refusal`)."""
    return {"think_budget": config.think_budget, "quant": config.quant, "device_preprocess": config.device_preprocess,
            "max_pixels": config.max_pixels, "sampling": [k for k, _ in config.gen_kwargs if k != "max_new_tokens"],
            "chat_template": config.chat_template is not None,
            "hub_options": [f"--{k.replace('_', '-')}" for k in ("revision", "attn_implementation", "device_map")
                            if getattr(config, k)]}


def load_for_run(config: RunConfig, world: World | None = None, checkpoint: Any = None) -> Any:
    """The one loader: the model `config` names, with every loading option it holds, on this
    rank's device (with several ranks, `auto`/`cuda` means the rank's own GPU). `checkpoint`: the
    record `check_family(config)` returned already (a sweep checks every variant first), or None."""
    from finbench.models import load_model
    from finbench.runner.distributed import World, rank_device

    if is_served(config.model):  # a URL: the served adapter (models/served.py) checks its options, loads nothing
        return importlib.import_module("finbench.models.served").served_for(config)
    checkpoint = checkpoint or check_family(config)
    device = rank_device(config.device, world or World())
    template = Path(config.chat_template).read_text(encoding="utf-8") if config.chat_template else None
    model = load_model(config.model, dtype=config.dtype, device=device, quant=config.quant,
                       max_pixels=config.max_pixels, device_map=config.device_map,
                       device_preprocess=config.device_preprocess, revision=config.revision,
                       trust_remote_code=config.trust_remote_code, attn_implementation=config.attn_implementation,
                       chat_template=template, quant_vision=config.quant_vision,
                       allow_dequantized=config.allow_dequantized, fast_paths=config.fast_paths, checkpoint=checkpoint)
    return model


def load_judge_for_run(config: RunConfig, world: World | None = None, model: Any = None) -> Any:
    """The --judge adapter (judge.py: the run's `model` if the same; served.py: a URL); None without one, off rank 0."""
    from finbench.models.judge import load_judge
    from finbench.runner.distributed import World, rank_device

    world = world or World()
    if config.judge and world.main and is_served(config.judge):  # a served judge (models/served.py)
        return importlib.import_module("finbench.models.served").served_for(config, judge=True)
    return load_judge(config.judge, dtype=config.dtype, device=rank_device(config.device, world), model=model) \
        if config.judge and world.main else None


def _loading(config: RunConfig) -> tuple:
    return tuple((name, getattr(config, name)) for name in LOADING_OPTIONS)


def given_model(config: RunConfig, model: Any, loaded_with: RunConfig | None = None) -> Any:
    """An already loaded model: loading options cannot apply to it any more, unless finbench's
    loader loaded it with these very options (`loaded_with`: the config `load_for_run` loaded it
    with — a multi-benchmark run's, a sweep variant's —, None for a model loaded elsewhere), and
    its family was checked for them then."""
    loading = [name for name in LOADING_OPTIONS if getattr(config, name)]
    if loading and (loaded_with is None or _loading(loaded_with) != _loading(config)):
        raise ValueError(f"{', '.join(loading)}: these apply when finbench loads the model; pass the model "
                         "name instead of a loaded model, or load it with them")
    if loaded_with is None or _refusal_options(loaded_with) != _refusal_options(config):
        check_family(config, model)  # the family's refusal, once per set of options
    return model


def think_budget_for(config: RunConfig, model: Any) -> int | None:
    """The thinking budget of the run's constrained requests: None for an instruct run. A
    checkpoint whose template opens the block itself always thinks (budget 0 = the block is
    closed at once); others only when asked to."""
    if config.protocol not in get_benchmark(config.benchmark).constrained_protocols:  # no choice or number reasons
        return None
    if model.thinking_token_ids() is None:
        if config.think_budget > 0:
            raise ValueError(f"--think-budget {config.think_budget}: {config.model} has no thinking block "
                             f"(family {model.family})")
        return None
    return config.think_budget if config.think_budget > 0 or model.template_opens_thinking() else None


def compile_parts(model: Any, config: RunConfig, notes: list[str]) -> None:
    """--compile-vision and --compile-lm (models/compile.py), before the fingerprint (it names what is compiled)."""
    from finbench.models.compile import compile_unavailable

    asked = [(option, compile, what) for option, on, compile, what in (
        ("--compile-vision", config.compile_vision, lambda: model.compile_vision(), "repeated vision blocks"),
        ("--compile-lm", config.compile_lm, lambda: model.compile_language_model(),
         "language-model RMSNorm, MLP or rotary modules")) if on]
    reason = compile_unavailable(model.device) if asked else None
    if reason:
        raise ValueError(f"{asked[0][0]}: {reason}")
    for option, compile, what in asked:
        compiled = compile()
        if compiled:
            log.info("%s compiled: %s", option, ", ".join(f"{n} ×{k}" for n, k in compiled.items()))
        else:
            notes.append(f"{option}: {model.family} declares no {what}; it ran uncompiled")


def mark_duplicate_ids(questions: list[Question], notes: list[str]) -> list[Question]:
    """A repeated question id is a per-sample error on every repeat (the first keeps it): results
    are keyed by id, so two rows with one id would be merged or miscounted downstream."""
    first_seen: dict[str, int] = {}
    marked = []
    for index, question in enumerate(questions):
        first = first_seen.setdefault(question.id, index)
        if first != index:  # renamed too, so that ids stay unique in samples.parquet
            question = dataclasses.replace(
                question, id=f"{question.id}#dup{index + 1}",
                error=f"duplicate id {question.id!r}: record {index + 1} repeats the id of record {first + 1}; "
                      "only the first is evaluated")
        marked.append(question)
    repeats = len(questions) - len(first_seen)
    if repeats:
        notes.append(f"{repeats} question(s) repeat an earlier id; each repeat is a per-sample error")
    return marked


def make_run_folder(out_dir: Path) -> None:
    """Create the run folder and prove it takes a file, or fail with one line."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".finbench-write-test-{os.getpid()}"  # per process: ranks probe at once
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"--out {out_dir}: cannot write there ({err.strerror or err})") from None
