"""Judging open answers: by the benchmark's rules, and by a local `--judge` model.

The runner hands over every prediction once decoding is done. For each question the benchmark
says (its `Benchmark`: benchmarks/base.py) what its rules conclude (`rule_judgement`) and, in its
`judging` (finbench/core/judging.py), which requests the judge model must answer (`Generate` requests
whose prompts name the question's images where the official judge sees them — FinMTM's and
MME-Finance's) and how its replies are read back — or, for a question the caller maps in
`judging` (a study's variant judged its own way: finbench/studies/), by that `Judging`. The judge is any local model
adapter (models/judge_model.py, loaded by runner/startup.py on the rank's device): a vision-language
model of any supported family, shown the images, or a text-only causal LM, shown the text alone
and labelled so (`text_only` in the summary and each row's details).

The judge's requests run through the one batch loop (runner/loop.py), as every answer does: the
run's row cap and token budget, the context check, out-of-memory halving and a failing batch
retried call by call. A call that still fails (after those retries) is read as a reply with no
verdict, which each benchmark's official reading scores 0 (the official MME-Finance judge scores
an item 0 once its retries fail; FinMTM's turn judge a turn without a verdict); such questions are
counted (`n_failed_items`), named (`failed_items`) and said in one note, never dropped from the
score. A reply the benchmark's reading cannot parse (its `read_judgement` says `parsed`: False)
fails closed: the question gets no judge score at all — not the official reading's default 0 —
and is counted (`n_unparsed_items`), named (`unparsed_items`) and said in one note. Replies are greedy and cached in the run's SQLite cache like any answer, keyed by the
judge's fingerprint and the whole request as shown (images by their digests, the budget), so a
rerun computes nothing and a changed answer is judged again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark
from finbench.config.specs import BatchSpec, JudgeSpec, RunConfig
from finbench.core.judging import Judging, rule_verdicts
from finbench.core.requests import Generate
from finbench.core.types import Prediction, Question
from finbench.models.contract import ModelAdapter
from finbench.runner.batching import plan_batches, too_long
from finbench.runner.cache import PredictionCache
from finbench.runner.cost import prediction_rows, totals
from finbench.runner.defaults import size_to_device
from finbench.runner.keys import request_payload
from finbench.runner.loop import BatchLoop, first_rows
from finbench.runner.preprocess import prefetch
from finbench.runner.timing import StageTimer

JUDGE_PROMPT_VERSION = "judge-v2"  # bump when the way requests reach the judge changes


def judge_key(fingerprint: Any, payload: Any) -> str:
    data = json.dumps({"judge": fingerprint, "version": JUDGE_PROMPT_VERSION, "request": payload},
                      sort_keys=True, default=str)
    return "judge:" + hashlib.sha256(data.encode()).hexdigest()


def text_only(request: Generate) -> Generate:
    """The request without its image parts (for a judge that cannot see them)."""
    return dataclasses.replace(request, prompt=request.prompt.without_images())


@dataclass(frozen=True)
class Judged:
    """Per-question judging columns for samples.parquet, and a summary for results.json."""

    columns: dict[str, list[Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # for results.json: judge failures, scored 0
    cost: dict[str, Any] | None = None  # the judge calls' tokens and seconds (runner/cost.py `totals`)


@dataclass(frozen=True)
class _Call:
    index: int  # the question
    request: Generate  # as shown to the judge
    key: str


def judge_run(benchmark: Benchmark, questions: Sequence[Question], predictions: dict[int, Prediction],
              judge: ModelAdapter | None = None, cache: PredictionCache | None = None, spec: JudgeSpec = JudgeSpec(),
              batching: BatchSpec = BatchSpec(), *, protocol: str = "", unsafe_sandbox: bool = False,
              judging: Mapping[int, Judging] | None = None) -> Judged:
    """Rule and judge-model verdicts for every prediction, as the run's judging `spec` says (the
    judge's name, recorded in the summary; `judge_max_new_tokens` replaces each request's budget,
    None: the benchmark's official judge budget). `batching` gives the batch loop its row cap,
    token budget and threads (settings left None: sized to the judge's device). A judge failure is
    that question's judge error (stored in `judge_output` and `judge_details`) and scores it 0,
    never the run's error. A benchmark's `rule_judgements` gives the rules' verdicts of the whole
    run (of `protocol`; its programs run without a kernel jail only with `unsafe_sandbox`) in one
    call. `judging` maps a question to the `Judging` that asks the judge and reads it in the
    benchmark's place (a study's own judging of its variants, finbench/studies/)."""
    n = len(questions)
    rule_score, judge_score = [float("nan")] * n, [float("nan")] * n
    outputs: list[str] = [""] * n
    details: list[dict[str, Any]] = [{} for _ in range(n)]
    asked = _rule_verdicts(benchmark, questions, predictions, judge is not None, protocol, unsafe_sandbox, judging,
                           rule_score, details)
    summary: dict[str, Any] = {"model": spec.judge or None, "n_rule_verdicts": sum(s == s for s in rule_score)}
    if judge is None:
        return Judged(_columns(rule_score, judge_score, outputs, details), summary)

    sees_images = judge.capabilities.sees_images
    fingerprint = judge.fingerprint()
    calls = _calls(asked, questions, fingerprint, spec.judge_max_new_tokens, sees_images)
    found = cache.get_many([c.key for c in calls]) if cache is not None else {}
    replies = {k: v.generated_text for k, v in found.items()}
    n_cached = sum(1 for c in calls if c.key in replies)
    todo = list({c.key: c for c in calls if c.key not in replies}.values())  # one call per distinct request
    # the judge's own run of the batch loop: the run's batching, greedy, sized to the judge's device
    config = size_to_device(RunConfig(model=spec.judge or "", benchmark=benchmark.name, batching=batching),
                            judge.device)
    answered, failed, oom_retries = _answer(judge, benchmark, questions, todo, cache, config)
    replies.update({k: p.generated_text for k, p in answered.items()})
    cost = totals(prediction_rows({**found, **answered}.values()))  # each distinct call once, cached ones too
    by_question: dict[int, list[_Call]] = {}
    for call in calls:
        by_question.setdefault(call.index, []).append(call)
    for i, mine in by_question.items():
        outputs[i] = json.dumps([replies.get(c.key, failed.get(c.key, "")) for c in mine], ensure_ascii=False)
        if not sees_images and any(r.prompt.images for r in asked[i]):
            details[i]["text_only"] = "the judge is a text model: the images its prompt names were not shown"
    failed_items, unparsed_items = _read_verdicts(benchmark, questions, predictions, by_question, replies, failed,
                                                  judging, details, judge_score)
    names_images = sum(1 for requests in asked.values() if any(r.prompt.images for r in requests))
    summary.update({"n_judged": len(by_question), "n_calls": len(calls), "n_cached": n_cached,
                    "n_computed": len(todo), "n_failed": len(failed), "n_failed_items": len(failed_items),
                    "failed_items": failed_items, "n_unparsed_items": len(unparsed_items),
                    "unparsed_items": unparsed_items, "oom_retries": oom_retries, "fingerprint": fingerprint,
                    "sees_images": sees_images, "n_shown_images": names_images if sees_images else 0,
                    **({"text_only": f"a text-only judge: the images of {names_images} judged questions were "
                                     "not shown (the official judge sees them)"} if names_images and not sees_images
                       else {})})
    return Judged(_columns(rule_score, judge_score, outputs, details), summary,
                  _failure_notes(failed_items, unparsed_items, failed), cost)


def _rule_verdicts(benchmark: Benchmark, questions: Sequence[Question], predictions: dict[int, Prediction],
                   with_judge: bool, protocol: str, unsafe: bool, judging: Mapping[int, Any] | None,
                   rule_score: list[float], details: list[dict[str, Any]]) -> dict[int, list[Generate]]:
    """The rules' verdicts into `rule_score` and `details` (finbench/core/judging.py `rule_verdicts`);
    returns what each question asks a judge model (`with_judge`). A malformed prediction is its
    question's judging error, and asks no judge."""
    scores, found = rule_verdicts(benchmark, questions, [predictions[i] for i in range(len(questions))], protocol,
                                  unsafe)
    for i, (score, info) in enumerate(zip(scores, found)):
        rule_score[i] = score
        details[i].update(info)
    asked: dict[int, list[Generate]] = {}
    if not with_judge:
        return asked
    for i, question in enumerate(questions):
        malformed = "error" in details[i] and benchmark.rule_judgements is None  # its own rule could not read it
        if question.error or predictions[i].error or malformed:
            continue
        try:
            requests = (judging or {}).get(i, benchmark.judging).judge_requests(question, predictions[i])
            if requests:
                asked[i] = requests
        except Exception as err:  # noqa: BLE001 — a malformed prediction is that question's problem
            details[i]["error"] = f"judging: {type(err).__name__}: {err}"
    return asked


