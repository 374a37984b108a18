"""Qwen3-VL (instruct and thinking checkpoints): `Qwen3VLForConditionalGeneration` via the Auto
classes. Same recipe as Qwen2.5-VL — M-RoPE with per-row deltas from the prefill, images resized
to multiples of patch·merge pixels (16·2 = 32 here) — so it reuses that adapter; only the names
differ, and the FLOP count follows its own vision tower. Thinking checkpoints reason in
`<think>` … `</think>` up to `--think-budget` tokens before the constrained answer
(runner/thinking.py)."""

from __future__ import annotations

from dataclasses import replace

from finbench.models.qwen2_5_vl import Qwen25VL


class Qwen3VL(Qwen25VL):
    family = "qwen3-vl"
    model_types = ("qwen3_vl",)
    checkpoints = ("Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
                   "Qwen/Qwen3-VL-32B-Instruct", "Qwen/Qwen3-VL-2B-Thinking", "Qwen/Qwen3-VL-4B-Thinking",
                   "Qwen/Qwen3-VL-8B-Thinking", "Qwen/Qwen3-VL-32B-Thinking")
    # Its own FLOP count, not Qwen2.5-VL's: no window attention, a two-layer vision MLP, patch 16,
    # and one extra patch merger per DeepStack layer (models/flops.py).
    capabilities = replace(Qwen25VL.capabilities, thinking=True)
