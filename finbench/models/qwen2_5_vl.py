"""Qwen2.5-VL (and Qwen2-VL) family: `Qwen2_5_VLForConditionalGeneration` via the Auto classes.

What differs from the generic adapter:
- multimodal rotary positions (M-RoPE): a decode step's position is the text position plus the
  per-row `rope_deltas` the model computed during prefill from the image grids;
- image tokens: the processor resizes to multiples of 28 px within [min_pixels, max_pixels]
  (`smart_resize`), one token per 28×28 block after the 2×2 patch merge;
- `--max-pixels` caps the image processor's `longest_edge` (pixel budget);
- `--device-preprocess`: the CPU threads only decode images and tokenize (image tokens counted
  from the resize rule); resize, normalisation and patchify run on the model's device in
  `to_device` (`qwen_gpu_preprocess.qwen_preprocess`), so only uint8 pixels cross the bus;
- every fast path (models/fast_paths.py). For the mask-free prefill the worker threads compute
  the M-RoPE positions of the real tokens (`get_rope_index` over the left-padded batch with its
  mask) and the first fed token's position (one past the largest: how `get_rope_index` continues
  text after an image); for Qwen2.5-VL's windowed tower they also build its position ids,
  attention boundaries and window index (transformers' `vision_utils`, the functions the tower
  calls itself), which the tower takes as `image_*` keyword arguments.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Sequence

import torch

from finbench.core.types import ModelRequest
from finbench.models.base import FINBENCH_KEYS, DecodeState, HFVisionLanguageModel
from finbench.models.contract import Capabilities
from finbench.models.fast_paths import PATHS
from finbench.models.inputs import ModelInputs, pinned
from finbench.models.vision_attention import install as install_vision_attention


IMAGE_PAD = "<|image_pad|>"
EXPANDED_MARK = "\x00finbench-image-token\x00"
POSITIONS, NEXT_POSITION = FINBENCH_KEYS + "positions", FINBENCH_KEYS + "next_position"
# the windowed tower's precomputed inputs, as `get_image_features` takes them (`image_` + the name
# transformers' vision_utils pop from the tower's keyword arguments)
VISION_INDEX_KEYS = frozenset({"image_position_ids", "image_cu_seqlens", "image_max_seqlen", "image_window_index",
                               "image_cu_window_seqlens", "image_max_window_seqlen"})


def _size_value(size: Any, key: str) -> int:
    return int(size[key] if isinstance(size, dict) else getattr(size, key))


class Qwen25VL(HFVisionLanguageModel):
    family = "qwen2.5-vl"
    model_types = ("qwen2_5_vl", "qwen2_vl")
    checkpoints = ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-32B-Instruct",
                   "Qwen/Qwen2.5-VL-72B-Instruct", "Qwen/Qwen2-VL-2B-Instruct", "Qwen/Qwen2-VL-7B-Instruct")
    # FLOP count: windowed vision tower (Qwen2.5-VL) or plain one (Qwen2-VL), models/flops.py
    capabilities = Capabilities(device_preprocessing=True, flop_count=True, pixel_budget=True)
    supports = frozenset(PATHS)
    vision_index_keys = VISION_INDEX_KEYS

    def __init__(self, model: Any, processor: Any, source: str, *, device_preprocess: bool = False,
                 vision_attention: str = "packed", **kwargs: Any) -> None:
        super().__init__(model, processor, source, **kwargs)
        self.device_preprocess = device_preprocess
        # one attention call per vision layer without flash-attn (models/vision_attention.py); in the fingerprint
        self.attn_implementation = install_vision_attention(self.model, self.attn_implementation, vision_attention)
        if self.max_pixels is not None:
            image_processor = processor.image_processor
            shortest = min(_size_value(image_processor.size, "shortest_edge"), self.max_pixels)
            image_processor.size = {"shortest_edge": shortest, "longest_edge": int(self.max_pixels)}

    def _pixel_bounds(self) -> tuple[int, int, int]:
        image_processor = self.processor.image_processor
        factor = image_processor.patch_size * image_processor.merge_size
        size = image_processor.size
        return factor, _size_value(size, "shortest_edge"), _size_value(size, "longest_edge")

    def image_token_count(self, width: int, height: int) -> int:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        factor, min_pixels, max_pixels = self._pixel_bounds()
        resized_height, resized_width = smart_resize(height, width, factor=factor,
                                                     min_pixels=min_pixels, max_pixels=max_pixels)
        return (resized_height // factor) * (resized_width // factor)

    def prepare(self, requests: Sequence[ModelRequest]) -> ModelInputs:
        """The processor's batch (or, with `--device-preprocess`, tokens and uint8 pixels), each row's
        images' extents declared (`ModelInputs.spans`). Only for a batch prefilled as it is
        (`ModelRequest.prefilled`): the worker-made M-RoPE positions, which free generation drops and
        a thinking step's rebuilt batch recomputes; the tower's indices for all but free generation
        (a thinking step keeps them: its images do not change)."""
        prefill = all(r.prefilled for r in requests)
        towers = all(r.prefilled or r.thinking for r in requests)
        inputs = self._device_inputs(requests) if self.device_preprocess else super().prepare(requests)
        return self._derived(inputs.like(inputs, spans=self._image_spans(requests, inputs)), prefill, towers)

    def _derived(self, inputs: ModelInputs, prefill: bool, towers: bool) -> ModelInputs:
        """`inputs` with the keys the workers compute from them (positions, the tower's indices), and
        this function as their `derive`: a batch joined from pieces (`ModelInputs.join`) gets them
        computed once more, for all its rows."""
        data = dict(inputs)
        if prefill and self.fast.causal_prefill:
            data[POSITIONS], data[NEXT_POSITION] = self.rope_positions(inputs)
        if towers and self.fast.vision_indices and inputs.get("image_grid_thw") is not None:
            data.update(self.vision_indices(inputs["image_grid_thw"]))
        return inputs.like(data, derived_keys={POSITIONS, NEXT_POSITION}, image_derived_keys=VISION_INDEX_KEYS,
                           derive=functools.partial(self._derived, prefill=prefill, towers=towers))

    @staticmethod
    def _image_spans(requests: Sequence[ModelRequest], inputs: ModelInputs) -> dict[str, list[int]]:
        """Each row's extent in the per-image tensors: its images, and their patches (t·h·w each)."""
        per_row = [len(r.images) for r in requests]
        grid = inputs.get("image_grid_thw")
        if grid is None:
            return {}
        patches = grid.prod(-1).split(per_row)
        spans = {"image_grid_thw": per_row, "images_uint8": per_row}
        return {**spans, "pixel_values": [int(p.sum()) for p in patches]}

    def _device_inputs(self, requests: Sequence[ModelRequest]) -> ModelInputs:
        import numpy as np

        from finbench.models.qwen_gpu_preprocess import qwen_grid

        settings = self._device_preprocess_settings()
        prompts = [r.text or self.prompt_text(r) for r in requests]
        texts, images, grids = [], [], []
        for request, text in zip(requests, prompts):
            for image in request.images:
                grid = qwen_grid(image.height, image.width, patch_size=settings["patch_size"],
                                 merge_size=settings["merge_size"], min_pixels=settings["min_pixels"],
                                 max_pixels=settings["max_pixels"])
                n_tokens = grid[0] * grid[1] * grid[2] // settings["merge_size"] ** 2
                # mark the expanded placeholder so the next image's pad is found, then restore it
                text = text.replace(IMAGE_PAD, EXPANDED_MARK * n_tokens, 1)
                images.append(torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).contiguous())
                grids.append(grid)
            texts.append(text.replace(EXPANDED_MARK, IMAGE_PAD))
        inputs = dict(self.tokenizer(texts, padding=True, return_tensors="pt"))
        if "mm_token_type_ids" in inspect.signature(self.model.model.forward).parameters:  # newer transformers
            inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.model.config.image_token_id).long()
        if images:
            inputs["image_grid_thw"] = torch.tensor(grids, dtype=torch.long)
            inputs["images_uint8"] = images
        return ModelInputs(inputs, token_keys=self.token_keys, texts=prompts)

    def to_device(self, inputs: ModelInputs) -> ModelInputs:
        if "images_uint8" not in inputs:
            return super().to_device(inputs)
        from finbench.models.qwen_gpu_preprocess import qwen_preprocess

        images = inputs["images_uint8"]
        moved = super().to_device(inputs.like({k: v for k, v in inputs.items() if k != "images_uint8"}))
        if self.device.type == "cuda":
            images = [pinned(image).to(self.device, non_blocking=True) for image in images]
        settings = {k: v for k, v in self._device_preprocess_settings().items() if k != "resample"}
        pixel_values, grid = qwen_preprocess(images, device=self.device, **settings)
        if not torch.equal(grid, moved["image_grid_thw"]):
            raise RuntimeError("device preprocessing produced a different image grid than the tokenizer expected")
        moved["pixel_values"] = pixel_values.to(self.dtype)
        return moved

    def _device_preprocess_settings(self) -> dict[str, Any]:
        from finbench.models.qwen_gpu_preprocess import processor_settings

        return processor_settings(self.processor.image_processor)

    def prefill(self, inputs: Any) -> tuple[torch.Tensor, DecodeState]:
        # The model keeps `rope_deltas` on the module and refreshes it only for prefills with
        # images; clear it so a text-only batch never inherits the previous batch's offsets.
        self.model.model.rope_deltas = None
        return super().prefill(inputs)

    def decode_extras(self) -> dict[str, Any]:
        # Prefill stored each row's offset between M-RoPE and text positions on the module; keep
        # our own copy so nothing else running on the model can change it under us.
        deltas = self.model.model.rope_deltas
        return {"rope_deltas": None if deltas is None else deltas.clone()}

    def fed_position(self, state: DecodeState) -> torch.Tensor:
        if state.next_position is not None:  # a mask-free prefill numbered the real tokens itself
            return state.next_position
        text_position = state.attention_mask.sum(-1, keepdim=True) - 1  # [B, 1]
        deltas = state.extras.get("rope_deltas")
        if deltas is None:
            # text-only prefill: the model used positions 0..T-1 counting pads, so shift by the pads
            deltas = (state.attention_mask == 0).sum(-1, keepdim=True)
        return text_position + deltas.to(text_position.device).view(-1, 1)

    def model_positions(self, position: torch.Tensor) -> torch.Tensor:
        return position[None].expand(3, -1, -1)  # temporal, height, width share it for text

    # ---- fast paths ----------------------------------------------------------------------------
    def rope_positions(self, inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """M-RoPE positions [3, B, T] of the real tokens of a (left-padded) batch, and the position
        of the first token fed after it [B, 1] (`get_rope_index`, the function the model calls itself)."""
        base = self.model.model
        input_ids, mask = inputs["input_ids"], inputs["attention_mask"]
        types = inputs.get("mm_token_type_ids")
        if types is None:  # older processors: image placeholders are the image tokens
            types = (input_ids == self.model.config.image_token_id).long()
        positions, _ = base.get_rope_index(input_ids, types, image_grid_thw=inputs.get("image_grid_thw"),
                                           attention_mask=mask)
        real = mask.bool()[None].to(positions.device)
        next_position = positions.masked_fill(~real, 0).amax(dim=(0, 2)) + 1  # text continues past the largest
        return positions, next_position.view(-1, 1).to(mask.device)

    def prefill_positions(self, inputs: Any, order: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        positions, next_position = inputs.get(POSITIONS), inputs.get(NEXT_POSITION)
        if positions is None:
            # a batch prepared for generation, or rebuilt on the model's thread (after thinking:
            # `ModelInputs.extend` drops positions, which no longer fit): computed here
            positions, next_position = self.rope_positions(inputs)
        return positions.gather(2, order[None].expand(positions.shape[0], -1, -1)), next_position

    def vision_indices(self, grid: torch.Tensor) -> dict[str, Any]:
        """The windowed tower's position ids, boundaries and window index for image grids [N, 3]
        (CPU), computed by transformers' own functions; {} for other towers."""
        config = self.model.config.vision_config
        if self.model.config.model_type != "qwen2_5_vl":
            return {}
        try:
            from transformers.vision_utils import (get_vision_cu_seqlens, get_vision_position_ids,
                                                   get_vision_window_index)
        except ImportError:  # a transformers without them: the tower builds its own
            return {}
        grid = grid.cpu()
        cu_seqlens = get_vision_cu_seqlens(grid)
        window_index, cu_window_seqlens = get_vision_window_index(
            grid, spatial_merge_size=config.spatial_merge_size, window_size=config.window_size,
            patch_size=config.patch_size)
        return {"image_position_ids": get_vision_position_ids(grid, config.spatial_merge_size),
                "image_cu_seqlens": cu_seqlens, "image_max_seqlen": int((cu_seqlens[1:] - cu_seqlens[:-1]).max()),
                "image_window_index": window_index, "image_cu_window_seqlens": cu_window_seqlens,
                "image_max_window_seqlen": int((cu_window_seqlens[1:] - cu_window_seqlens[:-1]).max())}

    def processor_settings(self) -> dict[str, Any]:
        factor, min_pixels, max_pixels = self._pixel_bounds()
        settings = super().processor_settings()
        settings.update({"factor": factor, "min_pixels": min_pixels, "max_pixels": max_pixels,
                         "preprocess": "device" if self.device_preprocess else "processor"})
        return settings