def _calls(asked: Mapping[int, Sequence[Generate]], questions: Sequence[Question], fingerprint: Any,
           max_new_tokens: int | None, sees_images: bool) -> list[_Call]:
    """Every judge call, as shown to the judge (its budget replaced; no images for a text judge), keyed."""
    calls = []
    for i, requests in asked.items():
        for request in requests:
            if max_new_tokens is not None:
                request = dataclasses.replace(request, max_new_tokens=max_new_tokens)
            if not sees_images:
                request = text_only(request)
            calls.append(_Call(i, request, judge_key(fingerprint, request_payload(request, questions[i]))))
    return calls


def _read_verdicts(benchmark: Benchmark, questions: Sequence[Question], predictions: dict[int, Prediction],
                   by_question: Mapping[int, Sequence[_Call]], replies: Mapping[str, str], failed: Mapping[str, str],
                   judging: Mapping[int, Any] | None, details: list[dict[str, Any]],
                   judge_score: list[float]) -> tuple[list[str], list[str]]:
    """The judge's replies read into `judge_score` and `details`; returns the ids of the questions
    whose call failed (scored 0) and of those whose reply held no verdict (no score)."""
    failed_items: list[str] = []
    unparsed_items: list[str] = []
    for i, mine in by_question.items():
        errors = [failed[c.key] for c in mine if c.key in failed]
        if errors:  # read as a reply with no verdict, which every official reading scores 0
            details[i]["error"] = errors[0]
            failed_items.append(questions[i].id)
        try:
            score, info = (judging or {}).get(i, benchmark.judging).read_judgement(
                questions[i], predictions[i], [replies.get(c.key, "") for c in mine])
        except Exception as err:  # noqa: BLE001
            details[i]["error"] = f"reading the judge: {type(err).__name__}: {err}"
            continue
        details[i]["judge"] = info
        if isinstance(info, Mapping) and info.get("parsed") is False and not errors:
            unparsed_items.append(questions[i].id)  # fail closed: no verdict, never a default score
            details[i]["error"] = "the judge's reply has no verdict the benchmark's reading can parse"
            continue
        if score is not None or errors:
            judge_score[i] = float(score or 0.0)
    return failed_items, unparsed_items


