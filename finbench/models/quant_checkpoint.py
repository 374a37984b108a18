"""Pre-quantized checkpoints: a model folder or hub id whose config.json has a `quantization_config`.

Each loads with its own format through transformers (5.24 read for these facts; the GPU machine
has 5.17), and the fingerprint names it, e.g. `prequantized:fp8-block128`:

| quant_method       | label                                 | needs                 | runs on                  |
|--------------------|---------------------------------------|-----------------------|--------------------------|
| fp8 (block)        | fp8-block128                          | —                     | CUDA capability >= 8.9   |
| compressed-tensors | compressed-tensors:<format>:w<bits>   | compressed-tensors    | CPU, CUDA                |
| awq                | awq-<bits>bit-g<group>                | gptqmodel             | CPU, CUDA (gptqmodel)    |
| gptq               | gptq-<bits>bit-g<group>               | gptqmodel, optimum    | CPU, CUDA (gptqmodel)    |
| bitsandbytes       | bnb-8bit, bnb-4bit-nf4                | bitsandbytes          | CPU, CUDA                |
| torchao            | torchao:<config>                      | torchao               | CPU, CUDA                |

FP8: without a GPU of capability >= 8.9 transformers dequantizes the checkpoint to bf16 with only a
warning. finbench refuses that load with one line unless `--allow-dequantized`, and then labels it
`prequantized:fp8-block128+dequantized`. On a capable GPU transformers would call a Triton kernel
downloaded from the hub (`kernels`), which cannot work offline: finbench keeps transformers'
`FP8Linear` weights and `weight_scale_inv` as loaded and swaps each layer for `Fp8BlockLinear`
(models/fp8.py: `_scaled_mm` with block scales, or per-K-slice row-wise; the kernel is in the
fingerprint). A package a format needs that is missing is one line naming it.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# import name → pip name, per quant_method (transformers' quantizers check these)
PACKAGES = {"awq": (("gptqmodel", "gptqmodel"),),
            "gptq": (("gptqmodel", "gptqmodel"), ("optimum", "optimum")),
            "compressed-tensors": (("compressed_tensors", "compressed-tensors"),),
            "bitsandbytes": (("bitsandbytes", "bitsandbytes"),),
            "torchao": (("torchao", "torchao"),)}
DEQUANTIZED = "+dequantized"


@dataclass(frozen=True)
class CheckpointQuant:
    """A checkpoint's declared quantization: its method, the label finbench gives it, and the raw
    `quantization_config`."""

    method: str
    label: str
    config: dict[str, Any] = field(hash=False)

    @property
    def fp8(self) -> bool:
        return self.method == "fp8"

    @property
    def block(self) -> tuple[int, int] | None:
        size = self.config.get("weight_block_size")
        return (int(size[0]), int(size[1])) if self.fp8 and size else None


def read_config_json(source: str) -> dict[str, Any] | None:
    """config.json of a local folder, or of a hub id in the local Hugging Face cache (offline, never
    a download), as a dict; None when neither is at hand or it is not a JSON object. The one reader
    of a checkpoint's config.json (models/families.py `read_checkpoint` reads it once per load)."""
    path = Path(source) / "config.json"
    if not path.is_file() and not Path(source).exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(source, "config.json")
        except Exception:  # a malformed id: the loader reports it
            return None
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def declared_quantization(source: str) -> CheckpointQuant | None:
    """The `quantization_config` of a local folder's config.json (or a hub id's cached one,
    offline), described; None for an unquantized checkpoint."""
    return described_quantization(read_config_json(source))


def described_quantization(config_json: dict[str, Any] | None) -> CheckpointQuant | None:
    """A config.json's `quantization_config`, described; None for an unquantized checkpoint."""
    config = (config_json or {}).get("quantization_config")
    if not isinstance(config, dict) or not config:
        return None
    method = str(config.get("quant_method", "unknown")).lower()
    return CheckpointQuant(method=method, label=_label(method, config), config=config)


def _label(method: str, config: dict[str, Any]) -> str:
    if method == "fp8":
        block = config.get("weight_block_size")
        if not block:
            return "fp8-tensor"
        return f"fp8-block{block[0]}" if block[0] == block[1] else f"fp8-block{block[0]}x{block[1]}"
    if method in ("awq", "gptq"):
        return f"{method}-{config.get('bits', '?')}bit-g{config.get('group_size', '?')}"
    if method == "bitsandbytes":
        if config.get("load_in_8bit"):
            return "bnb-8bit"
        return f"bnb-4bit-{config.get('bnb_4bit_quant_type', 'fp4')}"
    if method == "compressed-tensors":
        groups = config.get("config_groups") or {}
        schemes = sorted({f"w{(g.get('weights') or {}).get('num_bits', 16)}"
                          f"a{(g.get('input_activations') or {}).get('num_bits', 16)}"
                          f"-{(g.get('weights') or {}).get('type', 'int')}" for g in groups.values()})
        return f"compressed-tensors:{config.get('format', 'dense')}:{'+'.join(schemes) or 'dense'}"
    if method == "torchao":
        kind = config.get("quant_type")
        name = kind.get("default", {}).get("_type") if isinstance(kind, dict) else kind
        return f"torchao:{name or 'unknown'}"
    return method


