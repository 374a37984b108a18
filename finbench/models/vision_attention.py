"""Vision-tower attention in one call per layer when flash-attn is not installed.

The Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision towers pack every patch of a batch into one sequence
and describe the attention blocks with `cu_seqlens` (Qwen2.5-VL: 8×8-patch windows in most layers,
whole images in the others; Qwen3-VL: whole images). With flash-attn, transformers hands
`cu_seqlens` to one variable-length kernel. With any other implementation it splits the packed
sequence and makes one attention call per block in a Python loop: a 1024×768 chart is ~70 windows,
so 16 charts × 28 windowed layers is ~31,000 small calls per batch, each with its own launches.

`packed_attention` is the same attention as one call: blocks of equal length (same-size images)
reshaped into one batched SDPA; otherwise PyTorch's own variable-length flash kernel
(`torch.nn.attention.varlen`, CUDA, torch ≥ 2.10, half precision) where it is available, else the
blocks padded to the longest one and run as a single batched SDPA with a key mask (any device).
Padded keys get zero weight, so results equal the per-block loop up to summation order (≤ 1e-6 in
fp32), and padded query rows are dropped. When padding would more than double the work (a batch
that mixes a huge image with small ones), the blocks are cut into a few length buckets instead.

The same switch replaces the towers' patch embedding, an `nn.Conv3d` whose kernel equals its stride
(each output sees one patch: a linear map of the flattened patch), by that linear map as one GEMM
on the weight's view. cuDNN has no good algorithm for this degenerate convolution (reports of seconds
per call on H100 bf16; torch 2.9's fallback to `slow_conv_dilated3d`); the GEMM is the same sum in
another order (≤ 1e-6 in fp32). Weights stay in the Conv3d, so checkpoints are untouched.

transformers picks the tower's attention by name (`vision_config._attn_implementation`) and takes
the one-call `cu_seqlens` branch only when that name contains "flash"; `install` registers
`packed_attention` under such a name (`AttentionInterface.register`) and points only the vision
config at it, so the language model keeps sdpa.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

NAME = "flash_finbench_packed"  # must contain "flash": see the module docstring
STOCK, PACKED = "stock", "packed"
MODES = (STOCK, PACKED)
PAD_LIMIT = 2.0  # padded / real attention work above which blocks are bucketed by length
LAYOUT_ATTRIBUTE = "finbench_layout"  # a cu_seqlens tensor's layout, built once for all the tower's layers
KERNEL_CALLS_ATTRIBUTE = "finbench_kernel_calls"  # an attention module's Counter of kernels run ("varlen", "padded")
log = logging.getLogger("finbench")


# ---- the tensor function ----------------------------------------------------------------------
def packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
                     scale: float | None = None, max_seqlen: int | None = None,
                     calls: Counter[str] | None = None) -> torch.Tensor:
    """Attention within blocks of a packed sequence, non-causal.

    query, key, value: [S, H, D] (all blocks concatenated); cu_seqlens: [N+1] block boundaries
    (0, …, S); scale defaults to 1/√D; max_seqlen: the longest block when the caller knows it
    (saves a device sync); `calls` counts which kernel ran, for benchmarks. Returns [S, H, D]: each
    token attends to the tokens of its own block."""
    calls = calls if calls is not None else Counter()
    layout = _layout(cu_seqlens, max_seqlen, query.shape[0])
    # Equal blocks (same-size images) are a plain reshape into one batched SDPA, which beat the
    # varlen kernel on the H200 (Qwen3-VL, 16 equal charts: 203 vs 231 ms per tower, bench_vision).
    if not layout.equal_blocks and _varlen_usable(query):
        out = _varlen(query, key, value, cu_seqlens, scale, layout.longest)  # longest: already synced once
        if out is not None:
            calls["varlen"] += 1
            return out
    calls["padded"] += 1
    return _padded(query, key, value, layout, scale)


class _Layout:
    """Where each packed token sits in a padded [N, L] grid, per length bucket. A bucket is
    (blocks, longest, tokens, slots, key mask): `tokens` None = all tokens in packed order,
    `slots` None = the blocks are equally long and the grid is a plain reshape."""

    def __init__(self, cu_seqlens: torch.Tensor, max_seqlen: int | None, total: int) -> None:
        self.cu = cu_seqlens.to(torch.int64)
        self.lengths = self.cu[1:] - self.cu[:-1]
        n = self.lengths.numel()
        self.longest = int(max_seqlen) if max_seqlen is not None else int(self.lengths.max()) if n else 0
        self.total = total
        self.equal_blocks = n == 0 or n * self.longest == total  # lengths sum to S and none exceeds L
        self._buckets: list[tuple[int, int, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]] | None = None

    @property
    def buckets(self) -> list[tuple[int, int, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]]:
        """Built on first use: the varlen path needs only `equal_blocks`, never the grid."""
        if self._buckets is None:
            self._buckets = self._build()
        return self._buckets

    def _build(self) -> list[tuple[int, int, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]]:
        cu, lengths, longest, total = self.cu, self.lengths, self.longest, self.total
        n = lengths.numel()
        if self.equal_blocks:
            return [(n, longest, None, None, None)]
        if n * longest <= PAD_LIMIT * total:
            return [(n, longest, None, *self._grid(lengths, longest, total))]
        buckets = []
        for group in _length_buckets(lengths):
            group_lengths = lengths[group]
            size = int(group_lengths.sum())
            group_longest = int(group_lengths.max())
            offsets = torch.repeat_interleave(torch.cumsum(group_lengths, 0) - group_lengths, group_lengths,
                                              output_size=size)
            tokens = torch.repeat_interleave(cu[:-1][group], group_lengths, output_size=size) \
                + torch.arange(size, device=cu.device) - offsets  # packed positions, block by block
            buckets.append((group.numel(), group_longest, tokens, *self._grid(group_lengths, group_longest, size)))
        return buckets

    @staticmethod
    def _grid(lengths: torch.Tensor, longest: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(grid slot of each of the `size` tokens taken block by block, key mask [N, 1, 1, L])."""
        device = lengths.device
        block = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths, output_size=size)
        starts = torch.cumsum(lengths, 0) - lengths
        slots = block * longest + torch.arange(size, device=device) - starts[block]
        mask = torch.arange(longest, device=device)[None, :] < lengths[:, None]
        return slots, mask[:, None, None, :]


