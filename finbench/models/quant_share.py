"""The share of a model's language model that a `--quant` format would quantize, known before any
weights load: the family's module tree built from config.json on the meta device (no weights, no
memory), walked with the rule the load applies (models/quant.py `would_quantize`) and counted as
the loaded model's inspection counts (`inspect_quantization`). A sweep refuses every variant whose
share is below `MIN_QUANTIZED_SHARE` in one message, before its first variant runs (finbench/app/sweep.py).

What the module tree cannot tell (a checkpoint that is not a transformers architecture, remote
code) is left to the load, which inspects the real model and refuses there."""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from finbench.models.quant import MIN_QUANTIZED_SHARE, language_model_share, would_quantize

log = logging.getLogger("finbench")


def module_tree(source: str) -> torch.nn.Module | None:
    """The model of `source`'s config.json with its weights on the meta device (no memory, no
    weights read); None when transformers cannot build it from the config alone."""
    try:
        from transformers import AutoConfig, AutoModelForImageTextToText

        config = AutoConfig.from_pretrained(source)
        with torch.device("meta"):
            return AutoModelForImageTextToText.from_config(config)
    except Exception as err:  # an architecture transformers does not know, remote code: the load decides
        log.info("quantized share of %s not computed before the load: %s", source, err)
        return None


def planned_share(model: torch.nn.Module, quant: str, quant_vision: bool = False) -> float:
    """The share of the language model's matrix elements `quant` would quantize in `model`."""
    return language_model_share(model, lambda name, module: would_quantize(module, name, quant, quant_vision))


def planned_shares(source: str, quants: Sequence[str], quant_vision: bool = False) -> dict[str, float] | None:
    """{quant: share} for the on-the-fly formats among `quants` of one checkpoint (one tree for all);
    None when the tree cannot be built."""
    formats = [q for q in dict.fromkeys(quants) if q != "none"]
    if not formats:
        return {}
    model = module_tree(source)
    if model is None:
        return None
    return {quant: planned_share(model, quant, quant_vision) for quant in formats}


def share_refusals(variants: Sequence[tuple[str, Any]]) -> list[str]:
    """One line per variant (name, RunConfig) whose format would leave most of its language model
    unquantized, with the share; [] when every variant's format applies (or cannot be told)."""
    by_model: dict[tuple[str, bool], list[tuple[str, Any]]] = {}
    for name, config in variants:
        if config.load.quant != "none":
            by_model.setdefault((config.model, config.load.quant_vision), []).append((name, config))
    refused = []
    for (source, quant_vision), named in by_model.items():
        shares = planned_shares(source, [c.load.quant for _, c in named], quant_vision) or {}
        for name, config in named:
            share = shares.get(config.load.quant)
            if share is not None and share < MIN_QUANTIZED_SHARE:
                refused.append(f"{name} (--quant {config.load.quant}: would quantize {share:.0%} of the language "
                               f"model's weights, below {MIN_QUANTIZED_SHARE:.0%})")
    return refused
