"""Regional `torch.compile` of the vision tower's repeated blocks (`--compile-vision`) and of the
language model's elementwise modules (`--compile-lm`).

On the H200 the Qwen2.5-VL vision tower ran 16 charts at ~175 TFLOP/s (bench_vision_h200.txt)
although its matmuls are large (64k patches × 1280 wide): much of its time is elementwise work that
transformers writes as separate fp32 kernels — RMSNorm (cast, square, mean, rsqrt, scale, cast
back, weight) and the vision rotary embedding (casts, two products, a negated half-swap, a sum, a
cast back), each a full pass over a [patches, width] tensor. Inductor fuses each chain into one
pass with the same fp32 arithmetic (explicit casts are kept), so results agree to rounding.

Only the repeated blocks are compiled (PyTorch's "regional compilation" recipe): transformers
lists them in `_no_split_modules`, and every block of a class shares one compiled graph, so
compiling costs one block's time, not the tower's. `dynamic=True` because patch counts change with
every batch. finbench's packed vision attention stays eager (it chooses its kernel on the host;
see `vision_attention.transformers_attention`).

`--compile-lm` does not compile the decoder layers whole: their KV cache objects change between
calls, and Dynamo recompiles for every layer. It compiles the modules inside them that are pure
elementwise chains between GEMMs — RMSNorm (cast, square, mean, rsqrt, scale, cast back, weight),
the MLP (its GEMMs stay cuBLAS calls; Inductor fuses the activation and the gate product around
them) and the rotary embedding (cos/sin of the positions) — and leaves attention and the caches
eager. In the H200 profile of Qwen2.5-VL-7B these chains were ~9–11 ms per item of the prefill.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

import torch


def repeated_block_classes(model: Any) -> set[str]:
    """Class names of the repeated blocks, as the model declares them for device maps."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def compile_vision_blocks(model: Any) -> dict[str, int]:
    """Compile in place every repeated block of the vision tower; returns {block class: count}
    ({} when the model declares none, e.g. a family without `_no_split_modules`)."""
    classes = {name for name in repeated_block_classes(model) if "vision" in name.lower()}
    compiled: dict[str, int] = {}
    for module in model.modules():
        name = type(module).__name__
        if name in classes:
            module.compile(dynamic=True)
            compiled[name] = compiled.get(name, 0) + 1
    return compiled


LANGUAGE_MODEL_SUFFIXES = ("RMSNorm", "MLP", "RotaryEmbedding")  # module classes --compile-lm compiles


def compile_language_model(language_model: Any) -> dict[str, int]:
    """Compile in place the RMSNorm, MLP and rotary-embedding modules of `language_model` (the
    decoder stack); returns {module class: count} ({} when it has none). Attention, caches and the
    decoder layers themselves stay eager."""
    compiled: dict[str, int] = {}
    for module in language_model.modules():
        name = type(module).__name__
        if name.endswith(LANGUAGE_MODEL_SUFFIXES):
            module.compile(dynamic=True)
            compiled[name] = compiled.get(name, 0) + 1
    return compiled


def compile_unavailable(device: torch.device) -> str | None:
    """Why torch.compile cannot generate code for `device` on this machine, or None."""
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "Triton is not installed (torch.compile's GPU code generator)"
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (g++ or clang++) for torch.compile's CPU code generator"
    return None
