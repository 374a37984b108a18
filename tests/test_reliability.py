"""Every bad input and fault ends as promised (README "Reliability").

- the bad-input corpus: 38 kinds of broken record in one data set, run once, each with its
  documented outcome (answered, or a per-sample error with a named message) asserted;
- broken files and options: one start-up line and exit code 2, nothing written;
- faults: Ctrl-C, a corrupt cache, a changed weight file, accounting that raises;
- determinism, and SIGKILL at 10 points with resume (slow).
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import ENV
from helpers import cache_rows as _cache_rows
from helpers import cli as finbench
from helpers import finmme_record
from helpers import png_bytes as _image
from PIL import Image

from finbench.benchmarks import finmme, get_benchmark
from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark


def _gif() -> bytes:
    frames = [Image.new("P", (32, 24), i * 60) for i in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    return buffer.getvalue()


def _record(qid: str, **overrides) -> dict:
    return finmme_record(qid, **{"image": {"path": "ok.png"}, "asset_class": "Equity", "chart_type": "Bar",
                                 "cognitive_dimension": "Perception", **overrides})


ANSWERED = None  # outcome: answered, no error
# id → (record overrides, expected outcome: ANSWERED or a substring of the per-sample error)
CORPUS: dict[str, tuple[dict, str | None]] = {
    # images
    "img-truncated": ({"image": {"path": "truncated.png"}}, "cannot be decoded"),
    "img-random-bytes": ({"image": {"path": "random.bin"}}, "cannot be decoded"),
    "img-zero-bytes": ({"image": {"path": "empty.png"}}, "cannot be decoded"),
    "img-1x1": ({"image": {"path": "one.png"}}, ANSWERED),
    "img-aspect-500": ({"image": {"path": "strip.png"}}, "preprocess error"),
    "img-bomb": ({"image": {"path": "bomb.png"}}, "cannot be decoded: DecompressionBombError"),
    "img-huge": ({"image": {"path": "huge.png"}}, "pixel limit"),
    "img-animated-gif": ({"image": {"path": "anim.gif"}}, ANSWERED),
    "img-cmyk": ({"image": {"path": "cmyk.jpg"}}, ANSWERED),
    "img-16-bit": ({"image": {"path": "sixteen.png"}}, ANSWERED),
    "img-missing-path": ({"image": {"path": "nowhere.png"}}, "does not exist"),
    "img-none": ({"image": None}, "missing image"),
    # options
    "opt-empty": ({"options": []}, "empty option list"),
    "opt-none": ({"options": None}, "empty option list"),
    "opt-15": ({"options": [str(i) for i in range(15)]}, "at most 14"),
    "opt-malformed-string": ({"options": "['10', '20'"}, "bad record"),
    "opt-duplicates": ({"options": ["10", "10", "30"]}, ANSWERED),  # letters still name them apart
    # answers
    "ans-beyond-options": ({"answer": "E"}, "beyond the 4 given"),
    "ans-empty": ({"answer": ""}, "no option letter"),
    "ans-none": ({"answer": None}, "missing answer"),
    "ans-double-comma": ({"question_type": "multiple_choice", "answer": "A,,C"}, ANSWERED),  # gold AC
    "ans-n-slash-a": ({"answer": "N/A"}, "beyond the 4 given"),
    "ans-letter-range": ({"question_type": "multiple_choice", "answer": "A-C"}, ANSWERED),  # {A, C}, as eval.py
    "ans-number-range": ({"question_type": "numerical", "options": [], "answer": "5-10", "tolerance": 0.1},
                         "could not convert"),
    # tolerances (numerical items)
    "tol-nan": ({"question_type": "numerical", "answer": "8.81%", "tolerance": math.nan}, "finite number"),
    "tol-negative": ({"question_type": "numerical", "answer": "8.81", "tolerance": -0.5}, "finite number"),
    "tol-text": ({"question_type": "numerical", "answer": "8.81", "tolerance": "about one"}, "not a number"),
    "tol-infinite": ({"question_type": "numerical", "answer": "8.81", "tolerance": math.inf}, "finite number"),
    "tol-absent": ({"question_type": "numerical", "answer": "8.81"}, ANSWERED),  # tolerance 0.0, as eval.py
    # records
    "rec-unknown-type": ({"question_type": "essay"}, "unknown question_type 'essay'"),
    "rec-empty-question": ({"question_text": "  "}, "question_text is empty"),
    "rec-huge-prompt": ({"question_text": "rising " * 30_000}, "exceeds the model's context of 32768"),
    "rec-no-domain": ({"knowledge_domain": None}, ANSWERED),
    "rec-dup-id": ({"id": "img-1x1"}, "duplicate id 'img-1x1'"),
}
# records that cannot be written as a dict line: (raw JSONL line, expected error substring)
RAW_LINES = {
    "line-malformed-json": (b'{"id": "x", "question_text": ', "malformed JSON"),
    "line-not-utf8": (b'{"id": "y", "question_text": "caf\xe9 \xff"}', "field 'question_text' is not UTF-8 at byte"),
    "line-not-an-object": (b'["a", "list"]', "expected a JSON object"),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    files = {
        "ok.png": _image(), "truncated.png": _image(64, 48)[:60], "random.bin": os.urandom(3000), "empty.png": b"",
        "one.png": _image(1, 1), "strip.png": _image(6000, 12), "bomb.png": _image(15000, 15000, mode="1"),
        "huge.png": _image(9000, 8000, mode="1"), "anim.gif": _gif(), "cmyk.jpg": _image(40, 30, "CMYK", "JPEG"),
        "sixteen.png": _image(40, 30, "I;16"),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    lines = [json.dumps(_record(qid, **overrides)).encode() for qid, (overrides, _) in CORPUS.items()]
    lines.append(json.dumps({k: v for k, v in _record("rec-no-id").items() if k != "id"}).encode())
    line_numbers = {}
    for name, (raw, _) in RAW_LINES.items():
        lines.append(raw)
        line_numbers[name] = len(lines)
    lines.insert(3, b"")  # a blank line is skipped, not an error
    line_numbers = {k: v + 1 for k, v in line_numbers.items()}  # shifted by the blank line
    data = folder / "finmme.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    return data, line_numbers


@pytest.fixture(scope="module")
def corpus_run(corpus, tiny_model, tiny_qwen_dir, tmp_path_factory):
    data, _ = corpus
    out = tmp_path_factory.mktemp("corpus-run")
    result = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(data), batch_size=4, dtype="float32",
                                     device="cpu", out=str(out / "run"), bootstrap=0), tiny_model,
                           show_progress=False)
    return result


def test_bad_input_corpus_has_at_least_30_kinds():
    assert len(CORPUS) + len(RAW_LINES) + 1 >= 30


@pytest.mark.parametrize("qid", sorted(CORPUS))
def test_bad_input_corpus_outcome(corpus_run, qid):
    samples = corpus_run.samples.set_index("id")
    expected = CORPUS[qid][1]
    if qid == "rec-dup-id":  # a repeated id is renamed, so that ids stay unique
        (qid,) = [i for i in samples.index if i.startswith("img-1x1#dup")]
    row = samples.loc[qid]
    if expected is ANSWERED:
        assert row["error"] == "", row["error"]
        assert row["answer"] != "" or row["kind"] == "numerical"
    else:
        assert expected in row["error"], row["error"]


def test_broken_lines_are_errors_naming_file_and_line(corpus, corpus_run):
    data, line_numbers = corpus
    errors = corpus_run.samples.set_index("id")["error"]
    for name, (_, expected) in RAW_LINES.items():
        origin = f"{data}:{line_numbers[name]}"
        assert origin in errors.index, sorted(errors.index)
        assert expected in errors[origin] and origin in errors[origin]


def test_corpus_results_count_every_error_and_keep_ids_unique(corpus_run):
    samples, results = corpus_run.samples, corpus_run.results
    n_expected = len(CORPUS) + len(RAW_LINES) + 1
    assert len(samples) == n_expected and samples["id"].is_unique
    assert results["errors"]["count"] == int((samples["error"] != "").sum())
    assert any("repeat an earlier id" in note for note in results["notes"])
    # the record without an id gets its position; the duplicate is renamed, never merged
    assert "rec-no-id" not in set(samples["id"]) and any(i.startswith("rec-dup-id") or "#dup" in i for i in samples["id"])
    gold = samples.set_index("id")["gold"]
    assert gold["ans-double-comma"] == "AC" and gold["ans-letter-range"] == "AC"


def test_record_without_a_domain_is_left_out_of_F_as_eval_py_does(tmp_path):
    from finbench.scoring.tables import score_samples

    records = [_record("d0", answer="A"), _record("d1", answer="B"), _record("d2", knowledge_domain="Bonds"),
               _record("d3", knowledge_domain=None, answer="D")]
    answers = {"d0": "A", "d1": "C", "d2": "C", "d3": "D"}  # Banking 1/2, Bonds 1/1, no domain 1/1
    path = tmp_path / "d.jsonl"
    (tmp_path / "ok.png").write_bytes(_image())
    path.write_text("\n".join(json.dumps(r) for r in records))
    questions = finmme.load_questions(path)
    samples = pd.DataFrame([{"id": q.id, "kind": q.kind, "gold": q.gold, "answer": answers[q.id], "error": "",
                             "n_options": len(q.options), "tolerance": q.tolerance, **q.meta} for q in questions])
    scores = score_samples(samples, benchmark=get_benchmark("finmme"))
    # eval.py calculate_finscore, restated: groupby('knowledge_domain') drops the None row from F only
    frame = pd.DataFrame(records).assign(correct_or_not=[answers[r["id"]] == r["answer"] for r in records])
    assert scores["domain_accuracy"] == pytest.approx(frame.groupby("knowledge_domain")["correct_or_not"].mean().mean())
    assert scores["domain_accuracy"] == pytest.approx(0.75)  # not (0.5 + 1 + 1) / 3 with a "" domain
    assert scores["accuracy"] == pytest.approx(0.75)


# ---- broken files: one start-up line ---------------------------------------------------------------
def _one_line_exit_2(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.fixture(scope="module")
def good_parquet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    frame = pd.DataFrame([_record(f"p{i}", image={"bytes": _image(), "path": "x.png"}) for i in range(3)])
    path = folder / "finmme.parquet"
    frame.to_parquet(path)
    return path


@pytest.mark.parametrize("case", ["empty-jsonl", "truncated-parquet", "no-finmme-columns", "no-question-text",
                                  "not-json"])
def test_unusable_data_file_is_one_start_up_line(case, tmp_path, good_parquet, tiny_qwen_dir):
    path = tmp_path / {"empty-jsonl": "d.jsonl", "truncated-parquet": "d.parquet", "not-json": "d.json"}.get(
        case, "d.parquet")
    if case == "empty-jsonl":
        path.write_text("")
        needle = "no records (the data is empty)"
    elif case == "truncated-parquet":
        path.write_bytes(good_parquet.read_bytes()[:300])
        needle = f"cannot read {path}"
    elif case == "not-json":
        path.write_text("this is { not json\nat all")
        needle = f"cannot read {path}"
    else:
        frame = pd.read_parquet(good_parquet)
        drop = {"no-finmme-columns": list(frame.columns), "no-question-text": ["question_text"]}[case]
        frame = frame.drop(columns=drop).assign(unrelated=1)
        frame.to_parquet(path)
        needle = "missing required column(s) question_text"
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(path), "--out", str(tmp_path / "run"),
                    "--device", "cpu", "--no-progress")
    _one_line_exit_2(done, needle)
    assert not (tmp_path / "run").exists()  # nothing written: not even a folder holding run.log


def test_filters_that_match_nothing_name_the_values_the_data_has(tmp_path, good_parquet, tiny_qwen_dir):
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out", str(tmp_path / "run"),
                    "--device", "cpu", "--no-progress", "--domain", "Bankng", "--question-type", "single_choice")
    _one_line_exit_2(done, "finmme: no questions matched", "--domain Bankng: the data has Banking")
    assert "--question-type" not in done.stderr  # single_choice exists: only the filter that failed is listed
    assert not (tmp_path / "run").exists()
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out", str(tmp_path / "run"),
                    "--device", "cpu", "--no-progress", "--question-type", "single")
    _one_line_exit_2(done, "--question-type single: the data has single_choice")
    assert not (tmp_path / "run").exists()
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out", str(tmp_path / "run"),
                    "--device", "cpu", "--no-progress", "--domain", "Banking", "--question-type", "numerical",
                    "--question-type", "single_choice", "--domain", "Banking")
    assert done.returncode == 0, done.stderr[-2000:]  # both filters match: the run goes on
    empty = tmp_path / "no-numerical.parquet"
    pd.read_parquet(good_parquet).assign(question_type="numerical", knowledge_domain="Energy").iloc[:1].pipe(
        lambda frame: pd.concat([pd.read_parquet(good_parquet), frame])).to_parquet(empty)
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(empty), "--out", str(tmp_path / "run2"),
                    "--device", "cpu", "--no-progress", "--domain", "Banking", "--question-type", "numerical")
    _one_line_exit_2(done, "each filter matches some questions, but no question matches all of them")


def test_folder_mixing_formats_reads_each_file_by_its_own(tmp_path, good_parquet):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(good_parquet.read_bytes())
    (folder / "b.jsonl").write_text(json.dumps(_record("j0", image={"path": "ok.png"})) + "\n")
    (folder / "ok.png").write_bytes(_image())
    frame = pd.read_parquet(good_parquet).assign(id=lambda f: "arrow-" + f["id"])
    import pyarrow as pa

    with pa.OSFile(str(folder / "c.arrow"), "wb") as sink, pa.ipc.new_stream(sink, pa.Table.from_pandas(frame).schema) as writer:
        writer.write_table(pa.Table.from_pandas(frame))
    notes: list[str] = []
    questions = finmme.load_questions(folder, notes=notes)
    assert [q.id for q in questions] == ["p0", "p1", "p2", "j0", "arrow-p0", "arrow-p1", "arrow-p2"]
    assert all(q.error is None for q in questions), [q.error for q in questions]
    assert len({q.images for q in questions}) == 1  # the same image from bytes, a relative path and arrow


def test_missing_optional_columns_are_a_warning_in_results(tmp_path, good_parquet, tiny_model, tiny_qwen_dir):
    frame = pd.read_parquet(good_parquet).drop(columns=["asset_class", "chart_type"])
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    result = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(path), dtype="float32", device="cpu",
                                     out=str(tmp_path / "run"), bootstrap=0), tiny_model, show_progress=False)
    notes = " | ".join(result.results["notes"])
    assert "'asset_class' is missing" in notes and "'chart_type' is missing" in notes
    assert result.results["errors"]["count"] == 0


def test_non_utf8_field_in_parquet_is_that_row_s_error(tmp_path, good_parquet):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(good_parquet)
    texts = [b"fine", b"caf\xe9", b"also fine"]  # latin-1 bytes where UTF-8 belongs
    index = table.schema.get_field_index("question_text")
    table = table.set_column(index, pa.field("question_text", pa.binary()), pa.array(texts, type=pa.binary()))
    pq.write_table(table, tmp_path / "d.parquet")
    questions = finmme.load_questions(tmp_path / "d.parquet")
    assert [q.error is None for q in questions] == [True, False, True]
    assert "not valid UTF-8 (byte 0xe9" in questions[1].error


# ---- bad options: one line, exit 2 -----------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--limit", "0"], "--limit 0: must be at least 1"),
    (["--limit", "-1"], "--limit -1: must be at least 1"),
    (["--numeric-budget", "0"], "--numeric-budget 0: must be at least 1"),
    (["--max-pixels", "-5"], "--max-pixels -5: must be at least 1"),
    (["--device", "tpu"], "--device tpu: expected auto, cpu, cuda or cuda:N"),
    (["--workers", "0"], "--workers 0"),
    (["--data", "nobody/not-a-cached-set"], "cannot load this hub data set"),
])
def test_bad_option_is_one_line_and_exit_code_2(args, needle, tmp_path, good_parquet, tiny_qwen_dir):
    base = {"--model": str(tiny_qwen_dir), "--data": str(good_parquet), "--out": str(tmp_path / "run")}
    base.update(dict(zip(args[::2], args[1::2])))
    done = finbench("run", *[x for kv in base.items() for x in kv], "--no-progress")
    _one_line_exit_2(done, needle)


def test_unwritable_output_folder_is_one_line(tmp_path, good_parquet, tiny_qwen_dir):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out",
                    str(blocker / "run"), "--no-progress")
    _one_line_exit_2(done, "cannot write there")


# ---- faults ------------------------------------------------------------------------------------------
def _run(tiny_model, tiny_qwen_dir, data, out, **overrides):
    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(data), dtype="float32", device="cpu", out=str(out),
                       bootstrap=0, **overrides)
    return run_benchmark(config, tiny_model, show_progress=False)


WRONG_TYPED_ROWS = {  # a stored Prediction's field → a value of the wrong type
    "confidence-text": ("confidence", "high"), "logprobs-text": ("option_logprobs", "x"),
    "logprobs-strings": ("option_logprobs", ["a", "b"]), "answer-number": ("answer", 123),
    "seconds-text": ("seconds", "x"), "tokens-text": ("n_generated_tokens", "7"), "error-number": ("error", 5),
    "steps-text": ("step_logprobs", [["x"]]), "not-an-object": (None, None),
}


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad-row", *WRONG_TYPED_ROWS])
def test_corrupt_cache_is_moved_aside_or_missed_never_a_crash(damage, tmp_path, synthetic_parquet, tiny_model,
                                                               tiny_qwen_dir):
    first = _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=6)
    cache = tmp_path / "run" / "cache.sqlite"
    with sqlite3.connect(cache) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if damage == "garbage":
        cache.write_bytes(os.urandom(8192))
    elif damage == "truncated":
        cache.write_bytes(cache.read_bytes()[:1500])
    elif damage == "bad-row":
        with sqlite3.connect(cache) as connection:
            connection.execute("UPDATE samples SET prediction = '{not json' WHERE rowid = 1")
    else:  # valid JSON, a field of the wrong type: the samples table would fail after the whole run
        field, value = WRONG_TYPED_ROWS[damage]
        with sqlite3.connect(cache) as connection:
            stored = json.loads(connection.execute("SELECT prediction FROM samples WHERE rowid = 1").fetchone()[0])
            damaged = [stored] if field is None else {**stored, field: value}
            connection.execute("UPDATE samples SET prediction = ? WHERE rowid = 1", (json.dumps(damaged),))
    second = _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=6)
    columns = ["id", "answer", "gold", "error"]
    pd.testing.assert_frame_equal(second.samples[columns], first.samples[columns])
    if damage not in ("garbage", "truncated"):
        assert second.results["n_computed"] == 1 and second.results["n_cached"] == 5
    else:
        assert second.results["n_computed"] == 6
        assert any("moved it to cache.sqlite.corrupt-" in n for n in second.results["notes"])
        assert list((tmp_path / "run").glob("cache.sqlite.corrupt-*"))


def test_changed_weights_change_the_cache_key_and_digests_are_remembered(tmp_path, tiny_qwen_dir, synthetic_parquet):
    import shutil

    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.runner.cache import PredictionCache

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_qwen_dir, model_dir)
    weights = model_dir / "model.safetensors"
    run = lambda out: run_benchmark(RunConfig.flat(model=str(model_dir), data=str(synthetic_parquet), limit=4,
                                              dtype="float32", device="cpu", out=str(tmp_path / out),
                                              cache=str(tmp_path / "cache.sqlite"), bootstrap=0),
                                    load_model(str(model_dir), LoadSpec(dtype="float32", device="cpu")),
                                    show_progress=False)
    first = run("a")
    assert first.results["n_computed"] == 4
    assert run("b").results["n_computed"] == 0  # unchanged: all from the cache
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2  # far from the first and last MiB: the old digest missed this
    data[middle] ^= 0x01
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(time.time_ns(), time.time_ns() + 5_000_000))
    changed = run("c")
    assert changed.results["n_computed"] == 4, "a changed tensor must not reuse old answers"
    assert changed.results["fingerprint"]["weights"] != first.results["fingerprint"]["weights"]
    cache = PredictionCache(tmp_path / "cache.sqlite")
    rows = cache.connection.execute("SELECT path, sha256 FROM file_digests").fetchall()
    assert any(path.endswith("model.safetensors") for path, _ in rows)
    cache.close()


def test_accounting_that_raises_never_discards_answers(tmp_path, synthetic_parquet, tiny_model, tiny_qwen_dir,
                                                       monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("prefill_flops supports Qwen2.5-VL-style configs")

    monkeypatch.setattr(tiny_model, "prefill_flops", broken)
    result = _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=8, batch_size=4)
    assert result.results["errors"]["count"] == 0
    choice = result.samples["kind"] != "numerical"
    assert (result.samples.loc[choice, "answer"] != "").all()
    assert result.results["throughput"]["accounting_errors"] >= 2  # every batch's count raised


def test_processor_rejection_is_a_per_sample_error_and_the_batch_goes_on(tmp_path, tiny_model, tiny_qwen_dir):
    records = [_record(f"r{i}", image={"bytes": _image(), "path": "x.png"}) for i in range(3)]
    records[1]["image"] = {"bytes": _image(6000, 12), "path": "strip.png"}
    path = tmp_path / "d.parquet"
    pd.DataFrame(records).to_parquet(path)
    for _ in range(2):  # and on every rerun
        result = _run(tiny_model, tiny_qwen_dir, path, tmp_path / "run", batch_size=3)
        errors = result.samples.set_index("id")["error"]
        assert errors["r0"] == "" and errors["r2"] == ""
        assert errors["r1"].startswith("preprocess error") and "aspect ratio" in errors["r1"]


def test_score_predictions_for_some_ids_says_so(tmp_path, good_parquet):
    predictions = tmp_path / "p.jsonl"
    predictions.write_text(json.dumps({"id": "p0", "answer": "C"}) + "\n")
    done = finbench("score", "--data", str(good_parquet), "--predictions", str(predictions))
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout)
    assert any("2 of 3 questions have no prediction" in n for n in scores["notes"])
    assert "2 of 3 questions have no prediction" in done.stderr
    assert scores["accuracy"] == pytest.approx(1 / 3)


def test_compare_says_when_it_narrows_and_refuses_mixed_protocols(tmp_path, synthetic_parquet, tiny_model,
                                                                   tiny_qwen_dir):
    _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "a", limit=6)
    _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "b", limit=4)
    _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "c", limit=4, protocol="official", max_new_tokens=3)
    done = finbench("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab.json"),
                    "--bootstrap", "50")
    assert done.returncode == 0, done.stderr
    notes = json.loads((tmp_path / "ab.json").read_text())["notes"]
    assert any("a: 2 of its 6 questions are not in both a and b" in n for n in notes)
    assert "not in both a and b" in done.stdout
    refused = finbench("compare", str(tmp_path / "b"), str(tmp_path / "c"), "--bootstrap", "50")
    _one_line_exit_2(refused, "different protocols")
    allowed = finbench("compare", str(tmp_path / "b"), str(tmp_path / "c"), "--bootstrap", "50",
                       "--allow-mixed-protocols", "--out", str(tmp_path / "bc.json"))
    assert allowed.returncode == 0, allowed.stderr
    assert any("different protocols" in n for n in json.loads((tmp_path / "bc.json").read_text())["notes"])
    # two official runs store no option probabilities: compared all the same, with no distribution items
    _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "d", limit=4, protocol="official", max_new_tokens=2)
    official = finbench("compare", str(tmp_path / "c"), str(tmp_path / "d"), "--bootstrap", "50",
                        "--out", str(tmp_path / "cd.json"))
    assert official.returncode == 0, official.stderr
    compared = json.loads((tmp_path / "cd.json").read_text())
    assert compared["distributions"]["runs"]["d"]["n"] == 0


def test_a_run_whose_every_sample_failed_exits_non_zero(tmp_path, tiny_qwen_dir):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(_record(f"x{i}", image=None)) for i in range(3)))
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(path), "--out", str(tmp_path / "run"),
                    "--device", "cpu", "--no-progress")
    assert done.returncode == 1 and "every one of the 3 samples failed" in done.stderr
    assert (tmp_path / "run" / "results.json").exists()  # still written: the errors are the result


def _start_run(tiny_qwen_dir, data, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "finbench.cli", "run", "--model", str(tiny_qwen_dir), "--data",
                             str(data), "--batch-size", "2", "--dtype", "float32", "--device", "cpu",
                             "--no-progress", "--bootstrap", "0", "--out", str(out), *extra],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)


def _interruptible() -> None:
    """The run hears Ctrl-C as a user's terminal sends it, even when this suite runs as a
    background job (which starts every child with SIGINT ignored, so Python never installs its
    KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_rows(process, cache: Path, rows: int, deadline_s: float = 300) -> None:
    deadline = time.time() + deadline_s
    while _cache_rows(cache) < rows and time.time() < deadline and process.poll() is None:
        time.sleep(0.01)


@pytest.mark.slow
def test_ctrl_c_says_how_many_answers_were_saved_and_exits_130(tmp_path, synthetic_parquet, tiny_qwen_dir):
    out = tmp_path / "run"
    process = _start_run(tiny_qwen_dir, synthetic_parquet, out)
    _wait_for_rows(process, out / "cache.sqlite", 4)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    saved = _cache_rows(out / "cache.sqlite")
    assert f"interrupted: {saved} of 72 answers saved; rerun the same command to resume" in stderr
    assert "Traceback" not in stderr


# A process that has imported finbench, torch and transformers once and forks a child per run: each
# child is a real process, killed with a real SIGKILL, without paying for the imports again (most of
# what ten fresh starts cost). It prints each child's pid, then how the child ended.
FORK_SERVER = r"""
import json, os, signal, sys
import finbench.cli, finbench.runner.engine, transformers
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1), os.dup2(devnull, 2)
        sys.argv = ["finbench", *json.loads(line)]
        try:
            finbench.cli.app(sys.argv[1:])
        except SystemExit as stop:
            os._exit(stop.code if isinstance(stop.code, int) else 1)
        os._exit(0)
    print(pid, flush=True)
    print(os.waitpid(pid, 0)[1], flush=True)
"""


@pytest.mark.slow
def test_sigkill_at_10_points_then_resume_loses_and_changes_nothing(tmp_path, synthetic_parquet, tiny_model,
                                                                     tiny_qwen_dir):
    # small runs (the first 32 questions, 16 batches of 2): the time goes to the eleven process
    # starts, not to answering; every kill lands between two commits, the last well before the end
    n = 32
    out = tmp_path / "killed"
    cache = out / "cache.sqlite"
    kill_points = [4 + 2 * k for k in range(10)]  # rows committed when each kill is sent: 4, 6, ..., 22
    seen = []
    args = ["run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--batch-size", "2", "--dtype",
            "float32", "--device", "cpu", "--no-progress", "--bootstrap", "0", "--out", str(out), "--limit", str(n)]
    server = subprocess.Popen([sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=ENV)
    try:
        for point in kill_points:
            server.stdin.write(json.dumps(args) + "\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            _wait_for_rows(server, cache, point)
            os.kill(pid, signal.SIGKILL)
            status = int(server.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            seen.append(_cache_rows(cache))
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert seen == sorted(seen) and seen[0] >= 4 and seen[-1] < n, seen
    assert not (out / "samples.parquet").exists()
    resumed = _start_run(tiny_qwen_dir, synthetic_parquet, out, "--limit", str(n))
    _, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["n_cached"] == seen[-1] and results["n_computed"] == n - seen[-1]
    reference = _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / "reference", batch_size=2,
                     limit=n).samples
    resumed_samples = pd.read_parquet(out / "samples.parquet")
    assert resumed_samples["id"].is_unique and len(resumed_samples) == n  # 0 lost, 0 duplicated
    assert _cache_rows(cache) == n
    columns = [c for c in reference.columns if c not in ("seconds",)]
    pd.testing.assert_frame_equal(resumed_samples[columns], reference[columns], check_exact=False, atol=1e-6)


def test_the_same_run_twice_gives_identical_samples(tmp_path, synthetic_parquet, tiny_model, tiny_qwen_dir):
    runs = [_run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path / f"run{n}", limit=24, batch_size=4).samples
            for n in range(2)]
    columns = [c for c in runs[0].columns if c != "seconds"]
    pd.testing.assert_frame_equal(runs[0][columns], runs[1][columns], check_exact=True)


# ---- FinMME fidelity on unusual records (eval.py restated) ---------------------------------------------
def _eval_py_check(item: dict, model_answer: str) -> bool:
    """eval.py `check_answer`, restated from luo-junyu/FinMME@bc37fdf."""
    import re

    match = re.search(r"(?i)Answer\s*:\s*([^\s\n]+)", model_answer) if model_answer else None
    token = match.group(1) if match else ""
    for debris in ("**", ":", "$\\boxed{", "}$", "\\$", "$", "{", "\\boxed"):
        token = token.replace(debris, "")
    correct = str(item["answer"]) if item["answer"] is not None else ""
    if item["question_type"] == "numerical":
        try:
            value = float("".join(c for c in token if c.isdigit() or c in ".-"))
            gold = float("".join(c for c in correct if c.isdigit() or c in ".-"))
            return abs(value - gold) <= float(item.get("tolerance", 0.0))
        except (ValueError, TypeError):
            return False
    return {c for c in token.upper() if c in "ABCDEFGHIJKLMN"} == {c for c in correct.upper() if c in "ABCDEFGHIJKLMN"}


@pytest.mark.parametrize("item, output", [
    ({"question_type": "numerical", "answer": "8.81"}, "Answer: 8.81"),  # no tolerance field → 0.0: right
    ({"question_type": "numerical", "answer": "8.81"}, "Answer: 8.82"),  # … and 8.82 is wrong
    ({"question_type": "single_choice", "answer": "A"}, "Answer: \\bo\\boxedxed"),  # one pass leaves \boxed → {B,D,E}
    ({"question_type": "multiple_choice", "answer": "BDE"}, "Answer: \\bo\\boxedxed"),
    ({"question_type": "single_choice", "answer": "B"}, "**Answer:** B"),
])
def test_official_judging_equals_eval_py_on_unusual_records(item, output):
    from finbench.scoring.tables import score_samples

    record = _record("u0", **item, **({"options": []} if item["question_type"] == "numerical" else
                                       {"options": ["x", "y", "z", "w", "v"]}))
    if "tolerance" not in item:
        record.pop("tolerance", None)
    question = finmme.record_to_question({**record, "image": {"bytes": _image()}}, 0)
    assert question.error is None, question.error
    samples = pd.DataFrame([{"id": "u0", "kind": question.kind, "gold": question.gold,
                             "answer": finmme.extract_official(output), "n_options": len(question.options),
                             "tolerance": question.tolerance, "error": "", **question.meta}])
    scores = score_samples(samples, benchmark=get_benchmark("finmme"))
    assert scores["accuracy"] == float(_eval_py_check(record, output))


def test_hub_style_image_struct_and_base64_are_not_confused(tmp_path):
    """A JSON record's image may be a path string; a base64 string that is not a file is an error."""
    (tmp_path / "a.png").write_bytes(_image())
    ok = finmme.record_to_question(_record("s0", image="a.png"), 0, str(tmp_path))
    bad = finmme.record_to_question(_record("s1", image=base64.b64encode(_image()).decode()), 0, str(tmp_path))
    assert ok.error is None and ok.images == (_image(),)
    assert bad.error is not None and "does not exist" in bad.error


# ---- damaged run folders, model folders and paths given to the other commands -------------------------
def _cli_one_line_exit_2(args: list[str], *needles: str) -> None:
    """In-process `finbench ARGS`: exit code 2, one line on stderr, no traceback."""
    from typer.testing import CliRunner

    from finbench.cli import app

    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, (done.exit_code, done.output, done.exception)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.output, done.output
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, synthetic_parquet, tiny_model, tiny_qwen_dir):
    return _run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory.mktemp("finished") / "run",
                limit=4).out_dir


