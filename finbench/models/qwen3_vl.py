"""Qwen3-VL (instruct and thinking checkpoints): `Qwen3VLForConditionalGeneration` via the Auto
classes. Same recipe as Qwen2.5-VL — M-RoPE with per-row deltas from the prefill, images resized
to multiples of patch·merge pixels (16·2 = 32 here) — so it reuses that adapter; only the names
differ. Thinking checkpoints are run with the answer prefix right after the generation prompt
(no reasoning budget yet)."""

from __future__ import annotations

from finbench.models.qwen2_5_vl import Qwen25VL


class Qwen3VL(Qwen25VL):
    family = "qwen3-vl"
    model_types = ("qwen3_vl",)
