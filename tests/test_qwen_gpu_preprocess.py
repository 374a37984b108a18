"""`qwen_preprocess` vs the stock transformers Qwen2-VL/Qwen2.5-VL image processor (torchvision
backend), on CPU tensors. Same device ⇒ same library resize kernel ⇒ the outputs are expected to
be bit-identical; the asserted tolerance is max |Δ pixel| <= 1e-6."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import AutoImageProcessor, Qwen2VLImageProcessor

from finbench.models.qwen_gpu_preprocess import (
    processor_settings,
    qwen_grid,
    qwen_preprocess,
)

TOLERANCE = 1e-6
SMALL_MAX_PIXELS = 28 * 28 * 64  # keeps images ≤ 64 merged tokens: fast tests


def _images(sizes: list[tuple[int, ...]], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = []
    for size in sizes:
        shape = size if len(size) == 3 else (3, *size)
        images.append(torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator))
    return images


def _smooth_image(height: int, width: int) -> torch.Tensor:
    """A gradient image: realistic content for a resize (noise is the worst case, also tested)."""
    y = torch.linspace(0, 1, height)[:, None]
    x = torch.linspace(0, 1, width)[None, :]
    rgb = torch.stack(torch.broadcast_tensors(y * 255, x * 255, x * y * 255)).round()
    return rgb.to(torch.uint8)


@pytest.fixture(scope="module")
def stock() -> Qwen2VLImageProcessor:
    return Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=SMALL_MAX_PIXELS)


def _compare(stock_processor, images: list[torch.Tensor]) -> float:
    expected = stock_processor(images=images, return_tensors="pt")
    pixel_values, grid = qwen_preprocess(images, **processor_settings(stock_processor))
    assert torch.equal(grid, expected["image_grid_thw"])
    assert pixel_values.shape == expected["pixel_values"].shape
    assert pixel_values.dtype == torch.float32
    return (pixel_values - expected["pixel_values"]).abs().max().item()


@pytest.mark.parametrize(
    "sizes",
    [
        [(100, 100)],  # square, upscaled to a multiple of 28
        [(37, 251), (251, 37)],  # wide and tall
        [(300, 200), (64, 640), (199, 301)],  # downscaled to max_pixels
        [(20, 20)],  # below min_pixels: upscaled
        [(56, 84)],  # already a multiple of 28 and within limits: no resize
        [(1000, 30), (30, 1000)],  # extreme aspect ratio (≈ 33)
        [(90, 130), (90, 130), (120, 40), (90, 130)],  # same shapes are resized together
    ],
)
def test_matches_stock_processor_on_noise(stock, sizes):
    assert _compare(stock, _images(sizes)) <= TOLERANCE


def test_matches_stock_processor_on_smooth_images(stock):
    assert _compare(stock, [_smooth_image(480, 640), _smooth_image(333, 222)]) <= TOLERANCE


def test_grey_and_rgba_are_converted_like_stock(stock):
    assert _compare(stock, _images([(1, 90, 130), (4, 77, 150)])) <= TOLERANCE


def test_default_qwen25_settings_1024x768(stock):
    full = Qwen2VLImageProcessor()  # stock defaults: max_pixels 28·28·1280
    pixel_values, grid = qwen_preprocess(_images([(768, 1024)]), **processor_settings(full))
    assert grid.tolist() == [[1, 54, 74]]  # 999 image tokens, as the offline notes measured
    assert pixel_values.shape == (54 * 74, 3 * 2 * 14 * 14)
    assert qwen_grid(768, 1024) == (1, 54, 74)


def test_temporal_frames_are_duplicates(stock):
    pixel_values, _ = qwen_preprocess(_images([(100, 140)]), **processor_settings(stock))
    frames = pixel_values.view(-1, 3, 2, 14 * 14)
    assert torch.equal(frames[:, :, 0], frames[:, :, 1])


def test_settings_from_auto_image_processor(tmp_path):
    """Whatever AutoImageProcessor gives a saved Qwen2.5-VL processor config: settings round-trip."""
    Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 32).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    loaded = AutoImageProcessor.from_pretrained(tmp_path)
    settings = processor_settings(loaded)
    assert settings["min_pixels"] == 28 * 28 * 4 and settings["max_pixels"] == 28 * 28 * 32
    assert (settings["patch_size"], settings["temporal_patch_size"], settings["merge_size"]) == (14, 2, 2)
    assert settings["resample"] == "bicubic"
    json.dumps(settings)  # plain data: usable in a fingerprint
    if loaded.backend == "torchvision":
        assert _compare(loaded, _images([(150, 260), (64, 64)])) <= TOLERANCE


def test_bad_inputs_raise_like_stock(stock):
    with pytest.raises(ValueError, match="aspect ratio"):
        qwen_preprocess(_images([(10, 2100)]), **processor_settings(stock))
    with pytest.raises(ValueError, match="aspect ratio"):
        stock(images=_images([(10, 2100)]), return_tensors="pt")
    with pytest.raises(TypeError, match="uint8"):
        qwen_preprocess([torch.rand(3, 50, 50)])
    with pytest.raises(ValueError, match="channels"):
        qwen_preprocess([torch.zeros(2, 50, 50, dtype=torch.uint8)])
    with pytest.raises(ValueError, match="no images"):
        qwen_preprocess([])


def test_out_dtype_and_unsupported_settings(stock):
    pixel_values, _ = qwen_preprocess(_images([(60, 60)]), **processor_settings(stock), out_dtype=torch.bfloat16)
    assert pixel_values.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="do_normalize"):
        processor_settings(Qwen2VLImageProcessor(do_normalize=False))


def test_out_dtype_is_the_float32_result_cast_once(stock):
    images = _images([(90, 130), (90, 130), (40, 300)])
    full, _ = qwen_preprocess(images, **processor_settings(stock))
    half, _ = qwen_preprocess(images, **processor_settings(stock), out_dtype=torch.bfloat16)
    assert torch.equal(half, full.to(torch.bfloat16))