def test_damaged_run_folders_and_bad_paths_are_one_line(finished_run, tmp_path):
    import shutil

    truncated = tmp_path / "truncated"
    shutil.copytree(finished_run, truncated)
    (truncated / "samples.parquet").write_bytes((finished_run / "samples.parquet").read_bytes()[:3000])
    _cli_one_line_exit_2(["score", str(truncated)], "truncated", "Parquet")
    _cli_one_line_exit_2(["report", str(truncated)], "truncated", "Parquet")
    bad_json = tmp_path / "bad-json"
    shutil.copytree(finished_run, bad_json)
    (bad_json / "results.json").write_text("{oops")
    _cli_one_line_exit_2(["report", str(bad_json)], "bad-json")
    _cli_one_line_exit_2(["score", str(finished_run), "--variant", "foo"], "variant")
    _cli_one_line_exit_2(["score", str(finished_run), "--bootstrap", "-1"], "--bootstrap -1")
    _cli_one_line_exit_2(["compare", str(finished_run), str(truncated), "--bootstrap", "-3"], "--bootstrap -3")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    copy = tmp_path / "copy"
    shutil.copytree(finished_run, copy)
    _cli_one_line_exit_2(["compare", str(finished_run), str(copy), "--out", str(blocker / "x.json")], "a-file")
    _cli_one_line_exit_2(["models", "make-tiny", "qwen2.5-vl", str(blocker)], "not an empty folder")
    _cli_one_line_exit_2(["models", "make-tiny", "qwen2.5-vl", str(finished_run)], "not an empty folder", "--force")
    _cli_one_line_exit_2(["demo", "--n-items", "0"], "--n-items 0")


