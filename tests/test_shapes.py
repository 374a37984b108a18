"""Full-size Qwen2.5-VL configs (published values, parameter counts) and random-model building.

Full-size models are only instantiated on the meta device (shapes, no memory); real forwards run
on a scaled-down copy built through the same `build_random_model` path a GPU script uses."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from finbench.offline import shapes


@pytest.fixture(scope="module")
def configs() -> dict[str, Qwen2_5_VLConfig]:
    return {name: shapes.full_size_config(name) for name in ("qwen2.5-vl-7b", "qwen2.5-vl-3b")}


def test_published_values_7b(configs):
    c = configs["qwen2.5-vl-7b"]
    t, v = c.text_config, c.vision_config
    assert (t.hidden_size, t.intermediate_size, t.num_hidden_layers) == (3584, 18944, 28)
    assert (t.num_attention_heads, t.num_key_value_heads, t.vocab_size) == (28, 4, 152064)
    assert t.rope_parameters["mrope_section"] == [16, 24, 24] and t.rope_parameters["rope_theta"] == 1e6
    assert t.rms_norm_eps == 1e-6 and t.max_position_embeddings == 128000 and not c.tie_word_embeddings
    assert (v.depth, v.hidden_size, v.intermediate_size, v.num_heads, v.out_hidden_size) == (32, 1280, 3420, 16, 3584)
    assert (v.patch_size, v.spatial_merge_size, v.temporal_patch_size, v.window_size) == (14, 2, 2, 112)
    assert list(v.fullatt_block_indexes) == [7, 15, 23, 31] and v.in_channels == 3
    assert (c.image_token_id, c.video_token_id) == (151655, 151656)
    assert (c.vision_start_token_id, c.vision_end_token_id) == (151652, 151653)


def test_published_values_3b(configs):
    c = configs["qwen2.5-vl-3b"]
    t, v = c.text_config, c.vision_config
    assert (t.hidden_size, t.intermediate_size, t.num_hidden_layers) == (2048, 11008, 36)
    assert (t.num_attention_heads, t.num_key_value_heads, t.vocab_size) == (16, 2, 151936)
    assert c.tie_word_embeddings
    assert (v.depth, v.hidden_size, v.out_hidden_size) == (32, 1280, 2048)


def test_hub_ids_and_unknown_names():
    assert shapes.full_size_config("Qwen/Qwen2.5-VL-7B-Instruct").text_config.hidden_size == 3584
    with pytest.raises(ValueError, match="unknown full-size model"):
        shapes.full_size_config("qwen2.5-vl-72b")


@pytest.mark.parametrize("name", ["qwen2.5-vl-7b", "qwen2.5-vl-3b"])
def test_nested_config_matches_library_loading_of_flat_json(name):
    """Independent check of the flat → nested conversion: transformers' own loader of the published
    flat config.json must give the same architecture."""
    ours = shapes.full_size_config(name)
    library = Qwen2_5_VLConfig.from_dict(shapes.published_config(name))
    text_keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "vocab_size", "rms_norm_eps", "max_position_embeddings", "hidden_act"]
    for key in text_keys:
        assert getattr(ours.text_config, key) == getattr(library.text_config, key), key
    assert ours.text_config.rope_parameters["mrope_section"] == library.text_config.rope_parameters["mrope_section"]
    vision_keys = ["depth", "hidden_size", "intermediate_size", "num_heads", "out_hidden_size", "patch_size",
                   "spatial_merge_size", "temporal_patch_size", "window_size", "in_channels", "hidden_act"]
    for key in vision_keys:
        assert getattr(ours.vision_config, key) == getattr(library.vision_config, key), key
    assert list(ours.vision_config.fullatt_block_indexes) == list(library.vision_config.fullatt_block_indexes)
    assert ours.tie_word_embeddings == library.tie_word_embeddings
    assert ours.image_token_id == library.image_token_id


@pytest.mark.parametrize(("name", "expected"), [("qwen2.5-vl-7b", 8.29e9), ("qwen2.5-vl-3b", 3.75e9)])
def test_parameter_counts_analytic_equals_meta_model(configs, name, expected):
    config = configs[name]
    analytic = shapes.param_counts(config)
    model = shapes.meta_model(config)  # shapes only: no memory, no init
    assert next(model.parameters()).device.type == "meta"
    assert shapes.count_parameters(model) == analytic["total"]
    assert analytic["total"] == pytest.approx(expected, rel=0.01)
    vision = sum(p.numel() for p in model.model.visual.parameters())
    assert vision == analytic["vision"]


def test_scaled_down_keeps_structure(configs):
    tiny = shapes.scaled_down(configs["qwen2.5-vl-7b"], layers=2, vision_depth=3)
    t, v = tiny.text_config, tiny.vision_config
    assert t.num_hidden_layers == 2 and len(t.layer_types) == 2
    assert t.num_key_value_heads < t.num_attention_heads  # GQA kept
    head_dim = t.hidden_size // t.num_attention_heads
    assert sum(t.rope_parameters["mrope_section"]) == head_dim // 2
    assert list(v.fullatt_block_indexes) == [2] and v.depth == 3  # windowed and full blocks
    assert v.out_hidden_size == t.hidden_size
    assert (v.patch_size, v.spatial_merge_size, v.window_size) == (14, 2, 112)
    assert tiny.image_token_id == 151655
    with pytest.raises(ValueError):
        shapes.scaled_down(configs["qwen2.5-vl-7b"], vocab_size=1000)  # would drop the image token


def _one_image_inputs(config: Qwen2_5_VLConfig, grid: tuple[int, int, int]) -> dict[str, torch.Tensor]:
    t, h, w = grid
    n_image = t * h * w // config.vision_config.spatial_merge_size**2
    ids = [11, 12, config.vision_start_token_id] + [config.image_token_id] * n_image
    ids += [config.vision_end_token_id, 13, 14, 15]
    patch_dim = 3 * config.vision_config.temporal_patch_size * config.vision_config.patch_size**2
    return {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "pixel_values": torch.randn(t * h * w, patch_dim, generator=torch.Generator().manual_seed(0)),
        "image_grid_thw": torch.tensor([grid]),
    }


@pytest.mark.parametrize("name", ["qwen2.5-vl-7b", "qwen2.5-vl-3b"])
def test_build_random_model_tiny_forward(name):
    model = shapes.build_random_model(name, torch.float32, "cpu", layers=1)
    assert isinstance(model, Qwen2_5_VLForConditionalGeneration)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    tied = model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert tied == model.config.tie_word_embeddings
    # Random N(0, 0.02) matrices, unit norms, zero biases.
    assert model.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(model.model.language_model.norm.weight == 1)
    assert torch.all(model.model.visual.blocks[0].attn.qkv.bias == 0)
    # A 12×16-patch image: 48 image tokens, windowed (block 0) and full (last block) attention.
    inputs = _one_image_inputs(model.config, (1, 12, 16))
    with torch.inference_mode():
        out = model(**inputs, logits_to_keep=1)
    assert out.logits.shape == (1, 1, model.config.text_config.vocab_size)
    assert torch.isfinite(out.logits).all()


def test_build_random_model_is_seeded_and_keeps_rope_buffers():
    a = shapes.build_random_model("qwen2.5-vl-7b", torch.float32, "cpu", layers=1, seed=3)
    b = shapes.build_random_model("qwen2.5-vl-7b", torch.float32, "cpu", layers=1, seed=3)
    assert torch.equal(a.model.visual.merger.mlp[0].weight, b.model.visual.merger.mlp[0].weight)
    # Skipping init must not skip the RoPE buffers: compare with a default-initialised model.
    reference = Qwen2_5_VLForConditionalGeneration(a.config)
    assert torch.equal(a.model.language_model.rotary_emb.inv_freq, reference.model.language_model.rotary_emb.inv_freq)
    assert torch.equal(a.model.visual.rotary_pos_emb.inv_freq, reference.model.visual.rotary_pos_emb.inv_freq)


def test_build_random_model_bf16_and_explicit_config():
    config = shapes.scaled_down(shapes.full_size_config("qwen2.5-vl-3b"), layers=1)
    model = shapes.build_random_model(config, torch.bfloat16, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.language_model.rotary_emb.inv_freq.dtype == torch.float32
    with torch.inference_mode():
        out = model(**_one_image_inputs(model.config, (1, 8, 8)), logits_to_keep=1)
    assert torch.isfinite(out.logits.float()).all()
