"""The thinking loop with finished rows dropped (models/compaction.py) against the loop that keeps
them and against transformers' `generate`: same token ids, same reasoning text, same answers, on a
tiny thinking Qwen3-VL whose rows finish at different steps (dynamic cache, and the static KV
buffers of the CUDA fast path run on the CPU)."""

from __future__ import annotations

import pytest
import torch
from helpers import finmme_request, sharpened_tiny_dir

from finbench.kernels.compaction import compaction_due, live_rows, select_rows, worth_compacting
from finbench.models.fast_paths import FastPaths
from finbench.models.compaction import greedy_ids
from finbench.runner.decoding import AnswerVocabulary, decode_single
from finbench.runner.thinking import think

BUDGET = 10


def test_live_rows_and_select_rows_keep_the_running_rows_of_batch_tensors_only():
    finished = torch.tensor([False, True, False, True])
    rows = live_rows(finished)
    assert rows.tolist() == [0, 2]
    state = {"deltas": torch.arange(4)[:, None], "scalar": torch.tensor(3), "other": torch.zeros(2, 4),
             "nested": (torch.arange(8).reshape(4, 2), None), "name": "x"}
    kept = select_rows(state, rows, 4)
    assert kept["deltas"].tolist() == [[0], [2]] and kept["nested"][0].tolist() == [[0, 1], [4, 5]]
    assert kept["scalar"] is state["scalar"] and kept["other"] is state["other"] and kept["nested"][1] is None
    assert select_rows(torch.arange(12).reshape(3, 4, 1), rows, 4, dim=1).tolist() == [[[0], [2]], [[4], [6]], [[8], [10]]]
    assert [s for s in range(10) if compaction_due(s, 3)] == [2, 5, 8] and not any(compaction_due(s, 0) for s in range(9))
    assert worth_compacting(16, 64) and not worth_compacting(15, 64) and not worth_compacting(0, 1)


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(sharpened_tiny_dir(tmp_path_factory, "qwen3-vl", thinking=True)),
                      LoadSpec(dtype="float32", device="cpu"))


@pytest.fixture(scope="module")
def batch(thinker, questions):
    chosen = [q for q in questions if q.kind == "single"][:4]
    inputs = thinker.to_device(thinker.prepare([finmme_request(q, thinking=True) for q in chosen]))
    return chosen, inputs


def _staggered_stops(thinker, inputs):
    """Stop tokens that end the rows at different steps: each row's own token at steps 1, 3, 5 (the
    last row runs to the budget), chosen from a free run without stops."""
    free = greedy_ids(thinker, inputs, BUDGET, [-1], every=0)
    stops = set()
    for row, step in zip(free.tolist(), (1, 3, 5)):
        stops.add(row[step])
    return free, sorted(stops)


def _finish_steps(ids, stops, pad):
    is_stop = torch.isin(ids, torch.tensor(stops))
    return [int(r.nonzero()[0]) if r.any() else None for r in is_stop]


@pytest.mark.parametrize("paths", [None, FastPaths(static_decode=True)], ids=["dynamic-cache", "static-kv"])
def test_compacted_greedy_ids_equal_the_plain_loop_and_generate(thinker, batch, paths, monkeypatch):
    model = thinker if paths is None else type(thinker)(thinker.model, thinker.processor, thinker.source,
                                                         fast_paths=paths)
    _, inputs = batch
    _, stops = _staggered_stops(thinker, inputs)
    plain = greedy_ids(model, inputs, BUDGET, stops, every=0)
    ends = _finish_steps(plain, stops, thinker.pad_token_id)
    assert len({e for e in ends if e is not None}) >= 2 and min(e for e in ends if e is not None) < 2
    from finbench.models.base import DecodeState

    widths, select = [], DecodeState.select
    monkeypatch.setattr(DecodeState, "select", lambda self, rows: widths.append(len(rows)) or select(self, rows))
    compacted = greedy_ids(model, inputs, BUDGET, stops, every=2)
    assert widths and widths[0] < 4  # compacted: finished rows left the batch
    assert torch.equal(compacted, plain)
    assert torch.equal(plain, thinker.generate_ids(inputs, BUDGET, stops))


def test_thinking_with_compaction_gives_the_same_reasoning_and_answers(thinker, batch, monkeypatch):
    chosen, inputs = batch
    _, stops = _staggered_stops(thinker, inputs)
    # the batch's rows then close their block at different steps: the stop tokens act as the close tag
    monkeypatch.setattr(type(thinker), "stop_token_ids", lambda self: stops)
    vocab = AnswerVocabulary.for_model(thinker)
    n_options = torch.tensor([len(q.options) for q in chosen])
    results = []
    for every in (0, 2):
        rebuilt, reasoning = think(thinker, inputs, BUDGET, ["Answer:"] * len(chosen), compact_every=every)
        results.append((rebuilt, reasoning, decode_single(thinker, rebuilt, n_options, vocab)))
    (plain_inputs, plain, plain_answers), (inputs2, compacted, answers) = results
    assert len({r.tokens for r in plain}) >= 2  # rows finished at different steps
    assert compacted == plain and torch.equal(inputs2["input_ids"], plain_inputs["input_ids"])
    assert [p.answer for p in answers] == [p.answer for p in plain_answers]
    assert [p.option_logprobs for p in answers] == [p.option_logprobs for p in plain_answers]


@pytest.mark.parametrize("family", ["qwen3.5"])
def test_compaction_narrows_a_hybrid_linear_attention_cache_exactly(family, tmp_path, monkeypatch):
    """Qwen3.5's cache also carries linear-attention states (conv and recurrent): narrowed by
    transformers' own batch gather, the loop still equals the plain one and generate."""
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.models.base import DecodeState
    from finbench.offline.tiny import make_tiny, tiny_family_available

    if not tiny_family_available(family):
        pytest.skip(f"this transformers has no {family}")
    model = load_model(str(make_tiny(family, tmp_path / family)), LoadSpec(dtype="float32", device="cpu"))
    encoded = model.tokenizer(["hello there how are", "a much longer prompt with more words", "short one"],
                              padding=True, return_tensors="pt")
    inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    free = greedy_ids(model, inputs, 8, [-1], every=0)
    stop = int(free[0, 1])  # row 0 stops at step 1 (others only where they emit the same token)
    widths, select = [], DecodeState.select
    monkeypatch.setattr(DecodeState, "select", lambda self, rows: widths.append(len(rows)) or select(self, rows))
    compacted = greedy_ids(model, inputs, 8, [stop], every=2)
    assert widths and widths[0] < 3
    assert torch.equal(compacted, greedy_ids(model, inputs, 8, [stop], every=0))
    assert torch.equal(compacted, model.generate_ids(inputs, 8, [stop]))
