"""The batch loop end to end on the tiny model: outputs, resume, pipeline order, OOM backoff,
bad inputs and bad configuration."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest
import torch
from helpers import finmme_request

from finbench.config.specs import RunConfig
from finbench.report.schema import SAMPLE_COLUMNS
from finbench.runner.engine import run_benchmark

LIMIT = 24


def _config(tiny_qwen_dir, data, out, **overrides) -> RunConfig:
    settings = dict(model=str(tiny_qwen_dir), data=str(data), out=str(out), limit=LIMIT, batch_size=8,
                    dtype="float32", device="cpu")
    settings.update(overrides)
    return RunConfig.flat(**settings)


def test_run_writes_results_and_samples_and_resumes_from_cache(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    first = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run"), tiny_model, show_progress=False)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    assert results["n_questions"] == LIMIT and results["n_computed"] == LIMIT and results["n_cached"] == 0
    assert 0.0 <= results["scores"]["finscore"] <= 1.0
    ci = results["scores"]["ci"]["finscore"]  # bootstrap interval around the headline number
    assert ci["low"] <= results["scores"]["finscore"] <= ci["high"]
    assert set(SAMPLE_COLUMNS) <= set(samples.columns)
    assert samples["id"].is_unique and len(samples) == LIMIT
    assert set(samples["kind"]) == {"single", "multi", "numerical"}
    # choice rows carry a probability distribution over exactly their options
    choice = samples[samples["kind"] != "numerical"]
    assert all(len(p) == n and math.isclose(sum(p), 1.0, rel_tol=1e-5)
               for p, n in zip(choice["option_probs"], choice["n_options"]))
    # the headline accuracy is the mean of the per-question correctness column
    assert math.isclose(results["scores"]["accuracy"], samples["correct"].mean())
    # correctness agrees with a direct reading of answer vs gold for choice items
    assert (choice["correct"] == (choice["answer"] == choice["gold"]).astype(float)).all()
    throughput = results["throughput"]
    assert throughput["samples"] == LIMIT and throughput["samples_per_s"] > 0 and throughput["image_tokens"] > 0
    assert {"preprocess", "forward", "cache_write"} <= set(throughput["stages_s"])
    page = (tmp_path / "run" / "report.html").read_text()
    # one plot each: headline, every breakdown, reliability, selective, stages (tests/test_report.py)
    n_plots = 4 + len(results["scores"]["breakdowns"])
    assert "FinScore" in page and "By domain" in page and page.count("data:image/png;base64,") == n_plots
    assert f"{100 * results['scores']['finscore']:.2f}" in page

    again = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run"), tiny_model, show_progress=False)
    assert again.results["n_cached"] == LIMIT and again.results["n_computed"] == 0
    columns = [c for c in first.samples.columns if c != "seconds"]
    pd.testing.assert_frame_equal(first.samples[columns], again.samples[columns])


def test_pipeline_gives_the_plain_path_answers_in_question_order(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    """Batch 8 with bucketing, prefetch and threads vs batch 1 (no batching at all)."""
    bucketed = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "b8"), tiny_model, show_progress=False)
    plain = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "b1", batch_size=1), tiny_model,
                          show_progress=False)
    assert list(bucketed.samples["id"]) == list(plain.samples["id"])
    assert list(bucketed.samples["answer"]) == list(plain.samples["answer"])
    for a, b in zip(bucketed.samples["option_probs"], plain.samples["option_probs"]):
        assert len(a) == len(b) and all(abs(x - y) <= 1e-4 for x, y in zip(a, b))


class OutOfMemoryAbove:
    """Wraps a model; raises a CUDA out-of-memory error for batches above `limit` rows."""

    def __init__(self, model, limit: int):
        self._model, self.limit, self.rows_seen = model, limit, []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def _check(self, inputs):
        rows = inputs["input_ids"].shape[0]
        self.rows_seen.append(rows)
        if rows > self.limit:
            raise torch.cuda.OutOfMemoryError(f"fake OOM at {rows} rows")

    def prefill(self, inputs):
        self._check(inputs)
        return self._model.prefill(inputs)

    def score_options(self, inputs, option_token_ids):
        self._check(inputs)
        return self._model.score_options(inputs, option_token_ids)


def test_out_of_memory_halves_the_batch_and_loses_nothing(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    reference = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "ref"), tiny_model,
                              show_progress=False)
    flaky = OutOfMemoryAbove(tiny_model, limit=3)
    result = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "oom", batch_size=None), flaky,
                           show_progress=False)
    assert result.results["throughput"]["oom_retries"] >= 1
    assert result.results["throughput"]["final_max_batch"] <= 3
    assert max(flaky.rows_seen) > 3  # auto batch size did try large batches first
    assert result.samples["id"].is_unique and len(result.samples) == LIMIT
    assert (result.samples["error"] == "").all()
    assert list(result.samples["answer"]) == list(reference.samples["answer"])


def test_corrupt_image_is_a_counted_per_sample_error(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    frame = pd.read_parquet(synthetic_parquet).head(6)
    frame.at[1, "image"] = {"bytes": b"not an image", "path": "broken.png"}
    frame.at[2, "options"] = []
    frame.at[2, "question_type"] = "single_choice"
    broken = tmp_path / "broken.parquet"
    frame.to_parquet(broken)
    result = run_benchmark(_config(tiny_qwen_dir, broken, tmp_path / "run"), tiny_model, show_progress=False)
    errors = result.samples.set_index("id")["error"]
    assert "cannot be decoded" in errors[frame.at[1, "id"]]
    assert "empty option list" in errors[frame.at[2, "id"]]
    assert (errors.drop([frame.at[1, "id"], frame.at[2, "id"]]) == "").all()
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["errors"]["count"] == 2 and results["scores"]["n_errors"] == 2
    assert "cannot be decoded" in (tmp_path / "run" / "report.html").read_text()  # errors shown in the report
    assert result.samples.set_index("id").loc[frame.at[1, "id"], "correct"] == 0.0


@pytest.mark.parametrize("overrides, message", [
    ({"model": "/no/such/model"}, "cannot load model"),
    ({"protocol": "freestyle"}, "--protocol"),
    ({"quant": "3bit"}, "--quant"),
    ({"dtype": "int3"}, "--dtype"),
    ({"data": "missing.parquet"}, "no such file"),
])
def test_bad_configuration_fails_at_start_up(tiny_qwen_dir, synthetic_parquet, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        data = overrides.pop("data", synthetic_parquet)
        run_benchmark(_config(tiny_qwen_dir, data, tmp_path / "run", **overrides), show_progress=False)


def test_official_protocol_generates_and_extracts(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    result = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", protocol="official",
                                   max_new_tokens=6, limit=4), tiny_model, show_progress=False)
    samples = result.samples
    assert (samples["raw_output"].str.len() > 0).all()
    assert (samples["n_generated_tokens"] <= 6).all() and (samples["n_generated_tokens"] >= 1).all()
    from finbench.benchmarks.finmme import extract_official

    assert list(samples["answer"]) == [extract_official(t) for t in samples["raw_output"]]
    assert result.results["prompt_version"] == "finmme-official"


class FailsOnLength(OutOfMemoryAbove):
    """Raises an ordinary error for any batch holding a prompt of one given length."""

    def __init__(self, model, length: int):
        super().__init__(model, limit=10**9)
        self.length = length

    def _check(self, inputs):
        if (inputs["attention_mask"].sum(1) == self.length).any():
            raise RuntimeError("kernel exploded")


def test_a_sample_that_breaks_the_model_becomes_an_error_and_the_rest_are_answered(
        tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    from finbench.benchmarks import finmme

    questions = finmme.load_questions(synthetic_parquet, limit=LIMIT)
    victim = questions[3]
    length = int(tiny_model.prepare([finmme_request(victim)])
                 ["attention_mask"].sum())
    reference = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "ref"), tiny_model,
                              show_progress=False).samples.set_index("id")
    samples = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run"),
                            FailsOnLength(tiny_model, length), show_progress=False).samples.set_index("id")
    failed = samples[samples["error"] != ""]
    assert victim.id in failed.index and all("kernel exploded" in e for e in failed["error"])
    healthy = samples[samples["error"] == ""].index
    assert len(healthy) >= LIMIT - len(failed) and len(samples) == LIMIT
    assert (samples.loc[healthy, "answer"] == reference.loc[healthy, "answer"]).all()


def test_worker_threads_pin_every_tensor_of_a_prepared_batch():
    """`ModelInputs.pin` (run in the preprocessing threads for a CUDA model) pins each tensor of a
    processor output, tensors in lists too (Qwen's `images_uint8`), and leaves the rest alone."""
    from transformers import BatchFeature

    from finbench.models.inputs import ModelInputs

    pinned = []

    def pin(tensor):
        pinned.append(tensor)
        return tensor + 0  # a new tensor, as pin_memory returns

    images = [torch.zeros(3, 2, 2, dtype=torch.uint8), torch.ones(3, 4, 2, dtype=torch.uint8)]
    inputs = BatchFeature({"input_ids": torch.ones(2, 3, dtype=torch.long), "pixel_values": torch.rand(4, 5),
                           "images_uint8": list(images), "sizes": [[1, 2]], "note": "kept", "empty": []})
    originals = [inputs["input_ids"], inputs["pixel_values"], *images]
    before = {k: v.clone() for k, v in inputs.items() if torch.is_tensor(v)}
    prepared = ModelInputs(inputs)
    out = prepared.pin(pin)
    assert out is prepared
    assert sorted(map(id, pinned)) == sorted(map(id, originals))  # each tensor once, nothing else
    for key, value in before.items():
        assert torch.equal(out[key], value) and out[key] is not value
    assert all(torch.equal(a, b) for a, b in zip(out["images_uint8"], images))
    assert out["sizes"] == [[1, 2]] and out["note"] == "kept" and out["empty"] == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="page-locked memory needs CUDA")
