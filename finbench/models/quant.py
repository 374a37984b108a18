"""`--quant` → `from_pretrained` keyword arguments (bitsandbytes 8-bit / 4-bit NF4)."""

from __future__ import annotations

from typing import Any

import torch

QUANT_CHOICES = ("none", "8bit", "4bit")


def quantization_kwargs(quant: str, device: torch.device) -> dict[str, Any]:
    """Load settings for a quantization mode; raises one clear error when it cannot run here."""
    if quant == "none":
        return {}
    if quant not in QUANT_CHOICES:
        raise ValueError(f"--quant {quant}: expected one of {', '.join(QUANT_CHOICES)}")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ValueError(f"--quant {quant} needs bitsandbytes: pip install 'finbench[quant]'") from None
    from transformers import BitsAndBytesConfig

    if quant == "8bit":
        config = BitsAndBytesConfig(load_in_8bit=True)
    else:
        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                    bnb_4bit_compute_dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    # The vision tower stays in full precision: quantization studies are about the language model,
    # and bnb kernels reject the small conv/linear shapes of some vision towers.
    config.llm_int8_skip_modules = ["lm_head", "visual", "vision_tower", "multi_modal_projector"]
    device_map = {"": device.index or 0} if device.type == "cuda" else {"": "cpu"}
    return {"quantization_config": config, "device_map": device_map}