def _length_buckets(lengths: torch.Tensor) -> list[torch.Tensor]:
    """Block indices cut into groups of similar length (longest first) so that each group's padded
    work stays within PAD_LIMIT of its real work."""
    order = torch.argsort(lengths, descending=True, stable=True)
    sorted_lengths = lengths[order].tolist()
    groups, start, real = [], 0, 0
    for i, length in enumerate(sorted_lengths):
        if i > start and sorted_lengths[start] * (i - start + 1) > PAD_LIMIT * (real + length):
            groups.append(order[start:i])
            start, real = i, 0
        real += length
    groups.append(order[start:])
    return groups


def _layout(cu_seqlens: torch.Tensor, max_seqlen: int | None, total: int) -> _Layout:
    # A tower passes the same cu_seqlens tensor to every layer: its layout (one host sync) is built
    # once and held by that tensor, so it lives exactly as long as the boundaries it describes.
    layout = cu_seqlens.__dict__.get(LAYOUT_ATTRIBUTE)
    if layout is None or layout.total != total:
        layout = _Layout(cu_seqlens, max_seqlen, total)
        setattr(cu_seqlens, LAYOUT_ATTRIBUTE, layout)
    return layout


def _padded(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: _Layout,
            scale: float | None) -> torch.Tensor:
    total, heads, dim = query.shape
    out = query.new_empty(total, heads, dim) if len(layout.buckets) > 1 else None
    for count, longest, tokens, slots, mask in layout.buckets:
        if slots is None:  # equal blocks: [S, H, D] is already [N, L, H, D]
            grid = [t.reshape(count, longest, heads, dim).transpose(1, 2) for t in (query, key, value)]
            return F.scaled_dot_product_attention(*grid, scale=scale).transpose(1, 2).reshape(total, heads, dim)
        grid = [t.new_zeros(count * longest, heads, dim)
                .index_copy_(0, slots, t if tokens is None else t.index_select(0, tokens))
                .view(count, longest, heads, dim).transpose(1, 2) for t in (query, key, value)]
        result = F.scaled_dot_product_attention(*grid, attn_mask=mask, scale=scale)
        result = result.transpose(1, 2).reshape(count * longest, heads, dim).index_select(0, slots)
        if out is None:
            return result
        out.index_copy_(0, tokens, result)
    return out


