"""The model contract: what the runner calls on a model adapter (`ModelAdapter`), and what a family
declares it can honour (`Capabilities`), checked once at start-up before any weights load.

The runner (runner/) touches nothing but these methods and the prepared batch they return
(`ModelInputs`, models/inputs.py: the batch pins, moves, extends and cuts itself, and its
`input_ids` and `attention_mask` give the token counts); it never reaches into the Hugging Face
module, and it asks an adapter nothing the contract does not declare (no attribute probing).
`HFVisionLanguageModel` (models/base.py) implements the contract once for transformers models;
a family file overrides only what its architecture does differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence, runtime_checkable

import torch

from finbench.core.types import MULTI, NUMERICAL, SINGLE, ModelRequest
from finbench.models.inputs import ModelInputs
from finbench.models.part_timing import PartClock
from finbench.models.quant import QUANT_CHOICES

# a family that can load checkpoints shipped quantized (config.json's quantization_config) lists it
PREQUANTIZED = "prequantized"


@dataclass(frozen=True)
class Capabilities:
    """What a family can honour. An option it cannot is refused at start-up with one line
    (`refusal`), never inherited as code that raises or lies later."""

    thinking: bool = False  # can reason in a tagged block before answering (--think-budget)
    thinking_tags: tuple[str, str] = ("<think>", "</think>")
    # accepted --quant values (models/quant.py), and PREQUANTIZED for checkpoints shipped quantized
    quantization: tuple[str, ...] = (*QUANT_CHOICES, PREQUANTIZED)
    max_images: int | None = None  # images per request; None = no fixed limit (the context is)
    device_preprocessing: bool = False  # --device-preprocess: resize/normalise on the model's device
    flop_count: bool = False  # prefill_flops is an analytic count (models/flops.py), else None
    sampling: bool = True  # free generation can sample (--gen-kwargs temperature, top_p, top_k)
    pixel_budget: bool = False  # --max-pixels caps the processor's pixels per image
    chat_template: bool = True  # --chat-template replaces the checkpoint's template
    hub_options: bool = True  # --revision, --attn-implementation and --device-map apply
    sees_images: bool = True  # takes images (a text-only --judge model does not: it is shown the text)
    # the constrained answers it can read (types.py kinds): a served model reads single choices at most
    constrained: tuple[str, ...] = (SINGLE, MULTI, NUMERICAL)
    choice_reading: str = ""  # how choices are read when not from finbench's prompt and logits (a note in results)
    unread: str = ""  # why the kinds missing from `constrained` are not read here (one line, saying what reads them)


def refusal(capabilities: Capabilities, family: str, *, think_budget: int = 0, quant: str = "none",
            device_preprocess: bool = False, max_pixels: int | None = None, sampling: Sequence[str] = (),
            chat_template: bool = False, hub_options: Sequence[str] = (), prequantized: str | None = None) -> str | None:
    """The first asked-for option that `family` does not declare, as one line; None if all apply.
    `prequantized` is the label of a checkpoint's own quantization (models/quant_checkpoint.py)."""
    if think_budget > 0 and not capabilities.thinking:
        return f"--think-budget {think_budget}: {family} has no thinking block"
    if quant != "none" and quant not in capabilities.quantization:
        accepted = [q for q in capabilities.quantization if q != PREQUANTIZED]
        return f"--quant {quant}: {family} supports {', '.join(accepted)}"
    if prequantized and PREQUANTIZED not in capabilities.quantization:
        return f"this checkpoint is quantized ({prequantized}); {family} loads unquantized checkpoints only"
    if device_preprocess and not capabilities.device_preprocessing:
        return f"--device-preprocess is not available for {family}"
    if max_pixels is not None and not capabilities.pixel_budget:
        return (f"--max-pixels applies to Qwen-style processors; {family} sets its image budget in its "
                "checkpoint's processor config")
    if sampling and not capabilities.sampling:
        return f"--gen-kwargs {', '.join(sampling)}: {family} generates greedily only"
    if chat_template and not capabilities.chat_template:
        return f"--chat-template: {family} prompts use its fixed conversation format"
    if hub_options and not capabilities.hub_options:
        return (f"{', '.join(hub_options)}: not supported for {family} (a native adapter: load a local folder "
                "of the revision you want, on one device)")
    return None


