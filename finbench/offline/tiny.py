"""Tiny random-weight models of the REAL architectures, built offline.

No machine of this project can download weights, yet the loading code must be the real one
(`AutoProcessor.from_pretrained(dir)` + `AutoModelForImageTextToText.from_pretrained(dir)`).
`make_tiny(family, out_dir)` therefore builds, in well under a second, a folder that looks exactly
like a real checkpoint of that family, only tiny:

- a 2-layer text model (hidden 64 by default) and a 2-layer vision tower with the real model class;
- a ~400-token byte-level BPE trained on the spot with `tokenizers` on a small built-in corpus,
  wrapped in the real tokenizer class (`Qwen2Tokenizer`, the `tokenizers`-backed class that
  transformers 5 uses for the Qwen-VL and InternVL families; `Qwen3_5Tokenizer` for Qwen3.5), the
  family's special tokens and real chat template;
- the real image/video processors (small pixel limits) and the real processor class;
- `finbench_tiny.json`, which records family, seed and that the weights are random.

The weights are random: every score a tiny model produces is chance level. Tiny models exist to
test loading, batching, caching, decoding and scoring code paths, never model quality.

Tokenization guarantees (checked by `check_tokenizer` at build time, fail loudly otherwise):
"A".."N", " A".." N", each digit, ".", "-", "%", ",", " " are single tokens, and appending a
letter to a prompt ending in "Answer:" or "assistant\\n" leaves the prompt's tokens unchanged.
The BPE is trained with a stricter pre-tokenizer than Qwen's (letters never share a pre-token
with punctuation), so no merge can glue a letter onto preceding punctuation; at load time the
tokenizer class installs Qwen's own pre-tokenizer, which isolates every digit.

Pitfalls met while writing this (transformers 5.24, tokenizers 0.23, torch 2.14):
- `padding_side` assigned after constructing a tokenizer is not saved; pass
  `padding_side="left"` to the constructor (it is then saved and reloaded). Adapters should still
  set it again after loading a real checkpoint, whose saved value is usually "right".
- `AutoProcessor.from_pretrained` silently returns just the tokenizer when the processor class
  cannot be resolved: `make_tiny` reloads the folder and checks the processor type.
- `Qwen2Tokenizer` (like every tokenizer class with its own `__init__`) ignores the
  pre-tokenizer/normalizer stored in tokenizer.json: on load it only takes vocab + merges from
  that file and rebuilds Qwen's pipeline. So training-time pre-tokenization never leaks into the
  saved tokenizer, and what is tested here is what a real Qwen tokenizer does.
- Named multimodal tokens (InternVL's `start_image_token`, `context_image_token`, ...) must be
  passed as a dict in `extra_special_tokens`; the processor reads them as tokenizer attributes.
- Use `dtype=` (not the deprecated `torch_dtype=`) with `from_pretrained`.
- Model init draws from torch's global RNG; building runs under `torch.random.fork_rng` with
  `torch.manual_seed(seed)`, so the same seed gives byte-identical folders and the caller's RNG
  state is untouched.
- Image processors lost their `Fast` suffix in later 5.x releases (the plain name is now the
  torchvision class, `...Pil` the PIL one); `_image_processor_class` picks the torchvision class
  in either naming.
- The text `vocab_size` is padded to a multiple of 64 above `len(tokenizer)`, as real Qwen
  checkpoints do (152064 > 151665): logits have more columns than the tokenizer has tokens, and
  decoding an id past the tokenizer gives "".

Behaviour an adapter must respect (measured on these tiny models with transformers 5.24):
- Pass the processor output unchanged. Qwen2.5-VL without `mm_token_type_ids` silently falls
  back to 1-D positions (last-token logits off by ~3e-3); Qwen3-VL raises instead.
- The LM head is `model.lm_head` (an nn.Linear, = `model.get_output_embeddings()`), the decoder
  stack is `model.model` and returns `last_hidden_state` [B, T, H] (+ `cache`, `image_outputs`);
  `forward(..., logits_to_keep=1)` is supported by all three families.
- In 5.24 the cache argument is `cache=` (`past_key_values=` still works, with a deprecation
  warning) and outputs carry `.cache` (`.past_key_values` too). transformers 5.17 (GPU machine)
  predates the rename: use `past_key_values=` there, or read whichever attribute exists.
- Qwen decode steps with a cache need explicit rope positions. The prefill caches
  `model.model.rope_deltas` only when the batch has images; a text-only prefill uses plain
  arange positions and leaves a stale `rope_deltas` from the previous batch. Robust recipe for
  both: `pos, deltas = model.model.get_rope_index(input_ids, mm_token_type_ids=...,
  image_grid_thw=..., attention_mask=mask)`; prefill with `position_ids=pos`; each decode step
  with the full mask and `position_ids = ((mask.cumsum(-1) - 1)[:, -n_new:] + deltas)
  .unsqueeze(0).expand(3, -1, -1)` (matches a full recompute to 2e-7). Passing only the mask
  raises a shape error; passing neither gives wrong logits. `generate()` does all of this itself.
  InternVL (plain Qwen2 LM, 1-D rope) only needs the full attention mask and the cache.
- An answer prefix must not end with a space: "Answer: " + "A" re-tokenizes as "Answer:" + " A".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from finbench.offline.bpe import TINY_MARKER, TINY_NOTE, _build_tokenizer, check_tokenizer

TINY_FAMILIES: tuple[str, ...] = ("qwen2.5-vl", "qwen3-vl", "internvl", "qwen3-vl-moe", "qwen3.5", "qwen3.5-moe",
                                  "deepseek-vl2")
# Families whose model class only newer transformers releases have (the GPU machine's 5.17 may lack
# them): `make_tiny` says so in one line instead of an ImportError.
_NEEDS_CLASS = {"qwen3-vl-moe": "Qwen3VLMoeForConditionalGeneration", "qwen3.5": "Qwen3_5ForConditionalGeneration",
                "qwen3.5-moe": "Qwen3_5MoeForConditionalGeneration"}


def tiny_family_available(family: str) -> bool:
    """Whether the installed transformers has the model class `family` needs."""
    import transformers

    return family in TINY_FAMILIES and hasattr(transformers, _NEEDS_CLASS.get(family, "AutoModel"))

# Head size of every tiny attention layer: hidden_size / 16 heads, so hidden must be a multiple
# of 16 (multiples of 64 are needed for bitsandbytes 4-bit, which crashes on < 64 in-features).
_HEAD_DIM = 16
_VISION_HIDDEN = 64

# --------------------------------------------------------------------------------------------
# Chat templates, verbatim from the released checkpoints (written with explicit "\n" escapes so
# that the constants are byte-identical to the chat_template.json strings).
# --------------------------------------------------------------------------------------------

# Qwen/Qwen2.5-VL-*-Instruct chat_template.json
QWEN25_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen/Qwen3-VL-*-Instruct chat_template.json (raw string: the "\n" inside Jinja string literals
# are Jinja escapes, the real line breaks are eaten by the "{%-" / "{{-" whitespace control).
QWEN3_VL_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Qwen3.5 (dense and MoE): the Qwen3-VL template with the hybrid models' thinking switch in the
# generation prompt — `enable_thinking=False` writes an empty, closed block, anything else opens
# one (thinking is the checkpoints' default). Only this switch is taken from the released
# template's structure; its exact bytes (tool-call and multi-turn reasoning parts) could not be
# checked offline.
_QWEN3_GENERATION_PROMPT = r"""{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""
QWEN3_5_CHAT_TEMPLATE = QWEN3_VL_CHAT_TEMPLATE.replace(_QWEN3_GENERATION_PROMPT, r"""{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
""")
assert QWEN3_5_CHAT_TEMPLATE != QWEN3_VL_CHAT_TEMPLATE

# OpenGVLab/InternVL3-*-hf (the template transformers' conversion script writes). An image part
# renders as "<IMG_CONTEXT>\n"; the processor expands it to <img><IMG_CONTEXT>*N</img>.
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}"
    "{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{'<|im_end|>\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\n' }}"
    "{% endif %}"
)

