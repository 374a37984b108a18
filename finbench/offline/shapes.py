"""Full-size Qwen2.5-VL architectures with random weights, for throughput work without downloads.

A one-prefill scorer's cost does not depend on weight values, so a model built from the
*published* `config.json` hyper-parameters with random weights times exactly like the real one.
This module holds those hyper-parameters (architecture keys only, copied from the Hugging Face
`config.json` of `Qwen/Qwen2.5-VL-7B-Instruct` and `Qwen/Qwen2.5-VL-3B-Instruct`), turns them
into the nested `text_config` / `vision_config` layout transformers 5 expects, and builds random
models directly on the target device in the target dtype (no fp32 copy on the CPU first, no
expensive default initialisation).

On a CPU only tiny variants should be built: `scaled_down` shrinks every width and depth while
keeping the structure (GQA, M-RoPE sections, window + full-attention vision blocks, token ids),
and `build_random_model(..., **overrides)` routes through it, so tests exercise the same code
path a GPU throughput script takes.

Parameter counts (analytic, `param_counts`, checked against a meta-device instantiation in the
tests): 7B = 8.29e9 (vision 0.68e9), 3B = 3.75e9 (vision 0.67e9, embeddings tied).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

try:  # transformers 5: torch.nn.init and PreTrainedModel.init_weights become no-ops inside
    from transformers.initialization import no_init_weights
except ImportError:  # 4.x kept it in modeling_utils
    from transformers.modeling_utils import no_init_weights

# ---------------------------------------------------------------------------------------------
# Published config.json values (architecture keys only), in the checkpoints' own flat layout.
# Vision keys use the published spelling (`in_chans`), converted in `_v5_vision_config`.
# ---------------------------------------------------------------------------------------------

QWEN_SPECIAL_TOKEN_IDS: Mapping[str, int] = {
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
}

_QWEN25_VL_VISION_COMMON: Mapping[str, Any] = {
    "depth": 32,
    "hidden_act": "silu",
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "in_chans": 3,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "spatial_patch_size": 14,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2,
    "temporal_patch_size": 2,
}

QWEN25_VL_7B: Mapping[str, Any] = {
    "model_type": "qwen2_5_vl",
    **QWEN_SPECIAL_TOKEN_IDS,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 128000,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "use_sliding_window": False,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {**_QWEN25_VL_VISION_COMMON, "out_hidden_size": 3584},
}

QWEN25_VL_3B: Mapping[str, Any] = {
    "model_type": "qwen2_5_vl",
    **QWEN_SPECIAL_TOKEN_IDS,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "max_position_embeddings": 128000,
    "max_window_layers": 70,
    "num_attention_heads": 16,
    "num_hidden_layers": 36,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "use_sliding_window": False,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {**_QWEN25_VL_VISION_COMMON, "out_hidden_size": 2048},
}

# Names accepted by `full_size_config` (lower-cased lookup); hub ids map to the same entries.
FULL_SIZE_MODELS: Mapping[str, Mapping[str, Any]] = {
    "qwen2.5-vl-7b": QWEN25_VL_7B,
    "qwen2.5-vl-3b": QWEN25_VL_3B,
}
_ALIASES: Mapping[str, str] = {
    "qwen/qwen2.5-vl-7b-instruct": "qwen2.5-vl-7b",
    "qwen2.5-vl-7b-instruct": "qwen2.5-vl-7b",
    "qwen/qwen2.5-vl-3b-instruct": "qwen2.5-vl-3b",
    "qwen2.5-vl-3b-instruct": "qwen2.5-vl-3b",
}

_TEXT_KEYS = (
    "hidden_act",
    "hidden_size",
    "intermediate_size",
    "max_position_embeddings",
    "max_window_layers",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "rms_norm_eps",
    "sliding_window",
    "use_sliding_window",
    "vocab_size",
    "bos_token_id",
    "eos_token_id",
)
_TOP_LEVEL_TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


def published_config(name: str) -> dict[str, Any]:
    """A deep copy of the published flat `config.json` (architecture keys) for `name`."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in FULL_SIZE_MODELS:
        raise ValueError(f"unknown full-size model {name!r}; known: {sorted(FULL_SIZE_MODELS)}")
    return copy.deepcopy(dict(FULL_SIZE_MODELS[key]))


def _v5_vision_config(published_vision: Mapping[str, Any]) -> dict[str, Any]:
    """Published vision keys → `Qwen2_5_VLVisionConfig` fields (`in_chans` is `in_channels` in v5;
    `spatial_patch_size` duplicates `patch_size` and has no v5 field)."""
    vision = {k: v for k, v in published_vision.items() if k not in ("in_chans", "spatial_patch_size")}
    vision["in_channels"] = published_vision.get("in_chans", 3)
    vision["fullatt_block_indexes"] = list(vision["fullatt_block_indexes"])
    return vision


