"""The `--judge` model: any local chat model that judges open answers. A vision-language checkpoint
of any supported family (DeepSeek-VL2 included) is loaded through its family adapter
(`load_model`) and is shown the images the benchmark's judge requests name; a text-only causal LM
through `TextChatModel`, which offers the part of the model contract the judge uses (`prepare`,
`to_device`, `generate`, `fingerprint`) and declares that it sees no images."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from finbench.models.contract import Capabilities
from finbench.types import ModelRequest


def check_judge_source(source: str | None) -> None:
    """A --judge that is neither a folder nor a hub id is one line, before any model loads: a path
    (absolute, ./…, ~/…, or with more than one '/') that does not exist is not taken for a hub id."""
    if not source or Path(source).expanduser().exists():
        return
    if source.startswith(("/", ".", "~")) or source.count("/") != 1:
        raise ValueError(f"--judge {source}: no such model folder (a hub id is written owner/name)")


def load_judge(source: str, dtype: str = "auto", device: str = "auto", model: Any = None) -> Any:
    """The judge model, or a ValueError with one line. `model` is reused when it is the same checkpoint."""
    if model is not None and getattr(model, "source", None) == source:
        return model
    check_judge_source(source)
    from finbench.models import family_of, load_model

    try:  # a vision-language family finbench knows (from config.json's model_type)
        family_of(source)
        is_vision_language = True
    except ValueError:
        is_vision_language = False
    if is_vision_language:
        return load_model(source, dtype=dtype, device=device)
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(source)
    except Exception as err:  # noqa: BLE001 — offline, missing, not a model: one start-up line
        raise ValueError(f"--judge {source}: cannot load its config ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    return TextChatModel.load(source, dtype=dtype, device=device)


class TextChatModel:
    """A text-only causal LM with the same three methods the judge uses from a model adapter:
    `prepare(requests)`, `to_device(inputs)`, `generate(inputs, max_new_tokens)`, `fingerprint()`."""

    capabilities = Capabilities(sees_images=False, quantization=("none",))

    def __init__(self, model: Any, tokenizer: Any, source: str) -> None:
        self.model, self.tokenizer, self.source = model.eval(), tokenizer, source
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = next(model.parameters()).device

    @classmethod
    def load(cls, source: str, dtype: str = "auto", device: str = "auto") -> "TextChatModel":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from finbench.models.base import resolve_device, resolve_dtype

        target = resolve_device(device)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=resolve_dtype(dtype, target)).to(target)
        return cls(model, AutoTokenizer.from_pretrained(source), source)

    def prepare(self, requests: Sequence[ModelRequest]) -> Any:
        texts = [self.tokenizer.apply_chat_template([_text_message(m) for m in r.messages], tokenize=False,
                                                    add_generation_prompt=True) for r in requests]
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    def to_device(self, inputs: Any) -> Any:
        return {k: v.to(self.device) for k, v in inputs.items()}

    def generate(self, inputs: Any, max_new_tokens: int) -> tuple[list[str], list[int]]:
        import torch

        with torch.inference_mode():
            output = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                         pad_token_id=self.tokenizer.pad_token_id)
        new = output[:, inputs["input_ids"].shape[1]:]
        counts = [int((row != self.tokenizer.pad_token_id).sum()) for row in new]
        return self.tokenizer.batch_decode(new, skip_special_tokens=True), counts

    def fingerprint(self) -> dict[str, Any]:
        from finbench.models.base import weights_digest

        return {"source": self.source, "model_type": self.model.config.model_type,
                "weights": weights_digest(self.source), "dtype": str(self.model.dtype)}


def _text_message(message: Any) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return {"role": message["role"], "content": content}
    return {"role": message["role"], "content": "".join(p.get("text", "") for p in content if p.get("type") == "text")}