# --------------------------------------------------------------------------------------------
# Special tokens, in the relative order of the real vocabularies.
# --------------------------------------------------------------------------------------------

# Qwen2.5 / Qwen2.5-VL special tokens (ids 151643..151656 in the real vocabulary).
_QWEN_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added but NOT special in the real tokenizers (kept by decode(skip_special_tokens=True)).
_QWEN25_PLAIN_ADDED = ("<tool_call>", "</tool_call>")
_QWEN3_PLAIN_ADDED = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
# InternVL-hf adds these special tokens after Qwen's (ids 151665.. in the real vocabulary).
_INTERNVL_SPECIAL = (
    "<img>",
    "</img>",
    "<IMG_CONTEXT>",
    "<quad>",
    "</quad>",
    "<ref>",
    "</ref>",
    "<box>",
    "</box>",
    "<video>",
)
_INTERNVL_NAMED = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}

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


def _text_dims(hidden_size: int) -> dict[str, int]:
    heads = hidden_size // _HEAD_DIM
    return {
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2),  # grouped-query attention, like the real models
    }


def _qwen_image_sizes(max_pixels: int, factor: int) -> dict[str, int]:
    # Smallest image = 2x2 merged tokens (the real min_pixels is 56*56 for a 28-pixel factor).
    min_pixels = min(4 * factor * factor, max_pixels)
    return {"shortest_edge": min_pixels, "longest_edge": max_pixels}


