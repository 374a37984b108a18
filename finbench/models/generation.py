"""What decoding needs beside the adapter: the decode state, the decode-step attention kernels,
generated-token counts, free generation through transformers' `generate`, and the rows of a
generation that had finished when it was interrupted."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, ContextManager, Sequence

import torch

from finbench.kernels.compaction import select_rows
from finbench.models.contract import GenerationInterrupted


@dataclass
class DecodeState:
    """What a decode step needs: the KV cache, the attention mask so far, family extras; after a
    mask-free prefill the position of the next fed token [B, 1] (the prefill numbered the real
    tokens itself); once static decoding starts, its `StaticDecoder` (which holds the cache)."""

    cache: Any
    attention_mask: torch.Tensor
    extras: dict[str, Any]
    next_position: torch.Tensor | None = None
    static: Any = None

    def select(self, rows: torch.Tensor) -> "DecodeState":
        """The state of `rows` only, in that order (the thinking loop drops finished rows,
        models/compaction.py); the cache and the static buffers are narrowed in place."""
        batch = self.attention_mask.shape[0]
        if self.cache is not None:
            self.cache.reorder_cache(rows)  # transformers' batch gather over every layer
        if self.static:
            self.static.select(rows)
        return DecodeState(cache=self.cache, attention_mask=self.attention_mask[rows.to(self.attention_mask.device)],
                           extras=select_rows(self.extras, rows, batch),
                           next_position=select_rows(self.next_position, rows, batch), static=self.static)


def decode_attention(device: torch.device) -> ContextManager[Any]:
    """The SDPA kernels for decode steps and free generation: on CUDA, all but cuDNN's. PyTorch's
    cuDNN attention builds a graph for every new shape, and a decode step's key length is always
    new. In the H200 profile (benchmarks/results/gpu_profile_qwen2.5-vl-7b.txt) its 280 calls
    averaged 2.7 ms of host time; the 196 decode-step calls among them ran ~36 µs each on the
    device, so decode steps waited on the host. The flash and memory-efficient kernels launch in
    microseconds. The prefill keeps cuDNN: one graph per batch, hidden behind the prefill's own
    device time. Elsewhere (CPU) nothing changes."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


DECODE_ATTENTION_CUDA = "sdpa:flash,efficient,math"  # the fingerprint's name for `decode_attention` on CUDA


def cache_of(outputs: Any) -> Any:
    """The KV cache a forward returned (`cache` since transformers 5.2x, `past_key_values` before)."""
    return getattr(outputs, "cache", None) or getattr(outputs, "past_key_values", None)


def generated_counts(new_tokens: torch.Tensor, stops: Sequence[int]) -> list[int]:
    """Per row of generated ids [B, T]: tokens up to and including the first stop token (T when
    none stopped)."""
    is_stop = torch.isin(new_tokens, torch.tensor(list(stops), device=new_tokens.device))
    return torch.where(is_stop.any(-1), is_stop.int().argmax(-1) + 1, new_tokens.shape[1]).tolist()


def finished_rows(new_tokens: torch.Tensor, stops: Sequence[int]) -> list[int]:
    """Rows of generated ids [B, T] that have emitted a stop token (their answer is complete)."""
    is_stop = torch.isin(new_tokens, torch.tensor(list(stops), device=new_tokens.device))
    return is_stop.any(-1).nonzero().flatten().tolist()


@functools.cache
def _last_tokens_class() -> type:
    from transformers import StoppingCriteria

    class LastTokens(StoppingCriteria):
        """A stopping criterion that never stops: it keeps a reference to the ids so far (no copy,
        no device wait), so that an interrupted `generate` still knows which rows had finished."""

        def __init__(self) -> None:
            self.ids: torch.Tensor | None = None  # None until the first step

        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            self.ids = input_ids
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return LastTokens


def last_tokens() -> Any:
    """A fresh `LastTokens` criterion for one `generate` call (`.ids`: the ids so far, or None)."""
    return _last_tokens_class()()


def hf_generate(adapter: Any, inputs: Any, max_new_tokens: int,
                sampling: dict[str, Any] | None = None) -> tuple[list[str], list[int]]:
    """Free generation of a Hugging Face adapter (models/base.py), batched with left padding: greedy
    (temperature 0) unless `sampling` gives a temperature > 0 (with optional top_p, top_k). Returns
    texts and, per row, the tokens generated up to and including the first stop token. Ctrl-C
    raises the adapter's `GenerationInterrupted` with the rows that had finished."""
    prompt_length = inputs["input_ids"].shape[1]
    sampling = dict(sampling or {})
    sample = float(sampling.get("temperature") or 0) > 0
    pad = adapter.tokenizer.pad_token_id
    stops = list(adapter.stop_token_ids()) + ([pad] if pad is not None else [])
    seen = last_tokens()
    try:
        with decode_attention(adapter.device):
            output = adapter.model.generate(**adapter.model_inputs(inputs, vision_indices=False),
                                            max_new_tokens=max_new_tokens, do_sample=sample,
                                            temperature=sampling.get("temperature") if sample else None,
                                            top_p=sampling.get("top_p") if sample else None,
                                            top_k=sampling.get("top_k") if sample else None,
                                            pad_token_id=pad, stopping_criteria=[seen])
    except KeyboardInterrupt:
        raise adapter._interrupted(seen.ids, prompt_length, stops) from None
    new_tokens = output[:, prompt_length:]
    return adapter.decode(new_tokens), generated_counts(new_tokens, stops)


def interrupted(decode: Any, ids: torch.Tensor | None, prompt_length: int,
                stops: Sequence[int]) -> GenerationInterrupted:
    """The `GenerationInterrupted` of a generation stopped by Ctrl-C: the rows of `ids` (prompt and
    generated tokens) that had emitted a stop token, decoded by `decode`, with their token counts."""
    if ids is None:
        return GenerationInterrupted({}, {})
    new_tokens = ids[:, prompt_length:]
    rows = finished_rows(new_tokens, stops)
    texts = decode(new_tokens[rows]) if rows else []
    counts = generated_counts(new_tokens[rows], stops) if rows else []
    return GenerationInterrupted(dict(zip(rows, texts)), dict(zip(rows, counts)))
