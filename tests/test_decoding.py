"""Constrained decoders: batch invariance, grammar, cache-step correctness, no full-vocab logits."""

from __future__ import annotations

import math
import re

import pytest
import torch
from helpers import finmme_request

from finbench.runner.decoding import (
    AnswerVocabulary,
    decode_multi,
    decode_numerical,
    decode_single,
)
from finbench.runner.preprocess import decode_images

DECODERS = {
    "single": lambda model, inputs, n, vocab: decode_single(model, inputs, n, vocab),
    "multi": lambda model, inputs, n, vocab: decode_multi(model, inputs, n, vocab),
    "numerical": lambda model, inputs, n, vocab: decode_numerical(model, inputs, 8, vocab),
}


def _prepare(model, questions):
    return model.prepare([finmme_request(q) for q in questions])


def _max_logprob_gap(a, b):
    """Largest |Δ| over finite log-probs; -inf (disallowed) must sit at the same places."""
    gap = 0.0
    rows_a = (a.option_logprobs,) + tuple(a.step_logprobs)
    rows_b = (b.option_logprobs,) + tuple(b.step_logprobs)
    assert len(rows_a) == len(rows_b)
    for row_a, row_b in zip(rows_a, rows_b):
        assert len(row_a) == len(row_b)
        for x, y in zip(row_a, row_b):
            assert math.isinf(x) == math.isinf(y)
            if not math.isinf(x):
                gap = max(gap, abs(x - y))
    return gap


def _step_and_recompute(model, inputs, texts):
    """(hidden after one KV-cached decode step of one token per row, hidden of a full prefill over
    the prompt plus that token): the two must agree."""
    _, state = model.prefill(dict(inputs))
    tokens = torch.tensor(model.single_token_ids(texts))
    stepped = model.decode_step(state, tokens)
    rows = len(texts)
    extended = dict(inputs, input_ids=torch.cat([inputs["input_ids"], tokens[:, None]], 1),
                    attention_mask=torch.cat([inputs["attention_mask"], torch.ones(rows, 1, dtype=torch.long)], 1))
    if "mm_token_type_ids" in inputs:
        types = inputs["mm_token_type_ids"]
        extended["mm_token_type_ids"] = torch.cat([types, torch.zeros(rows, 1, dtype=types.dtype)], 1)
    recomputed, _ = model.prefill(extended)
    return stepped, recomputed


@pytest.mark.parametrize("kind", ["single", "multi", "numerical"])
def test_batch_of_8_equals_one_by_one(tiny_model, questions, kind):
    chosen = [q for q in questions if q.kind == kind][:8]
    sizes = {(len(q.text), __import__("PIL.Image").Image.open(__import__("io").BytesIO(q.images[0])).size) for q in chosen}
    assert len(chosen) == 8 and len(sizes) > 1, "the batch must mix image sizes and prompt lengths"
    vocab = AnswerVocabulary.for_model(tiny_model)
    n_options = torch.tensor([len(q.options) for q in chosen])
    batched = DECODERS[kind](tiny_model, _prepare(tiny_model, chosen), n_options, vocab)
    single = [DECODERS[kind](tiny_model, _prepare(tiny_model, [q]), n_options[i:i + 1], vocab)[0]
              for i, q in enumerate(chosen)]
    assert [p.answer for p in batched] == [p.answer for p in single]
    assert max(_max_logprob_gap(a, b) for a, b in zip(batched, single)) <= 1e-4
    if kind != "numerical":  # a non-degenerate model: answers depend on the question
        assert len({p.answer for p in batched}) > 1


