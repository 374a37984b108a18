"""The generic family (`--family auto`): any vision-language checkpoint transformers loads with
`AutoModelForImageTextToText` + `AutoProcessor`, chosen for every `model_type` no specific family
claims (models/families.py `family_for`).

What differs from the specific families' adapter (models/base.py):
- compute goes through the model's own generation code, not its decoder stack: the prefill and
  every decode step are `model.prepare_inputs_for_generation` then `model(..., logits_to_keep=1)`
  (the last position's logits only), with the position ids `generate` would build
  (`_prepare_position_ids_for_generation`, continued one per step as `generate` continues them).
  So whatever an architecture does between its decoder and its logits (Gemma's final logit
  soft-cap, a scaled or biased head) and however it numbers positions (GLM-4.6V's 4-row M-RoPE
  ids) is the model's own code. `prefill` and `decode_step` return those logits [B, V];
  `output_rows` returns token ids and `logits` gathers them: the constrained decoders, the set
  and number grammars and the thinking loop run unchanged on top;
- no fast paths (mask-free prefill, static or graphed decode steps, padded widths): none is
  proven for an architecture nobody wrote an adapter for; no FLOP count, no device preprocessing,
  no pixel budget (each processor sets its own);
- image tokens are measured, not computed: the processor expands one blank image of each size
  once (`image_token_count`);
- thinking where the checkpoint's template has a switch (`enable_thinking`) and the tokenizer a
  known tag pair (`<think>` … `</think>`; Gemma 4's `<|channel>thought` … `<channel|>`); otherwise
  `--think-budget` is refused at start-up (`thinking_of`);
- an architecture the installed transformers lacks is refused at start-up with the release that
  added it (`architecture_refusal`).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from finbench.core.types import ModelRequest
from finbench.models.base import DecodeState, HFVisionLanguageModel
from finbench.models.compaction import greedy_ids
from finbench.models.contract import Capabilities, GenerationInterrupted
from finbench.models.generation import generated_counts
from finbench.models.inputs import ModelInputs

THINKING_SWITCH = "enable_thinking"  # the chat-template variable every thinking template here reads
# (open tag, close tag) of the thinking blocks the released templates use; the close tag must be
# one token of the checkpoint's tokenizer, the open tag's first token opens the block
THINKING_TAGS = (("<think>", "</think>"), ("<|channel>thought", "<channel|>"))
# the first transformers release with each architecture (release notes; projects pinning it for the model)
INTRODUCED = {"llava_onevision": "4.45.0", "mistral3": "4.50.0", "smolvlm": "4.50.0", "llama4": "4.51.0",
              "internvl": "4.52.0", "glm4v": "4.54.0", "glm46v": "5.0.0", "gemma3n": "4.53.0",
              "minicpmv4_6": "5.7.0", "gemma4": "5.5.0"}
# the architectures the generic family is tested on (tests/test_auto_family.py, on tiny builds of
# each: offline/tiny_auto.py), and whether the released template can think (enable_thinking)
TESTED_ON = {"gemma4": True, "glm46v": True, "internvl": False, "minicpmv4_6": True, "llama4": False,
             "mistral3": False, "smolvlm": False, "llava_onevision": False, "qwen2_5_vl": False}
TOKEN_TYPE_KEYS = ("token_type_ids", "mm_token_type_ids")  # a decode step feeds text: type 0


def architecture_refusal(model_type: str) -> str | None:
    """One line when the installed transformers cannot load `model_type` through the Auto classes
    (too old for it, or not an image-text-to-text architecture); None when it can."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    installed = transformers.__version__
    if model_type not in CONFIG_MAPPING_NAMES:
        needed = INTRODUCED.get(model_type)
        return (f"model_type {model_type!r} needs transformers >= {needed} (installed {installed})" if needed else
                f"model_type {model_type!r} is unknown to transformers {installed} (a newer release may have it)")
    if model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return (f"model_type {model_type!r} is not an image-text-to-text model in transformers {installed} "
                "(AutoModelForImageTextToText cannot load it)")
    return None


