"""Qwen3-VL-MoE (e.g. Qwen3-VL-30B-A3B, Qwen3-VL-235B-A22B; instruct and thinking checkpoints):
`Qwen3VLMoeForConditionalGeneration` via the Auto classes.

What differs from Qwen3-VL: only the decoder's MLPs, which are top-k routed mixtures of experts.
Inputs, M-RoPE decode positions, image-token counting and device preprocessing are Qwen3-VL's, so
the adapter is Qwen3-VL's; the FLOP count charges the router and the `num_experts_per_tok`
experts each token is routed to, not all experts (models/flops.py). Routing is per token, so a
row's answer does not depend on the rest of its batch (checked in tests/test_decoding.py).

No `--quant`: bitsandbytes (transformers 5.24) and torchao quantize `nn.Linear` layers only, and
the experts are fused 3-D tensors, so an "8bit"/"4bit"/"int8wo" run would keep ~all expert weights
in bf16 (measured on the tiny model: attention int8, experts untouched) and mislabel a quantization
study (models/quant.py `untouched_refusal` would refuse it after loading anyway). No pre-quantized
checkpoints either: transformers serves FP8 experts with a hub kernel that cannot be fetched offline.
"""

from __future__ import annotations

from dataclasses import replace

from finbench.models.qwen3_vl import Qwen3VL


class Qwen3VLMoe(Qwen3VL):
    family = "qwen3-vl-moe"
    model_types = ("qwen3_vl_moe",)
    checkpoints = ("Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-30B-A3B-Thinking",
                   "Qwen/Qwen3-VL-235B-A22B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Thinking")
    capabilities = replace(Qwen3VL.capabilities, quantization=("none",))
