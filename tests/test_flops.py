"""Analytic prefill FLOPs vs the spec's figure and vs an independent count of a real forward.

The independent count is `torch.utils.flop_counter.FlopCounterMode` over a tiny random
Qwen2.5-VL with eager attention: it counts every matmul / bmm / addmm / convolution (2 FLOPs per
multiply-add) and nothing elementwise, which is exactly the analytic convention, so the two agree
to the FLOP (tolerance 0) per component — vision tower, language model, LM head. Eager attention
is used because on a CPU sdpa dispatches to a kernel the counter has no formula for; eager
multiplies the dense T×T scores, hence `causal_attention=False` on our side. (On a GPU the counter
also reports sdpa as dense, whatever the causal mask.)"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from finbench.models import shapes
from finbench.runner import flops


@pytest.fixture(scope="module")
def config_7b():
    return shapes.full_size_config("qwen2.5-vl-7b")


def test_spec_item_cost_7b(config_7b):
    """SPEC: a 7B FinMME item (~1,000 image tokens + ~300 text tokens) costs ~2.3e13 FLOP."""
    result = flops.prefill_flops(config_7b, 300, [(1, 50, 80)])  # 50·80/4 = 1,000 image tokens
    assert result["total"] == result["vision"] + result["language"] + result["lm_head"]
    assert result["total"] == pytest.approx(2.3e13, rel=0.30)
    assert result["total"] == pytest.approx(2.28e13, rel=0.01)  # pin today's number
    assert result["vision"] == pytest.approx(5.50e12, rel=0.01)
    assert result["lm_head"] == 2 * 3584 * 152064
    # A 1024×768 image (grid 54×74, 999 tokens) costs the same within 0.2 %.
    assert flops.prefill_flops(config_7b, 300, [(1, 54, 74)])["total"] == pytest.approx(result["total"], rel=2e-3)


def test_causal_halving_and_lm_head_rows(config_7b):
    causal = flops.prefill_flops_breakdown(config_7b, 300, [(1, 50, 80)])
    dense = flops.prefill_flops_breakdown(config_7b, 300, [(1, 50, 80)], causal_attention=False)
    seq, layers, q_dim = 1300, 28, 3584
    assert causal["seq_len"] == seq and causal["image_tokens"] == 1000
    assert dense["language_attention"] - causal["language_attention"] == layers * 4 * q_dim * (seq * (seq - 1) // 2)
    assert dense["vision"] == causal["vision"]  # the vision tower is bidirectional either way
    sliced = flops.prefill_flops(config_7b, 300, [(1, 50, 80)], lm_head_rows=16)
    assert sliced["lm_head"] == 2 * 3584 * 16


def test_flops_from_batch_sums_sequences(config_7b):
    grids = torch.tensor([[1, 50, 80], [1, 20, 20]])
    lengths = torch.tensor([1300, 400])  # e.g. attention_mask.sum(1), image placeholders included
    batch = flops.flops_from_batch(config_7b, lengths, grids)
    one = flops.prefill_flops(config_7b, 300, [(1, 50, 80)])
    two = flops.prefill_flops(config_7b, 300, [(1, 20, 20)])
    for key in ("vision", "language", "lm_head", "total"):
        assert batch[key] == one[key] + two[key], key
    assert flops.prefill_flops(config_7b, 300, grids[:1]) == one  # tensor grids == tuples


@pytest.mark.parametrize("grid", [(1, 12, 16), (1, 16, 16), (1, 54, 74), (2, 10, 6), (1, 2, 2), (1, 8, 42)])
def test_window_pairs_match_transformers_windowing(config_7b, grid):
    """Our closed-form window sizes vs the model's own `cu_window_seqlens`."""
    from transformers.vision_utils import get_vision_window_index

    v = config_7b.vision_config
    _, cu = get_vision_window_index(
        torch.tensor([grid]), spatial_merge_size=v.spatial_merge_size, window_size=v.window_size,
        patch_size=v.patch_size,
    )
    expected = int(((cu[1:] - cu[:-1]).long() ** 2).sum())
    window_merged = v.window_size // v.spatial_merge_size // v.patch_size
    assert flops.window_pair_count(grid, merge=2, window_merged=window_merged) == expected


def test_matches_flop_counter_on_a_real_forward():
    model = shapes.build_random_model(
        "qwen2.5-vl-7b", torch.float32, "cpu", attn_implementation="eager", layers=2, vision_depth=3
    )
    config = model.config
    # Two images: 12×16 patches (windows of 4×4 and 2×4 merged tokens) and 8×6; GQA 4:2 heads.
    grids = torch.tensor([[1, 12, 16], [1, 8, 6]])
    n_image = [48, 12]
    ids = [1, 2, 3, config.vision_start_token_id] + [config.image_token_id] * n_image[0]
    ids += [config.vision_end_token_id, 4, 5, config.vision_start_token_id]
    ids += [config.image_token_id] * n_image[1] + [config.vision_end_token_id, 6, 7, 8]
    pixel_values = torch.randn(int(grids.prod(1).sum()), 3 * 2 * 14 * 14)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.tensor([ids]), pixel_values=pixel_values, image_grid_thw=grids, logits_to_keep=1)
    counts = counter.get_flop_counts()

    def measured(module: str) -> int:
        return sum(counts[f"Qwen2_5_VLForConditionalGeneration{module}"].values())

    ours = flops.prefill_flops(config, len(ids) - sum(n_image), grids, causal_attention=False)
    assert measured(".model.visual") == ours["vision"]
    assert measured(".model.language_model") == ours["language"]
    assert measured(".lm_head") == ours["lm_head"]
    assert measured("") == ours["total"]


def test_rejects_non_qwen25_configs(config_7b):
    text_only = type("Cfg", (), {"text_config": config_7b.text_config})()
    with pytest.raises(ValueError, match="Qwen2.5-VL"):
        flops.prefill_flops(text_only, 10, [(1, 4, 4)])