def missing_package(quant: CheckpointQuant) -> str | None:
    """One line naming the package a checkpoint's format needs when it is not installed."""
    missing = [pip for module, pip in PACKAGES.get(quant.method, ()) if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    return (f"this checkpoint is quantized ({quant.label}) and loading it needs {' and '.join(missing)}: "
            f"pip install {' '.join(missing)}")


def dequantized_refusal(quant: CheckpointQuant, device: torch.device, allow_dequantized: bool) -> str | None:
    """An FP8 checkpoint on a device without FP8 matmuls would be silently dequantized to bf16:
    one line, unless --allow-dequantized."""
    from finbench.models.fp8 import fp8_matmul_unavailable

    if not quant.fp8 or allow_dequantized:
        return None
    reason = fp8_matmul_unavailable(device)
    if reason is None:
        return None
    return (f"this checkpoint is {quant.label} and {reason}: transformers would dequantize it to bf16 and run an "
            "unquantized model; pass --allow-dequantized to run it dequantized (labelled so)")


def dequantizes_here(quant: CheckpointQuant, device: torch.device) -> bool:
    from finbench.models.fp8 import fp8_matmul_unavailable

    return quant.fp8 and fp8_matmul_unavailable(device) is not None


def load_kwargs(quant: CheckpointQuant, source: str, device: torch.device) -> dict[str, Any]:
    """`from_pretrained` keywords for this checkpoint on `device` (its own format otherwise)."""
    placement = {"device_map": {"": device.index or 0}} if device.type == "cuda" else {"device_map": {"": "cpu"}}
    if not quant.fp8:
        return placement if quant.method in ("bitsandbytes", "awq", "gptq") else {}
    from transformers import FineGrainedFP8Config

    settings = {k: v for k, v in quant.config.items()
                if k in ("activation_scheme", "weight_block_size", "modules_to_not_convert")}
    if dequantizes_here(quant, device):
        return {"quantization_config": FineGrainedFP8Config(**settings, dequantize=True)}
    # keep every layer the checkpoint stores unquantized out of the FP8 swap, by the checkpoint's own names
    skip = sorted(set(settings.get("modules_to_not_convert") or []) | set(unquantized_layers(source)))
    return {"quantization_config": FineGrainedFP8Config(**{**settings, "modules_to_not_convert": skip}), **placement}


def checkpoint_folder(source: str) -> Path:
    """A local folder as given; a hub id's snapshot in the local Hugging Face cache (offline: no
    download); the path as given when neither exists."""
    if Path(source).is_dir():
        return Path(source)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=True))
    except Exception:  # noqa: BLE001 — not cached, or not an id: the loader reports it
        return Path(source)


def unquantized_layers(source: str) -> list[str]:
    """Module names (the checkpoint's spelling) of 2-D weights stored without `weight_scale_inv`."""
    from safetensors import safe_open

    keys: set[str] = set()
    for path in sorted(checkpoint_folder(source).glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            keys.update(handle.keys())
    return sorted(k.removesuffix(".weight") for k in keys
                  if k.endswith(".weight") and k.removesuffix(".weight") + ".weight_scale_inv" not in keys
                  and "norm" not in k and "embed" not in k)


def serve_fp8_blocks(model: torch.nn.Module, block: tuple[int, int], device: torch.device) -> str:
    """Swap every layer that holds FP8 weights with `weight_scale_inv` (transformers' FP8Linear)
    for `Fp8BlockLinear`, keeping the loaded tensors; returns the kernels used ("blockwise",
    "kblocks", or both joined by +)."""
    from finbench.models.fp8 import FP8, Fp8BlockLinear, block_kernel, layer_kernel

    kernel, used = block_kernel(str(device)), set()
    for name, module in list(model.named_modules()):
        weight = getattr(module, "weight", None)
        scale_inv = getattr(module, "weight_scale_inv", None)
        if not isinstance(weight, torch.Tensor) or weight.dtype != FP8 or not isinstance(scale_inv, torch.Tensor):
            continue
        if scale_inv.dim() != 2:
            raise ValueError(f"{name}: per-tensor FP8 scales are not supported (block scales expected)")
        bias = module.bias.detach() if getattr(module, "bias", None) is not None else None
        chosen = layer_kernel(kernel, weight.shape[1], block[1])
        used.add(chosen)
        model.set_submodule(name, Fp8BlockLinear(weight.detach(), scale_inv.detach(), block, bias, chosen))
    return "+".join(sorted(used)) or kernel
