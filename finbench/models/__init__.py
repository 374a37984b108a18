"""Model families: one file each. `load_model` reads the checkpoint's config, picks the family
adapter by `model_type`, and loads it; unknown architectures fail at start-up with one line."""

from __future__ import annotations

from finbench.models.base import HFVisionLanguageModel
from finbench.models.internvl import InternVL
from finbench.models.qwen2_5_vl import Qwen25VL
from finbench.models.qwen3_vl import Qwen3VL

FAMILIES: tuple[type[HFVisionLanguageModel], ...] = (Qwen25VL, Qwen3VL, InternVL)


def family_for(model_type: str) -> type[HFVisionLanguageModel]:
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise ValueError(f"model_type {model_type!r} is not supported yet (supported: {known})")


def load_model(source: str, *, dtype: str = "auto", device: str = "auto", quant: str = "none",
               max_pixels: int | None = None, device_preprocess: bool = False) -> HFVisionLanguageModel:
    """Load a model from a hub id or a local folder through the transformers Auto classes."""
    from pathlib import Path

    from transformers import AutoConfig

    if not Path(source).exists() and (source.startswith((".", "/", "~")) or source.count("/") != 1):
        raise ValueError(f"cannot load model {source!r}: no such folder (and not a hub id of the form owner/name)")
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot load model {source!r}: not a local folder with a config.json and not "
                         f"a hub id available offline ({str(err).splitlines()[0]})") from None
    family = family_for(config.model_type)
    options = {"device_preprocess": True} if device_preprocess else {}
    if device_preprocess and "device_preprocess" not in family.__init__.__code__.co_varnames:
        raise ValueError(f"--device-preprocess is not available for {family.family} yet")
    return family.load(source, dtype=dtype, device=device, quant=quant, max_pixels=max_pixels, **options)