# ---- PyTorch's variable-length flash kernel (CUDA) ----------------------------------------------
@functools.cache
def _varlen_kernel() -> tuple[Any, bool] | None:
    """(torch's varlen_attn, whether it takes `scale`), or None where this torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn

        return varlen_attn, "scale" in inspect.signature(varlen_attn).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


@functools.cache
def _varlen_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the varlen kernel runs on `device` in `dtype`: one tiny call, once (a GPU or a build
    without the kernel raises; the padded path then serves the tower for good)."""
    kernel, _ = _varlen_kernel()
    probe = torch.zeros(2, 1, 64, device=device, dtype=dtype)  # [S, H, D]: two blocks of one token
    cu = torch.tensor([0, 1, 2], device=device, dtype=torch.int32)
    try:
        kernel(probe, probe, probe, cu, cu, 1, 1)
    except (RuntimeError, NotImplementedError, TypeError) as err:
        log.warning("torch varlen attention unavailable (%s); using padded SDPA for the vision tower", err)
        return False
    return True


def _varlen_usable(query: torch.Tensor) -> bool:
    if query.device.type != "cuda" or query.dtype not in (torch.float16, torch.bfloat16):
        return False
    return _varlen_kernel() is not None and _varlen_runs(query.device, query.dtype)


def _varlen(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
            scale: float | None, max_seqlen: int | None) -> torch.Tensor | None:
    dim = query.shape[-1]
    cu = cu_seqlens.to(device=query.device, dtype=torch.int32)
    longest = int(max_seqlen) if max_seqlen is not None else int((cu[1:] - cu[:-1]).max())
    kwargs: dict[str, Any] = {}
    kernel, takes_scale = _varlen_kernel()
    if scale is not None and not math.isclose(scale, dim ** -0.5, rel_tol=1e-6):
        if takes_scale:
            kwargs["scale"] = scale
        else:  # older signature (no `scale`): fold it into the queries
            query = query * (scale * math.sqrt(dim))
    try:
        return kernel(query, key, value, cu, cu, longest, longest, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError) as err:  # the padded path answers this call
        log.warning("torch varlen attention failed (%s); padded SDPA answers this block", err)
        return None


