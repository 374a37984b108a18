"""FP8 matmuls over `torch._scaled_mm`: pure tensor functions and the two linear layers built on them.

- `Fp8Linear` (`--quant fp8`): W8A8 with a per-output-row weight scale computed once at load and a
  per-row (per-token) activation scale computed on every call — one row-wise `_scaled_mm`.
- `Fp8BlockLinear` (pre-quantized FP8 checkpoints, e.g. Qwen3-VL-*-FP8): the checkpoint's own FP8
  weights and 128×128 `weight_scale_inv`, never dequantized; activations are quantized in 1×128
  groups along K (the DeepSeek-V3 recipe the checkpoints were made for). Two kernels give the same
  sum: `blockwise` is one `_scaled_mm` with block scales (cuBLAS, Hopper, CUDA >= 12.9);
  `kblocks` is one row-wise `_scaled_mm` per 128-wide slice of K, accumulated in fp32 (any device
  with row-wise FP8 matmuls: Ada, Hopper without the blockwise cuBLAS, and CPU, where the tests run
  it). transformers would instead call a Triton kernel downloaded from the hub, which no machine of
  this project can fetch.

Activation quantization (`--quant fp8`) is one pass per distinct input: the layers that read the
same tensor (q/k/v of an attention block, gate/up of an MLP: siblings with the same input width)
share one `SharedActivation`, which quantizes the first call's input and hands the same fp8 rows and
scales to the others. On CUDA the quantization is `torch.compile`d into one fused reduction+cast
kernel (in eager PyTorch it is about seven fp32 passes over [M, K], which cost as much as the fp8
GEMMs save); elsewhere the eager `quantize_rows` runs, and the compiled function gives the same
values (tests/test_fp8_shared.py).

Shapes: activations x [M, K]; weights w [N, K] (row-major, as nn.Linear stores them, passed to
`_scaled_mm` as the column-major view w.t()); out [M, N]. FP8 is float8_e4m3fn (max 448).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(torch.float8_e4m3fn).max)  # 448
_TINY = 1e-12  # amax floor: an all-zero row gets a finite scale


def fp8_matmul_unavailable(device: torch.device) -> str | None:
    """Why FP8 matmuls cannot run on `device` (one line), or None when they can."""
    if device.type != "cuda":
        return f"FP8 matmuls need a CUDA GPU of compute capability >= 8.9 (Ada, Hopper); this run is on {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return (f"FP8 matmuls need compute capability >= 8.9 (Ada, Hopper); {torch.cuda.get_device_name(device)} "
                f"is {major}.{minor}")
    return None


# ---- quantization ------------------------------------------------------------------------------
def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (fp8 [M, K], scale [M, 1] fp32) with x ≈ fp8 · scale, one scale per row."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=_TINY)
    scale = amax / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def quantize_groups(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (fp8 [M, K], scale [M, K/group] fp32): one scale per row and `group` columns."""
    m, k = x.shape
    grouped = x.float().reshape(m, k // group, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True).clamp(min=_TINY) / FP8_MAX
    return (grouped / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8).reshape(m, k), scale.squeeze(-1)


def quantize_blocks(w: torch.Tensor, block: tuple[int, int] = (128, 128)) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] → (fp8 [N, K], scale_inv [N/bn, K/bk] fp32) in the layout of FP8 block checkpoints:
    w ≈ fp8 · scale_inv per block (`weight_scale_inv` is the dequantization multiplier)."""
    bn, bk = block
    n, k = w.shape
    if n % bn or k % bk:
        raise ValueError(f"a [{n}, {k}] weight does not split into {bn}×{bk} blocks")
    tiles = w.float().reshape(n // bn, bn, k // bk, bk)
    scale_inv = tiles.abs().amax(dim=(1, 3), keepdim=True).clamp(min=_TINY) / FP8_MAX
    q = (tiles / scale_inv).clamp(-FP8_MAX, FP8_MAX).to(FP8).reshape(n, k)
    return q, scale_inv.reshape(n // bn, k // bk)


def dequantize_blocks(q: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = (128, 128),
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The inverse of `quantize_blocks`: fp8 [N, K] · scale_inv per block → [N, K] in `dtype`."""
    bn, bk = block
    n, k = q.shape
    tiles = q.float().reshape(n // bn, bn, k // bk, bk) * scale_inv.float()[:, None, :, None]
    return tiles.reshape(n, k).to(dtype)


# ---- matmuls -----------------------------------------------------------------------------------
def _cpu_takes_rowwise_scales() -> bool:
    """A 16×16 probe: torch 2.11 (the H200 machine's, scripts/gpu-constraints.txt) takes only
    per-tensor scales in `_scaled_mm` on the CPU; later versions take row-wise ones too."""
    ones = torch.ones(16, 16).to(FP8)
    try:
        torch._scaled_mm(ones, ones.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.float32)
    except (RuntimeError, NotImplementedError):
        return False
    return True


# probed once, at import, outside any compiled region (a compiled MLP reads it as a constant)
CPU_ROWWISE_SCALES = _cpu_takes_rowwise_scales()


def rowwise_scales_run(device_type: str) -> bool:
    """Whether this torch's `_scaled_mm` takes row-wise scales on `device_type`: on CUDA yes (an FP8
    GPU is checked at start-up, `fp8_matmul_unavailable`), on the CPU as probed."""
    return device_type == "cuda" or CPU_ROWWISE_SCALES


def rowwise_matmul(x_fp8: torch.Tensor, x_scale: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor,
                   out_dtype: torch.dtype, bias: torch.Tensor | None = None) -> torch.Tensor:
    """(x_fp8 · x_scale [M, 1]) @ (w_fp8 · w_scale [1, N]).T + bias → [M, N] in `out_dtype`: one
    row-wise `_scaled_mm`, or, where this torch has none (the CPU of torch 2.11), a per-tensor one
    with unit scales (the fp32 sum of the fp8 products) scaled by rows and columns after."""
    if rowwise_scales_run(x_fp8.device.type):
        return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale, scale_b=w_scale, bias=bias, out_dtype=out_dtype)
    return _per_tensor_rowwise(x_fp8, x_scale, w_fp8, w_scale, out_dtype, bias)