def test_predictions_that_are_not_objects_or_not_a_file_are_one_line(good_parquet, tmp_path):
    listed = tmp_path / "list.jsonl"
    listed.write_text("[1, 2]\n")
    _cli_one_line_exit_2(["score", "--data", str(good_parquet), "--predictions", str(listed)], "list.jsonl:1",
                         "not an object")
    _cli_one_line_exit_2(["score", "--data", str(good_parquet), "--predictions", str(tmp_path)])


def test_a_file_given_as_cache_by_mistake_is_refused_and_left_alone(good_parquet, tiny_qwen_dir, tmp_path):
    mine = tmp_path / "results.json"
    mine.write_text('{"mine": true}')
    base = ["run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out", str(tmp_path / "run"),
            "--no-progress"]
    _cli_one_line_exit_2([*base, "--cache", str(mine)], "not a finbench cache")
    assert mine.read_text() == '{"mine": true}' and not list(tmp_path.glob("results.json.corrupt-*"))
    _cli_one_line_exit_2([*base, "--cache", str(tmp_path)], "is a folder")


@pytest.mark.parametrize("damage", ["no-weights", "cut-weights", "no-processor-config", "no-tokenizer"])
def test_model_folder_with_missing_or_damaged_files_is_one_line(damage, good_parquet, tiny_qwen_dir, tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_qwen_dir, model)
    weights = model / "model.safetensors"
    if damage == "no-weights":
        weights.unlink()
    elif damage == "cut-weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "no-processor-config":
        for name in ("processor_config.json", "preprocessor_config.json"):
            (model / name).unlink(missing_ok=True)
    else:
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
            (model / name).unlink(missing_ok=True)
    _cli_one_line_exit_2(["run", "--model", str(model), "--data", str(good_parquet), "--out", str(tmp_path / "run"),
                          "--no-progress"], str(model))


