"""Thinking never breaks the answer step (issue 49, item 6): a reasoning that emits the model's image
token — a Gemma 4 with `--think-budget` does, on ~8 % of items — goes into the answer prompt as its
generated ids without that token (nor any other special token), so the answer step has exactly
the image tokens of its images. Tested on every tiny family: the reasoning is scripted to hold the
family's image token (the processor's, or the config's), and the real answer step runs after it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers import finmme_request

from finbench.offline.tiny import TINY_FAMILIES, tiny_family_available
from finbench.runner.decoding import AnswerVocabulary, decode_single
from finbench.runner.thinking import think

FAMILIES = [f for f in TINY_FAMILIES if tiny_family_available(f)]


def _image_token_id(model) -> int:
    """The family's image token, read from its processor (or its config): independent of finbench's
    own list of reserved ids."""
    token = getattr(model.processor, "image_token", None)
    if isinstance(token, str) and token:
        return int(model.tokenizer.convert_tokens_to_ids(token))
    config = model.model.config
    found = getattr(config, "image_token_id", None) or getattr(config, "image_token_index", None)
    assert isinstance(found, int), "no image token found for this family"
    return found


class _Reasoning:
    """The model with a thinking block (its own where it has one, else a plain close tag) whose
    reasoning is scripted: `generate_ids` returns `rows` for the batch."""

    def __init__(self, inner, rows):
        self.inner, self.rows = inner, rows
        own = inner.thinking_token_ids()
        word = inner.encode(" ok")
        self.close = own[1] if own else word[-1]
        self.capabilities = inner.capabilities if own else replace(inner.capabilities, thinking=True,
                                                                   thinking_tags=("", inner.decode([[self.close]])[0]))

    def thinking_token_ids(self):
        return (self.close, self.close)

    def generate_ids(self, inputs, max_new_tokens, stop_token_ids):
        return torch.tensor(self.rows, dtype=inputs["input_ids"].dtype, device=inputs["input_ids"].device)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def question(questions):
    return next(q for q in questions if q.kind == "single")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_reasoning_holding_the_image_token_leaves_the_answer_step_whole(family, question, tmp_path_factory):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.offline.tiny import make_tiny

    path = make_tiny(family, tmp_path_factory.mktemp(family.replace(".", "")) / "model", weights_dtype="float32")
    model = load_model(str(path), LoadSpec(dtype="float32", device="cpu"))
    image = _image_token_id(model)
    request = finmme_request(question)
    inputs = model.to_device(model.prepare([replace(request, answer_prefix="")]))
    prompt_images = int((inputs["input_ids"] == image).sum())
    word = model.encode(" the")[0]
    scripted = _Reasoning(model, [[word, image, word, image, word]])  # cut at the budget: every id kept but these
    rebuilt, reasoning = think(scripted, inputs, 5, ["Answer:"], compact_every=0)
    real = rebuilt["input_ids"][0][rebuilt["attention_mask"][0].bool()]
    assert int((real == image).sum()) == prompt_images  # the reasoning added no image token
    assert real.tolist().count(word) >= inputs["input_ids"][0].tolist().count(word) + 3  # the rest of it is there
    assert reasoning[0].tokens == 5
    decoded = decode_single(model, rebuilt, torch.tensor([len(question.options)]), AnswerVocabulary.for_model(model))
    assert decoded[0].answer in "ABCDEFGHIJKLMN"[:len(question.options)] and not decoded[0].error
    assert model.tokenizer.convert_ids_to_tokens(image) not in reasoning[0].text