def v5_config_dict(published: Mapping[str, Any]) -> dict[str, Any]:
    """Flat published config → the nested kwargs transformers 5 expects for `Qwen2_5_VLConfig`."""
    text = {k: published[k] for k in _TEXT_KEYS if k in published}
    rope = published.get("rope_scaling") or {}
    # v5 stores RoPE in `rope_parameters`; "mrope" is the legacy type name of the default RoPE
    # with sections (the library rewrites it the same way when loading old checkpoints).
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": float(published.get("rope_theta", 1e6)),
        "mrope_section": list(rope.get("mrope_section", [16, 24, 24])),
    }
    # v5 reads tying from the top level; pre-v5 saves kept it in text_config. Set both.
    text["tie_word_embeddings"] = bool(published["tie_word_embeddings"])
    return {
        "text_config": text,
        "vision_config": _v5_vision_config(published["vision_config"]),
        **{k: published[k] for k in _TOP_LEVEL_TOKEN_KEYS},
        "tie_word_embeddings": bool(published["tie_word_embeddings"]),
    }


def full_size_config(name: str) -> Qwen2_5_VLConfig:
    """The transformers config object of a published full-size model ("qwen2.5-vl-7b", "qwen2.5-vl-3b"
    or their hub ids), with sdpa attention (flash-attn is an optional extra)."""
    config = Qwen2_5_VLConfig(**v5_config_dict(published_config(name)))
    config._attn_implementation = "sdpa"
    return config


def scaled_down(
    config: Qwen2_5_VLConfig,
    *,
    layers: int = 1,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    vision_depth: int = 2,
    vision_hidden_size: int = 32,
    vision_intermediate_size: int = 64,
    vision_num_heads: int = 2,
    vocab_size: int | None = None,
) -> Qwen2_5_VLConfig:
    """A tiny copy of `config` with the same structure: GQA (kv heads < heads), M-RoPE with sections
    rescaled to the new head size, a vision tower whose last block is full-attention and the others
    windowed, the same patch/merge/window geometry and the same special token ids (so the vocabulary
    stays full-size unless `vocab_size` is given; it must still contain the special ids)."""
    text = config.text_config.to_dict()
    vision = config.vision_config.to_dict()
    if hidden_size % num_attention_heads or num_attention_heads % num_key_value_heads:
        raise ValueError("hidden_size must divide into heads, heads into kv heads")
    head_dim = hidden_size // num_attention_heads
    if head_dim % 2 or head_dim < 6:
        raise ValueError(f"head_dim {head_dim} too small for 3-section M-RoPE")

    vocab = vocab_size or text["vocab_size"]
    max_special = max(config.image_token_id, config.video_token_id, config.vision_end_token_id)
    if vocab <= max_special:
        raise ValueError(f"vocab_size {vocab} does not contain the special token ids (max {max_special})")

    rope = dict(text.get("rope_parameters") or {})
    rope["mrope_section"] = _rescale_sections(rope.get("mrope_section", [16, 24, 24]), head_dim // 2)
    text.update(
        num_hidden_layers=layers,
        max_window_layers=layers,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        vocab_size=vocab,
        rope_parameters=rope,
        layer_types=None,  # recomputed for the new depth
    )
    vision.update(
        depth=vision_depth,
        hidden_size=vision_hidden_size,
        intermediate_size=vision_intermediate_size,
        num_heads=vision_num_heads,
        out_hidden_size=hidden_size,
        # Keep both attention kinds: every block windowed except the last.
        fullatt_block_indexes=[vision_depth - 1],
    )
    for sub in (text, vision):
        for key in ("transformers_version", "architectures", "model_type", "dtype"):
            sub.pop(key, None)
    tiny = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        **{k: getattr(config, k) for k in _TOP_LEVEL_TOKEN_KEYS},
        tie_word_embeddings=config.tie_word_embeddings,
    )
    tiny._attn_implementation = config._attn_implementation
    return tiny


def _rescale_sections(sections: list[int], half_head_dim: int) -> list[int]:
    """M-RoPE (t, h, w) sections must sum to head_dim // 2; keep their proportions."""
    total = sum(sections)
    scaled = [max(1, round(s * half_head_dim / total)) for s in sections]
    scaled[0] += half_head_dim - sum(scaled)  # absorb rounding so the sum is exact
    if min(scaled) < 1:
        raise ValueError(f"cannot split {half_head_dim} into {len(sections)} M-RoPE sections")
    return scaled