def test_answers_follow_their_grammar(tiny_model, questions):
    vocab = AnswerVocabulary.for_model(tiny_model)
    multi = [q for q in questions if q.kind == "multi"][:8]
    n_options = torch.tensor([len(q.options) for q in multi])
    for question, prediction in zip(multi, decode_multi(tiny_model, _prepare(tiny_model, multi), n_options, vocab)):
        letters = prediction.answer
        assert letters and list(letters) == sorted(set(letters))
        assert all(ord(c) - ord("A") < len(question.options) for c in letters)
        assert len(prediction.option_logprobs) == len(question.options)
        assert math.isclose(sum(math.exp(x) for x in prediction.option_logprobs), 1.0, rel_tol=1e-5)
    numerical = [q for q in questions if q.kind == "numerical"][:8]
    for prediction in decode_numerical(tiny_model, _prepare(tiny_model, numerical), 6, vocab):
        assert re.fullmatch(r"-?\d*(\.\d*)?%?", prediction.answer), prediction.answer
        assert 1 <= prediction.n_generated_tokens <= 6


@pytest.mark.parametrize("with_images", [True, False])
def test_decode_step_matches_a_full_recompute(tiny_model, questions, with_images):
    """A KV-cached decode step (with M-RoPE position deltas and left padding) must give the same
    hidden state as re-running the whole prompt with the token appended — also for a text-only
    batch, where the model keeps stale M-RoPE offsets from the previous batch unless cleared."""
    chosen = [questions[0], questions[5]]
    if with_images:
        inputs = _prepare(tiny_model, chosen)
    else:
        _prepare(tiny_model, chosen[:1])  # leave image offsets behind on the model
        tiny_model.prefill(dict(_prepare(tiny_model, chosen[:1])))
        inputs = tiny_model.prepare([finmme_request(q, []) for q in chosen])
    assert inputs["attention_mask"][:, 0].min() == 0 or inputs["attention_mask"].all()
    _, state = tiny_model.prefill(dict(inputs))
    tokens = torch.tensor(tiny_model.single_token_ids([" B", "7"]))
    stepped = tiny_model.decode_step(state, tokens)
    stepped_again = tiny_model.decode_step(state, torch.tensor(tiny_model.single_token_ids([",", "."])))
    extended = dict(inputs)
    extended["input_ids"] = torch.cat([inputs["input_ids"], tokens[:, None]], 1)
    extended["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones(2, 1, dtype=torch.long)], 1)
    if "mm_token_type_ids" in inputs:
        extended["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros(2, 1, dtype=inputs["mm_token_type_ids"].dtype)], 1)
    recomputed, _ = tiny_model.prefill(extended)
    assert torch.allclose(stepped, recomputed, atol=1e-4)
    assert not torch.allclose(stepped, stepped_again, atol=1e-3)


def test_single_choice_never_materializes_full_vocabulary_logits(tiny_model, questions):
    """Watch every module's output during scoring: no tensor may have a vocabulary-sized last
    dimension, and the LM head module itself is never run (only its option rows are gathered)."""
    vocab_size = tiny_model.model.get_output_embeddings().weight.shape[0]
    seen: list[tuple[str, tuple[int, ...]]] = []

    def record(module, args, output):
        tensors = [output] if torch.is_tensor(output) else [getattr(output, "last_hidden_state", None)]
        for tensor in tensors:
            if torch.is_tensor(tensor):
                seen.append((type(module).__name__, tuple(tensor.shape)))

    handles = [m.register_forward_hook(record) for m in tiny_model.model.modules()]
    try:
        chosen = [q for q in questions if q.kind == "single"][:4]
        vocab = AnswerVocabulary.for_model(tiny_model)
        logprobs = tiny_model.score_options(_prepare(tiny_model, chosen), vocab.letters)
    finally:
        for handle in handles:
            handle.remove()
    head = type(tiny_model.model.get_output_embeddings()).__name__
    assert seen, "hooks saw nothing"
    assert all(shape[-1] != vocab_size for _, shape in seen), [s for s in seen if s[1][-1] == vocab_size]
    assert not any(name == head and shape[-1] == vocab_size for name, shape in seen)
    assert logprobs.shape == (4, 14)


class ScriptedModel:
    """A fake model for the decoders: step t's logits over a 50-token vocabulary are given by a
    script, so the grammar's masking can be checked exactly."""

    def __init__(self, script: list[dict[int, float]]):
        self.script, self.step = script, 0
        self.device = torch.device("cpu")

    def _hidden(self):
        hidden = torch.full((1, 50), -5.0)
        for token, logit in self.script[min(self.step, len(self.script) - 1)].items():
            hidden[0, token] = logit
        return hidden

    def prefill(self, inputs):
        return self._hidden(), None

    def decode_step(self, state, token_ids):
        self.step += 1
        return self._hidden()

    def output_rows(self, token_ids):
        return torch.eye(50)[torch.as_tensor(token_ids)]

    def logits(self, hidden, rows):
        return hidden @ rows.T


SCRIPTED_VOCAB = AnswerVocabulary(letters=torch.stack([torch.arange(14), torch.arange(14) + 14]), separator=28,
                                  ends=(29,), number=torch.arange(30, 44))


def test_multi_decoder_enforces_ascending_letters_and_option_count():
    # step 0 prefers C; step 1 prefers A (not allowed after C) then ','; step 2 prefers B (not
    # allowed) then " E" (beyond 4 options: not allowed) then D; step 3 prefers ',' but nothing
    # can follow D, so it must end.
    script = [{2: 3.0}, {0: 5.0, 28: 2.0}, {1: 5.0, 18: 4.0, 3: 1.0}, {28: 5.0, 29: 0.0}]
    prediction = decode_multi(ScriptedModel(script), None, torch.tensor([4]), SCRIPTED_VOCAB)[0]
    assert prediction.answer == "CD"
    assert prediction.n_generated_tokens == 4  # C , D end
    assert len(prediction.step_logprobs) == 4


def test_number_decoder_follows_the_grammar():
    # wants '%' first (illegal), then '-', '4', '.', '.', '5', then end
    digit = lambda d: 30 + d  # noqa: E731
    dot, minus, pct = 40, 41, 42
    script = [{pct: 9.0, minus: 5.0}, {digit(4): 5.0}, {dot: 5.0}, {dot: 9.0, digit(5): 3.0}, {29: 5.0}]
    prediction = decode_numerical(ScriptedModel(script), None, 10, SCRIPTED_VOCAB)[0]
    assert prediction.answer == "-4.5"


def _device_preprocessed_pair(stock_model, questions):
    """Inputs for the same requests from the stock processor and from --device-preprocess,
    checked to agree: every tensor equal, pixels within 1e-6."""
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    device_model = load_model(stock_model.source, LoadSpec(dtype="float32", device="cpu", device_preprocess=True))
    requests = [finmme_request(q) for q in questions]
    stock = stock_model.to_device(stock_model.prepare(requests))
    on_device = device_model.to_device(device_model.prepare(requests))
    assert set(stock) == set(on_device)
    for key in set(stock) - {"pixel_values"}:
        assert torch.equal(stock[key], on_device[key]), key
    assert (stock["pixel_values"] - on_device["pixel_values"]).abs().max() <= 1e-6
    return device_model, stock, on_device


def test_device_preprocessing_matches_the_stock_processor(tiny_model, questions):
    """--device-preprocess: tokenization with image tokens counted from the resize rule, then
    resize/normalise/patchify on the model's device (CPU here): same inputs, same answers."""
    chosen = [q for q in questions if q.kind == "single"][:6]
    device_model, stock, on_device = _device_preprocessed_pair(tiny_model, chosen)
    vocab = AnswerVocabulary.for_model(tiny_model)
    n_options = torch.tensor([len(q.options) for q in chosen])
    assert [p.answer for p in decode_single(tiny_model, stock, n_options, vocab)] == \
           [p.answer for p in decode_single(device_model, on_device, n_options, vocab)]
    assert device_model.fingerprint() != tiny_model.fingerprint()


def test_other_families_are_batch_invariant_and_decode_steps_match_a_recompute(other_family, questions):
    """InternVL: the generic adapter path (plain rotary positions, tiled images). Qwen3-VL: the
    M-RoPE path with another patch size and interleaved rotary sections."""
    from PIL import Image

    model = other_family
    vocab = AnswerVocabulary.for_model(model)
    for kind in ("single", "multi"):
        chosen = [q for q in questions if q.kind == kind][:6]
        n_options = torch.tensor([len(q.options) for q in chosen])
        batched = DECODERS[kind](model, _prepare(model, chosen), n_options, vocab)
        single = [DECODERS[kind](model, _prepare(model, [q]), n_options[i:i + 1], vocab)[0] for i, q in enumerate(chosen)]
        assert [p.answer for p in batched] == [p.answer for p in single]
        assert max(_max_logprob_gap(a, b) for a, b in zip(batched, single)) <= 1e-4
    chosen = [questions[0], questions[5]]
    inputs = _prepare(model, chosen)
    assert not inputs["attention_mask"].all(), "the two prompts must differ in length (left padding)"
    stepped, recomputed = _step_and_recompute(model, inputs, [" B", "7"])
    assert torch.allclose(stepped, recomputed, atol=1e-4)
    image = Image.open(__import__("io").BytesIO(questions[0].images[0]))
    prepared = _prepare(model, [questions[0]])
    assert model.image_token_count(*image.size) == int((prepared["input_ids"] == model.model.config.image_token_id).sum())


def test_qwen3_style_device_preprocessing_matches_its_processor(other_family, questions):
    if not other_family.capabilities.device_preprocessing:
        pytest.skip(f"{other_family.family} declares no device preprocessing")
    _device_preprocessed_pair(other_family, questions[:4])


def _mixed_requests(questions):
    """Single-choice requests with one image, two images (the item's and the next one's) and none,
    interleaved so that every batch mixes them."""
    chosen = [q for q in questions if q.kind == "single"][:4]
    requests, counts = [], []
    for i, question in enumerate(chosen):
        images = decode_images(question)
        n_images = i % 3  # 0, 1, 2, 0
        if n_images == 2:
            images = images + decode_images(chosen[(i + 1) % len(chosen)])
        requests.append(finmme_request(question, images[:n_images]))
        counts.append(n_images)
    return chosen, requests, counts


def _check_mixed_batches(model, questions):
    """A batch mixing image, two-image and text-only rows answers like each row alone (≤ 1e-4),
    and a decode step over such a batch equals a full recompute of the extended prompts."""
    chosen, requests, counts = _mixed_requests(questions)
    assert sorted(set(counts)) == [0, 1, 2]
    vocab = AnswerVocabulary.for_model(model)
    n_options = torch.tensor([len(q.options) for q in chosen])
    batch = model.prepare(requests)
    image_id = model.model.config.image_token_id
    per_row = (batch["input_ids"] == image_id).sum(1).tolist()
    assert [n > 0 for n in per_row] == [c > 0 for c in counts]  # text-only rows have no image tokens
    batched = decode_single(model, batch, n_options, vocab)
    single = [decode_single(model, model.prepare([r]), n_options[i:i + 1], vocab)[0] for i, r in enumerate(requests)]
    assert [p.answer for p in batched] == [p.answer for p in single]
    assert max(_max_logprob_gap(a, b) for a, b in zip(batched, single)) <= 1e-4
    # decode step on a two-image row next to a text-only row (different lengths: left padding)
    pair = model.prepare([requests[2], requests[3]])
    assert not pair["attention_mask"].all()
    stepped, recomputed = _step_and_recompute(model, pair, [" C", "4"])
    assert (stepped - recomputed).abs().max() <= 1e-4
    # broken: the same step fed to the wrong rows (swapped tokens) must not match the recompute
    _, state = model.prefill(dict(pair))
    swapped = model.decode_step(state, torch.tensor(model.single_token_ids([" C", "4"])).flip(0))
    assert (swapped - recomputed).abs().max() > 1e-3


def test_mixed_image_counts_qwen25_vl(tiny_model, questions):
    _check_mixed_batches(tiny_model, questions)


def test_mixed_image_counts_other_families(other_family, questions):
    _check_mixed_batches(other_family, questions)


@pytest.fixture(scope="module")
def qwen3_5(other_family):
    if other_family.family != "qwen3.5":
        pytest.skip("Qwen3.5 only")
    return other_family


def _template(model, request, thinking: bool) -> str:
    """The checkpoint's own chat template, rendered directly (the reference for the adapter)."""
    return model.processor.apply_chat_template([dict(m) for m in request.messages], tokenize=False,
                                               add_generation_prompt=True, enable_thinking=thinking)


def test_qwen3_5_prompts_switch_thinking_through_the_template(qwen3_5, questions):
    """Default (instruct use): the template's closed empty block, then the answer prefix. A thinking
    request (`ModelRequest.thinking`): the template's own open block, once, and no answer prefix.
    Built with thinking=True: every prompt opens the block (the template opens it itself)."""
    from dataclasses import replace

    from finbench.models.qwen3_5 import Qwen35

    request = finmme_request(questions[0])
    assert not qwen3_5.enable_thinking and not request.thinking
    instruct = qwen3_5.prompt_text(request)
    assert instruct == _template(qwen3_5, request, False) + request.answer_prefix
    assert instruct.endswith("<think>\n\n</think>\n\n" + request.answer_prefix)
    assert not qwen3_5.template_opens_thinking() and qwen3_5.thinking_token_ids() is not None
    reasoning = qwen3_5.prompt_text(replace(request, thinking=True))
    assert reasoning == _template(qwen3_5, request, True) and reasoning.endswith("assistant\n<think>\n")
    assert reasoning.count("<think>") == 1
    thinker = Qwen35(qwen3_5.model, qwen3_5.processor, qwen3_5.source, thinking=True)
    assert thinker.template_opens_thinking()
    assert thinker.prompt_text(replace(request, thinking=True)) == reasoning
    assert thinker.fingerprint()["enable_thinking"] and not qwen3_5.fingerprint()["enable_thinking"]
    # an answer prefix that merely looks like the opener is text: thinking is the request's field
    odd = qwen3_5.prompt_text(replace(request, answer_prefix="<think>\n"))
    assert odd == _template(qwen3_5, request, False) + "<think>\n"


def test_qwen3_5_decode_state_carries_the_recurrent_state(qwen3_5, questions):
    """The prefill's cache holds the linear-attention layers' conv and recurrent states beside the
    full-attention KV cache; a decode step that started from a fresh, empty cache instead (what an
    adapter that only carried a KV cache would do) gives a different hidden state."""
    inputs = _prepare(qwen3_5, [questions[1], questions[2]])
    _, state = qwen3_5.prefill(dict(inputs))
    layer_types = qwen3_5.model.config.text_config.layer_types
    assert "linear_attention" in layer_types and "full_attention" in layer_types
    tokens = torch.tensor(qwen3_5.single_token_ids(["A", "B"]))
    carried = qwen3_5.decode_step(state, tokens)
    _, fresh = qwen3_5.prefill(dict(inputs))
    from transformers import DynamicCache

    fresh.cache = DynamicCache(config=qwen3_5.model.config.text_config)
    assert (qwen3_5.decode_step(fresh, tokens) - carried).abs().max() > 1e-3


def _number_next(text: str) -> set[str]:
    """The number grammar restated from its definition ([space] [-] digits [. digits] [%], then
    end): what may follow `text`. 'END' is the end of the answer."""
    digits = set("0123456789")
    body = text.lstrip(" ")
    if body == "":
        return digits | {"-"} | ({" "} if text == "" else set())
    if body == "-":
        return digits
    if body.endswith("%"):
        return {"END"}
    if body.endswith("."):
        return digits
    return digits | {"%", "END"} | (set() if "." in body else {"."})


def number_by_full_forwards(model, inputs, budget: int, vocab) -> tuple[str, list[float]]:
    """The number grammar decoded greedily by full forwards over the whole vocabulary (no cache,
    one question): (the text, each chosen step's log-probability renormalised over what the
    grammar allows there)."""
    symbols = {c: model.single_token_ids([c])[0] for c in "0123456789.-% "}
    ends = torch.tensor(vocab.ends)
    text, chosen = "", []
    for _ in range(budget):
        with torch.no_grad():
            logits = model.model(**inputs).logits[0, -1].double()
        allowed = _number_next(text)
        scores = {c: logits[i] for c, i in symbols.items() if c in allowed}
        if "END" in allowed:
            scores["END"] = torch.logsumexp(logits[ends], 0)
        names = list(scores)
        logprobs = torch.log_softmax(torch.stack([scores[n] for n in names]), 0)
        best = int(logprobs.argmax())
        chosen.append(float(logprobs[best]))
        if names[best] == "END":
            break
        text += names[best]
        new = torch.tensor([[symbols[names[best]]]])
        inputs["input_ids"] = torch.cat([inputs["input_ids"], new], 1)
        inputs["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(new)], 1)
        if "mm_token_type_ids" in inputs:
            inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(new)], 1)
    return text, chosen


def test_numerical_step_logprobs_and_confidence_match_a_full_vocabulary_loop(tiny_model, questions):
    """Each stored step log-prob is the chosen token's log-probability, renormalised over what
    the grammar allows, recomputed here by a greedy loop of full forwards over the whole
    vocabulary (no cache, one question at a time); the confidence is their product."""
    vocab = AnswerVocabulary.for_model(tiny_model)
    numeric = [q for q in questions if q.kind == "numerical"][:2]
    budget = 5
    decoded = decode_numerical(tiny_model, _prepare(tiny_model, numeric), budget, vocab)
    for question, prediction in zip(numeric, decoded):
        text, chosen = number_by_full_forwards(tiny_model, dict(_prepare(tiny_model, [question])), budget, vocab)
        assert prediction.answer == text.strip()
        assert len(prediction.step_logprobs) == 1 and len(prediction.step_logprobs[0]) == len(chosen)
        assert max(abs(a - b) for a, b in zip(prediction.step_logprobs[0], chosen)) <= 1e-4
        assert math.isclose(prediction.confidence, math.exp(sum(chosen)), rel_tol=1e-4)
        assert 0.0 < prediction.confidence <= 1.0


def test_every_decoder_gives_its_answer_a_confidence(tiny_model, questions):
    """single: the chosen option's probability; multi: the product over steps of the chosen
    (greedy = largest) candidate's probability — recomputed from the stored distributions."""
    from finbench.runner.decoding import answer_confidence

    vocab = AnswerVocabulary.for_model(tiny_model)
    for kind in ("single", "multi"):
        chosen = [q for q in questions if q.kind == kind][:4]
        n_options = torch.tensor([len(q.options) for q in chosen])
        for p in DECODERS[kind](tiny_model, _prepare(tiny_model, chosen), n_options, vocab):
            if kind == "single":
                expected = math.exp(p.option_logprobs["ABCDEFGHIJKLMN".index(p.answer)])
            else:
                expected = math.prod(max(math.exp(x) for x in step) for step in p.step_logprobs)
            assert math.isclose(p.confidence, expected, rel_tol=1e-5)
            assert math.isclose(answer_confidence(kind, p.option_logprobs, p.step_logprobs), expected, rel_tol=1e-5)
    # broken: nothing stored → no confidence, never a made-up one
    assert math.isnan(answer_confidence("numerical", (), ()))
    assert math.isnan(answer_confidence("single", (), ()))
