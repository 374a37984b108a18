"""What a `--judge` model is asked about an answer, and how its replies are read back: one typed
pair of calls, declared by a benchmark (`Benchmark.judging`) for its own items and by a study
(finbench/studies/) for the variants it judges its own way (the open-ended probe). The judge
(runner/judge_step.py) calls nothing else. `rule_verdicts`: what a benchmark's own rules conclude of
every answer — the one reading a run (runner/judge_step.py) and `score --predictions`
(scoring/predictions.py) both give."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from finbench.core.requests import Request
from finbench.core.types import Prediction, Question

Judgement = tuple[float | None, dict[str, Any]]  # (score, or None when there is nothing to judge; details)


def no_judge_requests(question: Question, prediction: Prediction) -> list[Request]:
    return []


def no_judgement(question: Question, prediction: Prediction, replies: Sequence[str]) -> Judgement:
    return None, {}


@dataclass(frozen=True)
class Judging:
    """`judge_requests(question, prediction)` → the requests (`Generate`, with the question's
    images where the official judge sees them) the judge model must answer; `read_judgement(
    question, prediction, replies)` → (score, details) from its replies (details' `parsed`: False
    when a reply holds no verdict the reading can parse)."""

    judge_requests: Callable[[Question, Prediction], list[Request]] = no_judge_requests
    read_judgement: Callable[[Question, Prediction, Sequence[str]], Judgement] = no_judgement


NO_JUDGING = Judging()  # answers nobody needs a judge for


def rule_verdicts(benchmark: Any, questions: Sequence[Question], predictions: Sequence[Prediction],
                  protocol: str, unsafe_sandbox: bool = False) -> tuple[list[float], list[dict[str, Any]]]:
    """(rule score per question, NaN where the rules give none; details per question: the rules'
    `rules`, or a judging `error`) from the `Benchmark`'s (benchmarks/base.py, above this module) `rule_judgements` of the whole run (of
    `protocol`; `unsafe_sandbox`: programs without a jail where none can be built) or its
    `rule_judgement` of each answer. A question or prediction with an error is not judged; a
    malformed prediction, or the rules failing, is its question's judging error, never the caller's."""
    n = len(questions)
    scores, details = [float("nan")] * n, [{} for _ in range(n)]  # type: tuple[list[float], list[dict[str, Any]]]
    rows = [i for i, q in enumerate(questions) if not q.error and not predictions[i].error]
    together: dict[int, Judgement] | None = None
    if benchmark.rule_judgements is not None:
        try:
            found = benchmark.rule_judgements([questions[i] for i in rows], [predictions[i] for i in rows], protocol,
                                              unsafe_sandbox)
            together = dict(zip(rows, found))
        except Exception as err:  # noqa: BLE001 — the rules failing is every judged question's problem
            for i in rows:
                details[i]["error"] = f"judging: {type(err).__name__}: {err}"
            together = {}
    for i in rows:
        try:
            score, info = together.get(i, (None, {})) if together is not None else \
                benchmark.rule_judgement(questions[i], predictions[i])
        except Exception as err:  # noqa: BLE001 — a malformed prediction is that question's problem
            details[i]["error"] = f"judging: {type(err).__name__}: {err}"
            continue
        if score is not None:
            scores[i] = float(score)
            details[i]["rules"] = info
    return scores, details