class GenerationInterrupted(KeyboardInterrupt):
    """Ctrl-C during a batch's free generation, carrying the rows that had finished by then
    (position in the batch → text, and generated tokens): the runner keeps their answers."""

    def __init__(self, texts: dict[int, str], counts: dict[int, int]) -> None:
        super().__init__()
        self.texts, self.counts = texts, counts


class ModelUnavailable(BaseException):
    """The model cannot answer any more (a served model's server is gone): the run stops in one
    line, keeping every committed answer (runner/engine.py). Like KeyboardInterrupt it is no
    question's error, so the batch loop's per-question isolation (`except Exception`) lets it pass."""


@runtime_checkable
class ModelAdapter(Protocol):
    """Everything the runner calls on a loaded model (`load_model` returns one)."""

    family: str
    source: str
    device: torch.device
    dtype: torch.dtype
    capabilities: Capabilities

    # ---- text and tokens
    def prompt_text(self, request: ModelRequest) -> str: ...
    def text_token_counts(self, texts: Sequence[str]) -> list[int]: ...
    def image_token_count(self, width: int, height: int) -> int: ...
    def single_token_ids(self, texts: Sequence[str]) -> list[int]: ...
    def stop_token_ids(self) -> list[int]: ...
    def end_token_ids(self) -> list[int]: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, rows: Sequence[Sequence[int]]) -> list[str]: ...
    # ids generated text never carries back into a prompt: special tokens, image/video placeholders
    def reserved_token_ids(self) -> frozenset[int]: ...
    @property
    def pad_token_id(self) -> int | None: ...
    def thinking_token_ids(self) -> tuple[int, int] | None: ...
    def template_opens_thinking(self) -> bool: ...

    # ---- inputs (prepare runs in worker threads; it honours `ModelRequest.text` and `.prefilled`)
    def prepare(self, requests: Sequence[ModelRequest]) -> ModelInputs: ...
    def to_device(self, inputs: ModelInputs) -> ModelInputs: ...

    # ---- compute
    def prefill(self, inputs: Any) -> tuple[torch.Tensor, Any]: ...
    def decode_step(self, state: Any, token_ids: torch.Tensor) -> torch.Tensor: ...
    def output_rows(self, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor: ...
    # logits [B, R] (float32) of the `output_rows` rows from what prefill / decode_step returned
    def logits(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor: ...
    def vocabulary_size(self) -> int: ...
    def score_options(self, inputs: Any, option_token_ids: torch.Tensor) -> torch.Tensor: ...
    # Ctrl-C inside `generate` raises `GenerationInterrupted` with the rows finished by then
    def generate(self, inputs: Any, max_new_tokens: int,
                 sampling: dict[str, Any] | None = None) -> tuple[list[str], list[int]]: ...
    def generate_ids(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int]) -> torch.Tensor: ...

    # ---- bookkeeping (never fails a batch: the runner catches)
    def count_image_tokens(self, inputs: Any) -> int: ...
    def image_tokens_per_row(self, inputs: Any) -> list[int]: ...  # the same count, one per row
    def prefill_flops(self, inputs: Any) -> float | None: ...
    def max_context(self) -> int | None: ...
    def memory_footprint(self) -> int | None: ...
    # times the model's parts into the clock while the block runs (models/part_timing.py)
    def timed_parts(self, clock: PartClock) -> ContextManager[Any]: ...
    def compile_vision(self) -> dict[str, int]: ...
    def compile_language_model(self) -> dict[str, int]: ...
    def fingerprint(self, file_digest: Callable[[Path], str] | None = None) -> dict[str, Any]: ...
