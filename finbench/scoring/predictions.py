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

from finbench.scoring.api import build_table, score_samples
from finbench.benchmarks.metrics import OFFICIAL
from finbench.types import Question

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


def answers_frame(questions: Sequence[Question], answers: Mapping[str, str]) -> pd.DataFrame:
    """The samples table (report/schema.py's columns that scoring reads) of `questions` answered
    by `answers`; a question without an answer has the error 'no prediction'."""
    return pd.DataFrame([{
        "id": q.id, "benchmark": q.benchmark, "kind": q.kind, "gold": q.gold, "answer": answers.get(q.id, ""),
        "n_options": len(q.options), "tolerance": math.nan if q.tolerance is None else q.tolerance,
        "error": q.error or ("" if q.id in answers else "no prediction"), **dict(q.meta)} for q in questions])


def score_predictions(benchmark: Benchmark, data: str, predictions: Path, variant: str = OFFICIAL.name,
                      n_bootstrap: int = 0, seed: int = 0, protocol: str | None = None,
                      samples_out: Path | None = None, unsafe_sandbox: bool = False
                      ) -> tuple[dict[str, Any], str | None]:
    """Score answer strings as an official extractor produced them against the benchmark's gold:
    (scores, the note saying how many questions had no answer, or None). Questions left unanswered
    are scored as wrong, and the note is among the scores' notes too.
    `protocol`: the protocol that produced the answers (where a benchmark's rule depends on it);
    `samples_out`: one JSON line per question saying what the rule read and whether it counted;
    `unsafe_sandbox`: programs run without a kernel jail where none can be built (else refused)."""
    from finbench.benchmarks import check_protocol
    from finbench.sandbox import refuse_without_jail

    check_protocol(benchmark, protocol)
    refuse_without_jail(protocol in benchmark.program_protocols, unsafe_sandbox, f"--protocol {protocol}")
    questions = benchmark.load(data)
    answers = read_predictions(predictions)
    unknown = set(answers) - {q.id for q in questions}
    if unknown:
        raise ValueError(f"{len(unknown)} prediction ids are not in the data, e.g. {sorted(unknown)[:3]}")
    samples = with_rule_verdicts(answers_frame(questions, answers), questions, benchmark, protocol or "",
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
    """Answers given in a file (`score --predictions`), with the verdicts a run's rules would add
    (`rule_score`, `judge_details`), for a benchmark whose rules judge the whole run at once
    (`Benchmark.rule_judgements`: FinMMR's programs run in the sandbox); others unchanged."""
    from finbench.types import Prediction

    spec = benchmark
    if spec.rule_judgements is None:
        return df
    answers = dict(zip(df["id"].astype(str), df["answer"].astype(str)))
    rows = [i for i, q in enumerate(questions) if not q.error and str(q.id) in answers]
    found = spec.rule_judgements([questions[i] for i in rows],
                                 [Prediction(id=str(questions[i].id), answer=answers[str(questions[i].id)]) for i in rows],
                                 protocol, unsafe_sandbox)
    verdicts = {str(questions[i].id): verdict for i, verdict in zip(rows, found)}
    out = df.copy()
    out["rule_score"] = [float("nan") if verdicts.get(i, (None,))[0] is None else float(verdicts[i][0])
                         for i in out["id"].astype(str)]
    out["judge_details"] = [json.dumps({"rules": verdicts[i][1]}, ensure_ascii=False) if i in verdicts else ""
                            for i in out["id"].astype(str)]
    return out


def write_samples_out(path: Any, df: pd.DataFrame, benchmark: Benchmark, variant: str = OFFICIAL.name) -> int:
    """`score --samples-out FILE.jsonl`: one line per question — `id`, `answer` as given, what
    the rule read from it (`extracted`: the rule's reading, or the program's result; null when
    the benchmark's rule does not report it), `correct` (the per-question score, 0/1 for binary
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
             for i, a, e, s in zip(df["id"].tolist(), df["answer"].tolist(), extracted, score.tolist())]
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    partial.replace(target)
    return len(lines)