def thinking_of(template: str | None, is_token: Callable[[str], bool]) -> tuple[str, str] | None:
    """The thinking tags of a chat template that takes the thinking switch and whose close tag the
    tokenizer knows as one token (`is_token`); None: no thinking."""
    if not template or THINKING_SWITCH not in template:
        return None
    return next(((open_tag, close) for open_tag, close in THINKING_TAGS if is_token(close)), None)


def _checkpoint_file(source: str, name: str) -> Path | None:
    """A file of a local folder, or of a hub id in the local Hugging Face cache (never a download)."""
    if Path(source).is_dir():
        return Path(source) / name if (Path(source) / name).is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, name)
    except Exception:  # a malformed id: the loader reports it
        return None
    return Path(cached) if isinstance(cached, str) else None


def _checkpoint_texts(source: str) -> tuple[str, set[str]]:
    """A checkpoint's chat template(s) and its tokenizer's added tokens, from its files alone
    (start-up reads no weights and builds no tokenizer)."""
    template, tokens = "", set()
    for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json", "processor_config.json",
                 "tokenizer.json"):
        path = _checkpoint_file(source, name)
        if path is None:
            continue
        if name.endswith(".jinja"):
            template += path.read_text(encoding="utf-8")
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("chat_template"), str):
            template += data["chat_template"]
        tokens |= {t.get("content") for t in data.get("added_tokens", []) if isinstance(t, dict)}
        tokens |= {t.get("content") for t in (data.get("added_tokens_decoder") or {}).values() if isinstance(t, dict)}
    return template, tokens


def _repair(model: Any) -> None:
    """Llama 4 (transformers 5.24): `Llama4ForConditionalGeneration.forward` builds its output from
    `language_model(...).image_outputs`, a field the language model's output record lacks, so every
    forward raises. This model's language model (this instance only) gets its outputs that field,
    empty; a release whose record has it is left alone."""
    language_model = getattr(model, "language_model", None)
    if model.config.model_type != "llama4" or language_model is None:
        return
    forward = language_model.forward

    def with_image_outputs(*args: Any, **kwargs: Any) -> Any:
        outputs = forward(*args, **kwargs)
        if not hasattr(outputs, "image_outputs"):
            object.__setattr__(outputs, "image_outputs", None)
        return outputs

    language_model.forward = with_image_outputs