def test_pin_host_memory_pins_for_real():
    from finbench.models.inputs import ModelInputs

    out = ModelInputs({"x": torch.rand(3), "ys": [torch.rand(2)]}).pin()
    assert out["x"].is_pinned() and out["ys"][0].is_pinned()


# ---- the pipeline: the first batch cut per thread, copies one batch ahead ------------------------
def test_the_first_batch_is_cut_into_one_piece_per_thread():
    from finbench.runner.preprocess import split_first

    plan = [list(range(10)), [10, 11], [12]]
    assert split_first(plan, 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], [10, 11], [12]]
    assert split_first(plan, 1) == plan and split_first([[5]], 8) == [[5]] and split_first([], 3) == []
    assert split_first([[0, 1, 2]], 8) == [[0], [1], [2]]
    assert sum(split_first(plan, 3), []) == list(range(13))  # every question once, in order


def test_prefetch_yields_the_pieces_in_order_and_hands_each_next_batch_ahead_once():
    import threading
    import time as clock

    from finbench.runner.preprocess import PreparedBatch, prefetch

    started: list[int] = []
    ahead: list[int] = []
    lock = threading.Lock()
    # the first batch's four pieces meet here: none finishes before all four have started, which
    # can only happen when they are prepared at once (one after another, the first waits for ever)
    first_four = threading.Barrier(4, timeout=30)

    def work(batch):
        with lock:
            started.append(batch[0])
        if batch[0] < 8:
            first_four.wait()
        clock.sleep(0.05)
        return PreparedBatch(list(batch), inputs=batch[0])

    def join(pieces):  # the loop's joins the inputs (runner/preprocess.py `join_pieces`)
        return [PreparedBatch([i for p in pieces for i in p.indices], inputs=[p.inputs for p in pieces])]

    yielded = []
    for prepared in prefetch([list(range(8)), [8, 9], [10]], work, workers=4, depth=2,
                             ahead=lambda p: ahead.append(p.indices[0]), join=join):
        clock.sleep(0.08)  # the model's work: the next batch is ready by the time this one is handed over
        yielded.append((prepared.indices, prepared.inputs))
    # the first batch comes back whole, made of its four pieces; the others as planned
    assert yielded == [(list(range(8)), [0, 2, 4, 6]), ([8, 9], 8), ([10], 10)]
    # the four pieces of the first batch were prepared at once (the fill is one piece's time)
    assert sorted(i for i in started if i < 8) == [0, 2, 4, 6] and not first_four.broken
    assert ahead in ([8, 10], [10])  # once each, never a piece of the first batch
    pieces = [list(range(8)), [8, 9], [10]]
    assert [p.indices for p in prefetch(pieces, lambda b: PreparedBatch(list(b), None), workers=4)] == [
        [0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10]]  # without a join: the pieces, as they were prepared


