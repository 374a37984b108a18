"""`finbench models make-tiny FAMILY DIR --like FOLDER`: tiny random weights inside a REAL
checkpoint's non-weight files.

`offline/tiny.py` builds a whole tiny checkpoint, tokenizer included (a ~400-token BPE). This
builds the model only, from the real checkpoint's config.json with the widths and depths shrunk
(2 text layers of hidden 64, a 2-block vision tower) and every token id, `vocab_size`, the
patch, merge and window sizes kept; every other file of FOLDER — tokenizer (vocab.json,
merges.txt, tokenizer_config.json, tokenizer.json), chat template, preprocessor and generation
config — is copied byte for byte. Weight files (`*.safetensors`, `*.bin`, their index) are not
read, so a folder of a checkpoint's small files is enough.

What it is for: a checkpoint's tokenizer (Qwen2.5-VL: the real 151,643-token BPE, digits as
single tokens, `(A` one token), chat template (its default system prompt) and image settings
(min/max pixels) go through the whole run path in seconds. The weights are random: scores are
chance level. Families: those whose config layout is known here (`LIKE_FAMILIES`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from finbench.offline.bpe import TINY_MARKER, TINY_NOTE

# family → (model_type of its config.json, rotary sections of the shrunk head (head_dim 16 → 8
# frequencies, in the real proportions: Qwen2.5-VL [16, 24, 24] → [2, 3, 3]; Qwen3-VL's
# interleaved [24, 20, 20] → [4, 2, 2], the interleave needing 3·section ≤ 8 for h and w))
LIKE_FAMILIES = {"qwen2.5-vl": ("qwen2_5_vl", [2, 3, 3]), "qwen3-vl": ("qwen3_vl", [4, 2, 2])}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
HEAD_DIM = 16
VISION_HIDDEN = 64


def weight_file(path: Path) -> bool:
    name = path.name
    return path.suffix in WEIGHT_SUFFIXES or name.endswith((".safetensors.index.json", ".bin.index.json"))


def shrink(config: Any, family: str, hidden_size: int) -> dict[str, Any]:
    """Shrink `config` (a transformers config of `family`) in place; returns what was changed."""
    text, vision = config.get_text_config(), config.vision_config
    heads = hidden_size // HEAD_DIM
    changes = {"text": {"hidden_size": hidden_size, "intermediate_size": 2 * hidden_size, "num_hidden_layers": 2,
                        "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2)},
               "vision": {"depth": 2, "hidden_size": VISION_HIDDEN, "intermediate_size": 2 * VISION_HIDDEN,
                          "num_heads": VISION_HIDDEN // HEAD_DIM, "out_hidden_size": hidden_size}}
    if getattr(text, "head_dim", None) is not None:
        changes["text"]["head_dim"] = HEAD_DIM
    if getattr(text, "max_window_layers", None) is not None:
        changes["text"]["max_window_layers"] = 2
    if isinstance(getattr(text, "layer_types", None), list):
        changes["text"]["layer_types"] = text.layer_types[:2]
    if family == "qwen2.5-vl":
        changes["vision"]["fullatt_block_indexes"] = [1]  # block 0 windowed, block 1 full: both kinds run
    else:
        changes["vision"]["deepstack_visual_indexes"] = [0]
    for name, value in changes["text"].items():
        setattr(text, name, value)
    for name, value in changes["vision"].items():
        setattr(vision, name, value)
    sections = LIKE_FAMILIES[family][1]
    for attribute in ("rope_parameters", "rope_scaling"):
        rope = getattr(text, attribute, None)
        if isinstance(rope, dict) and "mrope_section" in rope:
            rope["mrope_section"] = list(sections)
            changes["text"][f"{attribute}.mrope_section"] = list(sections)
    return changes


def make_tiny_like(family: str, out_dir: str | Path, like: str | Path, seed: int = 0, hidden_size: int = 64,
                   weights_dtype: str = "bfloat16") -> Path:
    """Build the tiny model into `out_dir` (see the module docstring) and return its path; a
    folder that is not a checkpoint of `family` is one ValueError line."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor
    from transformers.utils import logging as hf_logging

    like, out = Path(like), Path(out_dir)
    if family not in LIKE_FAMILIES:
        raise ValueError(f"--like builds {', '.join(LIKE_FAMILIES)}; {family!r} is not one of them yet")
    if not (like / "config.json").is_file():
        raise ValueError(f"--like {like}: no config.json (a checkpoint folder; its weights are not needed)")
    model_type = json.loads((like / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type != LIKE_FAMILIES[family][0]:
        raise ValueError(f"--like {like}: its model_type is {model_type!r}, not {family}'s {LIKE_FAMILIES[family][0]!r}")
    if hidden_size <= 0 or hidden_size % HEAD_DIM:
        raise ValueError(f"hidden_size must be a positive multiple of {HEAD_DIM}, got {hidden_size}")
    config = AutoConfig.from_pretrained(like)
    vocab_size, token_ids = config.get_text_config().vocab_size, _token_ids(config)
    changes = shrink(config, family, hidden_size)
    out.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config).to(getattr(torch, weights_dtype)).eval()
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    kept = []
    for path in sorted(like.iterdir()):  # the real files, byte for byte, over what save_pretrained wrote
        if path.is_file() and path.name != "config.json" and not weight_file(path):
            shutil.copyfile(path, out / path.name)
            kept.append(path.name)
    _check(out, like, vocab_size, token_ids)
    marker = {"family": family, "seed": seed, "note": TINY_NOTE, "like": str(like.resolve()), "kept": kept,
              "hidden_size": hidden_size, "weights_dtype": weights_dtype, "changed": changes}
    (out / TINY_MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # loading the processor once here fails loudly now rather than in the user's first run
    AutoProcessor.from_pretrained(out)
    return out


def _token_ids(config: Any) -> dict[str, Any]:
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "vision_token_id")
    text = config.get_text_config()
    ids = {name: getattr(config, name) for name in names if getattr(config, name, None) is not None}
    ids.update({f"text.{name}": getattr(text, name) for name in ("bos_token_id", "eos_token_id", "pad_token_id")
                if getattr(text, name, None) is not None})
    return ids


def _check(out: Path, like: Path, vocab_size: int, token_ids: dict[str, Any]) -> None:
    """The saved config keeps every token id and the vocabulary size of the real one."""
    from transformers import AutoConfig

    saved = AutoConfig.from_pretrained(out)
    if saved.get_text_config().vocab_size != vocab_size:
        raise RuntimeError(f"vocab_size changed: {saved.get_text_config().vocab_size} != {vocab_size}")
    if _token_ids(saved) != token_ids:
        raise RuntimeError(f"token ids changed: {_token_ids(saved)} != {token_ids} (from {like})")
