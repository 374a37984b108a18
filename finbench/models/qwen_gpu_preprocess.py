"""Device-side Qwen2-VL / Qwen2.5-VL image preprocessing as one pure tensor function.

`qwen_preprocess` reproduces the stock transformers `Qwen2VLImageProcessor` (the torchvision
backend, formerly `Qwen2VLImageProcessorFast`; what `AutoImageProcessor` gives Qwen2.5-VL) step by
step, with the same library calls where they decide the numbers:
  1. `smart_resize` (imported from transformers): both sides multiples of patch·merge (28), pixel
     count within [min_pixels, max_pixels], aspect ratio kept; aspect ratios > 200 raise ValueError;
  2. `torchvision.transforms.v2.functional.resize` on the uint8 image, bicubic, antialias=True
     (same-size images are resized together, as the stock processor groups them);
  3. rescale 1/255 and normalize with the OpenAI CLIP mean/std, fused exactly as the stock
     processor does: (x - mean/rescale) / (std/rescale) in float32;
  4. each frame duplicated to `temporal_patch_size` (2) frames and flattened to patches of
     C·T·P·P = 1176 values in the stock order: rows in (h-block, w-block, merge-row, merge-col),
     columns in (channel, time, patch-row, patch-col).
Differences from the stock call: input is a list of uint8 CHW tensors (no PIL / numpy decode),
everything runs on `device` (e.g. the GPU, so only uint8 bytes cross the bus), the output is
allocated once and each image is patchified straight into its rows (no per-image tensors, no final
concatenation), and outputs — `image_grid_thw` too — are returned on `device`.

Tolerance: on the same device the output is bit-identical to the stock processor
(measured max |Δ pixel| = 0 on CPU, identical `image_grid_thw`); the tests assert max |Δ| <= 1e-6.
Across devices (this function on CUDA vs the stock processor on CPU) the uint8 bicubic resize
itself differs — torchvision uses torch's native uint8 kernel on the CPU, but on CUDA resizes in
float32, clamps and rounds — expected by about one grey level (≈ 1/(255·0.26) ≈ 0.015 after
normalisation; not yet measured on a GPU). To compare bit for bit on a GPU, run the stock
processor with `device="cuda"` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchvision.transforms.v2 import functional as tvF
from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

__all__ = ["qwen_preprocess", "qwen_grid", "processor_settings", "DEFAULT_MIN_PIXELS", "DEFAULT_MAX_PIXELS"]

# Stock defaults (Qwen2VLImageProcessor.size): shortest_edge = min pixels, longest_edge = max pixels.
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 1280


def qwen_grid(
    height: int,
    width: int,
    *,
    patch_size: int = 14,
    merge_size: int = 2,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> tuple[int, int, int]:
    """(t, h, w) patch grid of one image of `height`×`width` — known before decoding pixels, so
    batching can count image tokens (t·h·w / merge²) from image headers alone."""
    resized_h, resized_w = smart_resize(
        height, width, factor=patch_size * merge_size, min_pixels=min_pixels, max_pixels=max_pixels
    )
    return 1, resized_h // patch_size, resized_w // patch_size


def _to_rgb(image: torch.Tensor) -> torch.Tensor:
    """CHW uint8 → 3 channels, as the stock processor's `convert_to_rgb` does for tensors: grey is
    repeated, RGBA is alpha-blended onto white."""
    if image.ndim == 2:
        image = image[None]
    if image.ndim != 3:
        raise ValueError(f"expected a [C, H, W] image, got shape {tuple(image.shape)}")
    channels = image.shape[0]
    if channels == 1:
        return tvF.grayscale_to_rgb(image)
    if channels == 4:
        rgba = tvF.to_dtype(image.movedim(0, -1), torch.float32, scale=True)
        rgb = rgba[..., :3] * rgba[..., 3:] + (1 - rgba[..., 3:])
        return tvF.to_dtype(rgb, torch.uint8, scale=True).movedim(-1, 0)
    if channels != 3:
        raise ValueError(f"expected 1, 3 or 4 channels, got {channels}")
    return image


def _interpolation(resample: Any) -> tvF.InterpolationMode:
    """PIL resampling enum / int (stock processors store PILImageResampling.BICUBIC = 3), a
    torchvision InterpolationMode or its string value ("bicubic") → InterpolationMode."""
    if isinstance(resample, tvF.InterpolationMode):
        return resample
    if isinstance(resample, str):
        return tvF.InterpolationMode(resample)
    from transformers.image_utils import pil_torch_interpolation_mapping

    return pil_torch_interpolation_mapping[resample]


def _patchify_into(
    out: torch.Tensor, image: torch.Tensor, patch_size: int, merge_size: int, temporal_patch_size: int
) -> None:
    """Write a normalised [C, H, W] image into `out` [(H/P)·(W/P), C·T·P·P] in the stock
    processor's order — rows (h-block, w-block, merge-row, merge-col), columns (channel, time,
    patch-row, patch-col) — duplicating the frame `temporal_patch_size` times. One strided copy,
    straight into the caller's slice of the batch output (no per-image tensor, no final cat)."""
    channels, height, width = image.shape
    grid_h, grid_w = height // patch_size, width // patch_size
    patches = image.reshape(
        channels, grid_h // merge_size, merge_size, patch_size, grid_w // merge_size, merge_size, patch_size
    )
    # → [h-block, w-block, merge-row, merge-col, channel, time, patch-row, patch-col]
    patches = patches.permute(1, 4, 2, 5, 0, 3, 6).unsqueeze(5)
    patches = patches.expand(-1, -1, -1, -1, -1, temporal_patch_size, -1, -1)
    out.view(patches.shape).copy_(patches)


