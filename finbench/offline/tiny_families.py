"""One builder per tiny family (`offline/tiny.py` explains the pitfalls): the real processor and
model classes with tiny text and vision configs, returned as `_Built` for `make_tiny` to save."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from finbench.offline.bpe import _build_tokenizer
from finbench.offline.tiny_texts import (INTERNVL_CHAT_TEMPLATE, QWEN25_VL_CHAT_TEMPLATE, QWEN3_5_CHAT_TEMPLATE,
                                         QWEN3_VL_CHAT_TEMPLATE, _INTERNVL_NAMED, _INTERNVL_SPECIAL,
                                         _QWEN25_PLAIN_ADDED, _QWEN3_PLAIN_ADDED, _QWEN_SPECIAL)

# Head size of every tiny attention layer: hidden_size / 16 heads, so hidden must be a multiple
# of 16 (multiples of 64 are needed for bitsandbytes 4-bit, which crashes on < 64 in-features).
_HEAD_DIM = 16
_VISION_HIDDEN = 64
# `make_tiny(head_dim=...)` builds these families with wider heads (vLLM's CPU attention runs head
# sizes 32, 64, 80, ... only: docs/scale.md)
HEAD_DIM_FAMILIES = ("qwen2.5-vl", "qwen3-vl")


# --------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Built:
    """What a family builder returns: the processor and the (untrained) model to save."""

    processor: Any
    model: Any
    processor_class: str
    model_class: str
    config_summary: dict[str, Any]


def _image_processor_class(name: str) -> Any:
    """The torchvision-backed image processor class `name`, under either 5.x naming scheme."""
    import transformers

    if hasattr(transformers, name + "Pil"):  # newer 5.x: plain name = torchvision, ...Pil = PIL
        return getattr(transformers, name)
    return getattr(transformers, name + "Fast", None) or getattr(transformers, name)


def _padded_vocab(tokenizer: Any) -> int:
    # Real checkpoints pad the embedding matrix beyond the tokenizer (Qwen: 152064 > 151665).
    return (len(tokenizer) + 63) // 64 * 64


def _text_dims(hidden_size: int, head_dim: int = _HEAD_DIM) -> dict[str, int]:
    heads = hidden_size // head_dim
    return {
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2),  # grouped-query attention, like the real models
    }


def _mrope(sections: list[int], head_dim: int) -> list[int]:
    """Rotary sections (temporal, height, width) of head_dim 16 scaled to `head_dim` (they sum to
    head_dim / 2: no weight depends on them)."""
    return [s * head_dim // _HEAD_DIM for s in sections]


def _qwen_image_sizes(max_pixels: int, factor: int) -> dict[str, int]:
    # Smallest image = 2x2 merged tokens (the real min_pixels is 56*56 for a 28-pixel factor).
    min_pixels = min(4 * factor * factor, max_pixels)
    return {"shortest_edge": min_pixels, "longest_edge": max_pixels}


def _build_qwen25_vl(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN,
                     head_dim: int = _HEAD_DIM) -> _Built:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = _build_tokenizer(_QWEN_SPECIAL, _QWEN25_PLAIN_ADDED, None, QWEN25_VL_CHAT_TEMPLATE)
    ids = tokenizer.convert_tokens_to_ids
    size = _qwen_image_sizes(max_pixels, factor=28)
    image_processor = _image_processor_class("Qwen2VLImageProcessor")(
        size=size, patch_size=14, temporal_patch_size=2, merge_size=2
    )
    video_processor = Qwen2VLVideoProcessor(size=size, patch_size=14, temporal_patch_size=2, merge_size=2)
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=QWEN25_VL_CHAT_TEMPLATE,
    )
    text = {
        **_text_dims(hidden_size, head_dim),
        "vocab_size": _padded_vocab(tokenizer),
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        # mrope_section splits head_dim/2 = 8 rotary frequencies into (temporal, height, width),
        # the same 2:3:3 proportion as the real [16, 24, 24] of head_dim 128.
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": _mrope([2, 3, 3], head_dim)},
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
    }
    vision = {
        "depth": 2,
        "hidden_size": vision_hidden,
        "intermediate_size": 2 * vision_hidden,
        "num_heads": vision_hidden // head_dim,
        "hidden_act": "silu",
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [1],  # layer 0 windowed, layer 1 full: both attention kinds run
        "out_hidden_size": hidden_size,
        "tokens_per_second": 2,
        "in_channels": 3,
    }
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,  # as the 7B/32B/72B checkpoints
    )
    model = Qwen2_5_VLForConditionalGeneration(config)
    return _Built(processor, model, "Qwen2_5_VLProcessor", "Qwen2_5_VLForConditionalGeneration",
                  {"text_config": text, "vision_config": vision, "image_processor_size": size})


def _build_qwen3_vl(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN,
                    head_dim: int = _HEAD_DIM) -> _Built:
    from transformers import (
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    tokenizer = _build_tokenizer(_QWEN_SPECIAL, _QWEN3_PLAIN_ADDED, None, QWEN3_VL_CHAT_TEMPLATE)
    ids = tokenizer.convert_tokens_to_ids
    size = _qwen_image_sizes(max_pixels, factor=32)
    half = [0.5, 0.5, 0.5]  # Qwen3-VL normalises with mean = std = 0.5
    image_processor = _image_processor_class("Qwen2VLImageProcessor")(
        size=size, patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=half, image_std=half
    )
    video_processor = Qwen3VLVideoProcessor(
        size=size, patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=half, image_std=half
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=QWEN3_VL_CHAT_TEMPLATE,
    )
    text = _qwen3_style_text(tokenizer, hidden_size, head_dim)
    vision = _qwen3_style_vision(hidden_size, deepstack=True, vision_hidden=vision_hidden, head_dim=head_dim)
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,  # as the 8B/32B checkpoints
    )
    model = Qwen3VLForConditionalGeneration(config)
    return _Built(processor, model, "Qwen3VLProcessor", "Qwen3VLForConditionalGeneration",
                  {"text_config": text, "vision_config": vision, "image_processor_size": size})


def _build_internvl(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN) -> _Built:
    from transformers import (
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
        Qwen2Config,
    )

    tokenizer = _build_tokenizer(
        _QWEN_SPECIAL + _INTERNVL_SPECIAL, _QWEN25_PLAIN_ADDED, _INTERNVL_NAMED, INTERNVL_CHAT_TEMPLATE
    )
    ids = tokenizer.convert_tokens_to_ids
    tile, patch, downsample = 56, 14, 0.5  # real: 448-pixel tiles, 14-pixel patches
    # Tokens per tile after pixel shuffle; the processor's value must equal the model's.
    image_seq_length = int((tile // patch) ** 2 * downsample**2)
    max_tiles = max(1, min(12, max_pixels // (tile * tile)))  # real max_patches = 12
    imagenet_mean, imagenet_std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    image_processor = _image_processor_class("GotOcr2ImageProcessor")(
        size={"height": tile, "width": tile},
        crop_to_patches=True,
        min_patches=1,
        max_patches=max_tiles,
        image_mean=imagenet_mean,
        image_std=imagenet_std,
    )
    video_processor = InternVLVideoProcessor(
        size={"height": tile, "width": tile}, image_mean=imagenet_mean, image_std=imagenet_std
    )
    processor = InternVLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        image_seq_length=image_seq_length,
        chat_template=INTERNVL_CHAT_TEMPLATE,
    )
    text = {
        **_text_dims(hidden_size),
        "vocab_size": _padded_vocab(tokenizer),
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
        "tie_word_embeddings": False,
    }
    vision = _internvit_dims(vision_hidden, tile, patch)
    config = InternVLConfig(
        text_config=Qwen2Config(**text),
        vision_config=vision,
        image_token_id=ids("<IMG_CONTEXT>"),
        image_seq_length=image_seq_length,
        downsample_ratio=downsample,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=False,
    )
    model = InternVLForConditionalGeneration(config)
    summary = {
        "text_config": text,
        "vision_config": vision,
        "image_seq_length": image_seq_length,
        "max_tiles": max_tiles,
    }
    return _Built(processor, model, "InternVLProcessor", "InternVLForConditionalGeneration", summary)


def _internvit_dims(vision_hidden: int, tile: int, patch: int) -> dict[str, Any]:
    """A two-layer InternViT's settings: InternViT-300M's, smaller."""
    return {
        "hidden_size": vision_hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": vision_hidden // _HEAD_DIM,
        "intermediate_size": 2 * vision_hidden,
        "hidden_act": "gelu",
        "attention_bias": True,  # InternViT-300M has qkv bias
        "use_qk_norm": False,
        "norm_type": "layer_norm",
        "image_size": [tile, tile],
        "patch_size": [patch, patch],
        "layer_scale_init_value": 0.1,
        "use_mean_pooling": True,
        "use_absolute_position_embeddings": True,
    }


def _qwen3_style_processor(tokenizer: Any, max_pixels: int, chat_template: str) -> tuple[Any, dict[str, int]]:
    """Qwen3-VL's processor (patch 16, merge 2, mean = std = 0.5), shared by Qwen3-VL-MoE and Qwen3.5."""
    from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

    size = _qwen_image_sizes(max_pixels, factor=32)
    half = [0.5, 0.5, 0.5]
    geometry = {"size": size, "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
                "image_mean": half, "image_std": half}
    processor = Qwen3VLProcessor(image_processor=_image_processor_class("Qwen2VLImageProcessor")(**geometry),
                                 tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(**geometry),
                                 chat_template=chat_template)
    return processor, size


