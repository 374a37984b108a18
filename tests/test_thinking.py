"""Thinking runs: reasoning within a budget, the block always closed, then a constrained answer.

A tiny Qwen3-VL built as a thinking checkpoint (`make_tiny(..., thinking=True)`: the template opens
`<think>`) runs through the real engine; the reference is a brute-force loop of full forwards
over the whole vocabulary, one question at a time, with no cache and no padding."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import finmme_request, sharpened_tiny_dir

from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark
from finbench.runner.thinking import AFTER_CLOSE, think


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """A sharpened tiny thinking Qwen3-VL (answers then depend on the question)."""
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(sharpened_tiny_dir(tmp_path_factory, "qwen3-vl", thinking=True)),
                      LoadSpec(dtype="float32", device="cpu"))


def _run(model, data, out, budget, limit=12):
    config = RunConfig.flat(model=model.source, data=str(data), limit=limit, batch_size=4, dtype="float32",
                       device="cpu", out=str(out), bootstrap=0, think_budget=budget)
    return run_benchmark(config, model=model, show_progress=False)


def _valid_answer(row) -> bool:
    letters = "ABCDEFGHIJKLMN"[: row["n_options"]]
    if row["kind"] == "single":
        return len(row["answer"]) == 1 and row["answer"] in letters
    if row["kind"] == "multi":
        return len(row["answer"]) >= 1 and all(c in letters for c in row["answer"]) \
            and list(row["answer"]) == sorted(set(row["answer"]))
    return re.fullmatch(r"-?\d+(\.\d*)?%?", row["answer"]) is not None


def test_a_budget_sweep_never_exceeds_its_budget_and_always_answers(thinker, synthetic_parquet, tmp_path):
    seen = {}
    for budget in (0, 3, 7):
        result = _run(thinker, synthetic_parquet, tmp_path / f"b{budget}", budget)
        samples = result.samples
        assert (samples["error"] == "").all(), samples["error"].unique()
        assert (samples["reasoning_tokens"] <= budget).all()
        assert samples.apply(_valid_answer, axis=1).all(), samples[["kind", "answer"]]
        assert samples["confidence"].between(0, 1).all()
        cut = samples["budget_cut"]
        assert (~cut | (samples["reasoning_tokens"] == budget)).all()  # a cut row spent the whole budget
        assert result.results["decoding"]["think_budget"] == budget
        assert result.results["thinking"] == {"budget": budget, "opener": ""}
        if budget == 0:
            assert (samples["reasoning_tokens"] == 0).all() and (samples["reasoning_text"] == "").all()
            assert not cut.any()
        seen[budget] = samples
    assert seen[7]["reasoning_tokens"].max() > 3  # the budget is really spent, not ignored
    # budgets are separate cache entries: a rerun of budget 3 is served from the cache, unchanged
    again = _run(thinker, synthetic_parquet, tmp_path / "b3", 3)
    assert again.results["n_cached"] == 12 and again.results["throughput"]["all_from_cache"]
    assert again.samples["answer"].tolist() == seen[3]["answer"].tolist()
    assert again.samples["reasoning_text"].tolist() == seen[3]["reasoning_text"].tolist()


def _letter_logprobs(model, logits, n_options):
    bare = model.single_token_ids(list("ABCDEFGHIJKLMN"[:n_options]))
    spaced = model.single_token_ids([" " + c for c in "ABCDEFGHIJKLMN"[:n_options]])
    scores = torch.logsumexp(torch.stack([logits[bare], logits[spaced]]), 0)
    return torch.log_softmax(scores, 0)


def test_reasoning_and_answer_match_a_full_vocabulary_loop(thinker, questions, tmp_path):
    """Batched (left padding, mixed lengths): the reasoning equals greedy full-vocabulary decoding
    of each prompt alone, and the answer's option log-probs equal a full forward of prompt +
    reasoning + '</think>\\n\\n' + 'Answer:'."""
    budget = 4
    chosen = [q for q in questions if q.kind == "single"][:2]
    requests = [finmme_request(q) for q in chosen]
    thinking_requests = [finmme_request(q, thinking=True) for q in chosen]
    inputs = thinker.to_device(thinker.prepare(thinking_requests))
    rebuilt, reasoning = think(thinker, inputs, budget, [r.answer_prefix for r in requests])
    from finbench.runner.decoding import AnswerVocabulary, decode_single

    decoded = decode_single(thinker, rebuilt, torch.tensor([len(q.options) for q in chosen]),
                            AnswerVocabulary.for_model(thinker))
    close = thinker.thinking_token_ids()[1]
    stops = set(thinker.stop_token_ids()) | {close}
    for question, request, r, p in zip(chosen, thinking_requests, reasoning, decoded):
        single = dict(thinker.prepare([request]))
        generated = []
        for _ in range(budget):
            with torch.no_grad():
                token = int(thinker.model(**single).logits[0, -1].argmax())
            generated.append(token)
            if token in stops:
                break
            single = _extend(single, [token])
        kept = generated[:-1] if generated and generated[-1] in stops else generated
        assert r.tokens == len(generated) <= budget
        assert r.cut == (len(generated) == budget and generated[-1] not in stops)
        assert r.text == thinker.tokenizer.decode(kept, skip_special_tokens=True)
        suffix = thinker.tokenizer.encode(thinker.capabilities.thinking_tags[1] + AFTER_CLOSE + "Answer:", add_special_tokens=False)
        full = _extend(dict(thinker.prepare([request])), kept + suffix)
        with torch.no_grad():
            logits = thinker.model(**full).logits[0, -1].double()
        reference = _letter_logprobs(thinker, logits, len(question.options))
        assert max(abs(a - b) for a, b in zip(p.option_logprobs, reference.tolist())) <= 1e-4
        assert p.answer == "ABCDEFGHIJKLMN"[int(reference.argmax())]


def _extend(inputs, tokens):
    new = torch.tensor([tokens], dtype=inputs["input_ids"].dtype)
    out = dict(inputs)
    out["input_ids"] = torch.cat([inputs["input_ids"], new], 1)
    out["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(new)], 1)
    if "mm_token_type_ids" in inputs:
        out["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(new)], 1)
    return out


class _ScriptedGeneration:
    """Wraps the thinker; `generate_ids` returns a scripted continuation per row (pads after a
    stop), to check the bookkeeping of early finishes, stop tokens and cuts exactly."""

    def __init__(self, inner, rows):
        self.inner, self.rows = inner, rows

    def generate_ids(self, inputs, max_new_tokens, stop_token_ids):
        width = max(len(r) for r in self.rows)
        pad = self.inner.tokenizer.pad_token_id
        return torch.tensor([r + [pad] * (width - len(r)) for r in self.rows], dtype=inputs["input_ids"].dtype)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_early_finish_stop_token_and_cut_are_booked_exactly(thinker, questions):
    close = thinker.thinking_token_ids()[1]
    end_of_turn = thinker.tokenizer.convert_tokens_to_ids("<|im_end|>")
    word = thinker.tokenizer.encode(" the", add_special_tokens=False)
    a, b = word[0], thinker.single_token_ids(["7"])[0]
    rows = [[a, close], [a, b, end_of_turn], [a, b, a, b]]  # closed, stopped without closing, cut at 4
    scripted = _ScriptedGeneration(thinker, rows)
    chosen = [q for q in questions if q.kind == "single"][:3]
    requests = [finmme_request(q) for q in chosen]
    inputs = thinker.prepare([type(r)(messages=r.messages, images=r.images, answer_prefix="") for r in requests])
    rebuilt, reasoning = think(scripted, inputs, 4, ["Answer:"] * 3, compact_every=0)  # scripted generate_ids
    assert [r.tokens for r in reasoning] == [2, 3, 4]
    assert [r.cut for r in reasoning] == [False, False, True]
    suffix = thinker.tokenizer.encode("</think>" + AFTER_CLOSE + "Answer:", add_special_tokens=False)
    for row, kept in enumerate([[a], [a, b], [a, b, a, b]]):
        real = rebuilt["input_ids"][row][rebuilt["attention_mask"][row].bool()].tolist()
        prompt = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
        assert real == prompt + kept + suffix  # one close tag, the stop token dropped, answer prefix last
        assert real.count(close) == 1
        mask = rebuilt["attention_mask"][row].tolist()
        assert mask == sorted(mask)  # left padding: pads only at the front


def test_thinking_is_refused_where_it_cannot_run(tiny_model, synthetic_parquet, tmp_path):
    """An instruct Qwen2.5-VL has no thinking block; a negative budget and thinking with the
    official protocol are configuration errors, each one clear line at start-up."""
    with pytest.raises(ValueError, match="no thinking block"):
        _run(tiny_model, synthetic_parquet, tmp_path / "a", 4, limit=2)
    for budget, protocol in ((-1, "constrained"), (4, "official")):
        config = RunConfig.flat(model=tiny_model.source, data=str(synthetic_parquet), limit=2, out=str(tmp_path / "b"),
                           protocol=protocol, think_budget=budget, device="cpu")
        with pytest.raises(ValueError, match="think-budget"):
            run_benchmark(config, model=tiny_model, show_progress=False)
    # an instruct model at budget 0 keeps its instruct prompts and cache keys: no thinking fields
    result = _run(tiny_model, synthetic_parquet, tmp_path / "c", 0, limit=2)
    assert result.results["thinking"] is None and "think_budget" not in result.results["decoding"]


def test_make_tiny_thinking_variant(tmp_path):
    from typer.testing import CliRunner

    from finbench.cli import app

    done = CliRunner().invoke(app, ["models", "make-tiny", "qwen3-vl", str(tmp_path / "t"), "--thinking"])
    assert done.exit_code == 0, done.output
    template = (tmp_path / "t" / "chat_template.jinja")
    text = template.read_text() if template.exists() else (tmp_path / "t" / "chat_template.json").read_text()
    assert "<think>" in text
    # broken: a family whose vocabulary has no <think> token cannot be made a thinking checkpoint
    done = CliRunner().invoke(app, ["models", "make-tiny", "qwen2.5-vl", str(tmp_path / "u"), "--thinking"])
    assert done.exit_code == 2 and "<think>" in done.output
