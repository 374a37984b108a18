"""The model contract (models/contract.py), implemented once for Hugging Face image-text-to-text models.

A family file subclasses `HFVisionLanguageModel`, declares its `capabilities` and overrides only
what its architecture does differently (decode-step positions, image-token counting, processor
settings). The heart of it:

- `prepare(requests)`       → a `ModelInputs` batch on the CPU (models/inputs.py; thread-safe: worker threads)
- `prefill(inputs)`         → last-position hidden state [B, H] and a decode state (KV cache)
- `decode_step(state, ids)` → next last-position hidden state, one token per row
- `output_rows(token_ids)`  → the LM-head rows to project onto (never the whole vocabulary)
- `logits(hidden, rows)`    → those rows' logits [B, R] (a projection; a gather in models/auto.py)
- `score_options(inputs, option_token_ids)` → log-probs [B, K] from one prefill
- `generate(inputs, max_new_tokens)` → free text (official protocols, open answers, sessions)
- `generate_ids(inputs, budget, stops)` → greedy token ids (the thinking step)
- `fingerprint()`           → everything that can change the outputs (models/identity.py)
- `timed_parts(clock)`      → forward hooks on its own vision tower and language model (models/part_timing.py)

The exact fast paths (models/fast_paths.py: padded GEMM widths, the mask-free prefill, static
decode steps, CUDA graphs) are on by default on CUDA and off on the CPU; each gives the answers of
the reference path it replaces.
"""

from __future__ import annotations

import inspect
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

import torch

from finbench.core.types import ModelRequest
from finbench.kernels.option_logits import combine_spellings, masked_log_softmax, project_rows
from finbench.models.compile import compile_language_model, compile_vision_blocks
from finbench.models.contract import Capabilities, GenerationInterrupted
from finbench.models.fast_paths import FastPaths, last_real, right_aligned
from finbench.models.flops import flops_from_batch
from finbench.models.generation import DecodeState, cache_of, decode_attention, hf_generate, interrupted
from finbench.models.identity import fingerprint_of
from finbench.models.inputs import ModelInputs
from finbench.models.loading import load_auto
from finbench.models.padding import pad_gemm_widths
from finbench.models.part_timing import PartClock
from finbench.models.quant import storage_bytes
import finbench.models.static_decode as static_decode
from finbench.models.tokens import end_token_ids, reserved_token_ids, single_token_ids, stop_token_ids


# LM-head rows a constrained decoder projects onto (letters in two spellings, separator, ends):
# the FLOP count charges these, not the whole vocabulary.
PROJECTED_HEAD_ROWS = 32


FINBENCH_KEYS = "finbench_"  # prepared-input keys for finbench's own use, never passed to transformers


