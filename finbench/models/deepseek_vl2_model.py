"""DeepSeek-VL2 in plain PyTorch (the vision tower and projector in deepseek_vl2_vision.py, the
language model in deepseek_vl2_text.py), loadable from the official checkpoint folders by their own
parameter names (`vision.*`, `projector.layers.*`, `image_newline`, `view_seperator`,
`language.model.*`, `language.lm_head.weight`).

Written from the official code (github.com/deepseek-ai/DeepSeek-VL2 @ ef9f91e) because neither
transformers nor PyPI has the model, and transformers' `DeepseekV2Model` (5.24) lacks three things
the checkpoints need: plain multi-head attention (`use_mla: false`, the tiny model), sigmoid
scoring with `noaux_tc` routing and `e_score_correction_bias` (the base model), and
`norm_topk_prob`. The math that has to match the official model exactly:

- vision: a timm-style ViT (LayerNorm eps 1e-6, tanh-GELU MLP of width int(width·mlp_ratio),
  learned absolute positions, no class token), then the final LayerNorm; the attention-pool head
  is never used.
- projector `downsample_mlp_gelu`: the 27×27 patch grid is zero-padded to 28×28 and every 2×2
  block concatenated in `F.unfold` order (channel-major), then Linear-GELU(erf)-Linear.
- text: DeepSeek-V2 decoder. MLA applies rotary embeddings to de-interleaved (even, odd) pairs;
  the MHA layers are transformers-4.38 `LlamaAttention` (plain rotate-half over the whole head).
  Yarn scaling multiplies cos/sin by mscale and the softmax scale by mscale_all_dim².
- MoE gate in fp32: softmax or sigmoid scores; greedy, group-limited greedy, or `noaux_tc`
  (choose on score + bias, weight by the unbiased score); renormalise when `norm_topk_prob` and
  k > 1; times `routed_scaling_factor`; plus the shared experts.

The KV cache keeps what the official model keeps: per-head K/V for MHA, and for MLA the
compressed (normalised) latent plus the shared rotary key, with decode steps in the absorbed
form (one latent dot product per head) so the cache stays small on the real models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from finbench.models.deepseek_vl2_text import Language
from finbench.models.deepseek_vl2_vision import Projector, VisionTower

# ---------------------------------------------------------------------------------------------
# Configuration: the official classes' defaults. A checkpoint's config.json omits every field
# equal to these, so they are part of the checkpoint format.
# ---------------------------------------------------------------------------------------------

VISION_DEFAULTS: dict[str, Any] = {
    "model_name": "siglip_large_patch16_384", "image_size": 384, "patch_size": 16, "width": 1024,
    "layers": 24, "heads": 16, "mlp_ratio": 4, "global_pool": "map", "ignore_head": True,
    "class_token": False, "num_classes": 0,
}
PROJECTOR_DEFAULTS: dict[str, Any] = {
    "projector_type": "downsample_mlp_gelu", "input_dim": 1152, "n_embed": 2048, "depth": 2,
    "mlp_ratio": 1, "downsample_ratio": 2, "token_pooling": False,
}
LANGUAGE_DEFAULTS: dict[str, Any] = {
    "vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008, "moe_intermediate_size": 1407,
    "num_hidden_layers": 30, "num_attention_heads": 32, "num_key_value_heads": None,
    "n_shared_experts": None, "n_routed_experts": None, "routed_scaling_factor": 1.0,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "topk_method": "gready", "n_group": None, "topk_group": None,
    "num_experts_per_tok": None, "moe_layer_freq": 1, "first_k_dense_replace": 0,
    "norm_topk_prob": False, "scoring_func": "softmax", "hidden_act": "silu",
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "bos_token_id": 100000,
    "eos_token_id": 100001, "pad_token_id": None, "tie_word_embeddings": False,
    "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "use_mla": True,
}
TOP_DEFAULTS: dict[str, Any] = {
    # The official __init__ default for tile_tag is the string "tile_tag", which the model rejects.
    "tile_tag": "tile_tag", "global_view_pos": "head", "candidate_resolutions": [[384, 384]],
}


@dataclass
class DeepseekVL2Config:
    """The resolved configuration: every field present, official defaults filled in."""

    vision: dict[str, Any]
    projector: dict[str, Any]
    language: dict[str, Any]
    tile_tag: str
    global_view_pos: str
    candidate_resolutions: list[list[int]]
    model_type: str = "deepseek_vl_v2"
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "DeepseekVL2Config":
        top = {**TOP_DEFAULTS, **{k: raw[k] for k in TOP_DEFAULTS if k in raw}}
        language = {**LANGUAGE_DEFAULTS, **raw.get("language_config", {})}
        if language["num_key_value_heads"] is None:
            language["num_key_value_heads"] = language["num_attention_heads"]
        config = cls(vision={**VISION_DEFAULTS, **raw.get("vision_config", {})},
                     projector={**PROJECTOR_DEFAULTS, **raw.get("projector_config", {})},
                     language=language, tile_tag=top["tile_tag"], global_view_pos=top["global_view_pos"],
                     candidate_resolutions=[list(r) for r in top["candidate_resolutions"]],
                     model_type=raw.get("model_type", "deepseek_vl_v2"), raw=raw)
        config.validate()
        return config

    def validate(self) -> None:
        """Everything this implementation does not do fails here, at load time, in one line."""
        problems = []
        if self.tile_tag != "2D":
            problems.append(f"tile_tag {self.tile_tag!r} (only '2D' is implemented, as in every release)")
        if self.global_view_pos not in ("head", "tail"):
            problems.append(f"global_view_pos {self.global_view_pos!r}")
        if self.projector["projector_type"] != "downsample_mlp_gelu" or self.projector["token_pooling"]:
            problems.append(f"projector_type {self.projector['projector_type']!r}")
        if self.vision["class_token"]:
            problems.append("a vision class token")
        lang = self.language
        if lang["hidden_act"] != "silu":
            problems.append(f"hidden_act {lang['hidden_act']!r}")
        routing = ("greedy", "group_limited_greedy", "noaux_tc")
        if lang["n_routed_experts"] is not None and lang["topk_method"] not in routing:
            problems.append(f"topk_method {lang['topk_method']!r}")
        if lang["scoring_func"] not in ("softmax", "sigmoid"):
            problems.append(f"scoring_func {lang['scoring_func']!r}")
        if lang["use_mla"] and not (lang["kv_lora_rank"] and lang["qk_rope_head_dim"] and lang["v_head_dim"]):
            problems.append("use_mla without kv_lora_rank / qk_rope_head_dim / v_head_dim")
        scaling = lang["rope_scaling"]
        if scaling is not None:
            kind = scaling.get("type", scaling.get("rope_type"))
            allowed = ("yarn",) if lang["use_mla"] else ("linear",)
            if kind not in allowed:
                problems.append(f"rope_scaling type {kind!r} with use_mla={lang['use_mla']}")
        if problems:
            raise ValueError("DeepSeek-VL2 config not supported: " + "; ".join(problems))

    @property
    def image_size(self) -> int:
        return int(self.candidate_resolutions[0][0])




NEWLINE, SEPARATOR = -2, -1  # image_source codes: the learned newline / view-separator rows


class DeepseekVL2Model(nn.Module):
    _no_split_modules = ["_VisionBlock", "DecoderLayer"]  # the repeated blocks, as transformers declares them

    def __init__(self, config: DeepseekVL2Config) -> None:
        super().__init__()
        self.config = config
        self.vision = VisionTower(config.vision)
        self.projector = Projector(config.projector)
        self.image_newline = nn.Parameter(torch.zeros(config.projector["n_embed"]))
        self.view_seperator = nn.Parameter(torch.zeros(config.projector["n_embed"]))  # sic: official name
        self.language = Language(config.language)
        # processor_config.json's normalisation; plain attributes, not weights
        self.pixel_mean = torch.full((3,), 0.5, device="cpu")
        self.pixel_std = torch.full((3,), 0.5, device="cpu")

    def get_memory_footprint(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def get_output_embeddings(self) -> nn.Linear:
        return self.language.lm_head

    def get_input_embeddings(self) -> nn.Embedding:
        return self.language.model.embed_tokens

    def image_features(self, tiles: torch.Tensor) -> torch.Tensor:
        """uint8 tiles [N, 3, S, S] -> projected features [N, tokens, D]. Normalising here (not
        in the processor) keeps host-to-device copies 4× smaller; the float32 arithmetic is the
        official ToTensor + Normalize(mean, std) bit for bit."""
        mean, std = (t.to(tiles.device)[:, None, None] for t in (self.pixel_mean, self.pixel_std))
        pixels = (tiles.float() / 255 - mean) / std
        return self.projector(self.vision(pixels.to(self.image_newline.dtype)))

    def embed(self, input_ids: torch.Tensor, images_seq_mask: torch.Tensor | None = None,
              tiles: torch.Tensor | None = None, image_source: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings with every image position replaced, in order, by its feature row:
        `image_source[i]` is the row (tile·tokens + token) of the i-th masked position in the
        flattened projector output, or NEWLINE / SEPARATOR."""
        embeds = self.get_input_embeddings()(input_ids)
        if tiles is None or tiles.shape[0] == 0:
            return embeds
        features = self.image_features(tiles)
        table = torch.cat([features.reshape(-1, features.shape[-1]),
                           self.image_newline[None].to(features.dtype), self.view_seperator[None].to(features.dtype)])
        source = torch.where(image_source < 0, image_source + table.shape[0], image_source)
        return embeds.masked_scatter(images_seq_mask[..., None].bool(), table[source].to(embeds.dtype))

    def decode_layers(self, embeds: torch.Tensor, attention_mask: torch.Tensor, caches: list | None = None,
                      output_hidden_states: bool = False) -> tuple[torch.Tensor, list, list]:
        """Run the decoder over `embeds` [B, T, H] given the full 2-D mask [B, past + T].
        Positions count real tokens only (left padding does not shift a row), so a row's
        numbers are the same alone or in a batch."""
        batch, length, _ = embeds.shape
        mask = attention_mask.bool()
        total = mask.shape[1]
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)[:, total - length:]
        causal = torch.ones(length, total, dtype=torch.bool, device=mask.device).tril(total - length)
        full = causal[None, None] & mask[:, None, None, :]
        # A left pad sees no key at all; let it see itself so no row of the softmax is empty.
        rows = torch.arange(length, device=mask.device)[:, None] + (total - length)
        full = full | (torch.arange(total, device=mask.device)[None, :] == rows)[None, None]
        hidden, new_caches, states = embeds, [], []
        for i, layer in enumerate(self.language.model.layers):
            if output_hidden_states:
                states.append(hidden)
            hidden, cache = layer(hidden, positions, full, None if caches is None else caches[i])
            new_caches.append(cache)
        hidden = self.language.model.norm(hidden)
        if output_hidden_states:
            states.append(hidden)
        return hidden, new_caches, states



# Present in every release but unused at inference (the ViT's attention-pool head).
UNUSED_PREFIXES = ("vision.attn_pool.",)


def load_checkpoint(folder: str, config: DeepseekVL2Config, dtype: torch.dtype,
                    device: torch.device) -> DeepseekVL2Model:
    """Build the model without allocating random weights, then assign every tensor from the
    folder's safetensors shard by shard (cast to `dtype`, moved to `device`). Missing or
    unexpected parameter names fail with one line."""
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    root = Path(folder)
    index = root / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in root.glob("model*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors weights (DeepSeek-VL2 needs the safetensors release)")
    with torch.device("meta"):
        model = DeepseekVL2Model(config)
    state: dict[str, torch.Tensor] = {}
    for name in files:
        for key, tensor in load_file(str(root / name), device="cpu").items():
            if key.startswith(UNUSED_PREFIXES):
                continue
            state[key] = (tensor.to(dtype) if tensor.is_floating_point() else tensor).to(device)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(f"{folder}: weights do not match the config: missing {missing[:4]}"
                         f"{'...' if len(missing) > 4 else ''}, unexpected {unexpected[:4]}"
                         f"{'...' if len(unexpected) > 4 else ''}")
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()
