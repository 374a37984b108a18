"""The model families: one file each, registered here in order (`FAMILIES`), the generic family
last (models/auto.py: it claims no `model_type`, it takes the rest). `read_checkpoint` reads a
checkpoint's config.json once into a `Checkpoint` record (its family adapter by `model_type`, its
own quantization); the start-up checks (runner/startup.py) and `load_model` (models/__init__.py)
share that record. A `model_type` no family claims goes to the generic family (`--family auto`);
one the installed transformers cannot load fails at start-up with one line. Importing this module
imports every family, so torch: the torch-free commands never do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finbench.models.auto import AutoVLM, architecture_refusal
from finbench.models.base import HFVisionLanguageModel
from finbench.models.contract import Capabilities
from finbench.models.deepseek_vl2 import DeepSeekVL2
from finbench.models.internvl import InternVL
import finbench.models.quant_checkpoint as quant_checkpoint  # by module: a test counts its reads of config.json
from finbench.models.qwen2_5_vl import Qwen25VL
from finbench.models.qwen3_5 import Qwen35
from finbench.models.qwen3_vl import Qwen3VL
from finbench.models.qwen3_vl_moe import Qwen3VLMoe

FAMILIES = (Qwen25VL, Qwen3VL, InternVL, Qwen3VLMoe, Qwen35, DeepSeekVL2, AutoVLM)
GENERIC = "auto"  # --family auto: the generic family, whatever the model_type


def family_for(model_type: str, name: str | None = None) -> type[HFVisionLanguageModel]:
    """The family of `model_type`: the one named (`--family`, e.g. auto), else the specific family
    that claims it, else the generic one, provided the installed transformers can load it."""
    if name is not None:
        named = {f.family: f for f in FAMILIES}
        if name not in named:
            raise ValueError(f"--family {name}: expected one of {', '.join(named)}")
        chosen = named[name]
        if chosen.family != GENERIC and model_type not in chosen.model_types:
            raise ValueError(f"--family {name}: its adapter is for model_type {', '.join(chosen.model_types)}, "
                             f"not {model_type!r} (--family {GENERIC} takes any)")
    else:
        generic = next(f for f in FAMILIES if f.family == GENERIC)
        chosen = next((f for f in FAMILIES if model_type in f.model_types), generic)
    if chosen.family == GENERIC:
        refused = architecture_refusal(model_type)
        if refused:
            raise ValueError(refused)
    return chosen


@dataclass(frozen=True)
class Checkpoint:
    """What config.json says of a checkpoint, read once per load (`read_checkpoint`): its family
    adapter, its `model_type` and its own quantization (None: unquantized)."""

    source: str
    family: type[HFVisionLanguageModel]
    model_type: str
    declared: Any = None  # models/quant_checkpoint.py CheckpointQuant

    @property
    def capabilities(self) -> Capabilities:
        return self.family.capabilities_for(self.model_type, self.source)


def read_checkpoint(source: str, family: str | None = None) -> Checkpoint:
    """The record of a hub id or local folder, from its config.json alone (no weights read; a hub
    id without a cached config.json asks AutoConfig, offline); `family` names one (`--family`).
    Architectures transformers cannot load and missing models are one ValueError line."""
    from transformers import AutoConfig

    if not Path(source).exists() and (source.startswith((".", "/", "~")) or source.count("/") != 1):
        raise ValueError(f"cannot load model {source!r}: no such folder (and not a hub id of the form owner/name)")
    # config.json's own model_type first: families outside transformers (deepseek_vl_v2) are
    # unknown to AutoConfig.
    config = quant_checkpoint.read_config_json(source)
    model_type = (config or {}).get("model_type")
    if model_type is None:
        try:
            model_type = AutoConfig.from_pretrained(source).model_type
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot load model {source!r}: not a local folder with a config.json and not "
                             f"a hub id available offline ({str(err).splitlines()[0]})") from None
    declared = quant_checkpoint.described_quantization(config)
    return Checkpoint(source, family_for(model_type, family), model_type, declared)


def family_of(source: str) -> tuple[type[HFVisionLanguageModel], str]:
    """(family class, model_type) of a hub id or local folder (`read_checkpoint`)."""
    checkpoint = read_checkpoint(source)
    return checkpoint.family, checkpoint.model_type
