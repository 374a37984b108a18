"""What a `--judge` model is asked about an answer, and how its replies are read back: one typed
pair of calls, declared by a benchmark (`Benchmark.judging`) for its own items and by a study
(finbench/studies/) for the variants it judges its own way (the open-ended probe). The judge
(runner/judge.py) calls nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from finbench.requests import Request
from finbench.types import Prediction, Question

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
