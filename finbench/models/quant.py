"""`--quant`: on-the-fly quantization formats, applied at load, and what a loaded model really holds.

| --quant  | library                         | weights / activations                              | runs on       |
|----------|---------------------------------|----------------------------------------------------|---------------|
| 8bit     | bitsandbytes (LLM.int8)         | int8 per row, outliers in fp16 / fp16             | CPU, CUDA     |
| 4bit     | bitsandbytes (NF4)              | NF4, blocks of 64 / compute dtype                  | CPU, CUDA     |
| int8wo   | torchao Int8WeightOnlyConfig    | int8 per row / model dtype                         | CPU, CUDA     |
| int4wo   | torchao (CUDA: Int4WeightOnly tile-packed; CPU: IntxWeightOnly int4 values in int8 storage) | int4, groups of 128 / model dtype | CPU, CUDA |
| fp8      | finbench over torch._scaled_mm (models/fp8.py) | fp8 e4m3 per row / fp8 per token, dynamic | CUDA capability >= 8.9 |

Only the language model's linear layers are quantized: the vision tower (unless `--quant-vision`)
and the LM head stay in the model dtype — the constrained decoders gather LM-head rows directly
(models/base.py `output_rows`), and quantization studies are about the language model.

After loading, `inspect_quantization` walks the modules and records what is really quantized
(count, types, bits, storage); the fingerprint carries it, and `untouched_refusal` refuses a load
whose language model stayed mostly in high precision (bitsandbytes and torchao leave fused 3-D
MoE expert tensors alone). Pre-quantized checkpoints are models/quant_checkpoint.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from finbench.core.types import QUANT_CHOICES  # the names: checked at start-up without torch
from finbench.models.library_logs import quiet_library_import
import finbench.models.quant_checkpoint as quant_checkpoint
from finbench.models.quant_checkpoint import DEQUANTIZED, serve_fp8_blocks

# the model parts a name belongs to (the families' module trees: Qwen-VL `model.visual`, InternVL-hf
# `model.vision_tower` + `model.multi_modal_projector`, all `model.language_model` and `lm_head`)
VISION_PARTS = ("visual", "vision_tower", "vision_model", "multi_modal_projector")
# below this share of the language model's matrix weights quantized, a format did not really apply
MIN_QUANTIZED_SHARE = 0.5
INT4_GROUP = 128


@dataclass(frozen=True)
class QuantFormat:
    """One `--quant` value: what it needs, where it runs, how it is labelled."""

    name: str
    library: str
    package: str  # import name that must be installed ("" for none)
    pip: str  # what to install when it is missing
    bits: int
    cuda_only: bool
    summary: str


FORMATS = {
    "8bit": QuantFormat("8bit", "bitsandbytes", "bitsandbytes", "finbench[quant]", 8, False,
                        "bitsandbytes LLM.int8 weights (int8 per row, fp16 outliers)"),
    "4bit": QuantFormat("4bit", "bitsandbytes", "bitsandbytes", "finbench[quant]", 4, False,
                        "bitsandbytes NF4 weights (blocks of 64)"),
    "int8wo": QuantFormat("int8wo", "torchao", "torchao", "finbench[quant]", 8, False,
                          "torchao int8 weight-only (per row)"),
    "int4wo": QuantFormat("int4wo", "torchao", "torchao", "finbench[quant]", 4, False,
                          f"torchao int4 weight-only (groups of {INT4_GROUP})"),
    "fp8": QuantFormat("fp8", "torch._scaled_mm", "", "", 8, True,
                       "fp8 e4m3 W8A8: weights per row, activations per token, dynamic"),
}


def quant_unavailable(quant: str, device: torch.device) -> str | None:
    """Why `--quant quant` cannot run on `device`, as one line (before any weights load)."""
    if quant == "none":
        return None
    if quant not in FORMATS:
        return f"--quant {quant}: expected one of {', '.join(QUANT_CHOICES)}"
    spec = FORMATS[quant]
    if spec.cuda_only:
        from finbench.models.fp8 import fp8_matmul_unavailable

        reason = fp8_matmul_unavailable(device)
        if reason:
            return f"--quant {quant}: {reason}"
    if spec.package and not _installed(spec.package):
        return f"--quant {quant} needs {spec.package}: pip install '{spec.pip}'"
    return None


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def part_of(name: str) -> str:
    """Which part of a vision-language model a module name belongs to."""
    dotted = f".{name}."
    if name == "lm_head" or name.endswith(".lm_head"):
        return "lm_head"
    if any(f".{p}." in dotted for p in VISION_PARTS):
        return "vision"
    if ".language_model." in dotted:
        return "language_model"
    return "other"


def in_scope(name: str, quant_vision: bool) -> bool:
    """Whether `--quant` quantizes the module `name` (the language model; the vision tower too with
    --quant-vision; never the LM head)."""
    part = part_of(name)
    return part == "language_model" or (quant_vision and part == "vision")


def load_kwargs(quant: str, device: torch.device, quant_vision: bool = False) -> dict[str, Any]:
    """`from_pretrained` keywords of a format applied while the weights load (bitsandbytes);
    {} for the formats applied after loading (`quantize_loaded`)."""
    if quant not in ("8bit", "4bit"):
        return {}
    from transformers import BitsAndBytesConfig

    if quant == "8bit":
        config = BitsAndBytesConfig(load_in_8bit=True)
    else:
        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                    bnb_4bit_compute_dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    # bitsandbytes skips by name: the LM head always, the vision tower unless asked
    config.llm_int8_skip_modules = ["lm_head", *(() if quant_vision else bnb_skip_patterns())]
    device_map = {"": device.index or 0} if device.type == "cuda" else {"": "cpu"}
    return {"quantization_config": config, "device_map": device_map}


def bnb_skip_patterns() -> list[str]:
    """The vision parts as bitsandbytes' skip list matches them: transformers 5.24 matches a name
    from its start (as a regex) or its end, so `visual` alone misses `model.visual.blocks.0…` (the
    vision tower was quantized with it); older releases match substrings. Both spellings."""
    return [*VISION_PARTS, *(f".*{part}" for part in VISION_PARTS)]


def quantize_loaded(model: torch.nn.Module, quant: str, device: torch.device, quant_vision: bool = False) -> None:
    """Apply a format that works on loaded weights, in place (torchao, fp8); nothing for the
    others. The model is on `device` already."""
    if quant in ("int8wo", "int4wo"):
        with quiet_library_import():
            from torchao.quantization import quantize_

        names = {id(m): n for n, m in model.named_modules()}

        def wanted(module: torch.nn.Module, name: str) -> bool:
            return would_quantize(module, names.get(id(module), name), quant, quant_vision)

        quantize_(model, _torchao_config(quant, device), filter_fn=wanted)
    elif quant == "fp8":
        from finbench.models.fp8 import Fp8Linear, share_activations

        for name, module in list(model.named_modules()):
            if would_quantize(module, name, quant, quant_vision):
                model.set_submodule(name, Fp8Linear.from_linear(module))
        share_activations(model)  # q/k/v and gate/up quantize their shared input once


def would_quantize(module: torch.nn.Module, name: str, quant: str, quant_vision: bool = False) -> bool:
    """The rule of every on-the-fly format: a plain linear layer in scope whose shape fits the
    format (bitsandbytes skips by name what is out of scope, and fits every shape). The sweep
    applies it to the module tree before any weights load (models/quant_share.py)."""
    return quant != "none" and type(module) is torch.nn.Linear and in_scope(name, quant_vision) and fits(module, quant)


def fits(linear: torch.nn.Linear, quant: str) -> bool:
    """Whether a layer's shape suits the format's kernel (int4: whole groups of 128 inputs; fp8:
    multiples of 16); a layer that does not stays in high precision, and the inspection says so."""
    if quant == "int4wo":
        return linear.in_features % INT4_GROUP == 0
    if quant == "fp8":
        return linear.in_features % 16 == 0 and linear.out_features % 16 == 0
    return True


def _torchao_config(quant: str, device: torch.device) -> Any:
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerGroup

    if quant == "int8wo":
        return Int8WeightOnlyConfig()
    if device.type == "cuda":  # tinygemm int4 kernels (bf16 activations)
        return Int4WeightOnlyConfig(group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d")
    # torchao 0.18 has no packed int4 CPU layout for x86: int4 values, stored one per int8
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(INT4_GROUP))


# ---- what is really quantized ------------------------------------------------------------------
def weight_kind(module: torch.nn.Module) -> tuple[str, int | None, str] | None:
    """(kind, bits, storage dtype) of a module's weight matrix: kind is the quantized tensor or
    layer type, or "high precision"; bits None when not quantized. None for modules without a
    matrix weight (norms, embeddings, convolutions count elsewhere or not at all)."""
    if isinstance(module, (torch.nn.Embedding, torch.nn.modules.conv._ConvNd)):
        return None
    scheme = getattr(module, "quantization_scheme", None)  # compressed-tensors (weights may be packed)
    if isinstance(module, torch.nn.Linear) and getattr(scheme, "weights", None) is not None:
        stored = getattr(module, "weight_packed", None)
        stored = stored if isinstance(stored, torch.Tensor) else getattr(module, "weight", None)
        dtype = str(getattr(stored, "dtype", "")).removeprefix("torch.")
        return f"compressed-tensors({scheme.weights.type}{scheme.weights.num_bits})", int(scheme.weights.num_bits), dtype
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return None
    tensor_type = type(weight.data if isinstance(weight, torch.nn.Parameter) else weight).__name__
    storage = _storage_dtype(weight)
    if tensor_type == "Int8Params" or type(weight).__name__ == "Int8Params":
        return "bitsandbytes.Linear8bitLt", 8, "int8"
    if type(weight).__name__ == "Params4bit":
        quant_type = getattr(getattr(weight, "quant_state", None), "quant_type", None) or "4bit"
        return f"bitsandbytes.Linear4bit({quant_type})", 4, "uint8"
    if hasattr(weight, "__tensor_flatten__"):  # a torchao quantized tensor
        target = getattr(weight, "target_dtype", None)
        bits = {torch.int4: 4, torch.int8: 8}.get(target, 4 if "Int4" in tensor_type else 8)
        return f"torchao.{tensor_type}", bits, storage
    if weight.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return f"{type(module).__name__}(fp8)", 8, storage
    packed = getattr(module, "qweight", None)  # AWQ / GPTQ packed int32 layers
    if isinstance(packed, torch.Tensor):
        return f"{type(module).__name__}(packed)", int(getattr(module, "bits", 4)), str(packed.dtype).removeprefix("torch.")
    return "high precision", None, storage


def _storage_dtype(weight: torch.Tensor) -> str:
    inner = getattr(weight, "qdata", None)
    tensor = inner if isinstance(inner, torch.Tensor) else weight
    return str(tensor.dtype).removeprefix("torch.")


def inspect_quantization(model: torch.nn.Module) -> dict[str, Any]:
    """What the loaded model really holds, per part (language model, vision, LM head): matrix
    layers, how many are quantized, their types and bits; and the share of the language model's
    matrix elements that are quantized (`language_model_share`)."""
    parts: dict[str, dict[str, Any]] = {}
    covered: set[int] = set()
    for name, module in model.named_modules():
        kind = weight_kind(module)
        if kind is None:
            continue
        entry = parts.setdefault(part_of(name), {"layers": 0, "quantized": 0, "types": Counter(), "bits": Counter()})
        entry["layers"] += 1
        covered.update(id(p) for p in module.parameters(recurse=False))
        label, bits, _ = kind
        if bits is not None:
            entry["quantized"] += 1
            entry["types"][label] += 1
            entry["bits"][str(bits)] += 1
    for name, param in model.named_parameters():
        if id(param) in covered or param.dim() < 2 or part_of(name) != "language_model" or "embed" in name:
            continue
        if param.dtype not in QUANTIZED_DTYPES:
            parts.setdefault("language_model", {"layers": 0, "quantized": 0, "types": Counter(), "bits": Counter()}) \
                .setdefault("unquantized_tensors", Counter())[name.rsplit(".", 1)[-1]] += 1
    return {"parts": {p: {k: dict(sorted(v.items())) if isinstance(v, Counter) else v for k, v in entry.items()}
                      for p, entry in sorted(parts.items())},
            "language_model_quantized_share": language_model_share(model, lambda _, m: weight_kind(m)[1] is not None)}


QUANTIZED_DTYPES = (torch.int8, torch.uint8, torch.int32, torch.float8_e4m3fn)


def language_model_share(model: torch.nn.Module, quantized: Any) -> float:
    """The share of the language model's matrix elements that `quantized(name, module)` says are
    quantized, over its matrix layers; raw >= 2-D parameters outside them (fused MoE experts)
    count as high precision unless their dtype is a quantized one. One count for the loaded
    model's inspection and for the plan made before the load (models/quant_share.py)."""
    elements = Counter()
    covered: set[int] = set()
    for name, module in model.named_modules():
        if weight_kind(module) is None:
            continue
        covered.update(id(p) for p in module.parameters(recurse=False))
        covered.update(id(b) for b in module.buffers(recurse=False))
        if part_of(name) == "language_model":
            numel = int(module.in_features * module.out_features) if hasattr(module, "in_features") \
                else int(module.weight.numel())
            elements["quantized" if quantized(name, module) else "high"] += numel
    for name, param in model.named_parameters():
        if id(param) in covered or param.dim() < 2 or part_of(name) != "language_model" or "embed" in name:
            continue
        elements["quantized" if param.dtype in QUANTIZED_DTYPES else "high"] += int(param.numel())
    total = sum(elements.values())
    return round(elements["quantized"] / total, 4) if total else 0.0