def _qwen3_style_text(tokenizer: Any, hidden_size: int, head_dim: int = _HEAD_DIM) -> dict[str, Any]:
    """The text config shared by the Qwen3-VL dense and MoE builders."""
    ids = tokenizer.convert_tokens_to_ids
    return {
        **_text_dims(hidden_size, head_dim),
        "head_dim": head_dim,
        "vocab_size": _padded_vocab(tokenizer),
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        # Interleaved mrope over head_dim/2 = 8 frequencies; sections (t, h, w) = [4, 2, 2]
        # (the interleave needs 3 * section <= 8 for h and w; real: [24, 20, 20] of 64).
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": _mrope([4, 2, 2], head_dim),
                            "mrope_interleaved": True},
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
    }


def _qwen3_style_vision(hidden_size: int, deepstack: bool, vision_hidden: int = _VISION_HIDDEN,
                        head_dim: int = _HEAD_DIM) -> dict[str, Any]:
    vision = {
        "depth": 2,
        "hidden_size": vision_hidden,
        "intermediate_size": 2 * vision_hidden,
        "num_heads": vision_hidden // head_dim,
        "hidden_act": "gelu_pytorch_tanh",
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": hidden_size,
        "num_position_embeddings": 64,  # an 8x8 learned grid, interpolated like the real 48x48
        "in_channels": 3,
    }
    if deepstack:
        vision["deepstack_visual_indexes"] = [0]  # vision layer 0 feeds text layer 0 (real: [8, 16, 24])
    return vision


