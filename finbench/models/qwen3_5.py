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
  `<think></think>` block, then the answer prefix), or ON when built with `thinking=True`. A
  request with `thinking` (`--think-budget`, runner/thinking.py) renders with the switch ON, so
  the template itself opens the block instead of a second block following a closed one;
- its own FLOP count (models/flops.py: linear-attention projections, convolution and chunked
  delta rule; output-gated full attention; the MoE variant's routed and shared experts);
- of the fast paths (models/fast_paths.py) only the padded widths: the linear-attention layers
  would run their recurrent state over the pads of a right-aligned row (the mask-free prefill
  reads the right last token, but every decode step after it would be off: measured Δ ≈ 0.2 in
  the hidden state on the tiny model), and their state is no KV cache a static buffer can hold;
- `--quant` only for the dense checkpoints: in the MoE ones bitsandbytes would leave the fused
  3-D expert tensors unquantized (see qwen3_vl_moe.py), so they refuse it at start-up.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from finbench.core.types import ModelRequest
from finbench.models.contract import Capabilities
from finbench.models.qwen3_vl import Qwen3VL


class Qwen35(Qwen3VL):
    family = "qwen3.5"
    model_types = ("qwen3_5", "qwen3_5_moe")
    checkpoints = ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B")
    supports = frozenset({"pad_widths"})  # see the module docstring

    @classmethod
    def capabilities_for(cls, model_type: str, source: str | None = None) -> Capabilities:
        if model_type == "qwen3_5_moe":  # bitsandbytes would leave the fused expert weights unquantized
            return replace(cls.capabilities, quantization=("none",))
        return cls.capabilities

    def __init__(self, model: Any, processor: Any, source: str, *, thinking: bool = False, **kwargs: Any) -> None:
        super().__init__(model, processor, source, **kwargs)
        self.enable_thinking = bool(thinking)

    def template_opens_thinking(self) -> bool:
        """Prompts open the block themselves only when built with thinking=True."""
        return self.enable_thinking

    def prompt_text(self, request: ModelRequest) -> str:
        # a thinking request renders with the template's own switch on, so the template opens the
        # block, instead of a second block following a closed empty one
        thinking = self.enable_thinking or request.thinking
        return self._render(request.messages, enable_thinking=thinking) + (
            "" if request.thinking else request.answer_prefix)

    def fingerprint(self, file_digest: Callable[..., str] | None = None) -> dict[str, Any]:
        return {**super().fingerprint(file_digest=file_digest), "enable_thinking": self.enable_thinking}
