"""The exact fast paths of a model adapter, and the tensor functions of the mask-free prefill.

Each path gives the answers of the reference path it replaces (fp32: ≤ 1e-5 in the tests named
below); they differ only in which kernels run, so on CUDA they are on by default and on the CPU
off (the CPU is where the reference path is the product: its answers are pinned by
tests/test_contracts.py). `None` means "on where it pays: CUDA".

- `pad_widths`: MLP widths zero-padded to a multiple of 64 at load (models/padding.py);
  tests/test_fast_paths.py.
- `vision_indices`: the vision tower's position ids, attention boundaries and window index built
  in the preprocessing threads with transformers' own functions (Qwen2.5-VL), so the model thread
  neither loops over images nor waits on the device for them; tests/test_fast_paths.py.
- `causal_prefill`: the prefill without an attention mask. Rows are right-aligned (each row's
  real tokens first, pads after), so the plain causal kernel sees only real tokens before every
  real token; the answer is read at each row's last real token (`last_real`). Positions are those
  of the real tokens (M-RoPE from `get_rope_index` over the real tokens, in the worker threads).
  The prompt is still tokenized left-padded: free generation and thinking need that.
- `static_decode`: decode steps over a static KV buffer with one-query attention
  (models/static_decode.py); `cuda_graphs`: those steps replayed from CUDA graphs (CUDA only).
A family whose architecture a path does not fit declares it (`HFVisionLanguageModel.supports`):
Qwen3.5's linear-attention layers would run their recurrent state over the pads of a right-aligned
row, so it keeps the masked prefill and the dynamic cache.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

PATHS = ("pad_widths", "vision_indices", "causal_prefill", "static_decode", "cuda_graphs")


@dataclass(frozen=True)
class FastPaths:
    pad_widths: bool | None = None
    vision_indices: bool | None = None
    causal_prefill: bool | None = None
    static_decode: bool | None = None
    cuda_graphs: bool | None = None

    @classmethod
    def everywhere(cls) -> "FastPaths":
        """Every path on, on any device (the CPU equality tests)."""
        return cls(**{name: True for name in PATHS})

    @classmethod
    def reference(cls) -> "FastPaths":
        """Every path off: the reference paths on any device."""
        return cls(**{name: False for name in PATHS})

    def resolved(self, device: torch.device, supported: frozenset[str] = frozenset(PATHS)) -> "FastPaths":
        """Defaults decided for `device` (None → on for CUDA); a path the family does not support is off."""
        on_cuda = device.type == "cuda"
        return FastPaths(**{name: bool((on_cuda if value is None else value) and name in supported)
                            for name, value in dataclasses.asdict(self).items()})

    def on(self) -> list[str]:
        return [name for name in PATHS if getattr(self, name)]


def right_aligned(attention_mask: torch.Tensor) -> torch.Tensor:
    """Gather index [B, T] that moves each row's real tokens (mask 1) to the front, in their order,
    and its pads behind them: `x.gather(1, right_aligned(mask))` (a stable sort on "is a pad", so
    any padding layout works; a left-padded row is rotated, a row without pads stays)."""
    return torch.sort((attention_mask == 0).to(torch.int8), dim=1, stable=True).indices


def last_real(hidden: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """hidden [B, T, H] of right-aligned rows, lengths [B] real tokens per row → [B, H] at each row's
    last real token."""
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths.to(hidden.device) - 1]