def _channel_stats(
    image_mean: Sequence[float], image_std: Sequence[float], rescale_factor: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std as [C, 1, 1], pre-multiplied by 1/rescale_factor with the very expression the
    stock processor uses, so the float32 values (and hence the outputs) are identical."""
    mean = torch.tensor(image_mean, device=device) * (1.0 / rescale_factor)
    std = torch.tensor(image_std, device=device) * (1.0 / rescale_factor)
    return mean[:, None, None], std[:, None, None]


def qwen_preprocess(
    images: Sequence[torch.Tensor],
    *,
    patch_size: int = 14,
    temporal_patch_size: int = 2,
    merge_size: int = 2,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    image_mean: Sequence[float] = OPENAI_CLIP_MEAN,
    image_std: Sequence[float] = OPENAI_CLIP_STD,
    rescale_factor: float = 1 / 255,
    resample: Any = tvF.InterpolationMode.BICUBIC,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 CHW images → (pixel_values [Σ patches, C·T·P·P], image_grid_thw [N, 3] long), both on
    `device` (default: the first image's device), equal to the stock Qwen2-VL/Qwen2.5-VL image
    processor's output for the same settings (see module docstring for the tolerance).
    `out_dtype` is the dtype of the returned pixels, computed in float32 and cast once (the model
    casts them to its weight dtype anyway; bf16 halves the transfer and memory)."""
    if len(images) == 0:
        raise ValueError("no images")
    device = torch.device(device) if device is not None else images[0].device
    interpolation = _interpolation(resample)

    rgb: list[torch.Tensor] = []
    for index, image in enumerate(images):
        if image.dtype != torch.uint8:
            raise TypeError(f"image {index}: expected uint8, got {image.dtype}")
        rgb.append(_to_rgb(image.to(device, non_blocking=True)))

    # Grids first (pure arithmetic on the sizes), so the output is allocated once and each image
    # is written straight into its rows: large fresh allocations (page faults on the CPU, allocator
    # churn on the GPU) cost more than the arithmetic here.
    grids = [
        qwen_grid(h, w, patch_size=patch_size, merge_size=merge_size, min_pixels=min_pixels, max_pixels=max_pixels)
        for h, w in (tuple(image.shape[-2:]) for image in rgb)
    ]
    counts = [t * h * w for t, h, w in grids]
    starts = _offsets(counts)
    channels = 3
    # Written in `out_dtype` directly: the patchify copy also does the cast (same rounding as
    # casting a float32 result afterwards, one large buffer fewer).
    pixels = torch.empty(
        sum(counts), channels * temporal_patch_size * patch_size * patch_size, dtype=out_dtype, device=device
    )
    mean, std = _channel_stats(image_mean, image_std, rescale_factor, device)

    # Same-shape images are resized and normalised together (one kernel each per shape), as the
    # stock processor groups them; then each is patchified into its slice of `pixels`.
    by_shape: dict[tuple[int, int], list[int]] = {}
    for index, image in enumerate(rgb):
        by_shape.setdefault(tuple(image.shape[-2:]), []).append(index)
    for indices in by_shape.values():
        _, grid_h, grid_w = grids[indices[0]]
        batch = rgb[indices[0]][None] if len(indices) == 1 else torch.stack([rgb[i] for i in indices])
        target = [grid_h * patch_size, grid_w * patch_size]
        batch = tvF.resize(batch, target, interpolation=interpolation, antialias=True)
        # (x - mean/rescale) / (std/rescale) in float32: the stock processor's fused rescale+normalize.
        batch = batch.to(torch.float32).sub_(mean).div_(std)
        for slot, i in enumerate(indices):
            rows = pixels[starts[i] : starts[i] + counts[i]]
            _patchify_into(rows, batch[slot], patch_size, merge_size, temporal_patch_size)

    image_grid_thw = torch.tensor(grids, dtype=torch.long, device=device)
    return pixels, image_grid_thw


def _offsets(counts: Sequence[int]) -> list[int]:
    """Start row of each image in the concatenated patch tensor."""
    starts, total = [], 0
    for count in counts:
        starts.append(total)
        total += count
    return starts


def _size_value(size: Any, key: str) -> int | None:
    """Read `shortest_edge` / `longest_edge` from a SizeDict (v5) or a plain dict (older saves)."""
    value = getattr(size, key, None)
    if value is None and isinstance(size, dict):
        value = size.get(key)
    return value


def processor_settings(image_processor: Any) -> dict[str, Any]:
    """The keyword arguments of `qwen_preprocess` that reproduce `image_processor` (a stock
    Qwen2-VL/Qwen2.5-VL image processor, either backend; or a processor holding one as
    `.image_processor`). Raises ValueError for settings `qwen_preprocess` does not implement.
    The dict is plain data (JSON-serialisable), so it can also go into a model fingerprint.
    For the PIL backend the settings are the same but its pixels differ from the torchvision
    backend (and from `qwen_preprocess`) by up to ~0.35: numbers match the torchvision backend."""
    image_processor = getattr(image_processor, "image_processor", image_processor)
    for flag in ("do_resize", "do_rescale", "do_normalize"):
        if getattr(image_processor, flag, True) is False:
            raise ValueError(f"{type(image_processor).__name__}.{flag}=False is not supported by qwen_preprocess")
    size = getattr(image_processor, "size", None)
    min_pixels = _size_value(size, "shortest_edge") or getattr(image_processor, "min_pixels", None)
    max_pixels = _size_value(size, "longest_edge") or getattr(image_processor, "max_pixels", None)
    return {
        "patch_size": int(image_processor.patch_size),
        "temporal_patch_size": int(image_processor.temporal_patch_size),
        "merge_size": int(image_processor.merge_size),
        "min_pixels": int(min_pixels if min_pixels is not None else DEFAULT_MIN_PIXELS),
        "max_pixels": int(max_pixels if max_pixels is not None else DEFAULT_MAX_PIXELS),
        "image_mean": [float(x) for x in image_processor.image_mean],
        "image_std": [float(x) for x in image_processor.image_std],
        "rescale_factor": float(image_processor.rescale_factor),
        "resample": _interpolation(image_processor.resample).value,  # e.g. "bicubic": JSON-friendly
    }
