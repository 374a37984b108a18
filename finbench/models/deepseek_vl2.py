"""DeepSeek-VL2 (`deepseek-ai/deepseek-vl2-tiny`, `-small`, `deepseek-vl2`): the official checkpoint
folders, loaded natively — the model is in neither transformers nor PyPI. The network itself is
`deepseek_vl2_model.py`; this file is the family: the official processor restated and the adapter
(a tiny random-weight checkpoint is built by `finbench/offline/tiny_deepseek_vl2.py`).

What differs from the generic adapter (everything the Auto classes would do):
- Prompt: the "deepseek" conversation format, `<BOS><|User|>: {content}\\n\\n<|Assistant|>:`.
  User content is stripped; image parts become `<image>` placeholders, parts joined by "\\n".
  Earlier answers are tokenised right after `<|Assistant|>:` (no space) and end with EOS. A
  system message is tokenised after BOS with no separator (the official quirk). The text is split
  at `<image>` and each piece is tokenised on its own.
- Images: dynamic tiling. The best of the candidate resolutions (largest useful area, then least
  waste) gives an nw × nh grid of S-pixel local tiles, plus one global S×S tile, both made by
  `ImageOps.pad` on grey (127). With three or more images in a conversation nothing is tiled
  (one global + one local tile each). Each tile gives an h×w feature grid (h = ceil(S/patch/2));
  an image's block is the global grid with a learned newline after each row, one view
  separator, then the local tiles as one (nh·h) × (nw·w) grid with a newline after each full row:
  `211 + 14·nh·(14·nw + 1)` tokens at S = 384.
- Tiles travel as uint8 and are normalised on the model's device; `image_source` says, for every
  image position, which projector row (or newline / separator) fills it.
- Positions count real tokens only, so left padding never shifts a row.
- No FLOP count yet (`prefill_flops` is None: MoE routing makes it data dependent).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Sequence

import numpy as np
import torch

from finbench.core.types import ModelRequest
from finbench.models.base import DecodeState, HFVisionLanguageModel, decode_attention
from finbench.models.contract import Capabilities
from finbench.models.deepseek_vl2_model import NEWLINE, SEPARATOR, DeepseekVL2Config, DeepseekVL2Model, load_checkpoint
from finbench.models.generation import generated_counts
from finbench.models.inputs import ModelInputs
from finbench.models.loading import resolve_device, resolve_dtype
from finbench.models.part_timing import PartClock

IMAGE_TOKEN = "<image>"
BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
USER, ASSISTANT = "<|User|>", "<|Assistant|>"
# Tokens the official processor adds to the tokenizer at load time, in its order.
GROUNDING_TOKENS = ("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>")
# The 23 candidate resolutions of every release (processor_config.json).
CANDIDATE_RESOLUTIONS = (
    (384, 384), (384, 768), (768, 384), (384, 1152), (1152, 384), (384, 1536), (1536, 384), (768, 768),
    (384, 1920), (1920, 384), (384, 2304), (2304, 384), (768, 1152), (1152, 768), (384, 2688), (2688, 384),
    (384, 3072), (3072, 384), (768, 1536), (1536, 768), (384, 3456), (3456, 384), (1152, 1152),
)
MAX_TILED_IMAGES = 2  # a conversation with more images is not tiled


def select_best_resolution(width: int, height: int, candidates: Sequence[Sequence[int]]) -> tuple[int, int]:
    """The official rule: the candidate where the image, scaled to fit, keeps the most pixels
    (capped at the original area); ties go to the least wasted canvas."""
    best, best_useful, best_waste = (0, 0), 0, math.inf
    for cand_w, cand_h in candidates:
        scale = min(cand_w / width, cand_h / height)
        useful = min(int(width * scale) * int(height * scale), width * height)
        waste = cand_w * cand_h - useful
        if useful > best_useful or (useful == best_useful and waste < best_waste):
            best, best_useful, best_waste = (cand_w, cand_h), useful, waste
    return best


@dataclass(frozen=True)
class ImageLayout:
    """Geometry of the image-token blocks: tile side S, feature grid side (h = w) per tile."""

    tile: int
    grid: int
    global_first: bool = True

    def tokens(self, tiles_across: int, tiles_down: int) -> int:
        g = self.grid
        return g * (g + 1) + 1 + tiles_down * g * (tiles_across * g + 1)

    def sources(self, first_tile: int, tiles_across: int, tiles_down: int) -> np.ndarray:
        """For every position of one image's block, the projector row that fills it."""
        g, per_tile = self.grid, self.grid * self.grid
        glob = np.concatenate([first_tile * per_tile + np.arange(per_tile).reshape(g, g),
                               np.full((g, 1), NEWLINE)], axis=1).ravel()
        rows, cols = np.meshgrid(np.arange(tiles_down * g), np.arange(tiles_across * g), indexing="ij")
        tile = first_tile + 1 + (rows // g) * tiles_across + cols // g
        local = np.concatenate([tile * per_tile + (rows % g) * g + cols % g,
                                np.full((tiles_down * g, 1), NEWLINE)], axis=1).ravel()
        parts = [glob, [SEPARATOR], local] if self.global_first else [local, [SEPARATOR], glob]
        return np.concatenate(parts).astype(np.int64)


class DeepseekVL2Processor:
    """The official `DeepseekVLV2Processor`, restated for inference (thread-safe: no state)."""

    def __init__(self, tokenizer: Any, settings: dict[str, Any], global_view_pos: str = "head") -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.candidates = [tuple(int(x) for x in r) for r in settings["candidate_resolutions"]]
        tile, patch, ratio = self.candidates[0][0], settings["patch_size"], settings["downsample_ratio"]
        self.layout = ImageLayout(tile, math.ceil((tile // patch) / ratio), global_view_pos == "head")
        self.fill = tuple(int(x * 255) for x in settings["image_mean"])
        self.image_token = settings.get("image_token", IMAGE_TOKEN)
        # The official processor adds these at load time when the tokenizer lacks them.
        if tokenizer.pad_token is None:
            tokenizer.add_special_tokens({"pad_token": settings.get("pad_token", PAD)})
        missing = [t for t in (self.image_token, *GROUNDING_TOKENS, USER, ASSISTANT)
                   if tokenizer.convert_tokens_to_ids(t) in (None, tokenizer.unk_token_id)]
        if missing:
            from tokenizers import AddedToken

            tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
        tokenizer.padding_side = "left"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)

    # ---- text ------------------------------------------------------------------------------
    def render(self, request: ModelRequest) -> list[tuple[str, str]]:
        """The conversation as (kind, text) pieces in token order: kind "special" for BOS/EOS,
        "text" for a piece tokenised on its own, "image" for one image block."""
        pieces: list[tuple[str, str]] = [("special", BOS)]
        for index, message in enumerate(request.messages):
            role, text = message["role"], _content_text(message["content"], self.image_token).strip()
            if role == "system" and index == 0:
                pieces.append(("text", text))
            elif role == "user":
                turn = f"{USER}: {text}\n\n{ASSISTANT}:" if text else f"{USER}:{ASSISTANT}:"
                chunks = turn.split(self.image_token)
                for i, chunk in enumerate(chunks):
                    pieces.append(("text", chunk))
                    if i < len(chunks) - 1:
                        pieces.append(("image", self.image_token))
            elif role == "assistant":
                if self.image_token in text:
                    raise ValueError(f"an assistant message contains {self.image_token}")
                pieces += [("text", text), ("special", EOS)]
            else:
                raise ValueError(f"DeepSeek-VL2 has no {role!r} role here (user, assistant, system first)")
        if request.answer_prefix:
            pieces.append(("text", request.answer_prefix))
        return pieces

    def prompt_text(self, request: ModelRequest) -> str:
        return "".join(text for _, text in self.render(request))

    # ---- images ----------------------------------------------------------------------------
    def grid_for(self, width: int, height: int, tiled: bool) -> tuple[int, int]:
        """(tiles across, tiles down) of the local view."""
        if not tiled:
            return 1, 1
        best_w, best_h = select_best_resolution(width, height, self.candidates)
        return best_w // self.layout.tile, best_h // self.layout.tile

    def image_token_count(self, width: int, height: int, tiled: bool = True) -> int:
        return self.layout.tokens(*self.grid_for(width, height, tiled))

    def tiles(self, image: Any, tiled: bool) -> tuple[np.ndarray, tuple[int, int]]:
        """uint8 tiles [1 + nw·nh, 3, S, S]: the global view, then the local tiles row by row."""
        from PIL import ImageOps

        image = image.convert("RGB")
        side = self.layout.tile
        across, down = self.grid_for(*image.size, tiled)
        views = [np.asarray(ImageOps.pad(image, (side, side), color=self.fill))]
        canvas = np.asarray(ImageOps.pad(image, (across * side, down * side), color=self.fill))
        views += [canvas[r * side:(r + 1) * side, c * side:(c + 1) * side] for r in range(down) for c in range(across)]
        return np.stack(views).transpose(0, 3, 1, 2), (across, down)

    # ---- batch -----------------------------------------------------------------------------
    def __call__(self, requests: Sequence[ModelRequest]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        special = {BOS: tok.bos_token_id, EOS: tok.eos_token_id}  # the official processor adds ids, not strings
        rows, masks, crops, tiles, sources = [], [], [], [], []
        n_tiles = 0
        for request in requests:
            pieces = self.render(request)
            n_images = sum(kind == "image" for kind, _ in pieces)
            if n_images != len(request.images):
                raise ValueError(f"the prompt has {n_images} image placeholders but {len(request.images)} images "
                                 f"(is there a literal {self.image_token} in the text?)")
            tiled = n_images <= MAX_TILED_IMAGES
            ids: list[int] = []
            is_image: list[bool] = []
            row_crops = []
            images = iter(request.images)
            for kind, text in pieces:
                if kind == "image":
                    pixels, (across, down) = self.tiles(next(images), tiled)
                    block = self.layout.sources(n_tiles, across, down)
                    tiles.append(pixels)
                    sources.append(block)
                    row_crops.append((across, down))
                    n_tiles += len(pixels)
                    ids += [self.image_token_id] * len(block)
                    is_image += [True] * len(block)
                    continue
                piece = [special[text]] if kind == "special" else tok.encode(text, add_special_tokens=False)
                ids += piece
                is_image += [False] * len(piece)
            rows.append(ids)
            masks.append(is_image)
            crops.append(row_crops)
        length = max(len(r) for r in rows)
        pad = tok.pad_token_id
        input_ids = torch.tensor([[pad] * (length - len(r)) + r for r in rows], dtype=torch.long)
        attention_mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
        images_seq_mask = torch.tensor([[False] * (length - len(m)) + m for m in masks], dtype=torch.bool)
        n_crops = max(1, max(len(c) for c in crops))
        spatial = torch.zeros(len(rows), n_crops, 2, dtype=torch.long)
        for i, row_crops in enumerate(crops):
            if row_crops:
                spatial[i, :len(row_crops)] = torch.tensor(row_crops)
        side = self.layout.tile
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "images_seq_mask": images_seq_mask,
            "images_spatial_crop": spatial,
            "tiles": (torch.from_numpy(np.concatenate(tiles)) if tiles
                      else torch.zeros(0, 3, side, side, dtype=torch.uint8)),
            "image_source": torch.from_numpy(np.concatenate(sources)) if sources else torch.zeros(0, dtype=torch.long),
        }


def _content_text(content: Any, image_token: str) -> str:
    """HF message content -> text with one `<image>` per image part, parts joined by newlines."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.get("type") == "image":
            parts.append(image_token)
        elif part.get("type") == "text":
            parts.append(part.get("text", ""))
        else:
            raise ValueError(f"unsupported message part {part.get('type')!r}")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def resolve_folder(source: str) -> Path:
    """A local folder as is; a hub id through the Hugging Face cache (never a download when
    HF_HUB_OFFLINE is set)."""
    if Path(source).is_dir():
        return Path(source)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"]))
    except Exception as err:  # offline miss, unknown repo, no network: all one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load model {source!r}: not a local folder and not available from the "
                         f"Hugging Face cache ({first})") from None


def processor_settings_for(folder: Path, config: DeepseekVL2Config) -> dict[str, Any]:
    """processor_config.json when the checkpoint has one, else the official defaults."""
    settings = {"candidate_resolutions": config.candidate_resolutions, "patch_size": config.vision["patch_size"],
                "downsample_ratio": config.projector["downsample_ratio"], "image_mean": [0.5] * 3,
                "image_std": [0.5] * 3, "normalize": True, "image_token": IMAGE_TOKEN, "pad_token": PAD,
                "sft_format": "deepseek"}
    path = folder / "processor_config.json"
    if path.is_file():
        settings.update(json.loads(path.read_text(encoding="utf-8")))
    if settings["sft_format"] != "deepseek" or not settings["normalize"]:
        raise ValueError(f"{folder}: processor sft_format={settings['sft_format']!r}, normalize="
                         f"{settings['normalize']} (only the released 'deepseek' / normalised setup is supported)")
    return settings


class DeepSeekVL2(HFVisionLanguageModel):
    family = "deepseek-vl2"
    model_types = ("deepseek_vl_v2",)
    checkpoints = ("deepseek-ai/deepseek-vl2-tiny", "deepseek-ai/deepseek-vl2-small", "deepseek-ai/deepseek-vl2")
    # native torch code: no bitsandbytes path, greedy generation only, its fixed conversation format,
    # one local folder on one device (nothing remote runs, so --trust-remote-code changes nothing)
    capabilities = Capabilities(quantization=("none",), sampling=False, chat_template=False, hub_options=False)

    def __init__(self, model: DeepseekVL2Model, processor: DeepseekVL2Processor, source: str, **kwargs: Any) -> None:
        super().__init__(model, processor, source, tokenizer=processor.tokenizer, **kwargs)
        settings = processor.settings
        model.pixel_mean = torch.tensor(settings["image_mean"], dtype=torch.float32)
        model.pixel_std = torch.tensor(settings["image_std"], dtype=torch.float32)

    @classmethod
    def load(cls, source: str, *, dtype: str = "auto", device: str = "auto", quant: str = "none",
             max_pixels: int | None = None, revision: str | None = None, trust_remote_code: bool = False,
             attn_implementation: str | None = None, device_map: str | None = None, declared: Any = None,
             **options: Any) -> "DeepSeekVL2":
        # `declared` (a checkpoint's own quantization) is refused for this family at start-up
        from transformers import PreTrainedTokenizerFast

        folder = resolve_folder(source)
        target = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, target)
        config = DeepseekVL2Config.from_dict(json.loads((folder / "config.json").read_text(encoding="utf-8")))
        # tokenizer.json as written: the released tokenizer_config.json names LlamaTokenizerFast,
        # whose class-specific rebuild in some transformers 5.x would not be DeepSeek's byte-level BPE.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
        processor = DeepseekVL2Processor(tokenizer, processor_settings_for(folder, config), config.global_view_pos)
        model = load_checkpoint(str(folder), config, torch_dtype, target)
        return cls(model, processor, source, quant=quant, max_pixels=max_pixels, **options)

    # ---- tokens -------------------------------------------------------------------------------
    def stop_token_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def image_token_count(self, width: int, height: int) -> int:
        """Tokens of one image in a conversation of at most two images (three or more: 421)."""
        return self.processor.image_token_count(width, height)

    def count_image_tokens(self, inputs: Any) -> int:
        return int(inputs["images_seq_mask"].sum())

    def image_tokens_per_row(self, inputs: Any) -> list[int]:
        return inputs["images_seq_mask"].sum(1).tolist()

    def prefill_flops(self, inputs: Any) -> float | None:
        """No analytic count yet: with MoE routing it depends on the data."""
        return None

    # ---- inputs -------------------------------------------------------------------------------
    def prompt_text(self, request: ModelRequest) -> str:
        return self.processor.prompt_text(request)

    def prepare(self, requests: Sequence[ModelRequest]) -> ModelInputs:
        """The official processor's batch. It tokenises the prompt piece by piece itself, so a text
        rendered already (`ModelRequest.text`) only goes to the log. The tiles and `image_source`
        (an index into the batch's tiles) are not declared by row: such a batch is not cut by rows."""
        texts = [r.text or self.prompt_text(r) for r in requests]
        return ModelInputs(self.processor(requests), token_keys={"images_seq_mask"},
                           row_keys={"images_spatial_crop"}, texts=texts)

    # ---- compute ------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, inputs: Any) -> tuple[torch.Tensor, DecodeState]:
        embeds = self.model.embed(inputs["input_ids"], inputs["images_seq_mask"], inputs["tiles"],
                                  inputs["image_source"])
        hidden, caches, _ = self.model.decode_layers(embeds, inputs["attention_mask"])
        return hidden[:, -1, :], DecodeState(cache=caches, attention_mask=inputs["attention_mask"], extras={})

    @torch.inference_mode()
    def decode_step(self, state: DecodeState, token_ids: torch.Tensor) -> torch.Tensor:
        ones = torch.ones_like(state.attention_mask[:, :1])
        state.attention_mask = torch.cat([state.attention_mask, ones], dim=1)
        embeds = self.model.get_input_embeddings()(token_ids[:, None].to(self.device))
        with decode_attention(self.device):
            hidden, state.cache, _ = self.model.decode_layers(embeds, state.attention_mask, state.cache)
        return hidden[:, -1, :]

    @torch.inference_mode()
    def generate(self, inputs: Any, max_new_tokens: int,
                 sampling: dict[str, Any] | None = None) -> tuple[list[str], list[int]]:
        """Greedy decoding over the full vocabulary, every row until EOS or the budget (Ctrl-C:
        `GenerationInterrupted` with the rows finished by then)."""
        tokens: list[torch.Tensor] = []
        try:
            new = self._greedy(inputs, max_new_tokens, self.stop_token_ids(), tokens)
        except KeyboardInterrupt:
            raise self._interrupted(torch.stack(tokens, 1) if tokens else None, 0, self.stop_token_ids()) from None
        return self.decode(new), generated_counts(new, self.stop_token_ids())

    @torch.inference_mode()
    def generate_ids(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int]) -> torch.Tensor:
        return self._greedy(inputs, max_new_tokens, stop_token_ids, [])

    def _greedy(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int],
                tokens: list[torch.Tensor]) -> torch.Tensor:
        """Greedy ids [B, ≤ max_new_tokens]; each step's tokens [B] are appended to `tokens` as made."""
        hidden, state = self.prefill(inputs)
        head = self.model.get_output_embeddings()
        stops = torch.tensor(list(stop_token_ids), device=hidden.device)
        pad = torch.full((hidden.shape[0],), self.tokenizer.pad_token_id, device=hidden.device)
        done = torch.zeros(hidden.shape[0], dtype=torch.bool, device=hidden.device)
        for step in range(max_new_tokens):
            chosen = torch.where(done, pad, head(hidden).float().argmax(-1))
            tokens.append(chosen)
            done |= torch.isin(chosen, stops)
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            hidden = self.decode_step(state, chosen)
        return torch.stack(tokens, 1) if tokens else torch.zeros(len(done), 0, dtype=torch.long)

    def memory_footprint(self) -> int | None:
        return sum(t.numel() * t.element_size() for t in [*self.model.parameters(), *self.model.buffers()])

    def timed_parts(self, clock: PartClock) -> ContextManager[Any]:
        return clock.hooks([])  # the native network's parts are not timed yet

    # ---- identity -----------------------------------------------------------------------------
    def processor_settings(self) -> dict[str, Any]:
        keys = ("candidate_resolutions", "patch_size", "downsample_ratio", "image_mean", "image_std", "sft_format")
        return {k: self.processor.settings[k] for k in keys} | {"format": "deepseek-v1"}

    def max_context(self) -> int | None:
        return int(self.model.config.language["max_position_embeddings"])

    def checkpoint_folder(self) -> Path:
        return resolve_folder(self.source)