def untouched_refusal(report: dict[str, Any], label: str) -> str | None:
    """One line when a quantized load left the language model (mostly) in high precision."""
    share = report.get("language_model_quantized_share", 0.0)
    if share >= MIN_QUANTIZED_SHARE:
        return None
    lm = report["parts"].get("language_model", {})
    left = lm.get("unquantized_tensors") or {}
    detail = (f"; left in high precision: {', '.join(f'{n} ×{c}' for n, c in left.items())}" if left else "")
    return (f"{label}: only {share:.0%} of the language model's weights were quantized "
            f"({lm.get('quantized', 0)} of {lm.get('layers', 0)} linear layers){detail} — the label would not be "
            "true, so the run is refused")


def storage_bytes(model: torch.nn.Module) -> int:
    """Bytes the weights and buffers really occupy: quantized tensor subclasses by their inner
    tensors (transformers' get_memory_footprint counts a torchao int8 weight at the model dtype)."""
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += _tensor_bytes(tensor)
    return total


def _tensor_bytes(tensor: torch.Tensor) -> int:
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None and type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        names, _ = flatten()
        return sum(_tensor_bytes(getattr(tensor, n)) for n in names if isinstance(getattr(tensor, n), torch.Tensor))
    size = tensor.numel() * tensor.element_size()
    state = getattr(tensor, "quant_state", None)  # bitsandbytes 4-bit absmax and friends
    if state is not None and isinstance(getattr(state, "absmax", None), torch.Tensor):
        size += state.absmax.numel() * state.absmax.element_size()
    scb = getattr(tensor, "SCB", None)  # bitsandbytes 8-bit row scales
    if isinstance(scb, torch.Tensor):
        size += scb.numel() * scb.element_size()
    return int(size)