def test_a_relative_data_path_is_recorded_so_report_finds_the_images_from_anywhere(
        tmp_path, synthetic_parquet, tiny_model, tiny_qwen_dir, monkeypatch):
    from finbench.report.html import write_report

    monkeypatch.chdir(synthetic_parquet.parent)
    result = _run(tiny_model, tiny_qwen_dir, synthetic_parquet.name, tmp_path / "run", limit=3)
    assert result.results["config"]["data"] == str(synthetic_parquet.resolve())
    monkeypatch.chdir(tmp_path)  # elsewhere: the report is rebuilt from the run folder alone
    (tmp_path / "run" / "report.html").unlink()
    write_report(tmp_path / "run")
    assert (tmp_path / "run" / "report.html").read_text().count("data:image/jpeg;base64,") == 3


def test_data_for_an_unknown_benchmark_names_it(good_parquet, tiny_qwen_dir, tmp_path):
    _cli_one_line_exit_2(["run", "--model", str(tiny_qwen_dir), "--benchmark", "finmme,famma", "--data",
                          f"finmme={good_parquet}", "--data", f"nope={good_parquet}", "--out", str(tmp_path / "r")],
                         "unknown benchmark 'nope'")


def test_a_model_folder_spelled_another_way_is_served_from_the_cache(good_parquet, tiny_qwen_dir, tmp_path,
                                                                     monkeypatch):
    from typer.testing import CliRunner

    from finbench.cli import app

    def run(model: str) -> dict:
        done = CliRunner().invoke(app, ["run", "--model", model, "--data", str(good_parquet), "--limit", "3",
                                        "--dtype", "float32", "--device", "cpu", "--bootstrap", "0",
                                        "--out", str(tmp_path / "run"), "--no-progress"])
        assert done.exit_code == 0, done.output
        return json.loads((tmp_path / "run" / "results.json").read_text())

    assert run(str(tiny_qwen_dir))["n_computed"] == 3
    monkeypatch.chdir(tiny_qwen_dir.parent)
    again = run(f"./{tiny_qwen_dir.name}")
    assert again["n_cached"] == 3 and again["n_computed"] == 0
    assert again["throughput"]["all_from_cache"] and again["throughput"]["samples_per_s"]  # the first run's rate


