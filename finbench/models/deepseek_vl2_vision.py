"""DeepSeek-VL2's vision side in plain PyTorch (see deepseek_vl2_model.py for what must match the
official model): the timm-style SigLIP ViT and the `downsample_mlp_gelu` projector."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


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
