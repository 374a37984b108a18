"""GEMM widths padded with zeros to a multiple of 64 at load, where that is exact.

Why: in the H200 profile of Qwen2.5-VL-7B (benchmarks/results/gpu_profile_qwen2.5-vl-7b.txt) the
vision MLP's three GEMMs ran in `cutlass_80_tensorop_bf16_s16816gemm`, an Ampere fallback, at
~240 TFLOP/s while every other GEMM reached ~790: their width 3420 × 2 bytes is not a multiple of
16 bytes, so cuBLAS cannot take its Hopper kernels. 224 ms of 1,161 ms of device time per profiled
batch. Padding 3420 → 3456 adds 1% of that MLP's FLOPs and removes the misalignment.

What is padded: the hidden width of an MLP — the output rows of its first GEMM(s) (`gate_proj`
and `up_proj`, or `fc1` / `linear_fc1`) and the matching input columns of its last one
(`down_proj`, `fc2` / `linear_fc2`). The new rows and columns are zeros (bias rows too), so each
padded hidden unit computes act(0) (times up(x) = 0 in a gated MLP) and the last GEMM multiplies
it by a zero column: it adds exact zeros, whatever the activation (a finite act(0)). Only the
summation length of the last GEMM changes, so fp32 results agree to rounding (≤ 1e-6).

Only plain `nn.Linear` layers with ordinary weights are touched (a quantized layer keeps its
shape). Each padded MLP is checked once on a random input against its unpadded self before the
new weights are kept: a module whose forward does not follow the pattern is left as it was.
"""

from __future__ import annotations

from typing import Any

import torch

ALIGN = 64  # pad widths to a multiple of this many elements (128 bytes in bf16)
# (first GEMMs, last GEMM) attribute names of the MLP shapes padded here
PATTERNS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("gate_proj", "up_proj"), "down_proj"),  # gated (SwiGLU): down(act(gate(x)) * up(x))
    (("fc1",), "fc2"),  # two-layer: fc2(act(fc1(x)))
    (("linear_fc1",), "linear_fc2"),
)


def padded_width(width: int, multiple: int = ALIGN) -> int:
    """The smallest multiple of `multiple` that is ≥ `width`."""
    return -(-width // multiple) * multiple


def _plain_linear(module: Any) -> bool:
    return (type(module) is torch.nn.Linear and type(module.weight) is torch.nn.Parameter
            and type(module.weight.data) is torch.Tensor and module.weight.is_floating_point()
            and module.weight.device.type != "meta")  # offloaded weights (accelerate) stay as they are


def _pattern(module: Any) -> tuple[list[torch.nn.Linear], torch.nn.Linear] | None:
    for firsts, last in PATTERNS:
        layers = [getattr(module, name, None) for name in (*firsts, last)]
        if all(_plain_linear(layer) for layer in layers):
            width = layers[-1].in_features
            if all(layer.out_features == width for layer in layers[:-1]):
                return layers[:-1], layers[-1]
    return None


def _grown(weight: torch.Tensor, rows: int, columns: int) -> torch.nn.Parameter:
    """`weight` with `rows` zero rows and `columns` zero columns appended (a 1-D bias: rows)."""
    if weight.ndim == 1:
        return torch.nn.Parameter(torch.cat([weight, weight.new_zeros(rows)]), requires_grad=False)
    grown = weight.new_zeros(weight.shape[0] + rows, weight.shape[1] + columns)
    grown[: weight.shape[0], : weight.shape[1]] = weight
    return torch.nn.Parameter(grown, requires_grad=False)


@torch.no_grad()
def pad_mlp(mlp: Any, multiple: int = ALIGN) -> tuple[int, int] | None:
    """Pad one MLP's hidden width in place; (old, new) width, or None when nothing was padded
    (already aligned, not a known shape, or the check below failed)."""
    found = _pattern(mlp)
    if found is None:
        return None
    firsts, last = found
    width = last.in_features
    new = padded_width(width, multiple)
    if new == width:
        return None
    weight = last.weight
    probe = torch.randn(2, firsts[0].in_features, generator=torch.Generator().manual_seed(0)).to(weight.device,
                                                                                                weight.dtype)
    expected = mlp(probe)
    saved = [(layer, layer.weight, layer.bias) for layer in (*firsts, last)]
    for layer in firsts:
        layer.weight = _grown(layer.weight, new - width, 0)
        if layer.bias is not None:
            layer.bias = _grown(layer.bias, new - width, 0)
        layer.out_features = new
    last.weight = _grown(last.weight, 0, new - width)
    last.in_features = new
    got = mlp(probe)
    tolerance = 1e-4 if weight.dtype == torch.float32 else 2e-2
    if got.shape != expected.shape or not torch.allclose(got.float(), expected.float(), rtol=tolerance,
                                                         atol=tolerance * float(expected.abs().max())):
        for layer, old_weight, old_bias in saved:  # not the pattern after all: leave it alone
            layer.weight, layer.bias = old_weight, old_bias
            layer.in_features, layer.out_features = old_weight.shape[1], old_weight.shape[0]
        return None
    return width, new


def pad_gemm_widths(model: Any, multiple: int = ALIGN) -> dict[str, list[int]]:
    """Pad every MLP of `model` whose hidden width is not a multiple of `multiple`, in place.
    Returns {MLP class: [old width, new width]} for the fingerprint ({} when none needed it)."""
    padded: dict[str, list[int]] = {}
    for module in list(model.modules()):
        widths = pad_mlp(module, multiple)
        if widths is not None:
            padded[type(module).__name__] = list(widths)
    return padded
