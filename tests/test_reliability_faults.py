"""Faults and silent misreads end as promised (README "Reliability"): a full disk, a cache made
immutable, a run folder deleted mid-run and SIGTERM each end in one line with every committed
answer kept; outputs are replaced together or not at all; metadata files, quoted option strings
and odd columns never change a score; `finbench score` follows eval.py and refuses ambiguity."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import ENV
from helpers import cache_rows as _cache_rows
from helpers import finmme_record as _finmme
from helpers import png_bytes as _png
from typer.testing import CliRunner

from finbench.benchmarks import famma, finmme, get_benchmark
from finbench.cli import app
from finbench.config.specs import RunConfig
from finbench.runner.cache import PredictionCache
from finbench.runner.engine import Stopped, run_benchmark


def _config(tiny_qwen_dir, data, out, **overrides) -> RunConfig:
    return RunConfig.flat(model=str(tiny_qwen_dir), data=str(data), dtype="float32", device="cpu", out=str(out),
                     bootstrap=0, **overrides)


def _one_line(done, code: int, *needles: str) -> None:
    assert done.exit_code == code, (done.exit_code, done.output)
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.output, done.output
    for needle in needles:
        assert needle in " ".join(done.stderr.split()), done.stderr


# ---- item 1: a quoted string as options is an error, never its letters -------------------------------
@pytest.mark.parametrize("raw", ["'abc'", '"yes"', "5", "None"])
def test_an_options_string_that_is_not_a_list_is_an_error(raw):
    with pytest.raises(ValueError, match="not a list of options"):
        finmme.parse_options(raw)
    question = finmme.record_to_question(_finmme("q", options=raw), 0)
    assert question.error and "not a list of options" in question.error and question.options == ()
    record = {"question_id": "f", "question": "?", "question_type": "multiple-choice", "options": raw,
              "answers": "A", "image_1": None}
    assert "not a list of options" in famma.record_to_question(record, 0).error
    # lists in strings still parse
    assert finmme.parse_options("['10', '20']") == ("10", "20") and finmme.parse_options('["a"]') == ("a",)


# ---- item 2: a save_to_disk folder's metadata files are no records ------------------------------------
def test_metadata_files_of_a_save_to_disk_folder_do_not_change_the_score(tmp_path):
    import datasets

    from finbench.scoring.tables import score_samples

    records = [_finmme(f"m{i}", answer="ABCD"[i % 4]) for i in range(5)]
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(records).save_to_disk(str(folder))
    assert (folder / "dataset_info.json").exists() and (folder / "state.json").exists()
    notes: list[str] = []
    questions = finmme.load_questions(folder, notes=notes)
    assert [q.id for q in questions] == [r["id"] for r in records]
    assert any("dataset_info.json" in n and "state.json" in n for n in notes)
    samples = pd.DataFrame([{"id": q.id, "kind": q.kind, "gold": q.gold, "answer": "A", "error": q.error or "",
                             "n_options": 4, "tolerance": math.nan, **q.meta} for q in questions])
    assert score_samples(samples, benchmark=get_benchmark("finmme"))["accuracy"] == pytest.approx(2 / 5)  # not 2 / 7


# ---- item 6: the Arrow cell kernel on columns that are not strings -------------------------------------
def _cells_restated(domains, types, golds):
    """eval.py's groups restated in Python: a domain id per row among the sorted present labels
    (missing → the last slot), plus 1 for a multiple_choice item whose gold has two or more of
    the letters A–N (a missing gold has none)."""
    present = sorted({d for d in domains if d is not None and not (isinstance(d, float) and math.isnan(d))})
    cells = []
    for d, t, g in zip(domains, types, golds):
        missing = d is None or (isinstance(d, float) and math.isnan(d))
        text = "" if g is None or (isinstance(g, float) and math.isnan(g)) else str(g)
        multi = t == "multiple_choice" and len({c for c in text.upper() if c in "ABCDEFGHIJKLMN"}) > 1
        cells.append(2 * (len(present) if missing else present.index(d)) + int(multi))
    return cells, present


@pytest.mark.parametrize("form", ["arrow", "pandas"])
@pytest.mark.parametrize("case", ["all-null-domain", "all-nan-gold", "float-gold", "null-type-gold"])
def test_arrow_cells_equal_the_rule_when_a_column_is_not_strings(form, case):
    import pyarrow as pa

    from finbench.scoring import finmme_cells

    domains, types, golds = ["Banking", "FX", "Banking", "FX"], ["multiple_choice"] * 4, ["AC", None, "B", "BD"]
    if case == "all-null-domain":
        domains = [None] * 4
    elif case == "all-nan-gold":
        golds = [math.nan] * 4
    elif case == "float-gold":
        golds = [1.5, math.nan, 2.0, math.nan]
    else:
        golds = [None] * 4
    expected, labels = _cells_restated(domains, types, golds)
    if form == "arrow":
        columns = [pa.array(domains), pa.array(types), pa.array(golds, from_pandas=True)]
    else:
        columns = [pd.Series(domains, dtype=object), pd.Series(types),
                   pd.Series(golds, dtype=float if case in ("all-nan-gold", "float-gold") else object)]
    cells, got = finmme_cells.encode_official_cells(*columns)
    assert cells.tolist() == expected and got == labels


# ---- item 7: `finbench score` as eval.py; no silent choices --------------------------------------------
def test_finmme_data_without_knowledge_domain_is_scored_as_eval_py(tmp_path):
    frame = pd.DataFrame([_finmme(f"k{i}", answer="ABCD"[i % 4]) for i in range(6)]).drop(columns=["knowledge_domain"])
    data = tmp_path / "d.parquet"
    frame.to_parquet(data)
    predictions = tmp_path / "p.jsonl"
    answers = {"k0": "A", "k1": "B", "k2": "A", "k3": "A", "k4": "A", "k5": "A"}
    predictions.write_text("\n".join(json.dumps({"id": k, "answer": v}) for k, v in answers.items()))
    done = CliRunner().invoke(app, ["score", "--data", str(data), "--predictions", str(predictions)])
    assert done.exit_code == 0, done.output
    scores = json.loads(done.stdout)
    # eval.py restated: item.get('knowledge_domain', '') puts every row in domain '';
    # calculate_finscore groups by it: one domain, F = its mean = accuracy
    rows = pd.DataFrame({"knowledge_domain": [""] * 6,
                         "correct_or_not": [answers[r["id"]] == r["answer"] for r in frame.to_dict("records")]})
    f = rows.groupby("knowledge_domain")["correct_or_not"].mean().mean()
    assert scores["domain_accuracy"] == pytest.approx(f) == pytest.approx(scores["accuracy"]) == pytest.approx(3 / 6)
    assert scores["finscore"] == pytest.approx(f)  # no multi-answer item: P_H = 0
    notes: list[str] = []
    finmme.load_questions(data, notes=notes)
    assert any("'knowledge_domain' is missing" in n and "F equals accuracy" in n for n in notes)


def test_a_repeated_prediction_id_is_an_error_naming_it(tmp_path):
    data = tmp_path / "d.parquet"
    pd.DataFrame([_finmme("a"), _finmme("b")]).to_parquet(data)
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"id": "a", "answer": "C"}\n{"id": "b", "answer": "A"}\n{"id": "a", "answer": "B"}\n')
    _one_line(CliRunner().invoke(app, ["score", "--data", str(data), "--predictions", str(predictions)]), 2,
              "p.jsonl:3: id 'a' was already given on line 1")


def test_score_on_a_run_folder_refuses_predictions_it_would_ignore(tmp_path, synthetic_parquet, tiny_model,
                                                                  tiny_qwen_dir):
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=2), tiny_model, show_progress=False)
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"id": "x", "answer": "A"}\n')
    _one_line(CliRunner().invoke(app, ["score", str(tmp_path / "run"), "--predictions", str(predictions)]), 2,
              "a run folder is scored from its own samples.parquet")
    assert not (tmp_path / "run" / "scores_official.json").exists()


# ---- item 9: a full disk, an immutable cache, outputs together or not at all ---------------------------
def _limited_cache(monkeypatch, extra_pages: int) -> None:
    """SQLite's own limit on the file's size (`max_page_count`): the next write past it fails
    with SQLITE_FULL, 'database or disk is full' — what a full disk gives, on any machine."""
    original = PredictionCache._open

    def opened(self):
        connection = original(self)
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages + extra_pages}")
        return connection

    monkeypatch.setattr(PredictionCache, "_open", opened)


def test_a_full_disk_mid_run_is_one_line_and_keeps_every_committed_answer(tmp_path, synthetic_parquet, tiny_model,
                                                                          tiny_qwen_dir, monkeypatch):
    out = tmp_path / "run"
    _limited_cache(monkeypatch, extra_pages=6)
    with pytest.raises(Stopped) as stopped:
        run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=24, batch_size=2), tiny_model,
                      show_progress=False)
    message = str(stopped.value)
    kept = _cache_rows(out / "cache.sqlite")
    assert 0 < kept < 24
    assert f"cache {out / 'cache.sqlite'}: cannot write (database or disk is full); {kept} of 24 answers saved" \
        in message and "\n" not in message
    assert not (out / "samples.parquet").exists()
    monkeypatch.undo()  # space again: the rerun computes only what is missing, and equals an undisturbed run
    resumed = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=24, batch_size=2), tiny_model,
                            show_progress=False)
    assert resumed.results["n_cached"] == kept and resumed.results["n_computed"] == 24 - kept
    reference = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "ref", limit=24, batch_size=2),
                              tiny_model, show_progress=False)
    columns = ["id", "answer", "gold", "error"]
    pd.testing.assert_frame_equal(resumed.samples[columns], reference.samples[columns])


def test_the_cli_says_it_in_one_line_and_exit_code_1(tmp_path, synthetic_parquet, tiny_qwen_dir, monkeypatch):
    _limited_cache(monkeypatch, extra_pages=6)
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit",
                                    "24", "--batch-size", "2", "--device", "cpu", "--dtype", "float32",
                                    "--out", str(tmp_path / "run"), "--no-progress", "--bootstrap", "0"])
    _one_line(done, 1, "database or disk is full", str(tmp_path / "run" / "cache.sqlite"), "answers saved")


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 192 KiB filesystem (tmpfs); skipped where mounting is not permitted."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:80]})")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_real_full_filesystem_ends_in_one_line_with_the_committed_answers_kept(small_tmpfs, tmp_path,
                                                                                 synthetic_parquet, tiny_qwen_dir):
    cache = small_tmpfs / "cache.sqlite"
    args = ["run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--batch-size", "2",
            "--device", "cpu", "--dtype", "float32", "--out", str(tmp_path / "run"), "--cache", str(cache),
            "--no-progress", "--bootstrap", "0"]
    done = CliRunner().invoke(app, args)
    _one_line(done, 1, f"cache {cache}: cannot write (database or disk is full)")
    kept = _cache_rows(cache)
    assert 0 < kept < 72 and f"{kept} of 72 answers saved" in " ".join(done.stderr.split())


def test_an_immutable_cache_is_refused_in_one_line(tmp_path, synthetic_parquet, tiny_model, tiny_qwen_dir):
    out = tmp_path / "run"
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=2), tiny_model, show_progress=False)
    cache = out / "cache.sqlite"
    if subprocess.run(["chattr", "+i", str(cache)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here")
    try:
        done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet),
                                        "--limit", "4", "--device", "cpu", "--dtype", "float32", "--out", str(out),
                                        "--no-progress"])
        _one_line(done, 2, f"--cache {cache}: cannot write cache.sqlite", "immutable")
    finally:
        subprocess.run(["chattr", "-i", str(cache)], capture_output=True)
    assert _cache_rows(cache) == 2  # untouched


def test_a_cache_file_that_refuses_writing_is_refused_in_one_line(tmp_path, monkeypatch):
    """The same check where chattr is not permitted: the file answers EPERM to opening it for
    writing, as an immutable file does even to root (SQLite would open it read-only)."""
    cache = tmp_path / "cache.sqlite"
    PredictionCache(cache).close()
    real_open = os.open

    def refuse(path, flags, *args):
        if Path(path) == cache and flags & os.O_RDWR:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ValueError, match=r"cannot write cache.sqlite \(Operation not permitted"):
        PredictionCache(cache)


def _outputs(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in ("samples.parquet", "results.json", "report.html",
                                                           "report.md")}


@pytest.mark.parametrize("fails", ["samples.parquet", "results.json", "report.html"])
def test_outputs_are_replaced_together_or_not_at_all(fails, tmp_path, synthetic_parquet, tiny_model, tiny_qwen_dir,
                                                     monkeypatch):
    import finbench.report.html as html
    from finbench.runner import outputs

    out = tmp_path / "run"
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=3), tiny_model, show_progress=False)
    before = _outputs(out)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target = {"samples.parquet": (outputs, "write_samples"), "results.json": (outputs, "write_json"),
              "report.html": (html, "write_report")}[fails]
    monkeypatch.setattr(*target, full)
    with pytest.raises(Stopped) as stopped:
        run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=5), tiny_model, show_progress=False)
    assert f"cannot write {out / fails} (No space left on device)" in str(stopped.value)
    assert "previous outputs in that folder are left as they were" in str(stopped.value)
    assert _outputs(out) == before  # all four files as they were
    assert not list(out.glob(".finbench-staging-*"))
    monkeypatch.undo()
    again = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=5), tiny_model, show_progress=False)
    assert again.results["n_cached"] == 5  # the answers were in the cache all along
    assert len(pd.read_parquet(out / "samples.parquet")) == 5


def test_a_report_that_fails_to_render_leaves_no_older_report_beside_new_results(tmp_path, synthetic_parquet,
                                                                                 tiny_model, tiny_qwen_dir, monkeypatch):
    import finbench.report.html as html

    out = tmp_path / "run"
    run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=3), tiny_model, show_progress=False)
    assert (out / "report.html").exists()

    def broken(run_dir):
        raise RuntimeError("a template error")

    monkeypatch.setattr(html, "write_report", broken)
    result = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=4), tiny_model, show_progress=False)
    assert not (out / "report.html").exists() and not (out / "report.md").exists()
    assert json.loads((out / "results.json").read_text())["n_questions"] == 4
    assert any("report.html could not be written (RuntimeError: a template error)" in n for n in result.results["notes"])


# ---- item 12: the run folder deleted mid-run ----------------------------------------------------------
def test_a_run_folder_deleted_mid_run_is_said_and_no_fresh_cache_appears(tmp_path, synthetic_parquet, tiny_model,
                                                                        tiny_qwen_dir):
    out = tmp_path / "run"

    class DeletesTheFolder:
        """The model, except that after its second batch someone removes the run folder."""

        def __init__(self, model):
            self._model, self.calls = model, 0

        def score_options(self, *args, **kwargs):
            self.calls += 1
            if self.calls == 2:
                shutil.rmtree(out)
            return self._model.score_options(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._model, name)

    with pytest.raises(Stopped) as stopped:
        run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, out, limit=12, batch_size=2,
                              question_types=("single_choice",)), DeletesTheFolder(tiny_model), show_progress=False)
    assert f"cache {out / 'cache.sqlite'} was deleted during the run (was the run folder removed?)" in str(stopped.value)
    assert not out.exists()  # nothing recreated: no fresh empty cache, no outputs


# ---- item 15: SIGTERM, an all-failed run, FLOP counts -----------------------------------------------------
@pytest.mark.slow
def test_sigterm_says_how_many_answers_were_saved_like_ctrl_c(tmp_path, synthetic_parquet, tiny_qwen_dir):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "finbench.cli", "run", "--model", str(tiny_qwen_dir), "--data",
                                str(synthetic_parquet), "--batch-size", "2", "--dtype", "float32", "--device", "cpu",
                                "--no-progress", "--bootstrap", "0", "--out", str(out)],
                               env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _cache_rows(out / "cache.sqlite") < 4 and time.time() < deadline and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    saved = _cache_rows(out / "cache.sqlite")
    assert f"interrupted: {saved} of 72 answers saved; rerun the same command to resume" in stderr
    assert "Traceback" not in stderr


def test_a_run_whose_every_question_is_an_error_says_so_not_all_from_cache(tmp_path, tiny_qwen_dir):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(_finmme(f"e{i}", options=[], image={"path": "x.png"})) for i in range(3)))
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(data), "--device", "cpu",
                                    "--out", str(tmp_path / "run"), "--no-progress", "--bootstrap", "0"])
    assert done.exit_code == 1, done.output
    assert "all from cache" not in done.stdout and "all cached" not in done.stdout
    assert "nothing computed: every question is an error" in " ".join(done.stdout.split())
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert not results["throughput"].get("all_from_cache")


def test_a_family_without_a_flop_count_reports_null_not_zero(tmp_path, synthetic_parquet, tiny_model, tiny_qwen_dir):
    import dataclasses

    from finbench.offline.tiny import tiny_family_available

    class Uncounted:
        def __init__(self, model):
            self._model = model
            self.capabilities = dataclasses.replace(model.capabilities, flop_count=False)

        def prefill_flops(self, inputs):
            return None

        def __getattr__(self, name):
            return getattr(self._model, name)

    result = run_benchmark(_config(tiny_qwen_dir, synthetic_parquet, tmp_path / "run", limit=2), Uncounted(tiny_model),
                           show_progress=False)
    assert result.results["throughput"]["prefill_flops"] is None
    assert result.results["throughput"]["prefill_tflops_per_s"] is None
    # every question an error: no batch ran, still "not counted", never 0
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(_finmme("b0", options=[], image={"path": "x.png"})))
    result = run_benchmark(_config(tiny_qwen_dir, data, tmp_path / "bad"), Uncounted(tiny_model), show_progress=False)
    assert result.results["throughput"]["prefill_flops"] is None
    if tiny_family_available("internvl"):  # a real family that declares no count
        from finbench.config.specs import LoadSpec
        from finbench.models import load_model
        from finbench.offline.tiny import make_tiny

        path = make_tiny("internvl", tmp_path / "internvl")
        model = load_model(str(path), LoadSpec(dtype="float32", device="cpu"))
        result = run_benchmark(_config(path, synthetic_parquet, tmp_path / "iv", limit=2), model, show_progress=False)
        assert not model.capabilities.flop_count and result.results["throughput"]["prefill_flops"] is None


def test_a_judge_path_that_does_not_exist_says_so_before_the_model_loads(tmp_path, synthetic_parquet, tiny_qwen_dir):
    done = CliRunner().invoke(app, ["run", "--model", str(tmp_path / "no-model"), "--data", str(synthetic_parquet),
                                    "--judge", "/nonexistent", "--out", str(tmp_path / "run"), "--no-progress"])
    _one_line(done, 2, "--judge /nonexistent: no such model folder")  # not "cannot load model …"
    assert "alphanumeric" not in done.output and not (tmp_path / "run").exists()


def test_a_judge_that_fails_after_the_model_loaded_writes_nothing(tmp_path, synthetic_parquet, tiny_qwen_dir):
    """Checks that need the loaded model (here: the judge's own config) come before the run
    folder: no cache.sqlite, no run.log is left behind."""
    empty = tmp_path / "empty-judge"
    empty.mkdir()
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit",
                                    "2", "--judge", str(empty), "--device", "cpu", "--out", str(tmp_path / "run"),
                                    "--no-progress"])
    _one_line(done, 2, f"--judge {empty}: cannot load its config")
    assert not (tmp_path / "run").exists()


# ---- items 10, 11: one line, one record ------------------------------------------------------------------
def test_one_deeply_nested_line_or_one_bad_byte_fails_that_record_only(tmp_path):
    deep = b'{"id": "deep", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    good = json.dumps({"question_id": "g", "question": "Why?", "question_type": "open question", "answers": "1"}).encode()
    (tmp_path / "lines.jsonl").write_bytes(good + b"\n" + deep + b"\n")
    rows = famma.load_questions(tmp_path / "lines.jsonl")
    assert rows[0].error is None and "nested too deeply" in rows[1].error
    array = json.dumps([json.loads(good), {**json.loads(good), "question_id": "h", "question": "QQ"}]).encode()
    (tmp_path / "array.json").write_bytes(array.replace(b"QQ", b"caf\xe9"))
    rows = famma.load_questions(tmp_path / "array.json")
    byte = array.index(b"QQ") + len(b"caf")
    assert rows[0].error is None and f"field 'question' is not UTF-8 at byte {byte} (0xe9)" in rows[1].error


def test_binary_text_columns_are_decoded_never_shown_as_bytes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"question_id": pa.array([b"b1"]), "question": pa.array([b"How much?"]),
                             "context": pa.array([b"Sales: 5."]), "question_type": pa.array([b"open question"]),
                             "answers": pa.array([b"5"])}), tmp_path / "b.parquet")
    (question,) = famma.load_questions(tmp_path / "b.parquet")
    assert question.error is None and question.text == "How much?" and question.fields["context"] == "Sales: 5."
    assert question.id == "b1" and question.fields["gold_text"] == "5"
    from finbench.runner.run_requests import first_prompt

    prompt = first_prompt(famma.request(question, "constrained"))
    assert "b'" not in json.dumps(prompt.messages)


# ---- item 15: image paths stay in the data's folder ---------------------------------------------------------
def test_a_relative_image_path_that_climbs_out_is_refused_and_absolute_ones_read(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png())
    (data / "ok.png").write_bytes(_png())
    records = [_finmme("up", image={"path": "../secret.png"}), _finmme("abs", image={"path": str(secret)}),
               _finmme("in", image={"path": "sub/../ok.png"})]
    (data / "d.jsonl").write_text("\n".join(json.dumps({**r, "image": r["image"]}) for r in records))
    by_id = {q.id: q for q in finmme.load_questions(data / "d.jsonl")}
    assert "image path '../secret.png' climbs out of the data's folder" in by_id["up"].error
    assert by_id["abs"].error is None and by_id["abs"].images == (_png(),)
    assert by_id["in"].error is None  # `..` that stays inside is fine
    # a file in a subfolder may name an image elsewhere in the data's folder; a symlink leading out
    # (a Hugging Face snapshot's files point into its blobs/) is followed, as the path stays inside
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "abc123").write_bytes(_png())
    (data / "linked.png").symlink_to(tmp_path / "blobs" / "abc123")
    (data / "sub" / "e.jsonl").write_text(json.dumps(_finmme("sib", image={"path": "../ok.png"})) + "\n"
                                          + json.dumps(_finmme("link", image={"path": "../linked.png"})))
    by_id = {q.id: q for q in finmme.load_questions(data)}
    assert by_id["sib"].error is None and by_id["link"].error is None and "climbs out" in by_id["up"].error


def test_sweep_validation_uses_no_weights(tmp_path, tiny_qwen_dir):
    """`check_family` reads config.json only: a sweep is refused before any weights load."""
    from finbench.app.sweep import plan_variants, validate_variants

    weightless = tmp_path / "config-only"
    weightless.mkdir()
    shutil.copy(tiny_qwen_dir / "config.json", weightless / "config.json")
    variants = plan_variants(RunConfig.flat(model=str(weightless), out=str(tmp_path / "s")), {"think_budget": [0, 8]})
    with pytest.raises(ValueError, match="variant think_budget-8: --think-budget 8: qwen2.5-vl has no thinking block"):
        validate_variants(variants, tmp_path / "s")


def test_the_cells_kernel_still_equals_the_general_path_on_strings():
    """(the fix left the string paths alone: a spot check against the restated rule)"""
    from finbench.scoring import finmme_cells

    rng = np.random.default_rng(3)
    domains = rng.choice(["a", "b", "c"], 200).tolist()
    types = rng.choice(["multiple_choice", "single_choice"], 200).tolist()
    golds = rng.choice(["AC", "B", "BD", "a,c", ""], 200).tolist()
    cells, labels = finmme_cells.encode_official_cells(pd.Series(domains), pd.Series(types), pd.Series(golds))
    assert (cells.tolist(), labels) == _cells_restated(domains, types, golds)
    assert cells.dtype == torch.uint8


def test_the_hub_data_error_names_offline_mode_only_when_it_is_set(monkeypatch):
    import datasets

    from finbench.benchmarks import records

    def missing(*args, **kwargs):
        raise FileNotFoundError("Dataset 'nobody/none' doesn't exist on the Hub or cannot be accessed.")

    monkeypatch.setattr(datasets, "load_dataset", missing)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(records.DataError, match="HF_HUB_OFFLINE is set: only sets already in the local"):
        records._read_hub("nobody/none", "train")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(records.DataError) as raised:
        records._read_hub("nobody/none", "train")
    assert "HF_HUB_OFFLINE is set" not in str(raised.value) and "HF_HUB_OFFLINE=1 skips the network" in str(raised.value)
