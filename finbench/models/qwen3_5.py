"""Qwen3.5 (dense, e.g. Qwen3.5-27B, and MoE, e.g. Qwen3.5-35B-A3B): natively multimodal hybrid
models, `Qwen3_5ForConditionalGeneration` / `Qwen3_5MoeForConditionalGeneration` via the Auto
classes (transformers releases without them fail at `AutoConfig`, at start-up, with one line).

What differs from Qwen3-VL, whose adapter it reuses (processor, M-RoPE decode positions with
per-row deltas, image-token counting, device preprocessing):
- the decoder is hybrid: three of every four layers are Gated DeltaNet linear attention, which
  carry a recurrent state (a causal-conv window and a k×v state per head) instead of a KV cache.
  The cache object transformers returns from the prefill holds both kinds, and a decode step
  hands it back unchanged (`DecodeState.cache`), so a step equals a full recompute. Left pads
  are zeroed before the linear layers by transformers, which keeps their state at zero until a
  row's first real token: batched and one-by-one answers agree;
- one checkpoint both thinks and answers directly: its chat template takes `enable_thinking`.
  The adapter renders prompts with thinking OFF by default (instruct use: an empty, closed
  `<think></think>` block, then the answer prefix), or ON when built with `thinking=True`. When
  the runner asks for reasoning (`--think-budget`, runner/thinking.py), it ends the prompt with
  the opener this adapter gives; the adapter then renders that request with thinking on, so the
  template itself opens the block instead of a second block following a closed one;
- its own FLOP count (models/flops.py: linear-attention projections, convolution and chunked
  delta rule; output-gated full attention; the MoE variant's routed and shared experts);
- `--quant` only for the dense checkpoints: in the MoE ones bitsandbytes would leave the fused
  3-D expert tensors unquantized (see qwen3_vl_moe.py), so they refuse it at start-up.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from finbench.models.qwen3_vl import Qwen3VL
from finbench.types import ModelRequest


class Qwen35(Qwen3VL):
    family = "qwen3.5"
    model_types = ("qwen3_5", "qwen3_5_moe")
    checkpoints = ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B")
    supports_thinking = True

    @classmethod
    def load(cls, source: str, *, quant: str = "none", **kwargs: Any) -> "Qwen35":
        if quant != "none":
            from transformers import AutoConfig

            if AutoConfig.from_pretrained(source, revision=kwargs.get("revision")).model_type == "qwen3_5_moe":
                raise ValueError(f"--quant {quant}: Qwen3.5-MoE supports none (bitsandbytes leaves its fused "
                                 "expert weights unquantized)")
        return super().load(source, quant=quant, **kwargs)  # type: ignore[return-value]

    def __init__(self, model: Any, processor: Any, source: str, *, thinking: bool = False, **kwargs: Any) -> None:
        super().__init__(model, processor, source, **kwargs)
        self.enable_thinking = bool(thinking)

    def _opener(self) -> str:
        return self.thinking_tags[0] + "\n"

    def thinking_opener(self) -> str:
        """'' when prompts already open the block (built with thinking=True), else the opener the
        runner appends to ask for reasoning — which `prompt_text` turns into thinking ON."""
        return "" if self.enable_thinking else self._opener()

    def prompt_text(self, request: ModelRequest) -> str:
        thinking = self.enable_thinking
        if not thinking and request.answer_prefix == self._opener():
            thinking, request = True, replace(request, answer_prefix="")
        return self.processor.apply_chat_template(
            [dict(m) for m in request.messages], tokenize=False, add_generation_prompt=True,
            enable_thinking=thinking) + request.answer_prefix

    def fingerprint(self, file_digest: Callable[..., str] | None = None) -> dict[str, Any]:
        return {**super().fingerprint(file_digest=file_digest), "enable_thinking": self.enable_thinking}
