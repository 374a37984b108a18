"""Tiny checkpoints for quantization tests, built offline: kernel-friendly widths, and pre-quantized
folders in each format's own on-disk layout.

Widths: every language-model linear layer has in and out features that are multiples of 128
(hidden 256 with 16 heads of 16 and 8 KV heads, MLP 512; vision tower 128), so bitsandbytes 4-bit
(which fails on < 64 input features), torchao int4 (groups of 128), FP8 `_scaled_mm` (multiples of
16) and 128×128 FP8 blocks all accept them. Qwen3.5's fixed linear-attention heads stay 64 wide.

Formats (`make_tiny_quantized(family, out, FORMAT)`, `finbench models make-tiny FAMILY DIR --quant FORMAT`):
- `bf16`: unquantized, for `--quant 8bit|4bit|int8wo|int4wo|fp8` runs;
- `fp8-block128`: the layout of Qwen's -FP8 releases: each quantized layer's `weight` in
  float8_e4m3fn with a float32 `weight_scale_inv` [out/128, in/128], and config.json's
  `quantization_config` {quant_method: fp8, fmt: e4m3, activation_scheme: dynamic,
  weight_block_size: [128, 128], modules_to_not_convert: the layers stored in bf16};
- `bnb-8bit`, `bnb-4bit`: bitsandbytes' own save path (`save_pretrained` of a bnb-loaded model);
- `torchao-int8wo`: torchao's own save path (TorchAoConfig, safetensors);
- `compressed-tensors-w8a16`: compressed-tensors' own save path (`ModelCompressor`, pack-quantized
  int8 weights in groups of 128, symmetric), scales from each group's max;
- `awq-4bit`, `gptq-4bit`: the AutoAWQ GEMM and GPTQ (v1) packed int32 layouts, written here
  (their loaders need gptqmodel, which is not installed on these machines).
Weights are random, as every tiny model's: the folders test loading, labelling and refusals.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from finbench.models.library_logs import quiet_library_import
from finbench.offline.bpe import TINY_MARKER
from finbench.offline.tiny import make_tiny

QUANT_HIDDEN = 256
QUANT_VISION_HIDDEN = 128
BLOCK = 128
TINY_QUANT_FORMATS: dict[str, str] = {
    "bf16": "unquantized, kernel-friendly widths (for on-the-fly --quant runs)",
    "fp8-block128": "FP8 e4m3 weights + weight_scale_inv per 128x128 block (Qwen -FP8 layout)",
    "bnb-8bit": "bitsandbytes LLM.int8, saved by bitsandbytes",
    "bnb-4bit": "bitsandbytes NF4, saved by bitsandbytes",
    "torchao-int8wo": "torchao int8 weight-only, saved by torchao",
    "compressed-tensors-w8a16": "compressed-tensors pack-quantized int8 weights, saved by compressed-tensors",
    "awq-4bit": "AWQ GEMM int4 packed layout (loading needs gptqmodel)",
    "gptq-4bit": "GPTQ v1 int4 packed layout (loading needs gptqmodel and optimum)",
}
_PACKAGES = {"bnb": ("bitsandbytes", "bitsandbytes"), "torchao": ("torchao", "torchao"),
             "compressed": ("compressed_tensors", "compressed-tensors")}
# names (either spelling: checkpoint or module tree) of what stays unquantized in every format
_KEEP = ("lm_head", "visual", "vision_tower", "vision_model", "multi_modal_projector", "embed", "norm")


def make_tiny_quantized(family: str, out_dir: str | Path, fmt: str, seed: int = 0) -> Path:
    """Build a tiny `family` checkpoint into `out_dir` in quantization format `fmt`."""
    if fmt not in TINY_QUANT_FORMATS:
        raise ValueError(f"--quant {fmt}: tiny builds exist for {', '.join(TINY_QUANT_FORMATS)}")
    package = _PACKAGES.get(fmt.split("-")[0])
    if package and importlib.util.find_spec(package[0]) is None:
        raise ValueError(f"--quant {fmt}: building it needs {package[1]}: pip install {package[1]}")
    out = Path(out_dir)
    if fmt == "bf16" or fmt in _REWRITES:
        make_tiny(family, out, seed=seed, hidden_size=QUANT_HIDDEN, vision_hidden_size=QUANT_VISION_HIDDEN)
        if fmt in _REWRITES:
            _REWRITES[fmt](out)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            source = make_tiny(family, Path(scratch) / "bf16", seed=seed, hidden_size=QUANT_HIDDEN,
                               vision_hidden_size=QUANT_VISION_HIDDEN)
            _SAVED_BY_LIBRARY[fmt](source, out)
            for path in source.iterdir():  # processor, tokenizer, generation config, marker
                if path.suffix != ".safetensors" and path.name not in ("config.json", "model.safetensors.index.json") \
                        and not (out / path.name).exists():
                    shutil.copy2(path, out / path.name)
    _mark(out, fmt)
    return out


def _mark(out: Path, fmt: str) -> None:
    marker = out / TINY_MARKER
    meta = json.loads(marker.read_text(encoding="utf-8")) if marker.is_file() else {}
    meta["quant"] = {"format": fmt, "layout": TINY_QUANT_FORMATS[fmt]}
    marker.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _quantizable(name: str, tensor: Any) -> bool:
    """A language-model linear weight that splits into 128-wide blocks (the checkpoint's spelling)."""
    return (name.endswith(".weight") and tensor.dim() == 2 and not any(k in name for k in _KEEP)
            and tensor.shape[0] % BLOCK == 0 and tensor.shape[1] % BLOCK == 0)


def _rewrite(folder: Path, convert: Callable[[str, Any], dict[str, Any]], quantization_config: dict[str, Any]) -> None:
    """Rewrite every safetensors file: each quantizable weight becomes `convert(name, tensor)`'s
    tensors; the layers left alone are listed in `modules_to_not_convert` where the format has one."""
    from safetensors.torch import load_file, save_file

    kept: list[str] = []
    for path in sorted(folder.glob("*.safetensors")):
        tensors = load_file(str(path))
        rewritten: dict[str, Any] = {}
        for name, tensor in tensors.items():
            if _quantizable(name, tensor):
                rewritten.update(convert(name.removesuffix(".weight"), tensor))
            else:
                rewritten[name] = tensor
                if name.endswith(".weight") and tensor.dim() == 2 and "embed" not in name:
                    kept.append(name.removesuffix(".weight"))
        save_file(rewritten, str(path), metadata={"format": "pt"})
    if "modules_to_not_convert" in quantization_config:
        quantization_config["modules_to_not_convert"] = sorted(kept)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["quantization_config"] = quantization_config
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ---- layouts written here ----------------------------------------------------------------------
def _fp8_blocks(folder: Path) -> None:
    from finbench.models.fp8 import quantize_blocks

    def convert(prefix: str, weight: Any) -> dict[str, Any]:
        q, scale_inv = quantize_blocks(weight, (BLOCK, BLOCK))
        return {f"{prefix}.weight": q, f"{prefix}.weight_scale_inv": scale_inv}

    _rewrite(folder, convert, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": []})


def _int4_groups(weight: Any, group: int = BLOCK) -> tuple[Any, Any, Any]:
    """W [N, K] → (q [K, N] in 0..15, scales [K/g, N], zeros [K/g, N]), asymmetric per group of K."""
    import torch

    w = weight.float().t().reshape(weight.shape[1] // group, group, weight.shape[0])  # [K/g, g, N]
    low, high = w.amin(dim=1), w.amax(dim=1)
    scales = ((high - low) / 15).clamp(min=1e-8)
    zeros = torch.round(-low / scales).clamp(0, 15)
    q = torch.round(w / scales[:, None] + zeros[:, None]).clamp(0, 15).to(torch.int32)
    return q.reshape(weight.shape[1], weight.shape[0]), scales, zeros.to(torch.int32)


def _pack_columns(values: Any, order: tuple[int, ...]) -> Any:
    """[R, C] int4 values → [R, C/8] int32: eight consecutive columns per word, nibble i holding
    column `order[i]` of the eight."""
    import torch

    grouped = values.reshape(values.shape[0], -1, 8)[:, :, list(order)].to(torch.int64)
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)
    return _as_int32((grouped << shifts).sum(-1))


def _pack_rows(values: Any) -> Any:
    """[R, C] int4 values → [R/8, C] int32: eight consecutive rows per word (GPTQ's qweight)."""
    import torch

    grouped = values.reshape(-1, 8, values.shape[1]).to(torch.int64)
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)[None, :, None]
    return _as_int32((grouped << shifts).sum(1))


def _as_int32(words: Any) -> Any:
    """Unsigned 32-bit words held in int64 → the int32 with the same bits."""
    import torch

    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ GEMM's nibble order


def _awq(folder: Path) -> None:
    import torch

    def convert(prefix: str, weight: Any) -> dict[str, Any]:
        q, scales, zeros = _int4_groups(weight)
        return {f"{prefix}.qweight": _pack_columns(q, AWQ_ORDER), f"{prefix}.qzeros": _pack_columns(zeros, AWQ_ORDER),
                f"{prefix}.scales": scales.to(torch.float16)}

    _rewrite(folder, convert, {"quant_method": "awq", "bits": 4, "group_size": BLOCK, "version": "gemm",
                               "zero_point": True, "modules_to_not_convert": []})


def _gptq(folder: Path) -> None:
    import torch

    def convert(prefix: str, weight: Any) -> dict[str, Any]:
        q, scales, zeros = _int4_groups(weight)
        k = weight.shape[1]
        return {f"{prefix}.qweight": _pack_rows(q), f"{prefix}.qzeros": _pack_columns(zeros - 1, tuple(range(8))),
                f"{prefix}.scales": scales.to(torch.float16),
                f"{prefix}.g_idx": (torch.arange(k, dtype=torch.int32) // BLOCK)}

    _rewrite(folder, convert, {"quant_method": "gptq", "bits": 4, "group_size": BLOCK, "desc_act": False,
                               "sym": False, "checkpoint_format": "gptq", "true_sequential": True})


_REWRITES: dict[str, Callable[[Path], None]] = {"fp8-block128": _fp8_blocks, "awq-4bit": _awq, "gptq-4bit": _gptq}


# ---- layouts saved by the libraries themselves -------------------------------------------------
def _bnb(bits: int) -> Callable[[Path, Path], None]:
    def save(source: Path, out: Path) -> None:
        import torch
        from transformers import AutoModelForImageTextToText, BitsAndBytesConfig

        from finbench.models.quant import bnb_skip_patterns

        config = (BitsAndBytesConfig(load_in_8bit=True) if bits == 8 else
                  BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32))
        config.llm_int8_skip_modules = ["lm_head", *bnb_skip_patterns()]
        model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch.float32, quantization_config=config,
                                                            device_map={"": "cpu"})
        model.save_pretrained(out)

    return save


def _torchao_int8wo(source: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForImageTextToText, TorchAoConfig

    with quiet_library_import():
        from torchao.quantization import Int8WeightOnlyConfig
    config = TorchAoConfig(quant_type=Int8WeightOnlyConfig(),
                           modules_to_not_convert=["lm_head", "model.visual", "model.vision_tower",
                                                   "model.multi_modal_projector"])
    model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch.bfloat16, quantization_config=config)
    model.save_pretrained(out)


def _compressed_tensors_w8a16(source: Path, out: Path) -> None:
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus, apply_quantization_config,
                                                 preset_name_to_scheme)
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch.bfloat16)
    # patterns, not names: transformers 5 renames `visual.*` to `model.visual.*` on load, so an
    # ignore list of explicit names would miss the vision tower and quantize it from random weights
    ignore = ["lm_head", "re:.*visual.*", "re:.*vision_tower.*", "re:.*multi_modal_projector.*"]
    scheme = preset_name_to_scheme("W8A16", ["Linear"])  # int8 symmetric, groups of 128
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=ignore,
                                                        quantization_status=QuantizationStatus.INITIALIZED))
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "quantization_scheme", None) is None:
                continue
            groups = module.weight_scale.shape[1]
            weight = module.weight.float()
            scale = weight.reshape(weight.shape[0], groups, -1).abs().amax(dim=-1) / 127
            module.weight_scale.copy_(scale.clamp(min=1e-8).to(module.weight_scale.dtype))
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(str(out))
    config_path = out / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["quantization_config"]["ignore"] = ignore
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


_SAVED_BY_LIBRARY: dict[str, Callable[[Path, Path], None]] = {
    "bnb-8bit": _bnb(8), "bnb-4bit": _bnb(4), "torchao-int8wo": _torchao_int8wo,
    "compressed-tensors-w8a16": _compressed_tensors_w8a16,
}
