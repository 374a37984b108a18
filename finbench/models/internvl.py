"""InternVL (the `-hf` checkpoint format: `InternVLForConditionalGeneration`, e.g.
`OpenGVLab/InternVL3-8B-hf`) via the Auto classes.

What differs from the generic adapter: only image-token counting, and what it declares: no FLOP
count (`prefill_flops` reports None; InternViT tiles and the pixel-shuffle projector are not in
models/flops.py), no device preprocessing and no pixel budget (its budget is a tile count). An image is cut into
`image_size` tiles on the best-fitting grid of `min_patches`..`max_patches` tiles (plus a
thumbnail when there is more than one), and each tile becomes `image_seq_length` tokens after
the pixel shuffle. Positions are plain 1-D rotary ones, so the generic decode step applies.
"""

from __future__ import annotations

from finbench.models.base import HFVisionLanguageModel
from finbench.models.contract import Capabilities


class InternVL(HFVisionLanguageModel):
    family = "internvl"
    model_types = ("internvl",)
    checkpoints = ("OpenGVLab/InternVL3-1B-hf", "OpenGVLab/InternVL3-2B-hf", "OpenGVLab/InternVL3-8B-hf",
                   "OpenGVLab/InternVL3-14B-hf", "OpenGVLab/InternVL3-38B-hf", "OpenGVLab/InternVL3-78B-hf")
    capabilities = Capabilities()

    def image_token_count(self, width: int, height: int) -> int:
        tiles = self.processor.image_processor.get_number_of_image_patches(height, width)
        return tiles * self.processor.image_seq_length
