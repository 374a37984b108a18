"""Model families, one file each (registered in models/families.py), behind one contract
(models/contract.py). `load_model` loads one from a hub id or a local folder: it refuses what the
family does not declare unless start-up did (runner/startup.py `check_family`), and loads it.
This package imports no torch: its torch-free module library_logs is imported by every command
before its options are checked, and `finbench.models.load_model` is the Python API's loader."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from finbench.config.specs import LoadSpec
from finbench.models.library_logs import no_library_bars

if TYPE_CHECKING:
    from finbench.models.base import HFVisionLanguageModel
    from finbench.models.families import Checkpoint

__all__ = ["load_model"]


def load_model(source: str, spec: LoadSpec = LoadSpec(), *, device: str | None = None,
               chat_template: str | None = None, checkpoint: Checkpoint | None = None) -> HFVisionLanguageModel:
    """Load a model from a hub id or a local folder through the transformers Auto classes, as
    `spec` says (`load_model(source, LoadSpec(dtype="bfloat16", quant="8bit"))`): every field but
    the served model's (models/served.py) and compiling (runner/startup.py `compile_parts`). An
    option the family does not declare (models/contract.py) is refused before any weights are
    read; so is a quantization that cannot run here (models/quant.py), and a checkpoint shipped
    quantized runs in its own format (models/quant_checkpoint.py). What start-up resolved and the
    spec does not hold: `device`, the device as resolved (a rank's own GPU; None: the spec's);
    `chat_template`, the text of a Jinja template that replaces the checkpoint's (a run's spec
    names its file); `checkpoint`, the record start-up read and checked (runner/startup.py
    `check_family`): config.json is not read again and the family's refusal not repeated."""
    from safetensors import SafetensorError

    # the families import torch and transformers: only a command that loads one does
    from finbench.models.families import read_checkpoint

    hub = {k: v for k, v in {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code,
                             "attn_implementation": spec.attn_implementation,
                             "device_map": spec.device_map}.items() if v}
    if checkpoint is None:
        checkpoint = read_checkpoint(source, spec.family)
        _refuse(checkpoint, spec, chat_template is not None, hub)
    family, declared = checkpoint.family, checkpoint.declared
    options = {"device_preprocess": True} if spec.device_preprocess else {}
    if not spec.fast_paths:
        from finbench.models.fast_paths import FastPaths

        options["fast_paths"] = FastPaths.reference()
    # passed only when they apply, so a native adapter (DeepSeek-VL2, refused above) never sees them
    options.update({k: True for k, v in (("quant_vision", spec.quant_vision),
                                         ("allow_dequantized", spec.allow_dequantized))
                    if v and (spec.quant != "none" or declared is not None)})
    try:
        with no_library_bars():  # the docs promise no library bar, to the Python API's callers too
            model = family.load(source, dtype=spec.dtype, device=device or spec.device, quant=spec.quant,
                                max_pixels=spec.max_pixels, declared=declared, **hub, **options)
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


def _refuse(checkpoint: Checkpoint, spec: LoadSpec, chat_template: bool, hub: dict[str, object]) -> None:
    """What the family does not declare (models/contract.py `refusal`), for a model loaded without
    start-up's checks: one ValueError line."""
    from finbench.models.contract import refusal  # imports torch, as the families do

    refused = refusal(checkpoint.capabilities, checkpoint.family.family, quant=spec.quant,
                      device_preprocess=spec.device_preprocess, max_pixels=spec.max_pixels,
                      chat_template=chat_template,
                      hub_options=[f"--{k.replace('_', '-')}" for k in ("revision", "attn_implementation",
                                                                        "device_map") if k in hub],
                      prequantized=checkpoint.declared.label if checkpoint.declared else None)
    if refused:
        raise ValueError(refused)