def test_an_attention_implementation_whose_package_is_missing_is_one_line(good_parquet, tiny_qwen_dir, tmp_path):
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    _cli_one_line_exit_2(["run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out",
                          str(tmp_path / "run"), "--no-progress", "--attn-implementation", "flash_attention_2"],
                         "FlashAttention2", "(a package these options need is not installed)")


def test_brackets_in_paths_and_values_reach_the_console_as_typed(good_parquet, tiny_qwen_dir, tmp_path):
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(tmp_path / "nothere[v2].parquet"),
                    "--out", str(tmp_path / "run"), "--no-progress")
    _one_line_exit_2(done, "nothere[v2].parquet")
    out = tmp_path / "o[v1]"
    done = finbench("run", "--model", str(tiny_qwen_dir), "--data", str(good_parquet), "--out", str(out),
                    "--no-progress", "--limit", "1", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"wrote{out / 'results.json'}" in "".join(done.stdout.split()), done.stdout  # (however Rich wraps it)


def test_an_undecodable_image_gives_the_same_message_every_run():
    from finbench.runner.preprocess import ImageError, decode_images
    from finbench.core.types import Question

    messages = set()
    for _ in range(2):
        with pytest.raises(ImageError) as caught:
            decode_images(Question(id="x", benchmark="finmme", kind="single", text="?", images=(b"not an image",)))
        messages.add(str(caught.value))
    (message,) = messages
    assert "cannot identify image file" in message and "0x" not in message