def param_counts(config: Qwen2_5_VLConfig) -> dict[str, int]:
    """Analytic parameter counts of `Qwen2_5_VLForConditionalGeneration(config)`: biases and norms
    included, tied LM head counted once. Keys: vision, embed, language (decoder layers + final norm),
    lm_head (0 when tied), total."""
    v, t = config.vision_config, config.text_config
    vh, vi, merge = v.hidden_size, v.intermediate_size, v.spatial_merge_size
    patch_in = v.in_channels * v.temporal_patch_size * v.patch_size**2
    vision_block = (
        2 * vh  # norm1, norm2
        + vh * 3 * vh + 3 * vh  # qkv (+bias)
        + vh * vh + vh  # proj (+bias)
        + 2 * (vh * vi + vi) + vi * vh + vh  # gated MLP, all with bias
    )
    merged = vh * merge**2
    merger = vh + merged * merged + merged + merged * v.out_hidden_size + v.out_hidden_size
    vision = patch_in * vh + v.depth * vision_block + merger

    h, inter = t.hidden_size, t.intermediate_size
    head_dim = getattr(t, "head_dim", None) or h // t.num_attention_heads
    q_dim, kv_dim = t.num_attention_heads * head_dim, t.num_key_value_heads * head_dim
    layer = (
        2 * h  # input / post-attention norms
        + h * q_dim + q_dim + 2 * (h * kv_dim + kv_dim)  # q, k, v with bias
        + q_dim * h  # o_proj, no bias
        + 3 * h * inter  # gated MLP, no bias
    )
    language = t.num_hidden_layers * layer + h  # + final norm
    embed = t.vocab_size * h
    lm_head = 0 if config.tie_word_embeddings else t.vocab_size * h
    return {
        "vision": vision,
        "embed": embed,
        "language": language,
        "lm_head": lm_head,
        "total": vision + embed + language + lm_head,
    }


def build_random_model(
    name: str | Qwen2_5_VLConfig,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cuda",
    *,
    attn_implementation: str = "sdpa",
    seed: int = 0,
    std: float = 0.02,
    **overrides: Any,
) -> Qwen2_5_VLForConditionalGeneration:
    """A `Qwen2_5_VLForConditionalGeneration` with random weights, allocated directly on `device` in
    `dtype` (no fp32 CPU copy), in eval mode with gradients off.

    `name` is a full-size name (see `full_size_config`) or a config. Keyword `overrides` (e.g.
    `layers=1, hidden_size=64`) go to `scaled_down` — on a CPU always pass some, a full-size 7B in
    fp32 is 33 GB. Initialisation skips torch's and transformers' default schemes (kaiming-uniform
    over 8e9 weights is seconds on a CPU and pointless here) and fills every weight with one
    seeded `normal_(0, std)` on the device; norms are ones and biases zero, so activations stay
    finite in bf16 and logits are not NaN.
    """
    config = full_size_config(name) if isinstance(name, str) else copy.deepcopy(name)
    if overrides:
        config = scaled_down(config, **overrides)
    device = torch.device(device)
    # `no_init_weights` turns torch.nn.init and PreTrainedModel.init_weights into no-ops; weights
    # are then created with torch.empty on `device` in `dtype` (set by `_from_config`).
    with torch.device(device), no_init_weights():
        model = Qwen2_5_VLForConditionalGeneration._from_config(
            config, dtype=dtype, attn_implementation=attn_implementation
        )
    _fill_random_(model, seed=seed, std=std)
    # `init_weights` (a no-op above) is also where tied weights are tied: tie explicitly.
    model.tie_weights()
    model.eval().requires_grad_(False)
    return model


@torch.no_grad()
def _fill_random_(model: torch.nn.Module, *, seed: int, std: float) -> None:
    """In place: weight matrices / conv kernels / embeddings ~ N(0, std), vectors named `bias` zero,
    other vectors (norm scales) one. Rotary `inv_freq` buffers were computed in __init__ and are
    left alone."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        if param.ndim >= 2:
            param.normal_(0.0, std, generator=generator)
        elif name.endswith("bias"):
            param.zero_()
        else:
            param.fill_(1.0)


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied tensors counted once, as `parameters()` dedupes)."""
    return sum(p.numel() for p in model.parameters())


def meta_model(config: Qwen2_5_VLConfig) -> Qwen2_5_VLForConditionalGeneration:
    """Instantiate on the meta device: shapes only, no memory, no init (transformers skips it on meta)."""
    with torch.device("meta"):
        return Qwen2_5_VLForConditionalGeneration(config)
