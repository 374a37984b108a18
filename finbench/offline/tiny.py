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

The family builders live in `tiny_families.py`, the chat templates and special tokens in
`tiny_texts.py`, the BPE in `bpe.py`; the architectures of the generic family (by transformers
`model_type`: gemma4, glm46v, minicpmv4_6, llama4, mistral3, smolvlm, llava_onevision, and
internvl in InternVL3.5's shapes) in `tiny_auto.py`; this module is the entry point.

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
from pathlib import Path
from typing import Any

from finbench.offline.bpe import TINY_MARKER, TINY_NOTE, check_tokenizer
from finbench.offline.tiny_auto import AUTO_BUILDERS, STOPS
from finbench.offline.tiny_families import _BUILDERS, HEAD_DIM_FAMILIES, _Built, _HEAD_DIM, _VISION_HIDDEN

TINY_FAMILIES: tuple[str, ...] = ("qwen2.5-vl", "qwen3-vl", "internvl", "qwen3-vl-moe", "qwen3.5", "qwen3.5-moe",
                                  "deepseek-vl2", "gemma4", "glm46v", "minicpmv4_6", "llama4", "mistral3", "smolvlm",
                                  "llava_onevision")
# Families whose model class only newer transformers releases have (the GPU machine's 5.17 may lack
# them): `make_tiny` says so in one line instead of an ImportError.
_NEEDS_CLASS = {"qwen3-vl-moe": "Qwen3VLMoeForConditionalGeneration", "qwen3.5": "Qwen3_5ForConditionalGeneration",
                "qwen3.5-moe": "Qwen3_5MoeForConditionalGeneration", "gemma4": "Gemma4ForConditionalGeneration",
                "glm46v": "Glm46VForConditionalGeneration", "minicpmv4_6": "MiniCPMV4_6ForConditionalGeneration",
                "llama4": "Llama4ForConditionalGeneration", "mistral3": "Mistral3ForConditionalGeneration",
                "smolvlm": "SmolVLMForConditionalGeneration",
                "llava_onevision": "LlavaOnevisionForConditionalGeneration"}


def tiny_family_available(family: str) -> bool:
    """Whether the installed transformers has the model class `family` needs."""
    import transformers

    return family in TINY_FAMILIES and hasattr(transformers, _NEEDS_CLASS.get(family, "AutoModel"))


# architectures only the generic family loads (internvl has its own family, and its tiny build
# InternVL3.5's shapes)
GENERIC_ONLY = frozenset(AUTO_BUILDERS) - {"internvl"}
# deepseek-vl2 is not a transformers model: its own file builds the official format (make_tiny)
assert set(_BUILDERS) | set(AUTO_BUILDERS) == {f for f in TINY_FAMILIES if f != "deepseek-vl2"}


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
    head_dim: int = _HEAD_DIM,
) -> Path:
    """Build a tiny random-weight checkpoint of `family` into `out_dir` and return its path.

    The folder loads with `AutoProcessor.from_pretrained` + `AutoModelForImageTextToText
    .from_pretrained` exactly like the released checkpoint. Same arguments -> identical files.
    `weights_dtype` is the stored dtype ("bfloat16" like the real checkpoints, or "float32");
    load with `dtype=torch.float32` for exact comparisons. `thinking=True` writes a thinking
    checkpoint's chat template (the generation prompt opens `<think>`, as Qwen3-VL-*-Thinking).
    `vision_hidden_size` sets the vision tower's width (offline/tiny_quant.py builds quantization
    checkpoints in kernel-friendly widths with it). `head_dim` (HEAD_DIM_FAMILIES): the text and
    vision attention heads' size, e.g. 32 for vLLM's CPU attention (docs/scale.md).
    """
    import torch

    from transformers import AutoProcessor, GenerationConfig

    if family == "deepseek-vl2":
        if thinking:
            raise ValueError("deepseek-vl2 has no thinking checkpoints")
        from finbench.offline.tiny_deepseek_vl2 import make_tiny_deepseek_vl2

        return make_tiny_deepseek_vl2(out_dir, seed=seed, hidden_size=hidden_size, weights_dtype=weights_dtype)
    _check_arguments(family, hidden_size, weights_dtype, thinking, head_dim)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    # Fork the RNG so that seeding for a deterministic init does not disturb the caller.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wide = {"head_dim": head_dim} if head_dim != _HEAD_DIM else {}  # default builds: files unchanged
        built = (AUTO_BUILDERS.get(family) or _BUILDERS[family])(hidden_size, max_pixels, vision_hidden_size, **wide)
    if thinking:
        _make_thinking(built)
    model = built.model.to(getattr(torch, weights_dtype)).eval()
    tokenizer = built.processor.tokenizer
    stops = [tokenizer.convert_tokens_to_ids(t) for t in STOPS.get(family, ("<|im_end|>", "<|endoftext|>"))]
    pad = tokenizer.pad_token_id if family in GENERIC_ONLY else stops[-1]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else pad
    # Greedy by default (real checkpoints ship sampling settings; adapters should pass their own).
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=stops, pad_token_id=pad)
    _save_quietly(model, built.processor, out)

    # Reload through the real entry point and check what a user would get.
    processor = AutoProcessor.from_pretrained(out)
    if type(processor).__name__ != built.processor_class:
        raise RuntimeError(f"AutoProcessor returned {type(processor).__name__}, expected {built.processor_class}")
    if processor.tokenizer.padding_side != "left":
        raise RuntimeError("padding_side='left' was not saved with the tokenizer")
    check_tokenizer(processor.tokenizer)
    _check_config_tokens(model.config, processor.tokenizer, generic=family in GENERIC_ONLY)

    meta = {
        "family": family,
        "seed": seed,
        "note": TINY_NOTE,
        "architecture": built.model_class,
        "processor": built.processor_class,
        "hidden_size": hidden_size,
        **({"vision_hidden_size": vision_hidden_size} if vision_hidden_size != _VISION_HIDDEN else {}),
        **wide,
        "max_pixels": max_pixels,
        "weights_dtype": weights_dtype,
        "thinking": thinking,
        "tokenizer_size": len(processor.tokenizer),
        "config": built.config_summary,
    }
    (out / TINY_MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _check_arguments(family: str, hidden_size: int, weights_dtype: str, thinking: bool,
                     head_dim: int = _HEAD_DIM) -> None:
    """One ValueError line for a family, width, dtype, head size or thinking variant no tiny build has."""
    if family not in _BUILDERS and family not in AUTO_BUILDERS:
        raise ValueError(f"unknown tiny family {family!r}; known: {', '.join(TINY_FAMILIES)}")
    if head_dim != _HEAD_DIM and (family not in HEAD_DIM_FAMILIES or head_dim <= 0 or head_dim % _HEAD_DIM):
        raise ValueError(f"head_dim {head_dim}: only {', '.join(HEAD_DIM_FAMILIES)} are built with another head "
                         f"size (a multiple of {_HEAD_DIM}); {family}'s is {_HEAD_DIM}")
    if hidden_size <= 0 or hidden_size % head_dim:
        raise ValueError(
            f"hidden_size must be a positive multiple of {head_dim} (of 64 for bnb 4-bit), got {hidden_size}"
        )
    if weights_dtype not in ("bfloat16", "float32"):
        raise ValueError(f"weights_dtype must be 'bfloat16' or 'float32', got {weights_dtype!r}")
    if not tiny_family_available(family):
        import transformers

        raise ValueError(f"{family}: transformers {transformers.__version__} has no {_NEEDS_CLASS[family]}")
    if thinking and family in GENERIC_ONLY:
        raise ValueError(f"{family}: the checkpoint's template has its own thinking switch (or none); there is no "
                         "separate thinking variant to build")
    if thinking and family.startswith("qwen3.5"):
        raise ValueError(f"{family}: one checkpoint both thinks and answers (its template's enable_thinking); "
                         "there is no separate thinking variant to build")


def _save_quietly(model: Any, processor: Any, out: Path) -> None:
    """Save the checkpoint without transformers' "Writing model shards" bar (noise in test logs);
    the caller's setting is restored afterwards (it is process-global)."""
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
        processor.save_pretrained(out)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


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


def _check_config_tokens(config: Any, tokenizer: Any, generic: bool = False) -> None:
    """Every token id the model config names must be the tokenizer's id for that token (the
    generic family's builders name theirs from the tokenizer: only the vocabulary is checked)."""
    expected = {} if generic else {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    if config.model_type == "internvl" and not generic:
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