# ---- the plan of one load ----------------------------------------------------------------------
@dataclass
class QuantPlan:
    """How one load quantizes: the `--quant` value or the checkpoint's own format, the
    `from_pretrained` keywords, and what to do once the weights are in (`finish`)."""

    quant: str
    checkpoint: Any  # models/quant_checkpoint.CheckpointQuant | None
    kwargs: dict[str, Any]
    dequantized: bool = False
    quant_vision: bool = False

    @property
    def placed(self) -> bool:
        """Whether from_pretrained puts the weights on the device itself (a device_map)."""
        return "device_map" in self.kwargs

    def finish(self, model: torch.nn.Module, device: torch.device) -> tuple[str, dict[str, Any] | None]:
        """Quantize what is applied after loading, serve FP8 blocks, inspect; returns (label,
        report). A load whose label would not be true raises one ValueError line."""
        if self.checkpoint is None and self.quant == "none":
            return "none", None
        fmt: dict[str, Any]
        if self.checkpoint is None:
            quantize_loaded(model, self.quant, device, self.quant_vision)
            spec = FORMATS[self.quant]
            label = self.quant
            fmt = {"name": self.quant, "library": spec.library, "summary": spec.summary,
                   "scope": "language model + vision tower" if self.quant_vision else "language model"}
        else:
            label = f"prequantized:{self.checkpoint.label}"
            fmt = {"name": self.checkpoint.label, "method": self.checkpoint.method}
            if self.dequantized:
                dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
                label += f"{DEQUANTIZED}-{str(dtype).removeprefix('torch.')}"
                fmt["dequantized"] = True
            elif self.checkpoint.method == "compressed-tensors":
                fmt["execution"] = _decompress_compressed_tensors(model)
            elif self.checkpoint.fp8:
                fmt["kernel"] = serve_fp8_blocks(model, self.checkpoint.block or (128, 128), device)
                left = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.startswith("FP8")})
                if left:
                    raise ValueError(f"{label}: {', '.join(left)} layers (fused FP8 MoE experts) need transformers' "
                                     "hub kernel, which cannot be downloaded offline")
        report = {"format": fmt, **inspect_quantization(model)}
        refused = None if self.dequantized else untouched_refusal(report, label)
        if refused:
            raise ValueError(refused)
        return label, report


