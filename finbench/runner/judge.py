"""Judging open answers: by the benchmark's rules, and by a local `--judge` model.

The runner hands over every prediction once decoding is done. For each question the benchmark
says (its `Benchmark`: benchmarks/base.py) what its rules conclude (`rule_judgement`) and which
requests the judge model must answer (`judge_requests`: `Generate` requests whose prompts name
the question's images where the official judge sees them — FinMTM's and MME-Finance's); the
judge's replies are read back by the benchmark (`read_judgement`). The judge is any local model
(models/judge.py): a vision-language model of any supported family, shown the images, or a
text-only causal LM, shown the text alone and labelled so (`text_only` in the summary and each
row's details). Replies are greedy and cached in the run's SQLite cache like any answer, keyed by
the judge's fingerprint and the whole request as shown (images by their digests, the budget), so
a rerun computes nothing and a changed answer is judged again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from finbench.benchmarks.base import Benchmark
from finbench.requests import Generate
from finbench.runner.keys import request_payload
from finbench.runner.preprocess import decode_images
from finbench.runner.requests import render
from finbench.types import Prediction, Question

JUDGE_PROMPT_VERSION = "judge-v2"  # bump when the way requests reach the judge changes
JUDGE_BATCH = 8
log = logging.getLogger("finbench")


def judge_key(fingerprint: Any, payload: Any) -> str:
    data = json.dumps({"judge": fingerprint, "version": JUDGE_PROMPT_VERSION, "request": payload},
                      sort_keys=True, default=str)
    return "judge:" + hashlib.sha256(data.encode()).hexdigest()


def text_only(request: Generate) -> Generate:
    """The request without its image parts (for a judge that cannot see them)."""
    return dataclasses.replace(request, prompt=request.prompt.without_images())


@dataclass
class Judged:
    """Per-question judging columns for samples.parquet, and a summary for results.json."""

    columns: dict[str, list[Any]]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    index: int  # the question
    request: Generate  # as shown to the judge
    key: str


def judge_run(benchmark: Benchmark, questions: Sequence[Question], predictions: dict[int, Prediction],
              judge: Any = None, cache: Any = None, judge_name: str = "",
              max_new_tokens: int | None = None, protocol: str = "") -> Judged:
    """Rule and judge-model verdicts for every prediction. `max_new_tokens` replaces each
    request's budget (None: the benchmark's official judge budget). A judge failure is that
    question's judge error (stored in `judge_output`), never the run's. A benchmark's
    `rule_judgements` gives the rules' verdicts of the whole run (of `protocol`) in one call."""
    n = len(questions)
    rule_score, judge_score = [float("nan")] * n, [float("nan")] * n
    outputs: list[str] = [""] * n
    details: list[dict[str, Any]] = [{} for _ in range(n)]
    asked: dict[int, list[Generate]] = {}
    together = _rule_judgements(benchmark, questions, predictions, protocol, details)
    for i, question in enumerate(questions):
        prediction = predictions[i]
        if question.error or prediction.error:
            continue
        try:
            score, info = together.get(i, (None, {})) if together is not None else benchmark.rule_judgement(question, prediction)
            if score is not None:
                rule_score[i] = float(score)
                details[i]["rules"] = info
            if judge is not None:
                found = benchmark.judge_requests(question, prediction)
                if found:
                    asked[i] = found
        except Exception as err:  # noqa: BLE001 — a malformed prediction is that question's problem
            details[i]["error"] = f"judging: {type(err).__name__}: {err}"
    summary: dict[str, Any] = {"model": judge_name or None, "n_rule_verdicts": sum(s == s for s in rule_score)}
    if judge is None:
        return Judged(_columns(rule_score, judge_score, outputs, details), summary)

    sees_images = judge.capabilities.sees_images
    fingerprint = judge.fingerprint()
    calls = []
    for i, requests in asked.items():
        for request in requests:
            if max_new_tokens is not None:
                request = dataclasses.replace(request, max_new_tokens=max_new_tokens)
            if not sees_images:
                request = text_only(request)
            calls.append(_Call(i, request, judge_key(fingerprint, request_payload(request, questions[i]))))
    replies: dict[str, str] = {}
    if cache is not None:
        replies.update({k: v.generated_text for k, v in cache.get_many([c.key for c in calls]).items()})
    n_cached = sum(1 for c in calls if c.key in replies)
    todo = list({c.key: c for c in calls if c.key not in replies}.values())  # one call per distinct request
    failed: dict[str, str] = {}
    for budget in sorted({c.request.max_new_tokens for c in todo}):
        same = [c for c in todo if c.request.max_new_tokens == budget]
        for start in range(0, len(same), JUDGE_BATCH):
            chunk = same[start:start + JUDGE_BATCH]
            try:
                texts = _ask(judge, benchmark, questions, chunk, budget)
            except Exception as err:  # noqa: BLE001
                log.error("judge batch failed: %r", err)
                failed.update({c.key: f"judge error: {type(err).__name__}: {err}" for c in chunk})
                continue
            new = {c.key: t for c, t in zip(chunk, texts)}
            replies.update(new)
            if cache is not None:
                cache.put_many((k, Prediction(id=k, answer="", generated_text=t)) for k, t in new.items())
    by_question: dict[int, list[_Call]] = {}
    for call in calls:
        by_question.setdefault(call.index, []).append(call)
    for i, mine in by_question.items():
        texts = [replies.get(c.key, failed.get(c.key, "")) for c in mine]
        outputs[i] = json.dumps(texts, ensure_ascii=False)
        if not sees_images and any(r.prompt.images for r in asked[i]):
            details[i]["text_only"] = "the judge is a text model: the images its prompt names were not shown"
        errors = [failed[c.key] for c in mine if c.key in failed]
        if errors:
            details[i]["error"] = errors[0]
            continue
        try:
            score, info = benchmark.read_judgement(questions[i], predictions[i], texts)
        except Exception as err:  # noqa: BLE001
            details[i]["error"] = f"reading the judge: {type(err).__name__}: {err}"
            continue
        if score is not None:
            judge_score[i] = float(score)
        details[i]["judge"] = info
    names_images = sum(1 for requests in asked.values() if any(r.prompt.images for r in requests))
    summary.update({"n_judged": len(by_question), "n_calls": len(calls), "n_cached": n_cached,
                    "n_computed": len(todo), "n_failed": len(failed), "fingerprint": fingerprint,
                    "sees_images": sees_images, "n_shown_images": names_images if sees_images else 0,
                    **({"text_only": f"a text-only judge: the images of {names_images} judged questions were "
                                     "not shown (the official judge sees them)"} if names_images and not sees_images
                       else {})})
    return Judged(_columns(rule_score, judge_score, outputs, details), summary)


