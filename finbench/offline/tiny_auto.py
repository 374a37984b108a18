"""Tiny random-weight checkpoints of the architectures the generic family (models/auto.py) is tested
on, by transformers `model_type`: `finbench models make-tiny gemma4 DIR`. Each is the real
processor and model class with a 2-layer text model and a 1-2-layer vision tower, the trained
~400-token BPE (offline/bpe.py) carrying the checkpoint's special tokens, and a chat template of
the released checkpoint's form (offline/tiny_auto_texts.py). The tokenizer class is the byte-level
BPE one (`Qwen2Tokenizer`) for every architecture: the real SentencePiece/tiktoken vocabularies
cannot be trained offline in milliseconds, and what the adapter relies on (single-token letters,
digits and tags; the template's markers as special tokens) is checked at build time as for the
other tiny families. `make_tiny` (offline/tiny.py) saves, reloads and checks the folder.
"""

from __future__ import annotations

from typing import Any, Callable

from finbench.offline.bpe import _train_bpe
from finbench.offline.tiny_auto_texts import (GEMMA4_CHAT_TEMPLATE, GEMMA4_NAMED, GEMMA4_SPECIAL,
                                              GLM46V_CHAT_TEMPLATE, GLM46V_SPECIAL, LLAMA4_CHAT_TEMPLATE,
                                              LLAMA4_SPECIAL, LLAVA_ONEVISION_CHAT_TEMPLATE, LLAVA_ONEVISION_SPECIAL,
                                              MINICPMV46_CHAT_TEMPLATE, MINICPMV46_NAMED, MINICPMV46_SPECIAL,
                                              MISTRAL3_CHAT_TEMPLATE, MISTRAL3_SPECIAL, SMOLVLM_CHAT_TEMPLATE,
                                              SMOLVLM_SPECIAL)
from finbench.offline.tiny_families import (_HEAD_DIM, _Built, _build_internvl, _image_processor_class, _padded_vocab,
                                            _text_dims)

PLAIN_WORDS = ("system", "user", "assistant", "model", "thought", "User", "Assistant")


def _tokenizer(special: tuple[str, ...], template: str, *, eos: str, pad: str, bos: str | None = None,
               named: dict[str, str] | None = None) -> Any:
    """The trained BPE in the byte-level tokenizer class, `special` as special tokens (ids from 0),
    the named multimodal tokens as tokenizer attributes (the processors read them there)."""
    from transformers import Qwen2Tokenizer

    vocab, merges = _train_bpe(special)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=bos, eos_token=eos,
                               pad_token=pad, padding_side="left", model_max_length=32768,
                               clean_up_tokenization_spaces=False, chat_template=template,
                               **({"extra_special_tokens": dict(named)} if named else {}))
    extra = [t for t in special if t not in (eos, pad, bos) and t not in (named or {}).values()]
    tokenizer.add_special_tokens({"extra_special_tokens": extra}, replace_extra_special_tokens=False)
    return tokenizer


def _text(tokenizer: Any, hidden_size: int, **extra: Any) -> dict[str, Any]:
    return {**_text_dims(hidden_size), "head_dim": _HEAD_DIM, "vocab_size": _padded_vocab(tokenizer),
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, **extra}


def _built(processor: Any, model: Any, summary: dict[str, Any]) -> _Built:
    return _Built(processor, model, type(processor).__name__, type(model).__name__, summary)


