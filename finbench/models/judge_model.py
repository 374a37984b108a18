"""The `--judge` model: any local chat model that judges open answers, as a model adapter
(models/contract.py) like any other, answered through the one batch loop (runner/judge_step.py). A
vision-language checkpoint of any supported family (DeepSeek-VL2 included) is loaded through its
family adapter (`load_model`) and is shown the images the benchmark's judge requests name; a
text-only causal LM is a `TextChatModel`: the generic adapter over `AutoTokenizer` +
`AutoModelForCausalLM`, whose capabilities declare that it sees no images (it is shown the text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from finbench.config.specs import LoadSpec
from finbench.core.sources import check_judge_source  # torch-free: start-up checks --judge with it
import finbench.models as models  # by module: a test stands in for its loader
from finbench.models.base import HFVisionLanguageModel
from finbench.models.contract import Capabilities, refusal
from finbench.models.families import read_checkpoint
from finbench.models.identity import weights_digest
from finbench.models.inputs import ModelInputs
from finbench.models.loading import resolve_device, resolve_dtype


def load_judge(source: str, dtype: str = "auto", device: str = "auto", model: Any = None) -> Any:
    """The judge adapter on `device`, or a ValueError with one line. `model` (the run's adapter) is
    reused when it is the same checkpoint."""
    if model is not None and model.source == source:
        return model
    check_judge_source(source)

    try:  # a vision-language family finbench knows (from config.json's model_type, read once)
        checkpoint = read_checkpoint(source)
    except ValueError:
        checkpoint = None
    if checkpoint is not None:  # loaded with no options: only a quantized checkpoint can be refused
        refused = refusal(checkpoint.capabilities, checkpoint.family.family,
                          prequantized=checkpoint.declared.label if checkpoint.declared else None)
        if refused:
            raise ValueError(f"--judge {source}: {refused}")
        return models.load_model(source, LoadSpec(dtype=dtype, device=device), checkpoint=checkpoint)
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(source)
    except Exception as err:  # noqa: BLE001 — offline, missing, not a model: one start-up line
        raise ValueError(f"--judge {source}: cannot load its config ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    return TextChatModel.load(source, dtype=dtype, device=device)


class TextChatModel(HFVisionLanguageModel):
    """A text-only causal LM. Differs from the generic adapter in what it is made of (a tokenizer
    in place of a processor, `AutoModelForCausalLM`) and in taking no images: its chat template
    gets each message's text parts joined, and its capabilities say `sees_images=False`, so the
    judge strips the image parts of its requests and labels its verdicts. No fast path, FLOP
    count, thinking block, pixel budget or on-the-fly quantization is declared."""

    family = "text"
    capabilities = Capabilities(sees_images=False, quantization=("none",), sampling=True, hub_options=False)
    supports: frozenset[str] = frozenset()

    def __init__(self, model: Any, tokenizer: Any, source: str) -> None:
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        super().__init__(model, tokenizer, source, tokenizer=tokenizer)

    @classmethod
    def load(cls, source: str, *, dtype: str = "auto", device: str = "auto", **options: Any) -> "TextChatModel":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        target = resolve_device(device)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=resolve_dtype(dtype, target)).to(target)
        return cls(model, AutoTokenizer.from_pretrained(source), source)

    def _render(self, messages: Sequence[Any], **template_options: Any) -> str:
        return self.tokenizer.apply_chat_template([_text_message(m) for m in messages], tokenize=False,
                                                  add_generation_prompt=True, **template_options)

    def prepare(self, requests: Sequence[Any]) -> ModelInputs:
        """Tokenizer output for a batch, on the CPU, left-padded (a request's images are refused:
        the judge removes them for a model that does not see them)."""
        if any(r.images for r in requests):
            raise ValueError(f"{self.source}: a text-only model is shown no images")
        texts = [self.prompt_text(r) for r in requests]
        return ModelInputs(self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False),
                           token_keys=self.token_keys, texts=texts)

    def image_token_count(self, width: int, height: int) -> int:
        raise ValueError(f"{self.source}: a text-only model takes no images")

    def count_image_tokens(self, inputs: Any) -> int:
        return 0  # it is never given any

    def image_tokens_per_row(self, inputs: Any) -> list[int]:
        return [0] * int(inputs["input_ids"].shape[0])

    def fingerprint(self, file_digest: Callable[[Path], str] | None = None) -> dict[str, Any]:
        # the judge's cache keys since text judges exist: kept, so that cached verdicts stay valid
        return {"source": self.source, "model_type": self.model.config.model_type,
                "weights": weights_digest(self.source, file_digest), "dtype": str(self.model.dtype)}


def _text_message(message: Any) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return {"role": message["role"], "content": content}
    return {"role": message["role"], "content": "".join(p.get("text", "") for p in content if p.get("type") == "text")}