def _rule_judgements(benchmark: Benchmark, questions: Sequence[Question], predictions: dict[int, Prediction],
                     protocol: str, details: list[dict[str, Any]]) -> dict[int, Any] | None:
    """{question: verdict} from the benchmark's `rule_judgements` (None when it has none); a
    failure of the call is every such question's judging error."""
    if benchmark.rule_judgements is None:
        return None
    rows = [i for i, q in enumerate(questions) if not q.error and not predictions[i].error]
    try:
        found = benchmark.rule_judgements([questions[i] for i in rows], [predictions[i] for i in rows], protocol)
        return dict(zip(rows, found))
    except Exception as err:  # noqa: BLE001 — the rules failing is every judged question's problem, not the run's
        for i in rows:
            details[i]["error"] = f"judging: {type(err).__name__}: {err}"
        return {}


def _ask(judge: Any, benchmark: Benchmark, questions: Sequence[Question], calls: Sequence[_Call],
         max_new_tokens: int) -> list[str]:
    """One batch of judge calls: each request rendered with its question's decoded images (decoded
    once per question: a FinMTM session's turns all show the same ones)."""
    decoded: dict[int, Any] = {}
    for c in calls:
        if c.request.prompt.images and c.index not in decoded:
            decoded[c.index] = decode_images(questions[c.index])
    rendered = [render(benchmark, c.request.prompt, decoded.get(c.index, [])) for c in calls]
    inputs = judge.to_device(judge.prepare(rendered))
    texts, _ = judge.generate(inputs, max_new_tokens)
    return list(texts)


def _columns(rule_score: list[float], judge_score: list[float], outputs: list[str],
             details: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {"rule_score": rule_score, "judge_score": judge_score, "judge_output": outputs,
            "judge_details": [json.dumps(d, ensure_ascii=False, default=str) if d else "" for d in details]}