def _build_qwen25_vl(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN) -> _Built:
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
        **_text_dims(hidden_size),
        "vocab_size": _padded_vocab(tokenizer),
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        # mrope_section splits head_dim/2 = 8 rotary frequencies into (temporal, height, width),
        # the same 2:3:3 proportion as the real [16, 24, 24] of head_dim 128.
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
    }
    vision = {
        "depth": 2,
        "hidden_size": vision_hidden,
        "intermediate_size": 2 * vision_hidden,
        "num_heads": vision_hidden // _HEAD_DIM,
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


def _build_qwen3_vl(hidden_size: int, max_pixels: int, vision_hidden: int = _VISION_HIDDEN) -> _Built:
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
    text = _qwen3_style_text(tokenizer, hidden_size)
    vision = _qwen3_style_vision(hidden_size, deepstack=True, vision_hidden=vision_hidden)
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
    vision = {
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


def _qwen3_style_text(tokenizer: Any, hidden_size: int) -> dict[str, Any]:
    """The text config shared by the Qwen3-VL dense and MoE builders."""
    ids = tokenizer.convert_tokens_to_ids
    return {
        **_text_dims(hidden_size),
        "head_dim": _HEAD_DIM,
        "vocab_size": _padded_vocab(tokenizer),
        "max_position_embeddings": 32768,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        # Interleaved mrope over head_dim/2 = 8 frequencies; sections (t, h, w) = [4, 2, 2]
        # (the interleave needs 3 * section <= 8 for h and w; real: [24, 20, 20] of 64).
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [4, 2, 2],
                            "mrope_interleaved": True},
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
    }


def _qwen3_style_vision(hidden_size: int, deepstack: bool, vision_hidden: int = _VISION_HIDDEN) -> dict[str, Any]:
    vision = {
        "depth": 2,
        "hidden_size": vision_hidden,
        "intermediate_size": 2 * vision_hidden,
        "num_heads": vision_hidden // _HEAD_DIM,
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
# deepseek-vl2 is not a transformers model: its own file builds the official format (make_tiny)
assert tuple(_BUILDERS) == tuple(f for f in TINY_FAMILIES if f != "deepseek-vl2")


# --------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------


def make_tiny(
    family: str,
    out_dir: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    max_pixels: int = 28 * 28 * 16,
    weights_dtype: str = "bfloat16",
    thinking: bool = False,
    vision_hidden_size: int = _VISION_HIDDEN,
) -> Path:
    """Build a tiny random-weight checkpoint of `family` into `out_dir` and return its path.

    The folder loads with `AutoProcessor.from_pretrained` + `AutoModelForImageTextToText
    .from_pretrained` exactly like the released checkpoint. Same arguments -> identical files.
    `weights_dtype` is the stored dtype ("bfloat16" like the real checkpoints, or "float32");
    load with `dtype=torch.float32` for exact comparisons. `thinking=True` writes a thinking
    checkpoint's chat template (the generation prompt opens `<think>`, as Qwen3-VL-*-Thinking).
    `vision_hidden_size` sets the vision tower's width (offline/tiny_quant.py builds quantization
    checkpoints in kernel-friendly widths with it).
    """
    import torch

    from transformers import AutoProcessor, GenerationConfig
    from transformers.utils import logging as hf_logging

    if family == "deepseek-vl2":
        if thinking:
            raise ValueError("deepseek-vl2 has no thinking checkpoints")
        from finbench.offline.tiny_deepseek_vl2 import make_tiny_deepseek_vl2

        return make_tiny_deepseek_vl2(out_dir, seed=seed, hidden_size=hidden_size, weights_dtype=weights_dtype)
    if family not in _BUILDERS:
        raise ValueError(f"unknown tiny family {family!r}; known: {', '.join(TINY_FAMILIES)}")
    if hidden_size <= 0 or hidden_size % _HEAD_DIM:
        raise ValueError(
            f"hidden_size must be a positive multiple of {_HEAD_DIM} (of 64 for bnb 4-bit), got {hidden_size}"
        )
    if weights_dtype not in ("bfloat16", "float32"):
        raise ValueError(f"weights_dtype must be 'bfloat16' or 'float32', got {weights_dtype!r}")
    if not tiny_family_available(family):
        import transformers

        raise ValueError(f"{family}: transformers {transformers.__version__} has no {_NEEDS_CLASS[family]}")
    if thinking and family.startswith("qwen3.5"):
        raise ValueError(f"{family}: one checkpoint both thinks and answers (its template's enable_thinking); "
                         "there is no separate thinking variant to build")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    # Fork the RNG so that seeding for a deterministic init does not disturb the caller.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = _BUILDERS[family](hidden_size, max_pixels, vision_hidden_size)
    if thinking:
        _make_thinking(built)
    model = built.model.to(getattr(torch, weights_dtype)).eval()
    tokenizer = built.processor.tokenizer
    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")
    # Greedy by default (real checkpoints ship sampling settings; adapters should pass their own).
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    # A "Writing model shards" progress bar per tiny build is noise in test logs; restore the
    # caller's setting afterwards (it is process-global).
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
        built.processor.save_pretrained(out)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()

    # Reload through the real entry point and check what a user would get.
    processor = AutoProcessor.from_pretrained(out)
    if type(processor).__name__ != built.processor_class:
        raise RuntimeError(f"AutoProcessor returned {type(processor).__name__}, expected {built.processor_class}")
    if processor.tokenizer.padding_side != "left":
        raise RuntimeError("padding_side='left' was not saved with the tokenizer")
    check_tokenizer(processor.tokenizer)
    _check_config_tokens(model.config, processor.tokenizer)

    meta = {
        "family": family,
        "seed": seed,
        "note": TINY_NOTE,
        "architecture": built.model_class,
        "processor": built.processor_class,
        "hidden_size": hidden_size,
        **({"vision_hidden_size": vision_hidden_size} if vision_hidden_size != _VISION_HIDDEN else {}),
        "max_pixels": max_pixels,
        "weights_dtype": weights_dtype,
        "thinking": thinking,
        "tokenizer_size": len(processor.tokenizer),
        "config": built.config_summary,
    }
    (out / TINY_MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _make_thinking(built: _Built) -> None:
    """Turn an instruct build into a thinking checkpoint: the generation prompt opens the
    thinking block (`<|im_start|>assistant\\n<think>\\n`), as the released -Thinking templates do."""
    tokenizer = built.processor.tokenizer
    for tag in ("<think>", "</think>"):
        if len(tokenizer.encode(tag, add_special_tokens=False)) != 1:
            raise ValueError(f"thinking variant: {tag} is not a token of this family's vocabulary")
    template = built.processor.chat_template
    for spelling in ("<|im_start|>assistant\\n", "<|im_start|>assistant\n"):  # Jinja literal, or raw text
        head, found, tail = template.rpartition(spelling)
        if found:
            template = head + found + "<think>" + spelling[len("<|im_start|>assistant"):] + tail
            break
    else:
        raise ValueError("thinking variant: no generation prompt found in the chat template")
    built.processor.chat_template = template
    tokenizer.chat_template = template


def _check_config_tokens(config: Any, tokenizer: Any) -> None:
    """Every token id the model config names must be the tokenizer's id for that token."""
    expected = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    if config.model_type == "internvl":
        expected = {"image_token_id": "<IMG_CONTEXT>"}
    for attr, token in expected.items():
        got = getattr(config, attr)
        want = tokenizer.convert_tokens_to_ids(token)
        if got != want:
            raise RuntimeError(f"config.{attr}={got} but the tokenizer's id of {token} is {want}")
    if config.get_text_config().vocab_size < len(tokenizer):
        raise RuntimeError("text vocab_size is smaller than the tokenizer")


def read_tiny_marker(model_dir: str | Path) -> dict[str, Any] | None:
    """The `finbench_tiny.json` of a folder built by `make_tiny`, or None for a real checkpoint."""
    path = Path(model_dir) / TINY_MARKER
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))

