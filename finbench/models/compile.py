"""Regional `torch.compile` of the vision tower's repeated blocks (`--compile-vision`).

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
see `vision_attention.transformers_attention`). The language model's decoder layers are left
alone: their KV cache objects change between calls, and Dynamo recompiles for every layer.
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


def compile_unavailable(device: torch.device) -> str | None:
    """Why torch.compile cannot generate code for `device` on this machine, or None."""
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "Triton is not installed (torch.compile's GPU code generator)"
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (g++ or clang++) for torch.compile's CPU code generator"
    return None
