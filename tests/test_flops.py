"""Analytic prefill FLOPs vs the spec's figure and vs an independent count of a real forward.

The independent count is `torch.utils.flop_counter.FlopCounterMode` over a tiny random
Qwen2.5-VL with eager attention: it counts every matmul / bmm / addmm / convolution (2 FLOPs per
multiply-add) and nothing elementwise, which is exactly the analytic convention, so the two agree
to the FLOP (tolerance 0) per component — vision tower, language model, LM head. Eager attention
is used because on a CPU sdpa dispatches to a kernel the counter has no formula for; eager
multiplies the dense T×T scores, hence `causal_attention=False` on our side. (On a GPU the counter
also reports sdpa as dense, whatever the causal mask.) The same check runs over every other counted
architecture: Qwen2-VL, Qwen3-VL (DeepStack, patch 16, no windows), Qwen3-VL-MoE and Qwen3.5 /
Qwen3.5-MoE (Gated DeltaNet linear attention, gated full attention, routed and shared experts)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from finbench.models import flops
from finbench.offline import shapes


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


def test_rejects_configs_it_cannot_count(config_7b):
    text_only = type("Cfg", (), {"text_config": config_7b.text_config})()
    with pytest.raises(ValueError, match="no FLOP count"):
        flops.prefill_flops(text_only, 10, [(1, 4, 4)])
    internvl = type("Cfg", (), {"model_type": "internvl", "text_config": config_7b.text_config})()
    assert not flops.supports(internvl) and flops.supports(config_7b)
    with pytest.raises(ValueError, match="internvl"):
        flops.flops_from_batch(internvl, [10])


# ---- every other counted architecture vs FlopCounterMode over a tiny random model -------------

def _tiny_from_builder(family: str):
    from finbench.offline.tiny import _BUILDERS

    return _BUILDERS[family](64, 28 * 28 * 16).model.config


def _qwen2_vl_config():
    """Qwen2-VL: plain vision tower (embed_dim wide, fc1/fc2 MLP, every block full attention)."""
    from transformers import Qwen2VLConfig

    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}}
    vision = {"depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14}
    return Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=300, video_token_id=301,
                         vision_start_token_id=302, vision_end_token_id=303)


ARCHITECTURES = {
    "qwen3-vl": lambda: _tiny_from_builder("qwen3-vl"),  # DeepStack mergers, patch 16
    "qwen3-vl-moe": lambda: _tiny_from_builder("qwen3-vl-moe"),  # routed experts
    "qwen3.5": lambda: _tiny_from_builder("qwen3.5"),  # Gated DeltaNet + gated full attention
    "qwen3.5-moe": lambda: _tiny_from_builder("qwen3.5-moe"),  # + routed and shared experts
    "qwen2-vl": _qwen2_vl_config,
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_matches_flop_counter_for_every_counted_architecture(name):
    """Per component, to the FLOP. Two documented differences from what the counter sees: the
    linear-attention core's triangular solves (`language_solve`; the counter has no formula for
    them), and the CPU fallback of the causal convolution, which computes kernel-1 padded output
    positions it then discards (2·(k-1)·channels·k FLOPs per linear-attention layer)."""
    from transformers import AutoModelForImageTextToText

    config = ARCHITECTURES[name]()
    kwargs = {"experts_implementation": "eager"} if "moe" in name else {}  # grouped_mm is not counted
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config, attn_implementation="eager", dtype=torch.float32, **kwargs)
    # No parameter requires grad: torch's module tracker (inside FlopCounterMode) hooks every module
    # input and output that requires grad, and from transformers 5.25 Qwen3.5's causal convolution
    # is a kernel module handed the convolution's weight (a parameter), which inference mode cannot
    # give a grad_fn. Counting FLOPs needs no gradients, and the count is unchanged.
    model.eval().requires_grad_(False)
    patch = config.vision_config.patch_size
    # Two images: 12×16 and 8×6 patches; 72 tokens in all, so the delta rule runs two 64-token chunks.
    grids = torch.tensor([[1, 12, 16], [1, 8, 6]])
    n_image = [48, 12]
    ids = [1, 2, 3, config.vision_start_token_id] + [config.image_token_id] * n_image[0]
    ids += [config.vision_end_token_id, 4, 5, config.vision_start_token_id]
    ids += [config.image_token_id] * n_image[1] + [config.vision_end_token_id, 6, 7, 8]
    input_ids = torch.tensor([ids])
    inputs = {"input_ids": input_ids, "pixel_values": torch.randn(int(grids.prod(1).sum()), 3 * 2 * patch * patch),
              "image_grid_thw": grids, "mm_token_type_ids": (input_ids == config.image_token_id).int()}
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(**inputs, logits_to_keep=1)
    counts = counter.get_flop_counts()
    prefix = type(model).__name__

    def measured(module: str) -> int:
        return sum(counts[f"{prefix}{module}"].values())

    ours = flops.prefill_flops_breakdown(config, len(ids) - sum(n_image), grids, causal_attention=False)
    text = config.get_text_config()
    linear_layers = sum(1 for kind in (getattr(text, "layer_types", None) or []) if kind == "linear_attention")
    conv_padding = 0
    if linear_layers:
        conv_channels = 2 * text.linear_num_key_heads * text.linear_key_head_dim
        conv_channels += text.linear_num_value_heads * text.linear_value_head_dim
        kernel = text.linear_conv_kernel_dim
        conv_padding = linear_layers * 2 * (kernel - 1) * conv_channels * kernel
        assert ours["language_solve"] > 0
    else:
        assert ours["language_solve"] == 0
    assert measured(".model.visual") == ours["vision"]
    assert measured(".model.language_model") == ours["language"] - ours["language_solve"] + conv_padding
    assert measured(".lm_head") == ours["lm_head"]
    assert ours["total"] == ours["vision"] + ours["language"] + ours["lm_head"]
