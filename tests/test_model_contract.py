"""The model contract as the runner uses it: the prepared batch (`ModelInputs`) cuts and extends
itself; only the images a prompt shows are decoded; a session's later turn is rendered once and
its images are not decoded again; worker-made M-RoPE positions only for batches that prefill; and
a Ctrl-C during generation keeps the rows that had finished."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import torch
from helpers import finmme_request

from finbench.benchmarks import finmme
from finbench.config.specs import RunConfig
from finbench.core.requests import Generate, Session, Turn
from finbench.models.fast_paths import FastPaths
from finbench.runner import preprocess
from finbench.runner.decoding import AnswerVocabulary
from finbench.runner.engine import Interrupted, run_benchmark
from finbench.runner.loop import BatchLoop
from finbench.runner.run_requests import build_requests, text_of
from finbench.runner.timing import StageTimer


def _loop(model, questions, requests, tmp_path, **options):
    config = RunConfig.flat(model=model.source, data="", out=str(tmp_path / "run"), device="cpu", dtype="float32",
                       bootstrap=0, **options)
    vocab = AnswerVocabulary.for_model(model)
    return BatchLoop(model, finmme.BENCHMARK, questions, requests, config, vocab, StageTimer(model.device))


def _requests(questions, tmp_path, protocol="constrained", **options):
    config = RunConfig.flat(model="m", data="", out=str(tmp_path), protocol=protocol, **options)
    requests, errors = build_requests(finmme.BENCHMARK, questions, config, None, None)
    assert errors == {}
    return requests


# ---- only what the prompt shows is decoded --------------------------------------------------------
def test_a_corrupt_image_the_prompt_does_not_show_leaves_its_sample_answered(tiny_model, questions, tmp_path):
    chosen = [q for q in questions if q.kind == "single"][:2]
    requests = _requests(chosen, tmp_path)
    assert all(r.prompt.images == (0,) for r in requests)
    # the same questions, each holding a second image that is not an image at all, never shown
    broken = [dataclasses.replace(q, images=(*q.images, b"not an image")) for q in chosen]
    plain = _loop(tiny_model, chosen, requests, tmp_path / "a").run(_loop(tiny_model, chosen, requests,
                                                                          tmp_path / "a").prepare([0, 1]))
    loop = _loop(tiny_model, broken, requests, tmp_path / "b")
    prepared = loop.prepare([0, 1])
    assert prepared.errors == {} and prepared.indices == [0, 1]
    answered = loop.run(prepared)
    assert [answered[i].error for i in (0, 1)] == [None, None]
    assert [answered[i].answer for i in (0, 1)] == [plain[i].answer for i in (0, 1)]
    assert answered[0].option_logprobs == pytest.approx(plain[0].option_logprobs, abs=1e-6)
    # a prompt that does show the broken image still fails its sample, naming the image
    shown = [dataclasses.replace(r, prompt=dataclasses.replace(r.prompt, images=(1,))) for r in requests]
    failed = _loop(tiny_model, broken, shown, tmp_path / "c").prepare([0])
    assert failed.indices == [] and failed.errors[0].startswith("image 2 cannot be decoded")


# ---- a session's later turn: rendered once, its images decoded once ---------------------------------
def _session(question_text: str) -> Session:
    def user(text, image=False):
        content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]
        return {"role": "user", "content": content}

    turns = (Turn(ask=user(question_text, image=True), recall=user(question_text, image=True)),
             Turn(ask=user("And the second?"), recall=user("And the second?")))
    return Session(prefix=(), turns=turns, max_new_tokens=2, images=(0,))


def test_a_later_session_turn_is_rendered_once_and_its_images_are_not_decoded_again(tiny_model, questions,
                                                                                    tmp_path, monkeypatch):
    chosen = questions[:2]
    requests = [_session(q.text) for q in chosen]
    loop = _loop(tiny_model, chosen, requests, tmp_path)
    rendered, decoded = [], []
    render = tiny_model.prompt_text
    monkeypatch.setattr(tiny_model, "prompt_text", lambda request: rendered.append(request) or render(request))
    decode = preprocess.decode_image
    monkeypatch.setattr(preprocess, "decode_image", lambda q, n: decoded.append((q.id, n)) or decode(q, n))
    prepared = loop.prepare([0, 1])
    assert len(rendered) == 2  # the first turn: once per row (the processor's text, logged as it is)
    answered = loop.run(prepared)
    assert all(not p.error for p in answered.values())
    assert all(len(json.loads(p.generated_text)) == 2 for p in answered.values())
    assert len(rendered) == 4  # the second turn: once per row again, for its context check and its inputs
    assert sorted(decoded) == sorted((q.id, 0) for q in chosen)  # each image decoded once for both turns
    # the logged prompt of a row is the text its first turn was prepared from
    first = render(text_of(requests[0].turn_prompt(())))
    assert answered[0].prompt == (first if loop.config.decode.log_prompts else
                                  "sha256:" + hashlib.sha256(first.encode()).hexdigest())


# ---- M-RoPE positions only where a prefill uses them ----------------------------------------------
def test_worker_made_rope_positions_only_for_batches_that_prefill(tiny_model, questions, tmp_path, monkeypatch):
    fast = type(tiny_model)(tiny_model.model, tiny_model.processor, tiny_model.source,
                            fast_paths=FastPaths.everywhere())
    calls = []
    positions = fast.rope_positions
    monkeypatch.setattr(fast, "rope_positions", lambda inputs: calls.append(len(inputs["input_ids"])) or positions(inputs))
    chosen = [q for q in questions if q.kind == "single"][:2]
    for protocol, expected in (("official", []), ("constrained", [2])):
        calls.clear()
        requests = _requests(chosen, tmp_path / protocol, protocol, max_new_tokens=2)
        assert isinstance(requests[0], Generate) == (protocol == "official")
        loop = _loop(fast, chosen, requests, tmp_path / protocol, protocol=protocol, max_new_tokens=2)
        prepared = loop.prepare([0, 1])
        assert calls == expected
        assert ("finbench_positions" in prepared.inputs) == bool(expected)
        assert ("image_window_index" in prepared.inputs) == bool(expected)
        answered = loop.run(prepared)
        assert all(not p.error for p in answered.values())


# ---- the prepared batch cuts and extends itself --------------------------------------------------
def test_selecting_rows_equals_preparing_those_rows_alone(tiny_model, questions):
    from finbench.runner.preprocess import decode_images

    chosen = [questions[0], questions[5], questions[3]]
    shown = [decode_images(chosen[0]) + decode_images(chosen[1]), [], decode_images(chosen[2])]
    requests = [finmme_request(q, images) for q, images in zip(chosen, shown)]
    batch = tiny_model.prepare(requests)
    for rows in ([2, 0], [1], [0, 1, 2]):
        cut = batch.select(rows)
        alone = tiny_model.prepare([requests[r] for r in rows])
        assert set(cut) == set(alone), rows
        for key, value in alone.items():
            assert torch.equal(cut[key], value), (rows, key)
        assert cut.texts == alone.texts
    with pytest.raises(ValueError, match="cannot select rows of 'extra'"):
        batch.like({**batch, "extra": torch.zeros(4)}).select([0])


def test_extending_appends_after_each_rows_real_tokens_and_left_pads_again():
    from finbench.models.inputs import ModelInputs

    batch = ModelInputs({"input_ids": torch.tensor([[0, 5, 6], [7, 8, 9]]),
                         "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
                         "mm_token_type_ids": torch.tensor([[0, 1, 0], [0, 0, 1]]),
                         "finbench_positions": torch.zeros(3, 2, 3), "pixel_values": torch.ones(2, 4)},
                        token_keys={"mm_token_type_ids"}, derived_keys={"finbench_positions"})
    new = torch.tensor([[1, 2, 3], [4, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = batch.extend(new, mask, pad_token_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 1, 2, 3], [0, 7, 8, 9, 4]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert out["mm_token_type_ids"].tolist() == [[1, 0, 0, 0, 0], [0, 0, 0, 1, 0]]
    assert "finbench_positions" not in out and out["pixel_values"] is batch["pixel_values"]


# ---- Ctrl-C during generation keeps the finished rows --------------------------------------------
def test_ctrl_c_during_generation_keeps_the_rows_that_had_finished(tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                                   tmp_path, monkeypatch):
    """The second of two rows has emitted its end token when Ctrl-C arrives; the first is still
    generating. The interrupt says one answer is saved, and a rerun serves it from the cache (the
    model is asked for the unfinished row only)."""
    end = tiny_model.stop_token_ids()[0]
    word = tiny_model.encode(" B")[0]
    asked = []

    def interrupted(**kwargs):
        ids = kwargs["input_ids"]
        asked.append(ids.shape[0])
        new = torch.tensor([[word, word], [word, end]])[: ids.shape[0]]
        for criterion in kwargs["stopping_criteria"]:
            criterion(torch.cat([ids, new], 1), None)
        raise KeyboardInterrupt

    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=2, bootstrap=0, dtype="float32",
                       device="cpu", protocol="official", max_new_tokens=4, batch_size=2, workers=1,
                       out=str(tmp_path / "run"))
    monkeypatch.setattr(tiny_model.model, "generate", interrupted)
    with pytest.raises(Interrupted) as stopped:
        run_benchmark(config, tiny_model, show_progress=False)
    assert (stopped.value.saved, stopped.value.total) == (1, 2) and asked == [2]

    def finishes(**kwargs):
        ids = kwargs["input_ids"]
        asked.append(ids.shape[0])
        return torch.cat([ids, torch.tensor([[word, end]] * ids.shape[0])], 1)

    monkeypatch.setattr(tiny_model.model, "generate", finishes)
    result = run_benchmark(config, tiny_model, show_progress=False)
    assert asked == [2, 1]  # the finished row came from the cache
    texts = list(result.samples["raw_output"])
    assert texts == [tiny_model.decode([[word, end]])[0]] * 2 and not result.samples["error"].astype(bool).any()


def test_deepseek_vl2_generation_interrupted_names_the_rows_that_had_finished(questions, tmp_path, monkeypatch):
    """The native adapter's own greedy loop: row 1 emits its end token at the first step, row 0 does
    not; Ctrl-C during the second step raises `GenerationInterrupted` with row 1 only."""
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.models.contract import GenerationInterrupted
    from finbench.offline.tiny import make_tiny

    model = load_model(str(make_tiny("deepseek-vl2", tmp_path / "dsv", weights_dtype="float32")),
                       LoadSpec(dtype="float32", device="cpu"))
    end, word = model.stop_token_ids()[0], model.encode(" B")[0]
    vocabulary = model.model.get_output_embeddings().weight.shape[0]

    def head(hidden):  # row 0 says " B", row 1 ends
        logits = torch.zeros(hidden.shape[0], vocabulary)
        logits[0, word], logits[1, end] = 1.0, 1.0
        return logits

    def interrupted(state, token_ids):
        raise KeyboardInterrupt

    monkeypatch.setattr(model.model, "get_output_embeddings", lambda: head)
    monkeypatch.setattr(model, "decode_step", interrupted)
    inputs = model.to_device(model.prepare([finmme_request(q) for q in questions[:2]]))
    with pytest.raises(GenerationInterrupted) as stopped:
        model.generate(inputs, 8)
    assert stopped.value.texts == {1: model.decode([[end]])[0]} and stopped.value.counts == {1: 1}


def test_a_run_renders_each_prompt_once(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path, monkeypatch):
    """Planning renders every first prompt (for its token count); the batch is prepared from that
    text and the log shows it: one chat-template render per question, not three."""
    rendered = []
    render = tiny_model.prompt_text
    monkeypatch.setattr(tiny_model, "prompt_text", lambda request: rendered.append(request) or render(request))
    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=6, bootstrap=0, dtype="float32",
                       device="cpu", out=str(tmp_path / "run"))
    result = run_benchmark(config, tiny_model, show_progress=False)
    assert len(rendered) == 6 and not result.samples["error"].astype(bool).any()
    again = run_benchmark(config.replaced(out=str(tmp_path / "fresh")), tiny_model, show_progress=False)
    assert list(again.samples["prompt"]) == list(result.samples["prompt"])
    assert len(rendered) == 12