class HFVisionLanguageModel:
    """Generic adapter over `AutoProcessor` + `AutoModelForImageTextToText`."""

    family = "generic"
    model_types: tuple[str, ...] = ()
    checkpoints: tuple[str, ...] = ()  # hub ids of released checkpoints with this architecture
    tested_on: dict[str, bool] = {}  # the generic family: architectures tested → thinks (models/auto.py)
    # What the family can honour (shown by `finbench models list`, checked at start-up).
    capabilities = Capabilities()
    compiled_blocks: dict[str, int] = {}  # --compile-vision: {block class: count}; replaced, never mutated
    compiled_language_model: dict[str, int] = {}  # --compile-lm: {module class: count}; the same
    # Fast paths this family's architecture fits (models/fast_paths.py); the generic adapter only
    # pads widths: a family turns on the others once its prefill and decode steps are tested under them.
    supports: frozenset[str] = frozenset({"pad_widths"})
    vision_index_keys: frozenset[str] = frozenset()  # prepared keys of the tower's precomputed indices
    # processor outputs aligned with the tokens [B, T] besides input_ids and attention_mask (a new
    # token gets 0: plain text), as `ModelInputs` (models/inputs.py) extends and cuts them
    token_keys: frozenset[str] = frozenset({"mm_token_type_ids", "token_type_ids"})

    @classmethod
    def capabilities_for(cls, model_type: str, source: str | None = None) -> Capabilities:  # source: models/auto.py
        return cls.capabilities

    def __init__(self, model: Any, processor: Any, source: str, *, quant: str = "none",
                 attn_implementation: str = "sdpa", max_pixels: int | None = None,
                 tokenizer: Any = None, quant_report: dict[str, Any] | None = None,
                 fast_paths: FastPaths | None = None) -> None:
        self.model = model.eval()
        self.processor = processor
        self.tokenizer = tokenizer if tokenizer is not None else processor.tokenizer
        # Left padding keeps every row's last position real: padding on the right would put pad
        # tokens where we read the answer logits (measured: Δ = 0.67 with right padding). The
        # mask-free prefill right-aligns rows itself and reads each row's last real token instead;
        # free generation and thinking keep these left-padded inputs.
        self.tokenizer.padding_side = "left"
        self._reserved: frozenset[int] | None = None  # reserved_token_ids, read once
        self.source = source
        self.quant = quant  # the label: a --quant value, or prequantized:<format> (models/quant.py)
        self.quant_report = quant_report  # what is really quantized, from the loaded modules
        self.attn_implementation = attn_implementation
        self.max_pixels = max_pixels
        self.device = next(model.parameters()).device
        self.dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
        self.fast = (fast_paths or FastPaths()).resolved(self.device, self.supports)
        self.padded_widths = pad_gemm_widths(self.model) if self.fast.pad_widths else {}
        self.graphs = static_decode.GraphState(self.fast.static_decode and self.fast.cuda_graphs)

    @cached_property
    def _cache_kw(self) -> str:
        # transformers renamed past_key_values → cache (5.2x); support both.
        return "cache" if "cache" in inspect.signature(self.model.model.forward).parameters else "past_key_values"

    # ---- loading ------------------------------------------------------------------------------
    load = classmethod(load_auto)  # models/loading.py: the Auto classes, quantization plan, placement

    # ---- tokens -------------------------------------------------------------------------------
    def single_token_ids(self, texts: Sequence[str]) -> list[int]:
        return single_token_ids(self.tokenizer, texts, self.source)

    def stop_token_ids(self) -> list[int]:
        return stop_token_ids(self.tokenizer, self.model.generation_config)

    def end_token_ids(self) -> list[int]:
        return end_token_ids(self.tokenizer, self.stop_token_ids())

    def text_token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Generated ids as text, without the ids no prompt may hold (`reserved_token_ids`): a
        placeholder the tokenizer does not mark special would come back as that token."""
        reserved = self.reserved_token_ids()
        return self.tokenizer.batch_decode([[t for t in row if t not in reserved] for row in rows],
                                           skip_special_tokens=True)

    def reserved_token_ids(self) -> frozenset[int]:
        """Special tokens and image/video placeholders (models/tokens.py `reserved_token_ids`): the
        thinking step drops them from the reasoning it carries into the answer prompt."""
        if getattr(self, "_reserved", None) is None:
            self._reserved = reserved_token_ids(self.tokenizer, getattr(self.model, "config", None), self.processor)
        return self._reserved

    @property
    def pad_token_id(self) -> int | None:
        return self.tokenizer.pad_token_id

    def image_token_count(self, width: int, height: int) -> int:
        raise NotImplementedError

    def count_image_tokens(self, inputs: Any) -> int:
        """Image placeholder tokens in a prepared batch (the processor expands one per token)."""
        return int(sum(self.image_tokens_per_row(inputs)))

    def image_tokens_per_row(self, inputs: Any) -> list[int]:
        """`count_image_tokens` of each row (a sample's cost: runner/loop.py `row_costs`)."""
        config, ids = self.model.config, inputs["input_ids"]
        token = getattr(config, "image_token_id", None) or getattr(config, "image_token_index", None)
        return (ids == token).sum(1).tolist() if token is not None else [0] * int(ids.shape[0])

    def prefill_flops(self, inputs: Any) -> float | None:
        """Analytic FLOPs of one prefill over `inputs` (models/flops.py: vision tower, every decoder
        layer over the real tokens of each row, `PROJECTED_HEAD_ROWS` LM-head rows) for a family
        that declares `flop_count`; None ("not counted") for the others."""
        if not self.capabilities.flop_count:
            return None

        return float(flops_from_batch(self.model.config, inputs["attention_mask"].sum(1), inputs.get("image_grid_thw"),
                                      lm_head_rows=PROJECTED_HEAD_ROWS)["total"])

    # ---- inputs -------------------------------------------------------------------------------
    def prompt_text(self, request: ModelRequest) -> str:
        """The rendered prompt: chat template, generation prompt, then the answer prefix or, for a
        thinking request, the opened thinking block."""
        return self._render(request.messages) + self._after_generation_prompt(request)

    def _render(self, messages: Sequence[Any], **template_options: Any) -> str:
        return self.processor.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                                  add_generation_prompt=True, **template_options)

    def _after_generation_prompt(self, request: ModelRequest) -> str:
        if not request.thinking:
            return request.answer_prefix
        return "" if self.template_opens_thinking() else self.capabilities.thinking_tags[0] + "\n"

    def prepare(self, requests: Sequence[ModelRequest]) -> ModelInputs:
        """Processor output for a batch, on the CPU, left-padded; a prompt the runner has rendered
        already (`ModelRequest.text`) is not rendered again."""
        texts = [r.text or self.prompt_text(r) for r in requests]
        images = [image for r in requests for image in r.images]
        inputs = self.processor(text=texts, images=images or None, return_tensors="pt", padding=True)
        return ModelInputs(self.pixels_in_model_dtype(inputs), token_keys=self.token_keys, texts=texts)

    def pixels_in_model_dtype(self, inputs: Any) -> Any:
        """fp32 `pixel_values` cast to the model's dtype here, in the worker thread: every tower
        casts them on arrival anyway (the same rounding), and bf16 halves the bytes pinned and
        copied to the device (~1.2 GB per batch of 64 charts in fp32)."""
        pixels = inputs.get("pixel_values")
        if torch.is_tensor(pixels) and pixels.is_floating_point() and self.dtype.itemsize < pixels.dtype.itemsize:
            inputs["pixel_values"] = pixels.to(self.dtype)
        return inputs

    def to_device(self, inputs: ModelInputs) -> ModelInputs:
        # the runner pins in its worker threads already (`ModelInputs.pin`)
        return inputs.to(self.device)

    # ---- compute ------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, inputs: Any) -> tuple[torch.Tensor, DecodeState]:
        """One forward over the whole prompt through the base model (no LM head): the hidden
        state at the last real position of every row, and a KV cache for decode steps. Masked
        over the left-padded rows, or (`causal_prefill`) mask-free over right-aligned rows."""
        if self.fast.causal_prefill:
            return self._causal_prefill(inputs)
        outputs = self.model.model(**self.model_inputs(inputs), use_cache=True)
        state = DecodeState(cache=cache_of(outputs), attention_mask=inputs["attention_mask"],
                            extras=self.decode_extras())
        return outputs.last_hidden_state[:, -1, :], state

    def _causal_prefill(self, inputs: Any) -> tuple[torch.Tensor, DecodeState]:
        """Rows right-aligned (real tokens first, models/fast_paths.py), `attention_mask=None` so the
        causal kernel runs; positions of the real tokens from `prefill_positions`."""
        mask = inputs["attention_mask"]
        order = right_aligned(mask)
        positions, next_position = self.prefill_positions(inputs, order)
        aligned = {key: value.gather(1, order) if torch.is_tensor(value) and value.shape == mask.shape else value
                   for key, value in self.model_inputs(inputs).items()}  # token-aligned tensors move with the tokens
        aligned_mask = aligned.pop("attention_mask")
        if positions is not None:
            aligned["position_ids"] = positions
        outputs = self.model.model(**aligned, attention_mask=None, use_cache=True)
        state = DecodeState(cache=cache_of(outputs), attention_mask=aligned_mask, extras=self.decode_extras(),
                            next_position=next_position)
        return last_real(outputs.last_hidden_state, mask.sum(-1)), state

    def prefill_positions(self, inputs: Any, order: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """For the mask-free prefill: position ids of the right-aligned tokens (None: the model's own
        0..T-1, which number each row's real tokens from 0) and the position of the first fed
        token [B, 1]."""
        return None, inputs["attention_mask"].sum(-1, keepdim=True)

    def model_inputs(self, inputs: Any, vision_indices: bool = True) -> dict[str, Any]:
        """The prepared inputs transformers takes (finbench's own keys left out; `vision_indices`
        False also leaves out the tower's precomputed indices, which `generate` does not need)."""
        return {k: v for k, v in inputs.items() if not k.startswith(FINBENCH_KEYS)
                and (vision_indices or k not in self.vision_index_keys)}

    def decode_extras(self) -> dict[str, Any]:
        return {}

    def decode_position_ids(self, state: DecodeState) -> torch.Tensor:
        """Position ids of the token being fed, in the shape the model takes."""
        return self.model_positions(self.fed_position(state))

    def fed_position(self, state: DecodeState) -> torch.Tensor:
        """Text position [B, 1] of the token being fed (`state.attention_mask` includes it). After a
        mask-free prefill the state carries it. A masked forward numbers the prefill 0..T-1
        including left pads (rotary attention only sees differences, so the pads' offset is
        harmless), so the fed token continues that numbering: the mask length so far, minus one."""
        if state.next_position is not None:
            return state.next_position
        batch, length = state.attention_mask.shape
        return torch.full((batch, 1), length - 1, device=state.attention_mask.device)

    def model_positions(self, position: torch.Tensor) -> torch.Tensor:
        """Text positions [B, 1] → the position ids the model takes (M-RoPE families: [3, B, 1])."""
        return position

    @torch.inference_mode()
    def decode_step(self, state: DecodeState, token_ids: torch.Tensor) -> torch.Tensor:
        """Feed one token per row; returns the new last hidden state [B, H]."""
        if self.fast.static_decode and state.static is None:
            state.static = self._static_decoder(state)
        with decode_attention(self.device):
            if state.static:
                return state.static.step(token_ids.to(self.device))
            ones = torch.ones_like(state.attention_mask[:, :1])
            state.attention_mask = torch.cat([state.attention_mask, ones], dim=1)
            outputs = self.model.model(
                input_ids=token_ids[:, None].to(self.device),
                attention_mask=state.attention_mask,
                position_ids=self.decode_position_ids(state),
                use_cache=True,
                **{self._cache_kw: state.cache},
            )
        if state.next_position is not None:
            state.next_position = state.next_position + 1
        state.cache = cache_of(outputs)
        return outputs.last_hidden_state[:, -1, :]

    def _static_decoder(self, state: DecodeState) -> Any:
        """The batch's static decoder, or False (then the dynamic cache goes on) when the language
        model has other than full-attention layers or the cache is not a per-layer KV cache."""
        config = getattr(self._language_model(), "config", None)
        layers = getattr(state.cache, "layers", None)
        if (config is None or any(t != "full_attention" for t in getattr(config, "layer_types", None) or ())
                or not layers or any(getattr(layer, "keys", None) is None for layer in layers)):
            return False
        kv = static_decode.StaticKV.from_cache(state.cache, state.attention_mask)
        fed = DecodeState(cache=None, attention_mask=torch.cat([state.attention_mask,
                                                               torch.ones_like(state.attention_mask[:, :1])], 1),
                          extras=state.extras, next_position=state.next_position)
        state.cache = None  # the buffer holds the keys and values now
        static_decode.register()

        def forward(ids: torch.Tensor, cache: static_decode.StaticKV, position: torch.Tensor) -> torch.Tensor:
            with static_decode.attention_as(config, static_decode.NAME):
                outputs = self.model.model(input_ids=ids, attention_mask=cache.attention_mask, position_ids=position,
                                           use_cache=True, **{self._cache_kw: cache})
            return outputs.last_hidden_state[:, -1, :]

        return static_decode.StaticDecoder(forward, kv, self.decode_position_ids(fed), self.graphs)

    def _language_model(self) -> Any:
        """The transformers decoder stack (`model.model.language_model`), None where there is none."""
        return getattr(getattr(self.model, "model", None), "language_model", None)

    @torch.inference_mode()
    def output_rows(self, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """LM-head rows [R, H] of the given tokens: a gather, not a projection."""
        head = self.model.get_output_embeddings()
        index = torch.as_tensor(token_ids, device=head.weight.device, dtype=torch.long)
        return head.weight.index_select(0, index)

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Logits [B, R] (float32) of `output_rows` rows: the last hidden states projected onto them."""
        return project_rows(hidden, rows)

    def vocabulary_size(self) -> int:  # rows of the LM head: what greedy decoding argmaxes over
        return int(self.model.get_output_embeddings().weight.shape[0])

    @torch.inference_mode()
    def score_options(self, inputs: Any, option_token_ids: torch.Tensor) -> torch.Tensor:
        """log P(option) [B, K] from one prefill. `option_token_ids` [S, K]: S spellings of each
        of K options (e.g. "A" and " A"), combined with logsumexp."""
        hidden, _ = self.prefill(inputs)
        spellings, n_options = option_token_ids.shape
        logits = self.logits(hidden, self.output_rows(option_token_ids.reshape(-1)))
        scores = combine_spellings(logits, spellings)
        allowed = torch.ones_like(scores, dtype=torch.bool)
        return masked_log_softmax(scores, allowed)

    @torch.inference_mode()
    def generate(self, inputs: Any, max_new_tokens: int,
                 sampling: dict[str, Any] | None = None) -> tuple[list[str], list[int]]:
        """Free generation, batched with left padding (models/generation.py `hf_generate`): greedy
        unless `sampling` gives a temperature > 0. Returns texts and per-row generated token counts."""
        return hf_generate(self, inputs, max_new_tokens, sampling)

    def _interrupted(self, ids: torch.Tensor | None, prompt_length: int, stops: Sequence[int]) -> GenerationInterrupted:
        """Ctrl-C in `generate`: the rows that had emitted a stop token by the last step, decoded."""
        return interrupted(self.decode, ids, prompt_length, stops)

    @torch.inference_mode()
    def generate_ids(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int]) -> torch.Tensor:
        """Greedy token ids [B, ≤ max_new_tokens] after the prompt; a row stops at any of
        `stop_token_ids` (later positions hold the pad token)."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else stop_token_ids[0]
        with decode_attention(self.device):
            output = self.model.generate(**self.model_inputs(inputs, vision_indices=False),
                                         max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                         top_p=None, top_k=None, eos_token_id=list(stop_token_ids), pad_token_id=pad)
        return output[:, inputs["input_ids"].shape[1]:]

    # ---- thinking -----------------------------------------------------------------------------
    # A family whose checkpoints can reason in a tagged block before answering declares it in its
    # capabilities; the runner (runner/thinking.py) generates inside the block, closes it, answers.
    def thinking_token_ids(self) -> tuple[int, int] | None:
        """Ids of the open and close tags when this checkpoint can think (the family supports it
        and both tags are single tokens), else None."""
        if not self.capabilities.thinking:
            return None
        ids = [self.tokenizer.encode(tag, add_special_tokens=False) for tag in self.capabilities.thinking_tags]
        return (ids[0][0], ids[1][0]) if all(len(i) == 1 for i in ids) else None

    def template_opens_thinking(self) -> bool:
        """Whether the chat template's generation prompt opens the thinking block itself (thinking
        checkpoints): then every prompt ends inside the block, whatever the request asks."""
        if not self.capabilities.thinking:
            return False
        probe = self._render([{"role": "user", "content": [{"type": "text", "text": "x"}]}])
        return probe.rstrip().endswith(self.capabilities.thinking_tags[0])

    # ---- compilation --------------------------------------------------------------------------
    def compile_vision(self) -> dict[str, int]:
        """`--compile-vision`: torch.compile the vision tower's repeated blocks in place
        (models/compile.py); idempotent. Returns {block class: count}, {} when there are none."""
        if not self.compiled_blocks:
            self.compiled_blocks = compile_vision_blocks(self.model)
        return self.compiled_blocks

    def compile_language_model(self) -> dict[str, int]:
        """`--compile-lm`: torch.compile the language model's RMSNorm, MLP and rotary modules in place
        (models/compile.py); idempotent. {} when the adapter has no transformers language model."""
        language_model = self._language_model()
        if not self.compiled_language_model and language_model is not None:
            self.compiled_language_model = compile_language_model(language_model)
        return self.compiled_language_model

    # ---- bookkeeping --------------------------------------------------------------------------
    def memory_footprint(self) -> int | None:  # bytes of the weights and buffers (quantized: what they store)
        if self.quant != "none":
            return storage_bytes(self.model)
        return int(self.model.get_memory_footprint())

    def timed_parts(self, clock: PartClock) -> ContextManager[Any]:
        """Forward hooks timing the vision tower and language model into `clock` (runner/timing.py)."""
        base = getattr(self.model, "model", None)
        parts = [("vision", getattr(base, "visual", None)), ("language_model", getattr(base, "language_model", None))]
        return clock.hooks([(name, module) for name, module in parts if isinstance(module, torch.nn.Module)])

    # ---- identity -----------------------------------------------------------------------------
    def processor_settings(self) -> dict[str, Any]:
        image_processor = getattr(self.processor, "image_processor", None)
        settings = image_processor.to_dict() if image_processor is not None else {}
        return {k: v for k, v in settings.items() if isinstance(v, (int, float, str, bool, list, dict, type(None)))}

    def use_chat_template(self, template: str) -> None:  # --chat-template FILE
        self.processor.chat_template = template
        self.tokenizer.chat_template = template

    def max_context(self) -> int | None:
        """The language model's context length in tokens (None when the config does not say)."""
        config = self.model.config
        text_config = getattr(config, "text_config", None) or getattr(config, "llm_config", None) or config
        value = getattr(text_config, "max_position_embeddings", None) or getattr(config, "max_position_embeddings", None)
        return int(value) if value else None

    def checkpoint_folder(self) -> Path:  # for the content digest (a hub id has none: its revision counts)
        return Path(self.source)

    def fingerprint(self, file_digest: Callable[[Path], str] | None = None) -> dict[str, Any]:
        return fingerprint_of(self, file_digest)  # models/identity.py