def _vision_token_ids(tokenizer: Any) -> dict[str, int]:
    ids = tokenizer.convert_tokens_to_ids
    return {"image_token_id": ids("<|image_pad|>"), "video_token_id": ids("<|video_pad|>"),
            "vision_start_token_id": ids("<|vision_start|>"), "vision_end_token_id": ids("<|vision_end|>")}


def _build_qwen3_vl_moe(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN) -> _Built:
    """Qwen3-VL-MoE (e.g. Qwen3-VL-30B-A3B): Qwen3-VL with every decoder MLP a top-k routed MoE."""
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    tokenizer = _build_tokenizer(_QWEN_SPECIAL, _QWEN3_PLAIN_ADDED, None, QWEN3_VL_CHAT_TEMPLATE)
    processor, size = _qwen3_style_processor(tokenizer, max_pixels, QWEN3_VL_CHAT_TEMPLATE)
    text = {
        **_qwen3_style_text(tokenizer, hidden_size),
        # 4 experts, 2 per token (real: 128 experts, 8 per token, moe_intermediate_size 768)
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": hidden_size,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    vision = _qwen3_style_vision(hidden_size, deepstack=True, vision_hidden=vision_hidden)
    config = Qwen3VLMoeConfig(text_config=text, vision_config=vision, **_vision_token_ids(tokenizer),
                              tie_word_embeddings=False)
    model = Qwen3VLMoeForConditionalGeneration(config)
    return _Built(processor, model, "Qwen3VLProcessor", "Qwen3VLMoeForConditionalGeneration",
                  {"text_config": text, "vision_config": vision, "image_processor_size": size})


def _build_qwen3_5(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN,
                   moe: bool = False) -> _Built:
    """Qwen3.5: a hybrid decoder — layer 0 Gated DeltaNet linear attention (a recurrent state
    instead of a KV cache), layer 1 output-gated full attention (real: 3 of every 4 layers
    linear) — with Qwen3-VL's vision tower minus DeepStack, and the `Qwen3_5Tokenizer` class.
    `moe`: Qwen3.5-MoE (e.g. 35B-A3B), every MLP 2-of-4 routed experts plus a shared expert
    (real: 256 experts, 8 routed + 1 shared)."""
    import transformers

    tokenizer = _build_tokenizer(_QWEN_SPECIAL, _QWEN3_PLAIN_ADDED, None, QWEN3_5_CHAT_TEMPLATE,
                                 tokenizer_class="Qwen3_5Tokenizer")
    ids = tokenizer.convert_tokens_to_ids
    processor, size = _qwen3_style_processor(tokenizer, max_pixels, QWEN3_5_CHAT_TEMPLATE)
    text = {
        **_text_dims(hidden_size),
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        # head_dim 32 with a rotary fraction of 0.25 (as the real 256 with 0.25) rotates 8 dims =
        # 4 frequencies, split (t, h, w) = [2, 1, 1] and interleaved (real: [11, 11, 10] of 32)
        "head_dim": 32,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": _HEAD_DIM,
        "linear_value_head_dim": _HEAD_DIM,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,  # two value heads per key head, like the real 16 : 32
        "vocab_size": _padded_vocab(tokenizer),
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
    }
    if moe:
        del text["intermediate_size"]
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden_size // 2,
                    shared_expert_intermediate_size=hidden_size)
    name = "Qwen3_5Moe" if moe else "Qwen3_5"
    vision = _qwen3_style_vision(hidden_size, deepstack=False, vision_hidden=vision_hidden)
    config = getattr(transformers, name + "Config")(text_config=text, vision_config=vision,
                                                   **_vision_token_ids(tokenizer), tie_word_embeddings=False)
    model = getattr(transformers, name + "ForConditionalGeneration")(config)
    return _Built(processor, model, "Qwen3VLProcessor", name + "ForConditionalGeneration",
                  {"text_config": text, "vision_config": vision, "image_processor_size": size})


_BUILDERS: dict[str, Callable[..., _Built]] = {
    "qwen2.5-vl": _build_qwen25_vl,
    "qwen3-vl": _build_qwen3_vl,
    "internvl": _build_internvl,
    "qwen3-vl-moe": _build_qwen3_vl_moe,
    "qwen3.5": _build_qwen3_5,
    "qwen3.5-moe": lambda hidden_size, max_pixels, vision_hidden=_VISION_HIDDEN: _build_qwen3_5(
        hidden_size, max_pixels, vision_hidden, moe=True),
}
