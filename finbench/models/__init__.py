"""Model families: one file each. `read_checkpoint` reads a checkpoint's config.json once into a
`Checkpoint` record (its family adapter by `model_type`, its own quantization); the start-up
checks (runner/startup.py) and `load_model` share that record. `load_model` refuses what the
family does not declare (models/contract.py) unless start-up did, and loads it. A `model_type` no
family claims goes to the generic family (models/auto.py, `--family auto`); one the installed
transformers cannot load fails at start-up with one line."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from finbench.models.base import HFVisionLanguageModel

__all__ = ["FAMILIES", "Capabilities", "Checkpoint", "ModelAdapter", "family_for", "family_of", "load_model",
           "read_checkpoint", "refusal"]

# The families (torch, transformers) are imported on first use, not with the package: a torch-free
# module of it (library_logs) is imported by every command before its options are checked.
_LAZY = {"Capabilities": "contract", "ModelAdapter": "contract", "refusal": "contract",
         "HFVisionLanguageModel": "base", "DeepSeekVL2": "deepseek_vl2", "InternVL": "internvl",
         "Qwen25VL": "qwen2_5_vl", "Qwen35": "qwen3_5", "Qwen3VL": "qwen3_vl", "Qwen3VLMoe": "qwen3_vl_moe",
         "AutoVLM": "auto"}
# FAMILIES, in order; the generic family last (it claims no model_type: it takes the rest)
FAMILY_NAMES = ("Qwen25VL", "Qwen3VL", "InternVL", "Qwen3VLMoe", "Qwen35", "DeepSeekVL2", "AutoVLM")
GENERIC = "auto"  # --family auto: the generic family, whatever the model_type


def __getattr__(name: str) -> Any:
    if name == "FAMILIES":
        value: Any = tuple(__getattr__(family) for family in FAMILY_NAMES)
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"finbench.models.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once: a later lookup (or a test's monkeypatch) finds it here
    return value


def family_for(model_type: str, name: str | None = None) -> type[HFVisionLanguageModel]:
    """The family of `model_type`: the one named (`--family`, e.g. auto), else the specific family
    that claims it, else the generic one, provided the installed transformers can load it."""
    families = globals().get("FAMILIES") or __getattr__("FAMILIES")
    if name is not None:
        named = {f.family: f for f in families}
        if name not in named:
            raise ValueError(f"--family {name}: expected one of {', '.join(named)}")
        chosen = named[name]
        if chosen.family != GENERIC and model_type not in chosen.model_types:
            raise ValueError(f"--family {name}: its adapter is for model_type {', '.join(chosen.model_types)}, "
                             f"not {model_type!r} (--family {GENERIC} takes any)")
    else:
        generic = next(f for f in families if f.family == GENERIC)
        chosen = next((f for f in families if model_type in f.model_types), generic)
    if chosen.family == GENERIC:
        from finbench.models.auto import architecture_refusal

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
    from pathlib import Path

    from transformers import AutoConfig

    from finbench.models.quant_checkpoint import described_quantization, read_config_json

    if not Path(source).exists() and (source.startswith((".", "/", "~")) or source.count("/") != 1):
        raise ValueError(f"cannot load model {source!r}: no such folder (and not a hub id of the form owner/name)")
    # config.json's own model_type first: families outside transformers (deepseek_vl_v2) are
    # unknown to AutoConfig.
    config = read_config_json(source)
    model_type = (config or {}).get("model_type")
    if model_type is None:
        try:
            model_type = AutoConfig.from_pretrained(source).model_type
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot load model {source!r}: not a local folder with a config.json and not "
                             f"a hub id available offline ({str(err).splitlines()[0]})") from None
    return Checkpoint(source, family_for(model_type, family), model_type, described_quantization(config))


def family_of(source: str) -> tuple[type[HFVisionLanguageModel], str]:
    """(family class, model_type) of a hub id or local folder (`read_checkpoint`)."""
    checkpoint = read_checkpoint(source)
    return checkpoint.family, checkpoint.model_type


def load_model(source: str, *, dtype: str = "auto", device: str = "auto", quant: str = "none",
               max_pixels: int | None = None, device_preprocess: bool = False, revision: str | None = None,
               trust_remote_code: bool = False, attn_implementation: str | None = None,
               chat_template: str | None = None, device_map: str | None = None, quant_vision: bool = False,
               allow_dequantized: bool = False, fast_paths: bool = True,
               checkpoint: Checkpoint | None = None, family: str | None = None) -> HFVisionLanguageModel:
    """Load a model from a hub id or a local folder through the transformers Auto classes.
    `chat_template` is the text of a Jinja template that replaces the checkpoint's. An option the
    family does not declare (models/contract.py) is refused before any weights are read; so is a
    quantization that cannot run here (models/quant.py), and a checkpoint shipped quantized runs
    in its own format (models/quant_checkpoint.py). `fast_paths=False` runs the reference paths
    where the exact CUDA fast paths would run (models/fast_paths.py). `checkpoint`: the record
    start-up read and checked (runner/startup.py `check_family`): config.json is not read again
    and the family's refusal not repeated; without it both happen here. `family`: a family by
    name (`--family`; "auto" is the generic one), else the one of the model_type."""
    from safetensors import SafetensorError

    from finbench.models.contract import refusal
    from finbench.models.library_logs import no_library_bars

    hub = {k: v for k, v in {"revision": revision, "trust_remote_code": trust_remote_code,
                             "attn_implementation": attn_implementation, "device_map": device_map}.items() if v}
    if checkpoint is None:
        checkpoint = read_checkpoint(source, family)
        refused = refusal(checkpoint.capabilities, checkpoint.family.family, quant=quant,
                          device_preprocess=device_preprocess, max_pixels=max_pixels,
                          chat_template=chat_template is not None,
                          hub_options=[f"--{k.replace('_', '-')}" for k in ("revision", "attn_implementation",
                                                                            "device_map") if k in hub],
                          prequantized=checkpoint.declared.label if checkpoint.declared else None)
        if refused:
            raise ValueError(refused)
    family, declared = checkpoint.family, checkpoint.declared
    options = {"device_preprocess": True} if device_preprocess else {}
    if not fast_paths:
        from finbench.models.fast_paths import FastPaths

        options["fast_paths"] = FastPaths.reference()
    # passed only when they apply, so a native adapter (DeepSeek-VL2, refused above) never sees them
    options.update({k: True for k, v in (("quant_vision", quant_vision), ("allow_dequantized", allow_dequantized))
                    if v and (quant != "none" or declared is not None)})
    try:
        with no_library_bars():  # the docs promise no library bar, to the Python API's callers too
            model = family.load(source, dtype=dtype, device=device, quant=quant, max_pixels=max_pixels,
                                declared=declared, **hub, **options)
    except (OSError, AttributeError, KeyError, SafetensorError, ImportError) as err:
        # a folder with missing or damaged files (weights, processor, tokenizer), or an option whose
        # package is missing (flash_attention_2 without flash-attn), fails deep inside transformers;
        # the user needs the folder and the first line of the cause, in one line
        logging.getLogger("finbench").info("loading %s failed", source, exc_info=True)  # run.log keeps the trace
        first_line = (str(err).strip().splitlines() or [""])[0]
        hint = ("a package these options need is not installed" if isinstance(err, ImportError)
                else "are its weight, processor and tokenizer files all there and complete?")
        raise ValueError(f"cannot load model {source!r} as {family.family}: {type(err).__name__}: {first_line} "
                         f"({hint})") from None
    if chat_template is not None:
        model.use_chat_template(chat_template)
    return model
