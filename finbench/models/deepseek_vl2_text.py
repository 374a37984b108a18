"""DeepSeek-VL2's language side in plain PyTorch (see deepseek_vl2_model.py for what must match the
official model): RMSNorm, Yarn rotary, MHA and MLA attention with their KV caches, the MoE gate and
experts, the decoder."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


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
