"""Loading a Hugging Face checkpoint: the device, dtype and attention kernels a load resolves to,
`load_auto`, the generic
adapter's `load` (the Auto classes, the quantization plan, the placement)."""

from __future__ import annotations

from typing import Any

import torch

from finbench.models.quant import plan_quantization


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available on this machine")
    return resolved


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ValueError(f"--dtype {dtype}: expected one of auto, {', '.join(table)}")
    return table[dtype]


def attention_implementation(device: torch.device) -> str:
    """flash-attn when it is installed and we are on CUDA, else PyTorch SDPA."""
    if device.type == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    return "sdpa"


def load_auto(cls: Any, source: str, *, dtype: str = "auto", device: str = "auto", quant: str = "none",
         max_pixels: int | None = None, revision: str | None = None, trust_remote_code: bool = False,
         attn_implementation: str | None = None, device_map: str | None = None,
         quant_vision: bool = False, allow_dequantized: bool = False, declared: Any = ...,
         **options: Any) -> Any:
    """Load through the Auto classes; `options` are family-specific adapter settings.
    `trust_remote_code` stays off unless asked: a checkpoint's own Python never runs silently.
    Quantization (`--quant`, or the checkpoint's own format `declared` in config.json, as read
    at start-up) follows models/quant.py's plan."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    plan = plan_quantization(source, quant, target, torch_dtype, quant_vision, allow_dequantized, declared)
    attn = attn_implementation or attention_implementation(target)
    hub = {"revision": revision, "trust_remote_code": trust_remote_code}
    processor = AutoProcessor.from_pretrained(source, **hub)
    if not hasattr(processor, "tokenizer"):
        raise ValueError(f"{source}: AutoProcessor returned {type(processor).__name__}, not a "
                         "multimodal processor (is the processor class saved with the model?)")
    placement = {"device_map": device_map} if device_map else {}  # accelerate splits the layers over GPUs
    model = AutoModelForImageTextToText.from_pretrained(
        source, dtype=torch_dtype, attn_implementation=attn, **hub,
        **{**plan.kwargs, **placement})
    if not plan.placed and not device_map:
        model = model.to(target)
    label, report = plan.finish(model, target)
    return cls(model, processor, source, quant=label, attn_implementation=attn, max_pixels=max_pixels,
               quant_report=report, **options)