class AutoVLM(HFVisionLanguageModel):
    family = "auto"
    model_types: tuple[str, ...] = ()  # claims whatever no specific family claims (family_for)
    tested_on = TESTED_ON
    # released checkpoints of architectures it is tested on that no specific family claims
    checkpoints = ("google/gemma-4-E4B-it", "zai-org/GLM-4.6V", "meta-llama/Llama-4-Scout-17B-16E-Instruct",
                   "mistralai/Mistral-Small-3.1-24B-Instruct-2503", "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
                   "llava-hf/llava-onevision-qwen2-7b-ov-hf", "openbmb/MiniCPM-V-4.6")
    capabilities = Capabilities()  # thinking per checkpoint (capabilities_for); quantization as the others
    supports: frozenset[str] = frozenset()  # no fast path (module docstring)

    @classmethod
    def capabilities_for(cls, model_type: str, source: str | None = None) -> Capabilities:
        """Thinking where the checkpoint's template and tokenizer have it (read from its files)."""
        if source is None:
            return cls.capabilities
        template, tokens = _checkpoint_texts(source)
        tags = thinking_of(template, tokens.__contains__)
        return replace(cls.capabilities, thinking=True, thinking_tags=tags) if tags else cls.capabilities

    def __init__(self, model: Any, processor: Any, source: str, **kwargs: Any) -> None:
        super().__init__(model, processor, source, **kwargs)
        _repair(self.model)
        self._image_tokens: dict[tuple[int, int], int] = {}  # measured once per image size
        self._use_template_capabilities()

    def _use_template_capabilities(self) -> None:
        template = getattr(self.processor, "chat_template", None) or self.tokenizer.chat_template
        template = template if isinstance(template, str) else json.dumps(template)
        tags = thinking_of(template, lambda tag: len(self.tokenizer.encode(tag, add_special_tokens=False)) == 1)
        self.capabilities = replace(type(self).capabilities, thinking=tags is not None,
                                    **({"thinking_tags": tags} if tags else {}))

    def use_chat_template(self, template: str) -> None:
        super().use_chat_template(template)
        self._use_template_capabilities()

    @cached_property
    def _cache_kw(self) -> str:
        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    # ---- prompts ------------------------------------------------------------------------------
    def prompt_text(self, request: ModelRequest) -> str:
        # the template's own switch, so a thinking request's system turn says what the model was
        # trained to see (Gemma 4's <|think|>), and an instruct request's says thinking is off
        switch = {THINKING_SWITCH: bool(request.thinking)} if self.capabilities.thinking else {}
        return self._render(request.messages, **switch) + self._after_generation_prompt(request)

    def thinking_token_ids(self) -> tuple[int, int] | None:
        """The open tag's first token (Gemma 4's `<|channel>` of `<|channel>thought`) and the close tag."""
        if not self.capabilities.thinking:
            return None
        open_tag, close_tag = (self.tokenizer.encode(tag, add_special_tokens=False)
                               for tag in self.capabilities.thinking_tags)
        return (open_tag[0], close_tag[0]) if open_tag and len(close_tag) == 1 else None

    def template_opens_thinking(self) -> bool:
        return False  # the switch asks the model to open the block; the adapter opens it for a thinking request

    # ---- inputs -------------------------------------------------------------------------------
    def prepare(self, requests: Sequence[ModelRequest]) -> ModelInputs:
        """The processor's batch, left-padded; images passed per row (processors that batch images by
        row, SmolVLM's and Llama 4's, need the nesting; the others flatten it). Tensors with one entry
        per image are cut by row (`spans`), those with one per row are row keys."""
        texts = [r.text or self.prompt_text(r) for r in requests]
        per_row = [len(r.images) for r in requests]
        images = [list(r.images) for r in requests] if any(per_row) else None
        inputs = self.processor(text=texts, images=images, return_tensors="pt", padding=True)
        for key, value in inputs.items():  # pixels in the model's dtype, either way (Llama 4's processor gives bf16)
            if torch.is_tensor(value) and value.is_floating_point():
                inputs[key] = value.to(self.dtype)
        batch, n_images = len(requests), sum(per_row)
        shaped = {k: v for k, v in inputs.items() if torch.is_tensor(v) and v.dim() and k not in self.token_keys
                  and k not in ("input_ids", "attention_mask")}
        spans = {k: per_row for k, v in shaped.items() if n_images and v.shape[0] == n_images and n_images != batch}
        rows = [k for k, v in shaped.items() if v.shape[0] == batch and k not in spans]
        return ModelInputs(inputs, token_keys=self.token_keys, row_keys=rows, spans=spans, texts=texts)

    def image_token_count(self, width: int, height: int) -> int:
        """Tokens one image of this size adds to a prompt, measured with the processor once per size."""
        key = (int(width), int(height))
        if key not in self._image_tokens:
            from PIL import Image

            with_image = self._render([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}])
            without = self._render([{"role": "user", "content": [{"type": "text", "text": "x"}]}])
            ids = self.processor(text=[with_image], images=[[Image.new("RGB", key)]], return_tensors="pt")["input_ids"]
            text_only = self.tokenizer(without, add_special_tokens=False)["input_ids"]
            self._image_tokens[key] = int(ids.shape[1]) - len(text_only)
        return self._image_tokens[key]

    # ---- compute: the model's own generation step, the last position's logits -------------------
    def _positions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, extra: dict[str, Any]) -> Any:
        """The position ids `generate` builds for this prompt (None where the model numbers its own)."""
        build = getattr(self.model, "_prepare_position_ids_for_generation", None)
        if build is None or "position_ids" not in inspect.signature(self.model.forward).parameters:
            return None
        return build(input_ids, {**extra, "input_ids": input_ids, "attention_mask": attention_mask})

    def _step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, first: bool,
              **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """One forward as `generate` makes it: last-position logits [B, V] and the cache."""
        from transformers.cache_utils import Cache

        prepared = self.model.prepare_inputs_for_generation(input_ids, attention_mask=attention_mask, use_cache=True,
                                                            is_first_iteration=first, **kwargs)
        outputs = self.model(**prepared, logits_to_keep=1, return_dict=False)
        return outputs[0][:, -1, :], next((o for o in outputs[1:] if isinstance(o, Cache)), None)

    @torch.inference_mode()
    def prefill(self, inputs: Any) -> tuple[torch.Tensor, DecodeState]:
        """The prompt's forward: the last position's logits [B, V] and the state a decode step continues."""
        extra = self.model_inputs(inputs)
        input_ids, mask = extra.pop("input_ids"), extra.pop("attention_mask")
        positions = self._positions(input_ids, mask, extra)
        logits, cache = self._step(input_ids, mask, True, **extra,
                                   **({} if positions is None else {"position_ids": positions}))
        extras: dict[str, Any] = {"token_types": tuple(k for k in TOKEN_TYPE_KEYS if k in extra)}
        if positions is not None:  # batch first, so that dropping rows (DecodeState.select) cuts it
            extras["position"] = positions[..., -1:].movedim(-2, 0)
        return logits, DecodeState(cache=cache, attention_mask=mask, extras=extras)

    @torch.inference_mode()
    def decode_step(self, state: DecodeState, token_ids: torch.Tensor) -> torch.Tensor:
        """Feed one token per row as `generate` would; returns the new last-position logits [B, V]."""
        ids = token_ids[:, None].to(self.device)
        state.attention_mask = torch.cat([state.attention_mask, torch.ones_like(state.attention_mask[:, :1])], dim=1)
        kwargs: dict[str, Any] = {key: torch.zeros_like(ids) for key in state.extras["token_types"]}
        if "position" in state.extras:
            state.extras["position"] = state.extras["position"] + 1
            kwargs["position_ids"] = state.extras["position"].movedim(0, -2)
        logits, state.cache = self._step(ids, state.attention_mask, False, **{self._cache_kw: state.cache}, **kwargs)
        return logits

    @torch.inference_mode()
    def generate(self, inputs: Any, max_new_tokens: int,
                 sampling: dict[str, Any] | None = None) -> tuple[list[str], list[int]]:
        """Free generation through the decoding loop (greedy, or sampled with a temperature > 0).
        Ctrl-C keeps no row: the loop holds its tokens until it returns."""
        stops = sorted(set(self.stop_token_ids()) | ({self.pad_token_id} if self.pad_token_id is not None else set()))
        sample = dict(sampling or {}) if float((sampling or {}).get("temperature") or 0) > 0 else None
        try:
            new_tokens = greedy_ids(self, inputs, max_new_tokens, stops, sampling=sample)
        except KeyboardInterrupt:
            raise GenerationInterrupted({}, {}) from None
        return self.decode(new_tokens), generated_counts(new_tokens, stops)

    def generate_ids(self, inputs: Any, max_new_tokens: int, stop_token_ids: Sequence[int]) -> torch.Tensor:
        return greedy_ids(self, inputs, max_new_tokens, stop_token_ids)

    @torch.inference_mode()
    def output_rows(self, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """The token ids themselves: `prefill` returns logits, so `logits` gathers columns."""
        return torch.as_tensor(token_ids, device=self.device, dtype=torch.long)

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return hidden.index_select(-1, rows.to(hidden.device)).float()

    def vocabulary_size(self) -> int:
        return int(self.model.config.get_text_config().vocab_size)

    # ---- bookkeeping --------------------------------------------------------------------------
    def timed_parts(self, clock: Any) -> Any:
        base = getattr(self.model, "model", None)
        vision = next((getattr(base, name) for name in ("visual", "vision_tower", "vision_model", "vpm")
                       if isinstance(getattr(base, name, None), torch.nn.Module)), None)
        parts = [("vision", vision), ("language_model", getattr(base, "language_model", None))]
        return clock.hooks([(name, module) for name, module in parts if isinstance(module, torch.nn.Module)])