def test_the_joined_first_batch_equals_the_processor_s_batch_of_all_its_rows(tiny_model, questions):
    """`ModelInputs.join` against an independent reference: the processor called once on all the
    rows. Every key equal (input ids padded as the processor pads, pixels, grids), and the
    positions and tower indices the adapter derives computed again for the whole batch."""
    from finbench.benchmarks import finmme
    from finbench.models.fast_paths import FastPaths
    from finbench.models.inputs import ModelInputs
    from finbench.models.qwen2_5_vl import Qwen25VL
    from finbench.runner.preprocess import decode_images
    from finbench.runner.run_requests import first_prompt, render

    model = Qwen25VL(tiny_model.model, tiny_model.processor, "tiny", fast_paths=FastPaths.everywhere())
    chosen = [q for q in questions if q.kind == "single"][:5]
    requests = [render(finmme.BENCHMARK, first_prompt(finmme.request(q, "constrained")), decode_images(q), False)
                for q in chosen]
    requests = [dataclasses.replace(r, text=model.prompt_text(r) + " pad" * (3 * k), prefilled=True)
                for k, r in enumerate(requests)]  # lengths differ: the shorter pieces are padded on the join
    whole = model.prepare(requests)
    joined = ModelInputs.join([model.prepare(requests[:2]), model.prepare(requests[2:3]), model.prepare(requests[3:])],
                              model.pad_token_id)
    assert set(joined) == set(whole) and joined.texts == whole.texts and joined.spans == whole.spans
    for key, value in whole.items():
        if torch.is_tensor(value):
            assert torch.equal(joined[key], value), key
        else:
            assert joined[key] == value, key
    assert {"image_cu_seqlens", "finbench_positions"} & set(joined)  # derived again, not dropped
    with pytest.raises(ValueError, match="rows are not declared"):
        ModelInputs.join([ModelInputs({**whole, "tiles": torch.ones(2)}), ModelInputs(whole)])


