"""Benchmarks: one file each. A benchmark module exposes NAME, HUB_ID, SCORER, GROUP_COLUMNS,
DOMAIN_FIELD (the meta field --domain filters on), PROMPT_VERSION, load_questions(source, limit,
domains, question_types), build_request(question, images, protocol), extract_official(text) and
OFFICIAL_MAX_NEW_TOKENS. The runner knows no more.

Optional, for open answers, judging and multi-turn sessions (FAMMA, FinMTM); the runner calls them
through the functions below, whose defaults are FinMME's behaviour:
- extract_answer(question, text, protocol) → the answer string judged (default: extract_official
  for official choice items, the stripped text for open ones);
- group_key(question, protocol) → questions sharing a key get one generation (the same request),
  each then extracts its own answer from it (FAMMA's grouped official call);
- is_session(question), n_turns(question) and build_turn_request(question, images, protocol,
  history) → a session asked turn by turn, `history` holding the model's earlier replies; its
  generated text is the JSON list of its replies (FinMTM dialogues and agents);
- rule_judgement(question, prediction) → (score or None, details): judging without a model;
- judge_prompts(question, prediction) → texts for the `--judge` model, and
  read_judgement(question, prediction, outputs) → (score or None, details) from its replies.
FORMS, PROTOCOLS and METRICS (strings) describe the benchmark in `finbench benchmarks`."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Sequence

from finbench.benchmarks import famma, finmme, finmtm
from finbench.types import OPEN, Prediction, Question

BENCHMARKS: dict[str, ModuleType] = {finmme.NAME: finmme, famma.NAME: famma, finmtm.NAME: finmtm}


def get_benchmark(name: str) -> ModuleType:
    try:
        return BENCHMARKS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}") from None


MAX_VALUES_SHOWN = 30  # filter values listed when nothing matched


def load_matching(benchmark: ModuleType, source: Any, limit: int | None, domains: Sequence[str],
                  question_types: Sequence[str], notes: list[str] | None = None) -> list[Question]:
    """The questions a run's data and filters select; none is an error that names the values the
    data does have, so a misspelt --domain or --question-type is fixed from the message."""
    questions = benchmark.load_questions(source, limit, domains, question_types, notes=notes)
    if questions:
        return questions
    message = f"{benchmark.NAME}: no questions matched the data and filters"
    if domains or question_types:
        everything = benchmark.load_questions(source)  # only on this error path: the filters left nothing
        unknown = ""
        for flag, field, asked in (("--domain", benchmark.DOMAIN_FIELD, domains),
                                   ("--question-type", "question_type", question_types)):
            have = sorted({str(q.meta[field]) for q in everything if q.meta.get(field) is not None})
            missing = [value for value in asked if value not in have]
            if missing:
                shown = ", ".join(have[:MAX_VALUES_SHOWN]) + (f", … ({len(have)} in all)" if len(have) > MAX_VALUES_SHOWN else "")
                unknown += f"; {flag} {', '.join(missing)}: the data has {shown or 'none'}"
        message += unknown or "; each filter matches some questions, but no question matches all of them"
    raise ValueError(message)


def extract_answer(benchmark: ModuleType, question: Question, text: str, protocol: str) -> str:
    if hasattr(benchmark, "extract_answer"):
        return benchmark.extract_answer(question, text, protocol)
    return text.strip() if question.kind == OPEN else benchmark.extract_official(text)


def group_key(benchmark: ModuleType, question: Question, protocol: str) -> str | None:
    return benchmark.group_key(question, protocol) if hasattr(benchmark, "group_key") else None


def is_session(benchmark: ModuleType, question: Question) -> bool:
    """Whether the question is asked as a session, whose generated text is the JSON list of its
    replies (even of one turn)."""
    return benchmark.is_session(question) if hasattr(benchmark, "is_session") else False


def n_turns(benchmark: ModuleType, question: Question) -> int:
    return benchmark.n_turns(question) if hasattr(benchmark, "n_turns") else 1


def build_turn_request(benchmark: ModuleType, question: Question, images: Sequence[Any], protocol: str,
                       history: Sequence[str]) -> Any:
    if not history:
        return benchmark.build_request(question, images, protocol)
    return benchmark.build_turn_request(question, images, protocol, history)


def rule_judgement(benchmark: ModuleType, question: Question, prediction: Prediction) -> tuple[float | None, dict]:
    if not hasattr(benchmark, "rule_judgement") or question.error or prediction.error:
        return None, {}
    return benchmark.rule_judgement(question, prediction)


def judge_prompts(benchmark: ModuleType, question: Question, prediction: Prediction) -> list[str]:
    if not hasattr(benchmark, "judge_prompts") or question.error or prediction.error:
        return []
    return benchmark.judge_prompts(question, prediction)


def read_judgement(benchmark: ModuleType, question: Question, prediction: Prediction,
                   outputs: Sequence[str]) -> tuple[float | None, dict]:
    return benchmark.read_judgement(question, prediction, outputs)


def describe(benchmark: ModuleType) -> dict[str, str]:
    """One benchmark for `finbench benchmarks`."""
    return {"name": benchmark.NAME, "title": (benchmark.__doc__ or "").strip().splitlines()[0],
            "hub": benchmark.HUB_ID,
            "forms": "; ".join(getattr(benchmark, "FORMS", ("hub parquet/arrow", "local parquet/arrow/jsonl"))),
            "protocols": "; ".join(getattr(benchmark, "PROTOCOLS", ("constrained", "official"))),
            "metrics": getattr(benchmark, "METRICS", "")}
