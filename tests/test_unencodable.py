"""Text UTF-8 cannot encode never stops `run`, `score` or `report` (issue 49, item 9): a lone
surrogate in a reply, in a program's result or a judge's reason is written escaped by every writer
(samples.parquet, JSON, HTML, Markdown, CSV, run.log, the console), and its row keeps the verdict
read from the text as it was."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest
from helpers import ENV, cli, run_cli
from scripted import Scripted

from finbench.benchmarks import finchart_bench, get_benchmark

LONE = "\ud800"  # a lone surrogate: what a served model's "\ud800" JSON escape decodes to


def test_every_table_writer_escapes_what_utf8_cannot_encode(tmp_path):
    """SPEC, Errors: "Bad input never stops a run and never disappears" — a reply, a program's
    result and a judge's reason holding a lone surrogate go into samples.parquet escaped, the
    rest of the row (its verdict) as it was."""
    from finbench.core.encodable import text_frame
    from finbench.runner.outputs import write_samples

    frame = text_frame([{"id": "a", "answer": f"C{LONE}", "correct": 0.0, "raw_output": f"Result = [[ C{LONE} ]]",
                         "judge_details": json.dumps({"rules": {"extracted": f"1{LONE}2"}}, ensure_ascii=False),
                         "options": ["x", f"y{LONE}"]},
                        {"id": "b", "answer": "B", "correct": 1.0, "raw_output": "ok", "judge_details": "",
                         "options": ["x", "y"]}])
    assert frame["answer"][0] == f"C{LONE}"  # held as it is until written
    write_samples(frame, tmp_path / "samples.parquet")
    back = pd.read_parquet(tmp_path / "samples.parquet")
    assert back["answer"].tolist() == ["C\\ud800", "B"] and back["correct"].tolist() == [0.0, 1.0]
    assert back["raw_output"][0] == "Result = [[ C\\ud800 ]]" and list(back["options"][0]) == ["x", "y\\ud800"]
    assert json.loads(back["judge_details"][0])["rules"]["extracted"] == f"1{LONE}2"  # a JSON escape: read back whole


@pytest.fixture(scope="module")
def surrogate_run(tmp_path_factory, tiny_model):
    """A FinChart-Bench official run whose replies hold lone surrogates: inside the label (wrong),
    after a right label (right)."""
    from finbench.app.api import make_config
    from finbench.runner.engine import run_benchmark

    root = tmp_path_factory.mktemp("surrogates")
    data, _ = get_benchmark("finchart-bench").demo.write(root / "data", None)
    labels = {q.text.strip(): q.meta["official_answer"] for q in finchart_bench.load_questions(data)
              if q.meta["task"] == "TF"}

    def reply(prompt: str) -> str:
        label = next(v for k, v in labels.items() if k in prompt)
        return f"Result = [[ {label} ]] {LONE}" if label == "true" else f"Result = [[ {label}{LONE} ]]"

    out = root / "run"
    config = make_config(model=tiny_model.source, benchmark="finchart-bench", data=str(data), protocol="official",
                         question_types=("TF",), out=str(out), device="cpu", dtype="float32", bootstrap=20,
                         max_pixels=28 * 28 * 16)
    result = run_benchmark(config, model=Scripted(tiny_model, reply, "surrogates"), show_progress=False)
    return data, out, result


def test_a_run_with_such_replies_writes_every_output_and_keeps_each_verdict(surrogate_run):
    data, out, result = surrogate_run
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) == 6 and (samples["error"] == "").all()
    right = samples["raw_output"].str.endswith(" \\ud800")
    assert right.any() and (~right).any()
    assert (samples["correct"] == right.astype(float)).all()  # the label with a surrogate in it: wrong, as read
    results = json.loads((out / "results.json").read_text())
    assert results["scores"]["accuracy"] == pytest.approx(right.mean())
    assert not [n for n in results["notes"] if "could not be written" in n]
    assert "\\ud800" in (out / "report.html").read_text(encoding="utf-8")
    assert (out / "report.md").is_file() and (out / "run.log").is_file()


def test_score_report_compare_and_leaderboard_write_such_rows(surrogate_run, tmp_path):
    _, out, _ = surrogate_run
    assert cli("score", str(out)).returncode == 0
    assert cli("report", str(out)).returncode == 0
    import shutil

    again = shutil.copytree(out, tmp_path / "again")
    done = cli("compare", str(out), str(again), "--bootstrap", "10", "--out", str(tmp_path / "c.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    board = [str(tmp_path / f"board{suffix}") for suffix in (".csv", ".md", ".html")]
    done = cli("leaderboard", str(out), *[arg for path in board for arg in ("--out", path)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(csv.DictReader(open(board[0], encoding="utf-8")))[0]["run"] == "run"


def test_score_predictions_writes_such_answers_and_keeps_their_verdicts(surrogate_run, tmp_path):
    data, _, _ = surrogate_run
    questions = [q for q in finchart_bench.load_questions(data) if q.meta["task"] == "TF"]
    path = tmp_path / "p.jsonl"
    lines = [{"id": q.id, "answer": f"Result = [[ {q.meta['official_answer']} ]]" + (LONE if k % 2 else "")}
             for k, q in enumerate(questions)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")  # JSON escapes the surrogate
    out = tmp_path / "samples.jsonl"
    done = cli("score", "--benchmark", "finchart-bench", "--data", str(data), "--predictions", str(path),
               "--protocol", "official", "--samples-out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["tf_accuracy"] == 1.0
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {line["correct"] for line in written if line["id"].startswith("TF/")} == {1.0}
    assert any(line["answer"].endswith(LONE) for line in written)  # its JSON escape reads back as it was given


def test_the_console_prints_such_text_escaped(surrogate_run, tiny_model, tmp_path):
    """`finbench compare` of a constrained run with the official one prints the official raw
    outputs where the answers differ — on a real process's stdout (whose encoding is strict), the
    lone surrogates escaped, not a UnicodeEncodeError traceback."""
    from finbench.app.api import make_config
    from finbench.runner.engine import run_benchmark

    data, out, _ = surrogate_run
    config = make_config(model=tiny_model.source, benchmark="finchart-bench", data=str(data), question_types=("TF",),
                         out=str(tmp_path / "constrained"), device="cpu", dtype="float32", bootstrap=0,
                         max_pixels=28 * 28 * 16)
    run_benchmark(config, model=tiny_model, show_progress=False)
    done = run_cli("compare", str(tmp_path / "constrained"), str(out), "--allow-mixed-protocols", "--bootstrap", "10",
                   env={**ENV, "COLUMNS": "300", "PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "\\ud800" in done.stdout


def test_the_command_line_s_streams_escape_what_they_cannot_encode():
    """Every command first sets the console's streams to escape (finbench/cli/common.py): a
    terminal's strict UTF-8 stdout then prints a lone surrogate as `\\ud800` instead of raising."""
    import io

    from rich.console import Console

    from finbench.core.encodable import escape_streams

    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    with pytest.raises(UnicodeEncodeError):
        Console(file=stream, width=80).print(f"reply {LONE}")
        stream.flush()
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    escape_streams(stream)
    Console(file=stream, width=80).print(f"reply {LONE}")
    stream.flush()
    assert stream.buffer.getvalue().decode() == "reply \\ud800\n"