@torch.compiler.disable  # eager inside a compiled module too: Inductor would reorder the scaling's rounding
def _per_tensor_rowwise(x_fp8: torch.Tensor, x_scale: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor,
                        out_dtype: torch.dtype, bias: torch.Tensor | None) -> torch.Tensor:
    unit = torch.ones((), device=x_fp8.device)
    out = torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=unit, scale_b=unit, out_dtype=torch.float32) * x_scale * w_scale
    return (out if bias is None else out + bias.float()).to(out_dtype)


def block_matmul(x_fp8: torch.Tensor, x_scale: torch.Tensor, w_fp8: torch.Tensor, w_scale_inv: torch.Tensor,
                 block: tuple[int, int], out_dtype: torch.dtype, kernel: str) -> torch.Tensor:
    """x 1×bk-group-scaled [M, K] (scales [M, K/bk]) @ w bn×bk-block-scaled [N, K] (scales
    [N/bn, K/bk]).T → [M, N]. `kernel`: "blockwise" (one cuBLAS call) or "kblocks" (one row-wise
    call per K slice, partial products summed in fp32)."""
    bn, bk = block
    if kernel == "blockwise":
        # cuBLAS wants the 1×128 activation scales outer-dim-major and the weight scales as [K/bk, N/bn]
        return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale.t().contiguous().t(), scale_b=w_scale_inv.t(),
                                out_dtype=out_dtype)
    n, k = w_fp8.shape
    column_scales = w_scale_inv.float().repeat_interleave(bn, dim=0)[:n].t().contiguous()  # [K/bk, N]
    partial = _partial_dtype(x_fp8.device)
    out = torch.zeros(x_fp8.shape[0], n, dtype=torch.float32, device=x_fp8.device)
    for j in range(k // bk):  # K/128 calls per layer (28 for a 7B), never per row or per sample
        cols = slice(j * bk, (j + 1) * bk)
        out += rowwise_matmul(x_fp8[:, cols], x_scale[:, j:j + 1].contiguous(), w_fp8[:, cols],
                              column_scales[j:j + 1], partial).float()
    return out.to(out_dtype)


def layer_kernel(device_kernel: str, in_features: int, block_k: int = 128) -> str:
    """The kernel of one layer: cuBLAS takes 128×128 weight scales without padding only when the
    number of K blocks is a multiple of 4 (real widths are: 3584 → 28, 18944 → 148); others slice."""
    return device_kernel if device_kernel != "blockwise" or (in_features // block_k) % 4 == 0 else "kblocks"


def _partial_dtype(device: torch.device) -> torch.dtype:
    # row-wise _scaled_mm gives fp32 outputs on CPU and on Hopper only (cuBLAS); elsewhere bf16
    if device.type == "cuda" and torch.cuda.get_device_capability(device) != (9, 0):
        return torch.bfloat16
    return torch.float32


@functools.lru_cache(maxsize=None)
def block_kernel(device: str) -> str:
    """The block-FP8 kernel for `device`, decided once by a probe: "blockwise" when one cuBLAS call
    with block scales runs and matches the K-slice sum, else "kblocks"."""
    where = torch.device(device)
    if where.type != "cuda":
        return "kblocks"
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(64, 512, generator=generator).to(where, torch.bfloat16)
    w = torch.randn(256, 512, generator=generator).to(where)
    w_fp8, w_scale_inv = quantize_blocks(w)
    x_fp8, x_scale = quantize_groups(x)
    try:
        fast = block_matmul(x_fp8, x_scale, w_fp8, w_scale_inv, (128, 128), torch.float32, "blockwise")
    except (RuntimeError, NotImplementedError, ValueError):
        return "kblocks"
    slow = block_matmul(x_fp8, x_scale, w_fp8, w_scale_inv, (128, 128), torch.float32, "kblocks")
    close = torch.allclose(fast, slow, rtol=2e-2, atol=2e-2 * float(slow.abs().max()))
    return "blockwise" if close else "kblocks"


# ---- activation quantization, fused and shared ---------------------------------------------------
# compiled on its first call (torch.compile is lazy): this module is imported only for FP8 models
_FUSED_QUANTIZE_ROWS = torch.compile(quantize_rows, dynamic=True, fullgraph=True)


def fused_quantize_rows(device_type: str) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """`quantize_rows` for activations on `device_type`: compiled on CUDA (one fused kernel: row amax,
    scale, divide, clamp, cast), the eager reference elsewhere (torch._scaled_mm's CPU path is the
    exact reference the tests pin). One compiled function for every layer (each compiled wrapper of
    its own would count against Dynamo's recompile limit of the same code); `--compile-lm` traces
    through this choice."""
    return _FUSED_QUANTIZE_ROWS if device_type == "cuda" else quantize_rows


class SharedActivation:
    """One activation quantization for the `users` layers that read the same input: the first call
    with a new input quantizes it, the next `users - 1` calls with that same tensor reuse the result,
    then it is dropped (nothing outlives the step). Identity is the tensor object itself (a weak
    reference, so a freed input never matches a new one) and its version counter (an in-place
    change is a new input)."""

    def __init__(self, users: int, quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        self.users = users
        self.quantize = quantize
        self.calls = 0  # quantizations actually run (tests/test_fp8_shared.py counts them)
        self._source: Any = None
        self._version = -1
        self._value: tuple[torch.Tensor, torch.Tensor] | None = None
        self._left = 0

    def __call__(self, x: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(fp8 rows, scales) of `rows` (= `x` viewed as [M, K]); `x` is what the layer was given."""
        # under torch.inference_mode (every run's forward) tensors keep no version counter (reading
        # one raises): identity alone decides then, which holds for the siblings served here,
        # called one after another on the same input with no in-place change between them
        version = None if x.is_inference() else x._version
        if self._left > 0 and self._source is not None and self._source() is x and version == self._version:
            value = self._value
        else:
            quantize = self.quantize or fused_quantize_rows(rows.device.type)
            value = quantize(rows)
            self.calls += 1
            self._source, self._version, self._left = weakref.ref(x, self._drop), version, self.users
        self._left -= 1
        if self._left > 0:
            self._value = value
        else:
            self._source = self._value = None
        return value

    def _drop(self, source: Any) -> None:
        # the input was freed (e.g. o_proj's, read by no sibling): its quantized copy goes with it
        if self._source is source:
            self._source = self._value = None
            self._left = 0


def share_activations(model: torch.nn.Module) -> list[SharedActivation]:
    """Give the `Fp8Linear` siblings of every module that have the same input width one
    `SharedActivation` (q/k/v; gate/up). A sibling with that width that reads another tensor
    (o_proj after attention) simply misses: it quantizes its own input, as before. Returns the
    shared quantizers made (a group of one keeps its own). A missed entry is held only as long as
    its input tensor lives."""
    made = []
    for parent in model.modules():
        groups: dict[int, list[Fp8Linear]] = {}
        for child in parent.children():
            if isinstance(child, Fp8Linear):
                groups.setdefault(child.in_features, []).append(child)
        for layers in groups.values():
            if len(layers) > 1:
                shared = SharedActivation(len(layers))
                for layer in layers:
                    layer.activation = shared
                made.append(shared)
    return made


# ---- layers ------------------------------------------------------------------------------------
class Fp8Linear(torch.nn.Module):
    """`--quant fp8`: an nn.Linear as FP8 weights with one scale per output row (computed once),
    times activations quantized per row on every call (dynamic scales)."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight)  # fp8 [N, K]
        self.register_buffer("weight_scale", weight_scale)  # fp32 [1, N]
        self.register_buffer("bias", bias)  # bf16 [N] (the dtype _scaled_mm adds in) or None
        self.activation: SharedActivation | None = None  # set by `share_activations`

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Fp8Linear":
        weight, scale = quantize_rows(linear.weight.detach())
        bias = linear.bias.detach().to(torch.bfloat16) if linear.bias is not None else None
        return cls(weight, scale.reshape(1, -1).contiguous(), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if self.activation is not None:
            x_fp8, x_scale = self.activation(x, rows)
        else:
            x_fp8, x_scale = fused_quantize_rows(rows.device.type)(rows)
        out = rowwise_matmul(x_fp8, x_scale, self.weight, self.weight_scale, torch.bfloat16, self.bias)
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8 e4m3 W8A8 rowwise"


class Fp8BlockLinear(torch.nn.Module):
    """A pre-quantized FP8 block layer: the checkpoint's fp8 weights and `weight_scale_inv` as
    loaded, activations quantized in 1×bk groups on every call (models/fp8.py docstring)."""

    def __init__(self, weight: torch.Tensor, weight_scale_inv: torch.Tensor, block: tuple[int, int],
                 bias: torch.Tensor | None, kernel: str) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.block = (int(block[0]), int(block[1]))
        self.kernel = kernel
        self.register_buffer("weight", weight)  # fp8 [N, K]
        self.register_buffer("weight_scale_inv", weight_scale_inv.float())  # [N/bn, K/bk]
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        x_fp8, x_scale = quantize_groups(rows, self.block[1])
        out = block_matmul(x_fp8, x_scale, self.weight, self.weight_scale_inv, self.block, torch.bfloat16,
                           self.kernel)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, fp8 e4m3 block "
                f"{self.block[0]}x{self.block[1]}, kernel={self.kernel}")