# ---- transformers integration -----------------------------------------------------------------
@torch.compiler.disable  # under --compile-vision (models/compile.py) the kernel choice stays a host decision
def transformers_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None = None, scaling: float | None = None,
                           dropout: float = 0.0, cu_seq_lens_q: torch.Tensor | None = None,
                           max_length_q: int | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The AttentionInterface signature: query/key/value [1, H, S, D] → ([1, S, H, D], None)."""
    if cu_seq_lens_q is None:  # a caller without block boundaries: one block
        cu_seq_lens_q = torch.tensor([0, query.shape[2]], device=query.device)
        max_length_q = query.shape[2]
    if attention_mask is not None or query.shape[0] != 1:
        raise ValueError(f"{NAME} serves packed vision towers only (batch 1, no attention mask)")
    packed = [t[0].transpose(0, 1) for t in (query, key, value)]  # [S, H, D]
    # counted by the attention module that ran them (`kernel_calls`)
    calls = module.__dict__.setdefault(KERNEL_CALLS_ATTRIBUTE, Counter()) if module is not None else None
    return packed_attention(*packed, cu_seq_lens_q, scaling, max_length_q, calls).unsqueeze(0), None


def kernel_calls(model: Any, reset: bool = False) -> Counter[str]:
    """Which kernels the vision attention of `model` ran, summed over its modules; `reset`: start
    counting again."""
    total: Counter[str] = Counter()
    for module in model.modules():
        calls = module.__dict__.get(KERNEL_CALLS_ATTRIBUTE)
        if calls is not None:
            total.update(calls)
            if reset:
                calls.clear()
    return total


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, transformers_attention)


def install(model: Any, attn_implementation: str, mode: str = PACKED) -> str:
    """Point `model`'s vision tower at `packed_attention` (mode "packed") or back at
    `attn_implementation` (mode "stock"), and return the attention description for the
    fingerprint. The stock path stays where it is already one call per layer (flash-attn) and on
    models without a vision config."""
    if mode not in MODES:
        raise ValueError(f"vision attention {mode!r}: expected one of {', '.join(MODES)}")
    vision_config = getattr(model.config, "vision_config", None)
    if vision_config is None or "flash" in (attn_implementation or ""):
        return attn_implementation
    towers = [m for m in model.modules() if getattr(m, "config", None) is not None
              and type(m).__name__.endswith(("VisionTransformerPretrainedModel", "VisionModel"))]
    if mode == PACKED:
        _register()
    for config in {id(c): c for c in [vision_config, *(t.config for t in towers)]}.values():
        config._attn_implementation = NAME if mode == PACKED else attn_implementation
    for tower in towers:
        patch_embed_as_gemm(getattr(tower, "patch_embed", None), mode == PACKED)
    return attn_implementation if mode == STOCK else f"{attn_implementation}+vision-{PACKED}"


# ---- patch embedding as one GEMM --------------------------------------------------------------
def patchify_linear(pixels: torch.Tensor, conv: torch.nn.Conv3d) -> torch.Tensor:
    """`conv` applied to flattened patches [N, C·T·P·P] (kernel = stride, no padding), as a GEMM:
    [N, out_channels]."""
    weight = conv.weight.reshape(conv.out_channels, -1)
    return F.linear(pixels.reshape(-1, weight.shape[1]).to(weight.dtype), weight, conv.bias)


def _is_patchify(conv: Any) -> bool:
    return (isinstance(conv, torch.nn.Conv3d) and tuple(conv.kernel_size) == tuple(conv.stride)
            and tuple(conv.padding) == (0, 0, 0) and tuple(conv.dilation) == (1, 1, 1) and conv.groups == 1
            and conv.padding_mode == "zeros")


def patch_embed_as_gemm(patch_embed: Any, enable: bool) -> bool:
    """Route a Qwen-style patch embedding (`.proj` a patchify Conv3d) through `patchify_linear`
    (enable) or back to its own forward; True when the GEMM is in place. Models dispatched by
    accelerate keep their hook: its `_old_forward` is what gets replaced."""
    conv = getattr(patch_embed, "proj", None)
    if not _is_patchify(conv):
        return False
    slot = "_old_forward" if hasattr(patch_embed, "_hf_hook") and hasattr(patch_embed, "_old_forward") else "forward"
    stock = patch_embed.__dict__.get("_finbench_stock_forward")
    if stock is None:
        stock = patch_embed.__dict__.get(slot)  # accelerate's saved forward, or None: the class's
        patch_embed._finbench_stock_forward = stock if stock is not None else False
    if enable:
        setattr(patch_embed, slot, lambda hidden_states: patchify_linear(hidden_states, conv))
    elif stock:
        setattr(patch_embed, slot, stock)
    else:
        patch_embed.__dict__.pop(slot, None)
    return enable
