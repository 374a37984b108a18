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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finbench.benchmarks import data_source, get_benchmark, refusal_of
from finbench.config.run_options import check_options as check_declared
from finbench.config.specs import RunConfig
from finbench.core.sources import check_sources, is_served
from finbench.core.types import Question
import finbench.models as models  # torch-free; by module: a test stands in for its loader
from finbench.sandbox import refuse_without_jail
from finbench.studies import check_studies

if TYPE_CHECKING:
    from finbench.runner.distributed import World

# torch and the model packages are imported by the checks that need them, after every check that
# needs none (the registry of benchmarks imports neither): a bad option is refused in a fraction of
# a second (tests/test_startup_fast.py)

log = logging.getLogger("finbench")
LOADING_OPTIONS = ("revision", "trust_remote_code", "attn_implementation", "chat_template")


def validate(config: RunConfig) -> None:
    """Every option checked before any work: a bad one is one ValueError line. First what the
    options alone decide (`validate_options`), then what needs the registry, torch or a package."""
    validate_options(config)
    benchmark = get_benchmark(config.benchmark)
    refusal = refusal_of(benchmark, data_source(benchmark, config.data, config.option))  # another's data, a bad row: now
    if refusal:
        raise ValueError(refusal)
    refuse_without_jail(config.protocol in get_benchmark(config.benchmark).program_protocols, config.unsafe_sandbox,
                        f"--protocol {config.protocol}")  # programs need the kernel jail (finbench/sandbox)
    _validate_device(config.load.device)
    if config.load.quant != "none":  # fp8 off CUDA, a missing package
        from finbench.models.loading import resolve_device
        from finbench.models.quant import quant_unavailable

        unavailable = quant_unavailable(config.load.quant, resolve_device(config.load.device))
        if unavailable:
            raise ValueError(unavailable)


def validate_options(config: RunConfig) -> None:
    """What the options and the registry of benchmarks decide, with no library imported (a sweep
    checks every variant's before any variant's library checks): each option's declared check and
    those across options (finbench/config/run_options.py), the studies', a served model's (sources.py)."""
    check_declared(config)
    check_studies(config)  # every registered study's option (finbench/studies/)
    check_sources(config)  # a served model's options, each only with a served --model or --judge


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


def check_family(config: RunConfig, model: Any = None) -> Any:
    """What the model's family does not declare (models/contract.py), refused once from config.json
    read once (the `Checkpoint` returned, for the loader); with a loaded `model`, its capabilities."""
    if is_served(config.model) and model is None:  # a server's model: its options were checked with the rest
        return None
    from finbench.models.families import read_checkpoint
    from finbench.models.contract import refusal
    from finbench.models.loading import resolve_device
    from finbench.models.quant import quant_refusal

    checkpoint = declared = None
    if model is not None:
        capabilities, family = model.capabilities, model.family
    else:
        checkpoint = read_checkpoint(config.model, config.load.family)
        capabilities, family, declared = checkpoint.capabilities, checkpoint.family.family, checkpoint.declared
    refused = refusal(capabilities, family, **_refusal_options(config),
                      prequantized=declared.label if declared else None)
    if model is None:  # the checkpoint's own format: its package, FP8 where it would be dequantized
        refused = refused or quant_refusal(config.model, config.load.quant, resolve_device(config.load.device),
                                           config.load.allow_dequantized, declared=declared)
    if refused:
        raise ValueError(refused)
    return checkpoint


def _refusal_options(config: RunConfig) -> dict[str, Any]:
    """The options of `config` a family may not declare (models/contract.py `refusal`)."""
    return {"think_budget": config.decode.think_budget, "quant": config.load.quant, "device_preprocess": config.load.device_preprocess,
            "max_pixels": config.load.max_pixels, "sampling": [k for k, _ in config.decode.gen_kwargs if k != "max_new_tokens"],
            "chat_template": config.decode.chat_template is not None,
            "hub_options": [f"--{k.replace('_', '-')}" for k in ("revision", "attn_implementation", "device_map")
                            if config.option(k)]}


def load_for_run(config: RunConfig, world: World | None = None, checkpoint: Any = None) -> Any:
    """The one loader: the model `config` names, with every loading option it holds, on this
    rank's device (with several ranks, `auto`/`cuda` means the rank's own GPU). `checkpoint`: the
    record `check_family(config)` returned already (a sweep checks every variant first), or None."""
    from finbench.runner.distributed import World, rank_device

    if is_served(config.model):  # a URL: the served adapter (models/served.py) checks its options, loads nothing
        return importlib.import_module("finbench.models.served").served_for(config)
    checkpoint = checkpoint or check_family(config)
    device = rank_device(config.load.device, world or World())
    template = Path(config.decode.chat_template).read_text(encoding="utf-8") if config.decode.chat_template else None
    model = models.load_model(config.model, config.load, device=device, chat_template=template, checkpoint=checkpoint)
    return model


def load_judge_for_run(config: RunConfig, world: World | None = None, model: Any = None) -> Any:
    """The --judge adapter (judge_model.py: the run's `model` if the same; served.py: a URL); None without one, off rank 0."""
    from finbench.models.judge_model import load_judge
    from finbench.runner.distributed import World, rank_device

    world = world or World()
    if config.judging.judge and world.main and is_served(config.judging.judge):  # a served judge (models/served.py)
        return importlib.import_module("finbench.models.served").served_for(config, judge=True)
    return load_judge(config.judging.judge, dtype=config.load.dtype, device=rank_device(config.load.device, world), model=model) \
        if config.judging.judge and world.main else None


def _loading(config: RunConfig) -> tuple:
    return tuple((name, config.option(name)) for name in LOADING_OPTIONS)


def given_model(config: RunConfig, model: Any, loaded_with: RunConfig | None = None) -> Any:
    """An already loaded model: loading options cannot apply to it any more, unless finbench's
    loader loaded it with these very options (`loaded_with`: the config `load_for_run` loaded it
    with — a multi-benchmark run's, a sweep variant's —, None for a model loaded elsewhere), and
    its family was checked for them then."""
    loading = [name for name in LOADING_OPTIONS if config.option(name)]
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
        if config.decode.think_budget > 0:
            raise ValueError(f"--think-budget {config.decode.think_budget}: {config.model} has no thinking block "
                             f"(family {model.family})")
        return None
    return config.decode.think_budget if config.decode.think_budget > 0 or model.template_opens_thinking() else None


def compile_parts(model: Any, config: RunConfig, notes: list[str]) -> None:
    """--compile-vision and --compile-lm (models/compile.py), before the fingerprint (it names what is compiled)."""
    from finbench.models.compile import compile_unavailable

    asked = [(option, compile, what) for option, on, compile, what in (
        ("--compile-vision", config.load.compile_vision, lambda: model.compile_vision(), "repeated vision blocks"),
        ("--compile-lm", config.load.compile_lm, lambda: model.compile_language_model(),
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
