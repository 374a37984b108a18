"""`finbench score --data --predictions`: answer strings given in a file (`read_predictions`),
scored against a benchmark's gold as the run's rules would (`with_rule_verdicts`: FinMMR's programs
run in the sandbox), with one line per question of what the rule read (`write_samples_out`).
Nothing is printed: cli/score_commands.py prints the note on unanswered questions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from finbench.benchmarks import check_protocol
from finbench.benchmarks.metrics import OFFICIAL
from finbench.core.encodable import text_frame, write_text
from finbench.core.judging import rule_verdicts
from finbench.core.requests import Choose, is_generated
from finbench.core.types import DEFAULT_PROTOCOL, Prediction, Question
from finbench.sandbox import refuse_without_jail
from finbench.scoring.stats import str_column
from finbench.scoring.tables import build_table, score_samples

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark


def read_predictions(predictions: Path) -> dict[str, str]:
    """id → answer of a JSONL file of {"id": ..., "answer": ...} lines; a line that is not such an
    object, or an id given twice, is one error naming the line."""
    answers: dict[str, str] = {}
    lines: dict[str, int] = {}
    for n, line in enumerate(Path(predictions).read_text().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise KeyError(f"a JSON {type(record).__name__}, not an object")
                qid = str(record["id"])
                answer = "" if record.get("answer") is None else str(record["answer"])
            except (json.JSONDecodeError, KeyError, RecursionError) as err:
                raise ValueError(f"{predictions}:{n}: expected {{\"id\": ..., \"answer\": ...}} ({err})") from None
            if qid in answers:  # which one would count? never the last one silently
                raise ValueError(f"{predictions}:{n}: id {qid!r} was already given on line {lines[qid]}; "
                                 "give one prediction per id")
            answers[qid], lines[qid] = answer, n
    return answers


def read_as_run(benchmark: Benchmark, question: Question, text: str, protocol: str) -> tuple[str, bool]:
    """(the answer a run under `protocol` stores for the output `text`, whether it is option
    letters): a choice request's output is its letters and a number request's its number, as
    given; generated text is read by the benchmark's rule (`Benchmark.answer`) when it is a reply
    in the benchmark's documented form (`Benchmark.reply_form`), and taken as the answer the rule
    read — a run's own stored `answer` — when it is not."""
    try:
        request = benchmark.request(question, protocol)
    except Exception:  # noqa: BLE001 — a question the benchmark cannot ask: its error is what is scored
        return text, False
    if isinstance(request, Choose):
        return text, True
    if is_generated(request) and benchmark.reply_form(text):
        return benchmark.answer(question, text, protocol), False
    return text, False


def answers_frame(questions: Sequence[Question], answers: Mapping[str, str], benchmark: Benchmark | None = None,
                  protocol: str = DEFAULT_PROTOCOL) -> pd.DataFrame:
    """The samples table (report/schema.py's columns that scoring reads) of `questions` answered
    by `answers`, each read as a run under `protocol` reads its model's output (`read_as_run`;
    without `benchmark`, as given); a question without an answer has the error 'no prediction'.
    `raw_output` keeps each answer as given."""
    rows = []
    for q in questions:
        given = answers.get(q.id, "")
        answer, letters = read_as_run(benchmark, q, given, protocol) if benchmark is not None and q.id in answers \
            else (given, False)
        rows.append({"id": q.id, "benchmark": q.benchmark, "kind": q.kind, "gold": q.gold, "answer": answer,
                     "raw_output": given, "letters": letters, "n_options": len(q.options),
                     "tolerance": math.nan if q.tolerance is None else q.tolerance,
                     "error": q.error or ("" if q.id in answers else "no prediction"), **dict(q.meta)})
    return text_frame(rows)  # an answer UTF-8 cannot encode is kept as given (finbench/core/encodable.py)