def _named(ids: Sequence[str]) -> str:
    return ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")


def _failure_notes(failed_items: Sequence[str], unparsed_items: Sequence[str], failed: Mapping[str, str]) -> list[str]:
    """One note for the questions whose judge call failed (scored 0), one for those whose reply
    held no verdict (failed judgements, no score)."""
    notes = [f"judge: {len(failed_items)} judged question(s) scored 0, a judge call failing after its retries "
             f"({_named(failed_items)}; first: {next(iter(failed.values()))})"] if failed_items else []
    if unparsed_items:
        notes.append(f"judge: {len(unparsed_items)} judged question(s) have no judge verdict, the reply could not be "
                     f"parsed ({_named(unparsed_items)}): counted as failed judgements (judge.unparsed_items), not "
                     "given a default score")
    return notes


def _answer(judge: ModelAdapter, benchmark: Benchmark, questions: Sequence[Question], calls: Sequence[_Call],
            cache: PredictionCache | None, config: RunConfig) -> tuple[dict[str, Prediction], dict[str, str], int]:
    """(replies, errors, out-of-memory retries) by call key: the calls answered by the batch loop
    (each one a row, shown its question's images when its prompt names them), each batch's replies
    committed to the cache as it finishes."""
    if not calls:
        return {}, {}, 0
    shown = [questions[c.index] if c.request.prompt.images else dataclasses.replace(questions[c.index], images=())
             for c in calls]  # a prompt that names no image decodes none
    loop = BatchLoop(judge, benchmark, shown, [c.request for c in calls], config.replaced(gen_kwargs=()),
                     None, StageTimer(judge.device), read_answers=False)
    replies: dict[str, Prediction] = {}
    errors: dict[str, str] = {}
    items = loop.items(range(len(calls)))
    for item, error in too_long(items, judge):
        errors[calls[item.index].key] = f"judge error: {error}"
    items = [item for item in items if calls[item.index].key not in errors]
    batches = plan_batches(items, first_rows(config.batching), config.batching.token_budget)
    for prepared in prefetch(batches, loop.prepare, workers=config.batching.workers, depth=config.batching.workers + 1,
                             ahead=loop.copy_ahead, join=loop.join):
        done = loop.run(prepared)
        new = {calls[k].key: p for k, p in done.items() if not p.error}
        errors.update({calls[k].key: f"judge error: {p.error}" for k, p in done.items() if p.error})
        replies.update(new)
        if cache is not None:  # the reply and what it cost (runner/cost.py), nothing of the question's
            cache.put_many((k, Prediction(id=k, answer="", generated_text=p.generated_text, seconds=p.seconds,
                                          prompt_tokens=p.prompt_tokens, image_tokens=p.image_tokens,
                                          generated_tokens=p.generated_tokens)) for k, p in new.items())
    return replies, errors, loop.throughput.oom_retries


def _columns(rule_score: list[float], judge_score: list[float], outputs: list[str],
             details: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {"rule_score": rule_score, "judge_score": judge_score, "judge_output": outputs,
            "judge_details": [json.dumps(d, ensure_ascii=False, default=str) if d else "" for d in details]}