def _decompress_compressed_tensors(model: torch.nn.Module) -> str:
    """compressed-tensors decompresses packed weights in a hook on the top-level forward, which
    the adapter's prefill (the base model, no LM head) never calls: decompress them now."""
    compressor = getattr(getattr(model, "hf_quantizer", None), "compressor", None)
    if compressor is not None and any(isinstance(getattr(m, "weight_packed", None), torch.Tensor)
                                      for m in model.modules()):
        compressor.decompress_model(model)
    return ("weights unpacked by compressed-tensors at load onto their quantization grid, in the model dtype; "
            "quantized activations, where the scheme has them, are simulated")


def plan_quantization(source: str, quant: str, device: torch.device, dtype: torch.dtype | None = None,
                      quant_vision: bool = False, allow_dequantized: bool = False, declared: Any = ...) -> QuantPlan:
    """The plan of a load, or one ValueError line when it cannot be honoured here (checked before
    any weights are read). `declared`: the checkpoint's own quantization as start-up read it from
    config.json (models/quant_checkpoint.py; `...`: read it here)."""
    checkpoint = quant_checkpoint.declared_quantization(source) if declared is ... else declared
    refused = quant_refusal(source, quant, device, allow_dequantized, declared=checkpoint)
    if refused:
        raise ValueError(refused)
    if checkpoint is not None:
        return QuantPlan(quant, checkpoint, quant_checkpoint.load_kwargs(checkpoint, source, device),
                         dequantized=quant_checkpoint.dequantizes_here(checkpoint, device))
    if quant == "int4wo" and device.type == "cuda" and dtype not in (None, torch.bfloat16):
        raise ValueError(f"--quant int4wo on CUDA runs bf16 activations (tinygemm); --dtype {str(dtype)[6:]} "
                         "does not apply (use --dtype auto or bfloat16)")
    return QuantPlan(quant, None, load_kwargs(quant, device, quant_vision), quant_vision=quant_vision)


def quant_refusal(source: str, quant: str, device: torch.device, allow_dequantized: bool = False,
                  declared: Any = ...) -> str | None:
    """Why this (model, --quant, device) cannot load as asked, in one line, from config.json alone
    (`declared` as read already, or `...`: read it here)."""
    checkpoint = quant_checkpoint.declared_quantization(source) if declared is ... else declared
    if checkpoint is not None:
        if quant != "none":
            return (f"--quant {quant}: {source} is already quantized ({checkpoint.label}, its config.json's "
                    "quantization_config); run it without --quant")
        return quant_checkpoint.missing_package(checkpoint) or \
            quant_checkpoint.dequantized_refusal(checkpoint, device, allow_dequantized)
    return quant_unavailable(quant, device)
