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
The rotary *application* (q·cos + rotate_half(q)·sin, the same for k: casts, a negated half-swap,
two products, a sum per tensor) is no module but a function of the family's modeling file that
the attention calls; `--compile-lm` compiles that function and gives the attention modules of the
language model that asked for it their own forward calling the compiled one (`compile_rotary`):
no library module is patched, and any other model in the process keeps the eager one.
"""

from __future__ import annotations

import importlib.util
import inspect
import shutil
import types
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
    decoder stack) and its rotary application (`compile_rotary`); returns {module class or
    function: count} ({} when it has none). Attention, caches and the decoder layers stay eager."""
    compiled: dict[str, int] = {}
    for module in language_model.modules():
        name = type(module).__name__
        if name.endswith(LANGUAGE_MODEL_SUFFIXES):
            module.compile(dynamic=True)
            compiled[name] = compiled.get(name, 0) + 1
    return {**compiled, **compile_rotary(language_model)}


def compile_unavailable(device: torch.device) -> str | None:
    """Why torch.compile cannot generate code for `device` on this machine, or None."""
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "Triton is not installed (torch.compile's GPU code generator)"
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (g++ or clang++) for torch.compile's CPU code generator"
    return None


ROTARY_FUNCTIONS = ("apply_rotary_pos_emb", "apply_multimodal_rotary_pos_emb")  # transformers' names


def compile_rotary(language_model: Any) -> dict[str, int]:
    """Compile the rotary functions the attention modules of `language_model` call, for this
    language model only; returns {function: attention modules calling it} ({} when none).

    The compile boundary is the rotary function itself (`torch.compile(apply_rotary_pos_emb)`), as
    gpt-fast compiles its own functions: each attention module of this language model gets its own
    copy of its forward (`rotary_forward`) whose global rotary name is the compiled function. The
    family's modeling file is left as it is, so every other model in the process keeps the eager one."""
    found: dict[str, int] = {}
    compiled: dict[Any, Any] = {}  # one compiled function per original, shared by this model's attentions
    for module in language_model.modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        forward = type(module).forward
        code = inspect.unwrap(forward)
        names = [n for n in ROTARY_FUNCTIONS if n in code.__code__.co_names and callable(code.__globals__.get(n))]
        if not names:
            continue
        replacements = {n: compiled.setdefault(code.__globals__[n], torch.compile(code.__globals__[n], dynamic=True))
                        for n in names}
        module.finbench_rotary_forward = types.MethodType(rotary_forward(forward, replacements), module)
        for name in names:
            found[name] = found.get(name, 0) + 1
    if found:
        set_rotary(language_model, True)
    return found


def rotary_forward(function: Any, replacements: dict[str, Any]) -> Any:
    """A copy of `function` whose global names in `replacements` resolve to them; a decorator's
    wrapper around it (`functools.wraps`: `__wrapped__`, held in its closure) is copied around the
    copy, so that the decorator still applies."""
    inner = getattr(function, "__wrapped__", None)
    cells = function.__closure__
    if inner is not None and cells and any(_holds(cell, inner) for cell in cells):
        copied_inner = rotary_forward(inner, replacements)
        cells = tuple(types.CellType(copied_inner) if _holds(cell, inner) else cell for cell in cells)
        copy = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__,
                                  cells)
        copy.__dict__.update({**function.__dict__, "__wrapped__": copied_inner})
    else:
        copy = types.FunctionType(function.__code__, {**function.__globals__, **replacements}, function.__name__,
                                  function.__defaults__, cells)
        copy.__dict__.update(function.__dict__)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    return copy


def _holds(cell: Any, value: Any) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def set_rotary(language_model: Any, on: bool) -> None:
    """Switch `language_model`'s compiled rotary on or off (gpu_check's interleaved A/B runs): its
    attention modules call their copy of the forward, or their class's."""
    language_model.finbench_compiled_rotary = on
    for module in language_model.modules():
        compiled = getattr(module, "finbench_rotary_forward", None)
        if compiled is None:
            continue
        if on:
            module.forward = compiled
        else:
            module.__dict__.pop("forward", None)
