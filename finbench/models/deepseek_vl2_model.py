"""DeepSeek-VL2 in plain PyTorch, loadable from the official checkpoint folders by their own
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

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

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


# ---------------------------------------------------------------------------------------------
# Vision tower and projector
# ---------------------------------------------------------------------------------------------


class _PatchEmbed(nn.Module):
    def __init__(self, patch: int, width: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, width, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class _VisionAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))


class _VisionMlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class _VisionBlock(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = _VisionAttention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = _VisionMlp(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTower(nn.Module):
    """[N, 3, S, S] normalised tiles -> [N, (S // patch)², width] after the final LayerNorm."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        width, grid = cfg["width"], cfg["image_size"] // cfg["patch_size"]
        self.patch_embed = _PatchEmbed(cfg["patch_size"], width)
        self.pos_embed = nn.Parameter(torch.zeros(1, grid * grid, width))
        hidden = int(width * cfg["mlp_ratio"])
        self.blocks = nn.ModuleList(_VisionBlock(width, cfg["heads"], hidden) for _ in range(cfg["layers"]))
        self.norm = nn.LayerNorm(width, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class Projector(nn.Module):
    """2×2 patch merge (zero-padded to an even grid) + Linear-GELU-...-Linear."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.ratio = cfg["downsample_ratio"]
        inner = cfg["n_embed"] * cfg["mlp_ratio"]
        modules: list[nn.Module] = [nn.Linear(cfg["input_dim"] * self.ratio**2, inner)]
        for _ in range(1, cfg["depth"] - 1):
            modules += [nn.GELU(), nn.Linear(inner, inner)]
        modules += [nn.GELU(), nn.Linear(inner, cfg["n_embed"])]
        self.layers = nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, channels = x.shape
        side = int(length**0.5)
        pad = -side % self.ratio
        x = x.reshape(batch, side, side, channels)
        if pad:
            x = F.pad(x, (0, 0, 0, pad, 0, pad))
        x = F.unfold(x.permute(0, 3, 1, 2), kernel_size=self.ratio, stride=self.ratio).transpose(1, 2)
        return self.layers(x)


# ---------------------------------------------------------------------------------------------
# Language model
# ---------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


class Rotary:
    """cos/sin tables at given positions (fp32, then the compute dtype), default or yarn/linear."""

    def __init__(self, dim: int, cfg: dict[str, Any]) -> None:
        base, scaling = cfg["rope_theta"], cfg["rope_scaling"]
        # explicit CPU: the model may be built under a meta-device context before loading
        exponents = torch.arange(0, dim, 2, dtype=torch.float32, device="cpu") / dim
        inv_freq = 1.0 / base**exponents
        self.mscale = 1.0
        self.position_scale = 1.0
        if scaling is not None and scaling.get("type", scaling.get("rope_type")) == "yarn":
            factor = scaling["factor"]
            original = scaling.get("original_max_position_embeddings", 4096)
            fast, slow = scaling.get("beta_fast", 32), scaling.get("beta_slow", 1)

            def correction(rotations: float) -> float:
                return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

            low, high = max(math.floor(correction(fast)), 0), min(math.ceil(correction(slow)), dim - 1)
            if low == high:
                high += 0.001
            ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)
            extrapolate = 1.0 - ramp
            inv_freq = inv_freq / factor * (1 - extrapolate) + inv_freq * extrapolate
            self.mscale = _yarn_mscale(factor, scaling.get("mscale", 1)) / _yarn_mscale(
                factor, scaling.get("mscale_all_dim", 0))
        elif scaling is not None:  # linear (MHA layers only, as transformers 4.38's Llama)
            self.position_scale = 1.0 / scaling["factor"]
        self.inv_freq = inv_freq

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        t = positions.float() * self.position_scale
        freqs = t[..., None] * self.inv_freq.to(positions.device)
        emb = torch.cat([freqs, freqs], dim=-1)
        return (emb.cos() * self.mscale).to(dtype)[:, None], (emb.sin() * self.mscale).to(dtype)[:, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    if interleaved:  # DeepSeek's MLA stores rotary pairs interleaved: regroup evens, then odds
        b, h, s, d = x.shape
        x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return x * cos + _rotate_half(x) * sin


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B,H,Tq,D], k/v [B,Hkv,Tk,D], mask bool [B,1,Tq,Tk] (True = attend)."""
    if k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    width = v.shape[-1]
    if width != q.shape[-1]:  # MLA: v is narrower than q/k; equal widths take SDPA's fast kernels
        v = F.pad(v, (0, q.shape[-1] - width))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)[..., :width]


class MHAttention(nn.Module):
    """`use_mla: false`: transformers-4.38 LlamaAttention on the DeepSeek config."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, self.heads, self.kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = hidden // self.heads
        bias = cfg["attention_bias"]
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=bias)
        self.rotary = Rotary(self.head_dim, cfg)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: dict[str, torch.Tensor] | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, -1).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, -1).transpose(1, 2)
        cos, sin = self.rotary(positions, x.dtype)
        q, k = _rope(q, cos, sin, False), _rope(k, cos, sin, False)
        if cache is not None:
            k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        out = _attend(q, k, v, mask, self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1)), {"k": k, "v": v}


class MLAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.nope, self.rope_dim, self.v_dim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.rank, self.q_rank = cfg["kv_lora_rank"], cfg["q_lora_rank"]
        q_dim = self.heads * (self.nope + self.rope_dim)
        bias = cfg["attention_bias"]
        if self.q_rank is None:
            self.q_proj = nn.Linear(hidden, q_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden, self.q_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(self.q_rank)
            self.q_b_proj = nn.Linear(self.q_rank, q_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.rank + self.rope_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(self.rank)
        self.kv_b_proj = nn.Linear(self.rank, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, hidden, bias=bias)
        self.rotary = Rotary(self.rope_dim, cfg)
        self.scale = (self.nope + self.rope_dim) ** -0.5
        scaling = cfg["rope_scaling"]
        if scaling is not None and scaling.get("mscale_all_dim", 0):
            self.scale *= _yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: dict[str, torch.Tensor] | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        batch, length, _ = x.shape
        q = self.q_proj(x) if self.q_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_pe = q.view(batch, length, self.heads, -1).transpose(1, 2).split([self.nope, self.rope_dim], -1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([self.rank, self.rope_dim], -1)
        latent = self.kv_a_layernorm(latent)
        cos, sin = self.rotary(positions, x.dtype)
        q_pe = _rope(q_pe, cos, sin, True)
        k_pe = _rope(k_pe.view(batch, length, 1, self.rope_dim).transpose(1, 2), cos, sin, True)
        if cache is not None:
            latent, k_pe = torch.cat([cache["latent"], latent], 1), torch.cat([cache["k_pe"], k_pe], 2)
        kv_b = self.kv_b_proj.weight.view(self.heads, self.nope + self.v_dim, self.rank)
        if cache is None:  # prefill: expand the latent into per-head keys/values, one fused kernel
            k_nope = torch.einsum("btr,hdr->bhtd", latent, kv_b[:, : self.nope])
            v = torch.einsum("btr,hdr->bhtd", latent, kv_b[:, self.nope:])
            k = torch.cat([k_nope, k_pe.expand(-1, self.heads, -1, -1)], dim=-1)
            out = _attend(torch.cat([q_nope, q_pe], dim=-1), k, v, mask, self.scale)
        else:  # decode: attend in latent space (the official absorbed form) over the small cache
            q_latent = torch.matmul(q_nope, kv_b[:, : self.nope])  # [B,H,Tq,r]
            scores = (torch.matmul(q_pe, k_pe.mT) + torch.matmul(q_latent, latent.unsqueeze(1).mT)) * self.scale
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            weights = scores.softmax(-1, dtype=torch.float32).to(x.dtype)
            out = torch.matmul(torch.matmul(weights, latent.unsqueeze(1)), kv_b[:, self.nope:].mT)
        out = self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))
        return out, {"latent": latent, "k_pe": k_pe}


class DenseMlp(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEGate(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.zeros(cfg["n_routed_experts"], cfg["hidden_size"]))
        if cfg["topk_method"] == "noaux_tc":
            self.e_score_correction_bias = nn.Parameter(torch.zeros(cfg["n_routed_experts"]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, H] -> (expert ids [N, k], fp32 weights [N, k])."""
        cfg, k = self.cfg, self.cfg["num_experts_per_tok"]
        logits = F.linear(x.float(), self.weight.float())
        scores = logits.softmax(-1) if cfg["scoring_func"] == "softmax" else logits.sigmoid()
        method = cfg["topk_method"]
        if method == "greedy":
            weight, idx = scores.topk(k, dim=-1, sorted=False)
        else:
            choice = scores + self.e_score_correction_bias[None] if method == "noaux_tc" else scores
            groups = choice.view(len(x), cfg["n_group"], -1)
            group_score = groups.topk(2, dim=-1)[0].sum(-1) if method == "noaux_tc" else groups.max(-1).values
            keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(cfg["topk_group"], dim=-1)[1], 1)
            keep = keep.bool()[..., None].expand_as(groups).reshape(len(x), -1)
            idx = choice.masked_fill(~keep, 0.0).topk(k, dim=-1, sorted=False)[1]
            weight = scores.gather(1, idx)
        if k > 1 and cfg["norm_topk_prob"]:
            weight = weight / (weight.sum(-1, keepdim=True) + 1e-20)
        return idx, weight * cfg["routed_scaling_factor"]


class MoE(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden = cfg["hidden_size"]
        self.experts = nn.ModuleList(DenseMlp(hidden, cfg["moe_intermediate_size"])
                                     for _ in range(cfg["n_routed_experts"]))
        self.gate = MoEGate(cfg)
        if cfg["n_shared_experts"] is not None:
            self.shared_experts = DenseMlp(hidden, cfg["moe_intermediate_size"] * cfg["n_shared_experts"])
        self.routing: tuple[torch.Tensor, torch.Tensor] | None = None
        self.record_routing = False  # tests compare expert choices with the official model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        idx, weight = self.gate(flat)
        if self.record_routing:
            self.routing = (idx.view(*shape[:-1], -1), weight.view(*shape[:-1], -1))
        # Group the (token, slot) pairs by expert, run each expert once on its group, scatter back.
        order = idx.view(-1).argsort()
        counts = torch.bincount(idx.view(-1), minlength=len(self.experts)).tolist()
        grouped = flat[order // idx.shape[1]]
        outputs = [self.experts[e](chunk) for e, chunk in enumerate(grouped.split(counts)) if counts[e]]
        routed = torch.empty_like(grouped)
        routed[order] = torch.cat(outputs)
        y = (routed.view(*idx.shape, -1).float() * weight[..., None]).sum(1).to(x.dtype).view(shape)
        if hasattr(self, "shared_experts"):
            y = y + self.shared_experts(x)
        return y


class DecoderLayer(nn.Module):
    def __init__(self, cfg: dict[str, Any], index: int) -> None:
        super().__init__()
        self.self_attn = MLAttention(cfg) if cfg["use_mla"] else MHAttention(cfg)
        moe = (cfg["n_routed_experts"] is not None and index >= cfg["first_k_dense_replace"]
               and index % cfg["moe_layer_freq"] == 0)
        self.mlp = MoE(cfg) if moe else DenseMlp(cfg["hidden_size"], cfg["intermediate_size"])
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, positions, mask, cache):
        attended, new_cache = self.self_attn(self.input_layernorm(x), positions, mask, cache)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), new_cache


class TextModel(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class Language(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.model = TextModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)


# ---------------------------------------------------------------------------------------------
# The whole model
# ---------------------------------------------------------------------------------------------

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
