"""Per-sample cost: samples.parquet's prompt_tokens, image_tokens, generated_tokens and seconds,
results.json's `cost` totals, the report's Cost table, and the cache keeping the counts. The token
counts are checked against the processor applied to a row's own prompt and images, and the totals
against sums over the written parquet file, never against the code path that made them."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from PIL import Image

import finbench
from finbench.app.api import make_config
from finbench.core.requests import Choose, Generate, Prompt
from finbench.core.types import Prediction
from finbench.runner.cost import cost_summary, with_costs
from finbench.runner.engine import run_benchmark

LIMIT = 12
COLUMNS = ("prompt_tokens", "image_tokens", "generated_tokens", "seconds")


def _config(tiny_qwen_dir, data, out, **overrides):
    return make_config(model=str(tiny_qwen_dir), benchmark="finmme", data=str(data), out=str(out), dtype="float32",
                     device="cpu", bootstrap=0, limit=LIMIT, **overrides)


@pytest.fixture(scope="module")
def costed(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """One run with the images removed as a study (the "none" ablation), then the same run again."""
    out = tmp_path_factory.mktemp("cost") / "run"
    config = _config(tiny_qwen_dir, synthetic_parquet, out, image_ablation=("none",))
    first = run_benchmark(config, tiny_model, show_progress=False)
    files = (pd.read_parquet(out / "samples.parquet"), pd.read_parquet(out / "variants.parquet"),
             json.loads((out / "results.json").read_text()))
    again = run_benchmark(config, tiny_model, show_progress=False)
    return out, first, files, again


def test_the_columns_are_written_and_typed(costed):
    _, _, (samples, variants, _), _ = costed
    for table in (samples, variants):
        assert set(COLUMNS) <= set(table.columns)
        assert table[list(COLUMNS[:3])].notna().all().all()
        assert (table["seconds"] > 0).all()
        assert all(pd.api.types.is_integer_dtype(table[c]) for c in COLUMNS[:3])


def test_prompt_and_image_tokens_are_the_processors_count_of_the_rows_own_prompt(costed, tiny_model, questions):
    """The processor applied to one row's logged prompt and its question's images, independently."""
    _, _, (samples, _, _), _ = costed
    image_pad = tiny_model.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    by_id = {q.id: q for q in questions}
    checked = 0
    for row in samples.head(4).itertuples():
        images = [Image.open(io.BytesIO(data)).convert("RGB") for data in by_id[row.id].images]
        ids = tiny_model.processor(text=[row.prompt], images=images or None, return_tensors="pt")["input_ids"][0]
        assert row.prompt_tokens == len(ids), row.id
        assert row.image_tokens == int((ids == image_pad).sum()), row.id
        checked += bool(images)
    assert checked and (samples["image_tokens"] > 0).all()  # every synthetic FinMME item shows a chart
    assert (samples["image_tokens"] < samples["prompt_tokens"]).all()


def test_a_question_shown_no_image_has_no_image_tokens(costed):
    _, _, (samples, variants, _), _ = costed
    none = variants[variants["ablation"] == "none"]
    assert len(none) == len(samples) and (none["image_tokens"] == 0).all()
    # the same text without the image: fewer prompt tokens, by more than nothing
    base = samples.set_index("id")["prompt_tokens"]
    assert (none.set_index("id")["prompt_tokens"] < base.loc[none["id"]]).all()


def test_generated_tokens_follow_the_decoder(costed):
    """A single choice is read from one prefill's option scores: nothing generated; a multiple
    choice decodes its letters and end, a number its characters and end (`n_generated_tokens`)."""
    _, _, (samples, _, _), _ = costed
    kinds = set(samples["kind"])
    assert {"single", "multi", "numerical"} <= kinds
    assert (samples.loc[samples["kind"] == "single", "generated_tokens"] == 0).all()
    decoded = samples[samples["kind"] != "single"]
    assert (decoded["generated_tokens"] == decoded["n_generated_tokens"]).all()
    assert (decoded["generated_tokens"] >= 1).all()


def test_results_totals_are_the_column_sums(costed):
    out, first, (samples, variants, results), _ = costed
    cost = results["cost"]
    assert cost == json.loads(json.dumps(first.results["cost"], default=str))
    for kind, group in samples.groupby("kind"):
        found = cost["by_kind"][kind]
        assert found["n"] == found["n_counted"] == len(group)
        for column in COLUMNS[:3]:
            assert found[column] == int(group[column].sum())
        assert found["seconds"] == pytest.approx(float(group["seconds"].sum()))
    for column in COLUMNS[:3]:
        assert cost["total"][column] == int(samples[column].sum())
        assert cost["variants"][column] == int(variants[column].sum())
    correct = float(samples["correct"].sum())
    assert cost["per_correct"]["correct"] == correct
    if correct:
        tokens = int(samples["prompt_tokens"].sum() + samples["generated_tokens"].sum())
        assert cost["per_correct"]["tokens"] == pytest.approx(tokens / correct)
        assert cost["per_correct"]["seconds"] == pytest.approx(float(samples["seconds"].sum()) / correct)
    schema = json.loads((Path(finbench.__file__).parent / "report" / "results.schema.json").read_text())
    jsonschema.validate(results, schema)


def test_seconds_add_up_to_the_batches_and_stay_within_the_compute_time(costed):
    _, _, (samples, variants, results), _ = costed
    spent = float(samples["seconds"].sum() + variants["seconds"].sum())
    assert 0 < spent <= results["throughput"]["seconds"]


def test_seconds_are_split_by_tokens_processed():
    """Two rows of one batch: 300 + 0 and 100 + 100 tokens processed share 1 s as 0.6 and 0.4."""
    rows = {0: Prediction(id="", answer="A", n_generated_tokens=1),
            1: Prediction(id="", answer="12", n_generated_tokens=100)}
    requests = [Choose(prompt=Prompt(messages=()), n_options=4),
                Generate(prompt=Prompt(messages=()), max_new_tokens=200)]
    out = with_costs(rows, requests, ([300, 100], [50, 0]), 1.0, 2)
    assert [out[r].generated_tokens for r in (0, 1)] == [0, 100]
    assert [out[r].seconds for r in (0, 1)] == pytest.approx([0.6, 0.4])
    assert (out[0].prompt_tokens, out[0].image_tokens) == (300, 50)
    uncounted = with_costs(rows, requests, None, 1.0, 4)  # nothing counted: equal shares of the batch's rows
    assert [uncounted[r].seconds for r in (0, 1)] == [0.25, 0.25] and uncounted[0].prompt_tokens is None


def test_a_resumed_run_keeps_the_counts_of_the_run_that_computed_them(costed):
    out, _, (samples, variants, results), again = costed
    assert again.results["n_computed"] == 0 and again.results["n_cached"] == LIMIT
    rerun = pd.read_parquet(out / "samples.parquet")
    pd.testing.assert_frame_equal(rerun[list(COLUMNS)], samples[list(COLUMNS)])
    assert again.results["cost"] == results["cost"]


def test_a_cache_written_before_counts_existed_reads_as_null(costed, tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                            tmp_path):
    """Rows cached without the three fields (a cache from before): served, counts null, no crash."""
    out, _, (samples, _, _), _ = costed
    cache = tmp_path / "old.sqlite"
    with sqlite3.connect(out / "cache.sqlite") as source, sqlite3.connect(cache) as target:
        source.backup(target)
    with sqlite3.connect(cache) as db:
        for key, payload in db.execute("SELECT key, prediction FROM samples").fetchall():
            data = {k: v for k, v in json.loads(payload).items() if k not in COLUMNS[:3]}
            db.execute("UPDATE samples SET prediction = ? WHERE key = ?", (json.dumps(data), key))
    result = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", cache=str(cache)), tiny_model,
                           show_progress=False)
    assert result.results["n_computed"] == 0
    written = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    assert written[list(COLUMNS[:3])].isna().all().all()
    assert written["seconds"].tolist() == pytest.approx(samples["seconds"].tolist())  # stored before: kept
    total = result.results["cost"]["total"]
    assert total["n_counted"] == 0 and total["prompt_tokens"] is None
    assert result.results["cost"]["per_correct"]["tokens"] is None
    assert "their tokens are not counted" in (tmp_path / "run" / "report.md").read_text()


def test_the_reports_show_the_cost_table(costed):
    out, _, (samples, _, results), _ = costed
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## Cost" in md and 'id="cost"' in html
    total = results["cost"]["total"]
    line = next(row for row in md.splitlines() if row.startswith("| total |"))
    assert f"{total['prompt_tokens']:,}" in line and f"{total['image_tokens']:,}" in line
    assert "per correct answer" in md and "per correct answer" in html


def test_judge_calls_are_their_own_kind():
    samples = pd.DataFrame({"kind": ["open", "open"], "sample_key": ["a", "a"], "correct": [1.0, 0.0],
                            "prompt_tokens": pd.array([10, 10], dtype="Int64"),
                            "image_tokens": pd.array([0, 0], dtype="Int64"),
                            "generated_tokens": pd.array([5, 5], dtype="Int64"), "seconds": [0.5, 0.5]})
    judge = {"n": 3, "n_counted": 3, "prompt_tokens": 30, "image_tokens": 0, "generated_tokens": 3, "seconds": 0.3}
    cost = cost_summary(samples, judge)
    assert cost["by_kind"]["open"]["n"] == 1  # one request shared by two questions: computed once
    assert cost["by_kind"]["judge"] == judge
    assert cost["total"]["prompt_tokens"] == 40 and cost["total"]["seconds"] == pytest.approx(0.8)
    assert cost["per_correct"]["tokens"] == pytest.approx(48.0)
    assert cost_summary(samples.assign(correct=0.0))["per_correct"] == {"correct": 0.0, "tokens": None, "seconds": None}


def test_a_judged_run_counts_the_judge_calls_and_each_shared_generation_once(tiny_model, tiny_qwen_dir, tmp_path):
    """FAMMA's official protocol asks one grouped call per main question (two sub-questions share a
    sample key) and a --judge model judges the open answers through the same batch loop."""
    from finbench.offline import famma_synthetic

    data = famma_synthetic.write_parquet(tmp_path / "famma.parquet", famma_synthetic.records(None))
    config = make_config(model=str(tiny_qwen_dir), benchmark="famma", data=str(data), out=str(tmp_path / "run"),
                       device="cpu", dtype="float32", protocol="official", max_new_tokens=8,
                       judge=str(tiny_qwen_dir), judge_max_new_tokens=8, bootstrap=0)
    first = run_benchmark(config, tiny_model, show_progress=False)
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    cost = first.results["cost"]
    judge = cost["by_kind"]["judge"]
    assert judge["n"] == judge["n_counted"] == first.results["judge"]["n_calls"] > 0
    assert judge["prompt_tokens"] > 0 and 0 < judge["generated_tokens"] <= 8 * judge["n"]
    computed = samples[samples["error"] == ""]
    distinct = computed.drop_duplicates("sample_key")
    assert len(distinct) < len(computed)  # a shared generation, shown on each of its questions' rows
    assert sum(c["n_counted"] for k, c in cost["by_kind"].items() if k != "judge") == len(distinct)
    assert cost["total"]["generated_tokens"] == int(distinct["generated_tokens"].sum()) + judge["generated_tokens"]
    assert (distinct["generated_tokens"] == distinct["n_generated_tokens"]).all()  # free text: every token decoded
    again = run_benchmark(config, tiny_model, show_progress=False)
    assert again.results["judge"]["n_computed"] == 0 and again.results["cost"] == json.loads(json.dumps(cost))


def _image_tokens_per_row_check(model, questions):
    from helpers import finmme_request

    shown, blind = finmme_request(questions[0]), finmme_request(questions[1], images=[])
    batch = model.prepare([shown, blind])
    per_row = model.image_tokens_per_row(batch)
    alone = [model.count_image_tokens(model.prepare([r])) for r in (shown, blind)]
    assert per_row == alone and per_row[0] > 0 and per_row[1] == 0
    assert sum(per_row) == model.count_image_tokens(batch)


def test_image_tokens_per_row_are_each_rows_own_count(tiny_model, questions):
    _image_tokens_per_row_check(tiny_model, questions)


def test_image_tokens_per_row_in_the_other_families(other_family, questions):
    _image_tokens_per_row_check(other_family, questions)


def test_a_sessions_prompt_tokens_add_every_turns_prefill(tiny_model, tiny_qwen_dir, tmp_path):
    """Each turn of a FinMTM session is prefilled again with its history: the session's prompt
    tokens are the sum of its turns' batch rows, recorded here as the adapter prepared them."""
    from test_finmtm import write_fixtures

    data = write_fixtures(tmp_path / "data")
    lengths: list[tuple[str, int]] = []  # (the rendered prompt, its real tokens) of every row prepared
    original = tiny_model.prepare

    def recording(requests):
        inputs = original(requests)
        lengths.extend((r.text or tiny_model.prompt_text(r), int(n))
                       for r, n in zip(requests, inputs["attention_mask"].sum(1).tolist()))
        return inputs

    tiny_model.prepare = recording
    try:
        config = make_config(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(data), out=str(tmp_path / "run"),
                           dtype="float32", device="cpu", max_new_tokens=6, bootstrap=0)
        run_benchmark(config, tiny_model, show_progress=False)
    finally:
        tiny_model.prepare = original
    session = pd.read_parquet(tmp_path / "run" / "samples.parquet").set_index("id").loc["s1"]
    turns = len(json.loads(session["raw_output"]))
    mine = [n for text, n in lengths if "Revenue in 2023?" in text]  # s1's first question, in every turn's history
    assert next(text for text, _ in lengths if "Revenue in 2023?" in text) == session["prompt"]
    assert turns == 3 and len(mine) == turns
    assert session["prompt_tokens"] == sum(mine) > mine[0]
    assert 0 < session["generated_tokens"] <= 6 * turns and session["image_tokens"] > 0


def test_the_seconds_of_the_same_rows_in_another_order_total_the_same_to_the_last_bit():
    # a rerun reads its cached judge calls in another order than they were answered: its cost must
    # equal the first run's (0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ as plain float sums)
    from finbench.runner.cost import totals

    rows = [{"prompt_tokens": 1, "image_tokens": 0, "generated_tokens": 1, "seconds": s} for s in (0.1, 0.2, 0.3)]
    assert totals(rows)["seconds"] == totals(rows[::-1])["seconds"] == 0.6