def test_a_planned_batch_is_one_forward_of_all_its_rows(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path,
                                                       monkeypatch):
    """The first batch is prepared in one piece per worker thread, then run as the batch the plan
    made: with 4 workers and batches of 8, every planned batch is one prefill of its rows."""
    from finbench.runner import engine

    plans, forwards = [], []
    real_plan, real_prefill = engine.plan_batches, tiny_model.prefill
    monkeypatch.setattr(engine, "plan_batches", lambda *a, **k: plans.append(real_plan(*a, **k)) or plans[-1])
    monkeypatch.setattr(tiny_model, "prefill", lambda inputs: forwards.append(inputs["input_ids"].shape[0])
                        or real_prefill(inputs))
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", workers=4, limit=16), tiny_model,
                  show_progress=False)
    [plan] = plans
    assert len(plan[0]) >= 4 and forwards == [len(batch) for batch in plan], (plan, forwards)  # uncut: 1, 1, 1, 1, …


@pytest.mark.slow
def test_a_cut_first_batch_gives_the_answers_of_the_uncut_plan(tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                               tmp_path, monkeypatch):
    from finbench.runner import preprocess

    cut = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "cut", workers=4), tiny_model,
                        show_progress=False)
    monkeypatch.setattr(preprocess, "split_first", lambda batches, parts: list(batches))
    whole = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "whole", workers=4), tiny_model,
                          show_progress=False)
    assert list(cut.samples["answer"]) == list(whole.samples["answer"])
    for a, b in zip(cut.samples["option_probs"], whole.samples["option_probs"]):
        assert len(a) == len(b) and all(abs(x - y) <= 1e-4 for x, y in zip(a, b))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="side-stream copies need CUDA")
def test_inputs_copied_ahead_on_a_side_stream_equal_a_plain_copy(tiny_qwen_dir, synthetic_parquet, tmp_path):
    from finbench.benchmarks import finmme
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.runner.loop import BatchLoop
    from finbench.runner.run_requests import build_requests
    from finbench.runner.timing import StageTimer

    model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cuda"))
    questions = finmme.load_questions(synthetic_parquet, limit=4)
    config = _config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run")
    requests, _ = build_requests(finmme.BENCHMARK, questions, config, None, None)
    loop = BatchLoop(model, finmme.BENCHMARK, questions, requests, config, None, StageTimer(model.device))
    prepared = loop.prepare([0, 1, 2, 3])
    loop.copy_ahead(prepared)
    assert prepared.on_device is not None
    ahead = loop._on_device(prepared)
    plain = model.to_device(prepared.inputs)
    torch.cuda.synchronize()
    for key, value in plain.items():
        if torch.is_tensor(value):
            assert torch.equal(ahead[key], value), key