def build_gemma4(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """Gemma 4: sliding and full attention layers, the final logit soft-cap, a pooled vision tower
    with 70 soft tokens per image (the smallest budget its processor accepts)."""
    from transformers import (Gemma4AudioFeatureExtractor, Gemma4Config, Gemma4ForConditionalGeneration,
                              Gemma4Processor, Gemma4VideoProcessor)

    tokenizer = _tokenizer(GEMMA4_SPECIAL, GEMMA4_CHAT_TEMPLATE, eos="<eos>", pad="<pad>", bos="<bos>",
                           named=GEMMA4_NAMED)
    ids = tokenizer.convert_tokens_to_ids
    geometry = {"patch_size": 16, "max_soft_tokens": 70, "pooling_kernel_size": 3}
    processor = Gemma4Processor(feature_extractor=Gemma4AudioFeatureExtractor(),
                                image_processor=_image_processor_class("Gemma4ImageProcessor")(**geometry),
                                tokenizer=tokenizer, video_processor=Gemma4VideoProcessor(**geometry),
                                chat_template=GEMMA4_CHAT_TEMPLATE, image_seq_length=70)
    text = _text(tokenizer, hidden_size, layer_types=["sliding_attention", "full_attention"], sliding_window=64,
                 final_logit_softcapping=30.0, hidden_size_per_layer_input=16,
                 vocab_size_per_layer_input=_padded_vocab(tokenizer), pad_token_id=ids("<pad>"),
                 eos_token_id=ids("<eos>"), bos_token_id=ids("<bos>"))
    vision = {"hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden, "num_hidden_layers": 1,
              "num_attention_heads": vision_hidden // _HEAD_DIM, "num_key_value_heads": vision_hidden // _HEAD_DIM,
              "head_dim": _HEAD_DIM, "patch_size": 16, "pooling_kernel_size": 3}
    config = Gemma4Config(text_config=text, vision_config=vision, audio_config=None, image_token_id=ids("<|image|>"),
                          boi_token_id=ids("<|image>"), eoi_token_id=ids("<image|>"), audio_token_id=ids("<|audio|>"),
                          boa_token_id=ids("<|audio>"), eoa_token_index=ids("<audio|>"),
                          video_token_id=ids("<|video|>"))
    return _built(processor, Gemma4ForConditionalGeneration(config), {"text_config": text, "vision_config": vision})


def build_glm46v(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """GLM-4.6V: GLM-4 text layers with 3-D M-RoPE (4-row position ids in generation), the GLM-4V
    vision tower with a 2×2 patch merge."""
    from transformers import Glm46VConfig, Glm46VForConditionalGeneration, Glm46VProcessor

    tokenizer = _tokenizer(GLM46V_SPECIAL, GLM46V_CHAT_TEMPLATE, eos="<|endoftext|>", pad="<|endoftext|>")
    ids = tokenizer.convert_tokens_to_ids
    size = {"shortest_edge": 4 * 28 * 28, "longest_edge": max_pixels}
    geometry = {"size": size, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    import transformers

    processor = Glm46VProcessor(image_processor=_image_processor_class("Glm46VImageProcessor")(**geometry),
                                tokenizer=tokenizer, video_processor=transformers.Glm46VVideoProcessor(**geometry),
                                chat_template=GLM46V_CHAT_TEMPLATE)
    text = _text(tokenizer, hidden_size, partial_rotary_factor=0.5,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                  "partial_rotary_factor": 0.5},
                 eos_token_id=[ids("<|endoftext|>"), ids("<|user|>"), ids("<|observation|>")],
                 pad_token_id=ids("<|endoftext|>"))
    vision = {"depth": 1, "hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden,
              "num_heads": vision_hidden // _HEAD_DIM, "out_hidden_size": hidden_size, "patch_size": 14,
              "spatial_merge_size": 2, "temporal_patch_size": 2, "image_size": 56}
    config = Glm46VConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image|>"),
                          video_token_id=ids("<|video|>"), image_start_token_id=ids("<|begin_of_image|>"),
                          image_end_token_id=ids("<|end_of_image|>"), video_start_token_id=ids("<|begin_of_video|>"),
                          video_end_token_id=ids("<|end_of_video|>"))
    return _built(processor, Glm46VForConditionalGeneration(config), {"text_config": text, "vision_config": vision})


def build_internvl35(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """InternVL3.5 (`-hf`): the InternVL tiny build with a Qwen3 language model (head_dim, q/k norm)."""
    from transformers import InternVLConfig, InternVLForConditionalGeneration, Qwen3Config

    built = _build_internvl(hidden_size, max_pixels, vision_hidden)
    old = built.model.config
    text = {**built.config_summary["text_config"], "head_dim": _HEAD_DIM}
    config = InternVLConfig(text_config=Qwen3Config(**text), vision_config=old.vision_config.to_dict(),
                            image_token_id=old.image_token_id, image_seq_length=old.image_seq_length,
                            downsample_ratio=old.downsample_ratio, projector_hidden_act="gelu",
                            vision_feature_layer=-1, vision_feature_select_strategy="default",
                            tie_word_embeddings=False)
    summary = {**built.config_summary, "text_config": text}
    return _built(built.processor, InternVLForConditionalGeneration(config), summary)


def build_minicpmv4_6(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """MiniCPM-V 4.6: a Qwen3.5 hybrid language model (linear and full attention), a SigLIP-style
    tower with a window-attention merger, images sliced at a small scale resolution."""
    import transformers

    tokenizer = _tokenizer(MINICPMV46_SPECIAL, MINICPMV46_CHAT_TEMPLATE, eos="<|im_end|>", pad="<|endoftext|>",
                           named=MINICPMV46_NAMED)
    ids = tokenizer.convert_tokens_to_ids
    geometry = {"scale_resolution": 56, "patch_size": 14, "max_slice_nums": 1, "slice_mode": False}
    processor = transformers.MiniCPMV4_6Processor(
        image_processor=_image_processor_class("MiniCPMV4_6ImageProcessor")(**geometry),
        video_processor=transformers.MiniCPMV4_6VideoProcessor(**geometry), tokenizer=tokenizer,
        chat_template=MINICPMV46_CHAT_TEMPLATE)
    text = _text(tokenizer, hidden_size, layer_types=["linear_attention", "full_attention"],
                 linear_conv_kernel_dim=4, linear_key_head_dim=_HEAD_DIM, linear_value_head_dim=_HEAD_DIM,
                 linear_num_key_heads=2, linear_num_value_heads=4,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                  "mrope_section": [1, 1, 0], "mrope_interleaved": True},
                 eos_token_id=ids("<|im_end|>"), bos_token_id=ids("<|endoftext|>"))
    vision = {"hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden, "num_hidden_layers": 2,
              "num_attention_heads": vision_hidden // _HEAD_DIM, "patch_size": 14, "image_size": 56}
    config = transformers.MiniCPMV4_6Config(text_config=text, vision_config=vision, image_size=56, patch_size=14,
                                            insert_layer_id=0, image_token_id=ids("<|image_pad|>"),
                                            video_token_id=ids("<|video_pad|>"))
    model = transformers.MiniCPMV4_6ForConditionalGeneration(config)
    return _built(processor, model, {"text_config": text, "vision_config": vision})


def build_llama4(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """Llama 4: routed-expert text layers (2 experts, 1 per token) with chunked and global
    attention, the Llama 4 vision tower with pixel shuffle, images tiled at 56 px."""
    import transformers
    from transformers import Llama4Config, Llama4ForConditionalGeneration, Llama4Processor

    tokenizer = _tokenizer(LLAMA4_SPECIAL, LLAMA4_CHAT_TEMPLATE, eos="<|eot|>", pad="<|finetune_right_pad|>",
                           bos="<|begin_of_text|>")
    ids = tokenizer.convert_tokens_to_ids
    image_processor = transformers.Llama4ImageProcessor(size={"height": 56, "width": 56},
                                                                      max_patches=2, resize_to_max_canvas=False)
    processor = Llama4Processor(image_processor=image_processor, tokenizer=tokenizer, patch_size=14,
                                pixel_shuffle_ratio=0.5, chat_template=LLAMA4_CHAT_TEMPLATE)
    text = _text(tokenizer, hidden_size, intermediate_size_mlp=2 * hidden_size, num_local_experts=2,
                 num_experts_per_tok=1, interleave_moe_layer_step=1, no_rope_layers=[1, 0], attention_chunk_size=64,
                 eos_token_id=[ids("<|eot|>"), ids("<|end_of_text|>")], bos_token_id=ids("<|begin_of_text|>"),
                 pad_token_id=ids("<|finetune_right_pad|>"))
    # the pixel shuffle (ratio 0.5) makes 4× wider features: the MLP's width (real: 1408 → 5632)
    vision = {"hidden_size": vision_hidden, "intermediate_size": 4 * vision_hidden, "num_hidden_layers": 1,
              "num_attention_heads": vision_hidden // _HEAD_DIM, "image_size": 56, "patch_size": 14,
              "pixel_shuffle_ratio": 0.5, "projector_input_dim": hidden_size, "projector_output_dim": hidden_size,
              "vision_output_dim": hidden_size, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    config = Llama4Config(text_config=text, vision_config=vision, image_token_index=ids("<|patch|>"),
                          boi_token_index=ids("<|image_start|>"), eoi_token_index=ids("<|image_end|>"))
    return _built(processor, Llama4ForConditionalGeneration(config), {"text_config": text, "vision_config": vision})


def build_mistral3(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """Mistral 3 (Mistral Small 3.x): a Mistral language model, the Pixtral vision tower with a 2×2
    patch merge, [IMG] rows separated by [IMG_BREAK]."""
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralProcessor

    tokenizer = _tokenizer(MISTRAL3_SPECIAL, MISTRAL3_CHAT_TEMPLATE, eos="</s>", pad="<unk>", bos="<s>")
    ids = tokenizer.convert_tokens_to_ids
    image_processor = _image_processor_class("PixtralImageProcessor")(size={"longest_edge": 112},
                                                                      patch_size={"height": 14, "width": 14})
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=14,
                                 spatial_merge_size=2, chat_template=MISTRAL3_CHAT_TEMPLATE)
    text = _text(tokenizer, hidden_size, sliding_window=None, eos_token_id=ids("</s>"), bos_token_id=ids("<s>"),
                 pad_token_id=ids("<unk>"))
    vision = {"hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden, "num_hidden_layers": 1,
              "num_attention_heads": vision_hidden // _HEAD_DIM, "head_dim": _HEAD_DIM, "image_size": 112,
              "patch_size": 14}
    config = Mistral3Config(text_config=text, vision_config=vision, image_token_index=ids("[IMG]"),
                            spatial_merge_size=2, tie_word_embeddings=False)
    return _built(processor, Mistral3ForConditionalGeneration(config), {"text_config": text, "vision_config": vision})


def build_smolvlm(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """SmolVLM: a Llama language model, the SigLIP tower with pixel shuffle (scale 2), one 56 px
    global image (no splitting)."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMProcessor, SmolVLMVideoProcessor

    tokenizer = _tokenizer(SMOLVLM_SPECIAL, SMOLVLM_CHAT_TEMPLATE, eos="<end_of_utterance>", pad="<|endoftext|>",
                           named={"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                                  "end_of_utterance_token": "<end_of_utterance>", "global_image_token": "<global-img>"})
    ids = tokenizer.convert_tokens_to_ids
    image_processor = _image_processor_class("SmolVLMImageProcessor")(
        do_image_splitting=False, size={"longest_edge": 56}, max_image_size={"longest_edge": 56})
    processor = SmolVLMProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                 video_processor=SmolVLMVideoProcessor(), image_seq_len=4,
                                 chat_template=SMOLVLM_CHAT_TEMPLATE)
    text = _text(tokenizer, hidden_size, eos_token_id=ids("<end_of_utterance>"), pad_token_id=ids("<|endoftext|>"))
    vision = {"hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden, "num_hidden_layers": 1,
              "num_attention_heads": vision_hidden // _HEAD_DIM, "image_size": 56, "patch_size": 14}
    config = SmolVLMConfig(text_config=text, vision_config=vision, image_token_id=ids("<image>"), scale_factor=2,
                           pad_token_id=ids("<|endoftext|>"))
    return _built(processor, SmolVLMForConditionalGeneration(config), {"text_config": text, "vision_config": vision})


def build_llava_onevision(hidden_size: int, max_pixels: int, vision_hidden: int) -> _Built:
    """LLaVA-OneVision: a Qwen2 language model, a SigLIP tower, any-resolution tiling on a 56 px grid."""
    import transformers

    tokenizer = _tokenizer(LLAVA_ONEVISION_SPECIAL, LLAVA_ONEVISION_CHAT_TEMPLATE, eos="<|im_end|>",
                           pad="<|endoftext|>")
    ids = tokenizer.convert_tokens_to_ids
    pinpoints = [[56, 56], [56, 112], [112, 56], [112, 112]]
    image_processor = _image_processor_class("LlavaOnevisionImageProcessor")(
        size={"height": 56, "width": 56}, image_grid_pinpoints=pinpoints)
    processor = transformers.LlavaOnevisionProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=transformers.LlavaOnevisionVideoProcessor(), num_image_tokens=16,
        vision_feature_select_strategy="full", chat_template=LLAVA_ONEVISION_CHAT_TEMPLATE,
        vision_aspect_ratio="anyres_max_9")
    text = _text(tokenizer, hidden_size, eos_token_id=ids("<|im_end|>"), bos_token_id=ids("<|endoftext|>"))
    text.pop("head_dim")
    vision = {"hidden_size": vision_hidden, "intermediate_size": 2 * vision_hidden, "num_hidden_layers": 1,
              "num_attention_heads": vision_hidden // _HEAD_DIM, "image_size": 56, "patch_size": 14}
    config = transformers.LlavaOnevisionConfig(text_config={"model_type": "qwen2", **text},
                                               vision_config={"model_type": "siglip_vision_model", **vision},
                                               image_token_index=ids("<image>"), video_token_index=ids("<video>"),
                                               image_grid_pinpoints=pinpoints, vision_feature_select_strategy="full")
    model = transformers.LlavaOnevisionForConditionalGeneration(config)
    return _built(processor, model, {"text_config": text, "vision_config": vision})


# model_type → builder; the eos and turn-end tokens of each, for the generation config
AUTO_BUILDERS: dict[str, Callable[..., _Built]] = {
    "gemma4": build_gemma4, "glm46v": build_glm46v, "internvl": build_internvl35, "minicpmv4_6": build_minicpmv4_6,
    "llama4": build_llama4, "mistral3": build_mistral3, "smolvlm": build_smolvlm,
    "llava_onevision": build_llava_onevision,
}
STOPS = {"gemma4": ("<eos>", "<turn|>"), "glm46v": ("<|endoftext|>", "<|user|>", "<|observation|>"),
         "internvl": ("<|im_end|>", "<|endoftext|>"), "minicpmv4_6": ("<|im_end|>", "<|endoftext|>"),
         "llama4": ("<|eot|>", "<|end_of_text|>"), "mistral3": ("</s>",), "smolvlm": ("<end_of_utterance>",),
         "llava_onevision": ("<|im_end|>", "<|endoftext|>")}
