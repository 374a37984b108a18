"""A tiny random-weight DeepSeek-VL2 checkpoint in the official folder format
(`finbench models make-tiny deepseek-vl2 DIR`): the real architecture in miniature (MLA attention,
`noaux_tc` sigmoid-routed experts, SigLIP tower, 2D tiling), loadable by `DeepSeekVL2.load` like a
released checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from finbench.models.deepseek_vl2 import (ASSISTANT, BOS, CANDIDATE_RESOLUTIONS, EOS, GROUNDING_TOKENS, IMAGE_TOKEN,
                                          PAD, USER, DeepSeekVL2)
from finbench.models.deepseek_vl2_model import DeepseekVL2Config, DeepseekVL2Model
from finbench.offline.bpe import TINY_MARKER, TINY_NOTE, _TRAIN_SPLIT_REGEX, _train_bpe, check_tokenizer

# 56-pixel tiles (the official 23 candidates scaled by 56/384) keep tiny runs cheap: a 2×2 feature
# grid per tile, 7 + 2·nh·(2·nw + 1) tokens per image, with every layout rule of the real model.
TINY_TILE = 56


def _tiny_config(hidden_size: int) -> dict[str, Any]:
    """The base model's architecture in miniature: MLA (no query LoRA, like -small; the LoRA path
    is exercised by nothing here), `noaux_tc` sigmoid routing with a correction bias, shared
    experts, one dense layer first."""
    return {
        "model_type": "deepseek_vl_v2",
        "tile_tag": "2D",
        "global_view_pos": "head",
        "candidate_resolutions": [[w * TINY_TILE // 384, h * TINY_TILE // 384] for w, h in CANDIDATE_RESOLUTIONS],
        "vision_config": {"model_name": "siglip_so400m_patch14_384", "image_size": TINY_TILE, "patch_size": 14,
                          "width": 32, "layers": 2, "heads": 2, "mlp_ratio": 3.7362},
        "projector_config": {"projector_type": "downsample_mlp_gelu", "input_dim": 32, "n_embed": hidden_size,
                             "depth": 2, "mlp_ratio": 1, "downsample_ratio": 2},
        "language_config": {
            "model_type": "deepseek_v2", "vocab_size": 0, "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size, "moe_intermediate_size": hidden_size // 2,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
            "n_shared_experts": 2, "n_routed_experts": 8, "num_experts_per_tok": 3, "first_k_dense_replace": 1,
            "kv_lora_rank": 32, "q_lora_rank": None, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "n_group": 1, "topk_group": 1,
            "norm_topk_prob": True, "routed_scaling_factor": 2.0, "use_mla": True,
            "max_position_embeddings": 4096, "bos_token_id": 0, "eos_token_id": 1,
        },
    }


def _tiny_tokenizer() -> Any:
    """A byte-level BPE (trained like tiny.py's) with DeepSeek's special tokens and ids: BOS 0,
    EOS 1, pad 2, then the processor's `<image>`, grounding and chat tokens after the BPE."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _train_bpe((BOS, EOS, PAD))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_TRAIN_SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (BOS, EOS, PAD)])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t in (IMAGE_TOKEN, *GROUNDING_TOKENS, USER, ASSISTANT)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   padding_side="left", clean_up_tokenization_spaces=False, model_max_length=4096)


def _tiny_weights(model: DeepseekVL2Model) -> dict[str, torch.Tensor]:
    """Random weights with enough spread that answers depend on the input, plus the unused
    attention-pool head every release carries (so the folder also loads strictly elsewhere)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("e_score_correction_bias"):
                param.normal_(0.0, 0.1)
            elif name in ("image_newline", "view_seperator") or name.endswith("pos_embed"):
                param.normal_(0.0, 1.0 / math.sqrt(param.shape[-1]))
            elif name.endswith("gate.weight") or param.ndim >= 2:
                param.normal_(0.0, 1.0 / math.sqrt(param.shape[-1]))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    width = model.config.vision["width"]
    hidden = int(width * model.config.vision["mlp_ratio"])
    shapes = {"latent": (1, 1, width), "q.weight": (width, width), "q.bias": (width,), "kv.weight": (2 * width, width),
              "kv.bias": (2 * width,), "proj.weight": (width, width), "proj.bias": (width,), "norm.weight": (width,),
              "norm.bias": (width,), "mlp.fc1.weight": (hidden, width), "mlp.fc1.bias": (hidden,),
              "mlp.fc2.weight": (width, hidden), "mlp.fc2.bias": (width,)}
    state |= {f"vision.attn_pool.{k}": torch.randn(shape) * 0.02 for k, shape in shapes.items()}
    return state


def make_tiny_deepseek_vl2(out_dir: str | Path, seed: int = 0, hidden_size: int = 64,
                           weights_dtype: str = "bfloat16") -> Path:
    """Write an official-format DeepSeek-VL2 folder (config.json, model.safetensors with the
    official names, processor_config.json, tokenizer files) with tiny random weights, reload it
    through `DeepSeekVL2.load` and check the tokenizer."""
    from safetensors.torch import save_file

    if weights_dtype not in ("bfloat16", "float32"):
        raise ValueError(f"weights_dtype must be 'bfloat16' or 'float32', got {weights_dtype!r}")
    if hidden_size <= 0 or hidden_size % 16:
        raise ValueError(f"hidden_size must be a positive multiple of 16, got {hidden_size}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tiny_tokenizer()
    raw = _tiny_config(hidden_size)
    raw["language_config"]["vocab_size"] = (len(tokenizer) + 63) // 64 * 64  # padded, as released
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DeepseekVL2Model(DeepseekVL2Config.from_dict(raw))
        state = _tiny_weights(model)
    save_file({k: v.to(getattr(torch, weights_dtype)) for k, v in state.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    processor = {"candidate_resolutions": raw["candidate_resolutions"], "patch_size": 14, "downsample_ratio": 2,
                 "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "normalize": True, "image_token": IMAGE_TOKEN,
                 "pad_token": PAD, "add_special_token": False, "sft_format": "deepseek", "mask_prompt": True,
                 "ignore_id": -100, "processor_class": "DeepseekVLV2Processor"}
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(str(out))

    loaded = DeepSeekVL2.load(str(out), dtype="float32", device="cpu")
    check_tokenizer(loaded.tokenizer, boundary_prompts=(f"{USER}: Which option?\n\n{ASSISTANT}:",
                                                        f"{ASSISTANT}:Answer:", "Answer:"))
    meta = {"family": DeepSeekVL2.family, "seed": seed, "note": TINY_NOTE, "architecture": "DeepseekVLV2ForCausalLM",
            "processor": "DeepseekVLV2Processor", "hidden_size": hidden_size, "weights_dtype": weights_dtype,
            "tokenizer_size": len(loaded.tokenizer), "config": raw}
    (out / TINY_MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out