def score_predictions(benchmark: Benchmark, data: str, predictions: Path, variant: str = OFFICIAL.name,
                      n_bootstrap: int = 0, seed: int = 0, protocol: str | None = None,
                      samples_out: Path | None = None, unsafe_sandbox: bool = False
                      ) -> tuple[dict[str, Any], str | None]:
    """Score a model's outputs given in a file against the benchmark's gold as a run under
    `protocol` scores them (`read_as_run`: letters for its choice requests, the benchmark's rule
    for replies, a run's own stored answers as they are): (scores, the note saying how many
    questions had no answer, or None). Questions left unanswered are scored as wrong, and the note
    is among the scores' notes too.
    `protocol`: the protocol that produced the outputs (None: the default, constrained);
    `samples_out`: one JSON line per question saying what the rule read and whether it counted;
    `unsafe_sandbox`: programs run without a kernel jail where none can be built (else refused)."""
    check_protocol(benchmark, protocol)
    refuse_without_jail(protocol in benchmark.program_protocols, unsafe_sandbox, f"--protocol {protocol}")
    questions = benchmark.load(data)
    answers = read_predictions(predictions)
    unknown = set(answers) - {q.id for q in questions}
    if unknown:
        raise ValueError(f"{len(unknown)} prediction ids are not in the data, e.g. {sorted(unknown)[:3]}")
    protocol = protocol or DEFAULT_PROTOCOL
    samples = with_rule_verdicts(answers_frame(questions, answers, benchmark, protocol), questions, benchmark, protocol,
                                 unsafe_sandbox)
    scores = score_samples(samples, benchmark=benchmark, variant=variant, n_bootstrap=n_bootstrap, seed=seed)
    if samples_out is not None:
        write_samples_out(samples_out, samples, benchmark, variant)
    unanswered = sum(q.id not in answers for q in questions)
    note = None
    if unanswered:
        note = (f"{unanswered} of {len(questions)} questions have no prediction in {Path(predictions).name}: they are "
                "scored as wrong (error 'no prediction')")
        scores["notes"] = list(scores.get("notes", [])) + [note]
    return scores, note


def with_rule_verdicts(df: pd.DataFrame, questions: Sequence[Any], benchmark: Benchmark, protocol: str,
                       unsafe_sandbox: bool = False) -> pd.DataFrame:
    """Answers given in a file (`score --predictions`), with the verdicts a run's rules add
    (`rule_score`, `judge_details`: finbench/core/judging.py `rule_verdicts`, the reading a run gives —
    FinMMR's programs run in the sandbox, FAMMA's and FinMTM's rules judge their answers)."""
    ids = str_column(df, "id").tolist()
    answers = dict(zip(ids, str_column(df, "answer").tolist()))
    given = dict(zip(ids, str_column(df, "raw_output").tolist())) if "raw_output" in df.columns else {}
    predictions = [Prediction(id=str(q.id), answer=answers.get(str(q.id), ""),
                              generated_text=_read_from(given, answers, str(q.id)),
                              error=None if str(q.id) in answers else "no prediction") for q in questions]
    scores, details = rule_verdicts(benchmark, questions, predictions, protocol, unsafe_sandbox)
    if all(s != s for s in scores) and not any(details):
        return df
    by_id = {str(q.id): k for k, q in enumerate(questions)}
    rows = [by_id[i] for i in ids]
    return df.assign(rule_score=[scores[k] for k in rows],
                     judge_details=[json.dumps(details[k], ensure_ascii=False, default=str) if details[k] else ""
                                    for k in rows])


def _read_from(given: Mapping[str, str], answers: Mapping[str, str], qid: str) -> str:
    """The text an answer was read from, as a run's prediction carries it: the output given, where
    the benchmark's rule read something else from it; '' where it was taken as it is."""
    text = given.get(qid, "")
    return text if text != answers.get(qid, "") else ""


def write_samples_out(path: Any, df: pd.DataFrame, benchmark: Benchmark, variant: str = OFFICIAL.name) -> int:
    """`score --samples-out FILE.jsonl`: one line per question — `id`, `answer` as given, what
    the rule read from it (`extracted`: the rule's reading, or the program's result; null when
    the benchmark's scorer does not report it), `correct` (the per-question score, 0/1 for binary
    rules; null for a row the rule does not score). Written then renamed; returns the lines."""
    table = build_table(df, benchmark, variant)
    rows = table.info.get("rows")
    positions = np.arange(len(df)) if rows is None else np.asarray(rows)
    score = np.full(len(df), np.nan)
    score[positions] = table.score.cpu().numpy()
    extracted: list[Any] = [None] * len(df)
    if table.info.get("extracted") is not None:
        for position, text in zip(positions, table.info["extracted"]):
            extracted[int(position)] = text
    lines = [json.dumps({"id": str(i), "answer": a, "extracted": e, "correct": None if s != s else float(s)},
                        ensure_ascii=False)
             for i, a, e, s in zip(df["id"].tolist(), df["raw_output" if "raw_output" in df.columns else "answer"].tolist(),
                                   extracted, score.tolist())]
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    write_text(partial, "".join(line + "\n" for line in lines))
    partial.replace(target)
    return len(lines)
