"""Judging open answers: by the benchmark's rules, and by a local `--judge` chat model.

The runner hands over every prediction once decoding is done. For each question the benchmark
says (its `Benchmark`: benchmarks/base.py) what its rules conclude (`rule_judgement`) and which
prompts the judge model must answer (`judge_prompts`); the judge's raw replies are read back by
the benchmark (`read_judgement`). The judge is any local transformers chat model: a vision-language checkpoint
through the model adapter (used text-only), or a text-only causal LM. Its replies are greedy and
cached in the run's SQLite cache like any answer, keyed by the judge's fingerprint and the full
prompt, so a rerun computes nothing and a changed answer is judged again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from finbench.benchmarks.base import Benchmark
from finbench.types import ModelRequest, Prediction, Question

JUDGE_PROMPT_VERSION = "judge-v1"  # bump when the way prompts reach the judge changes
JUDGE_MAX_NEW_TOKENS = 256
JUDGE_BATCH = 8
log = logging.getLogger("finbench")


def judge_key(fingerprint: Any, prompt: str, max_new_tokens: int) -> str:
    payload = json.dumps({"judge": fingerprint, "version": JUDGE_PROMPT_VERSION, "prompt": prompt,
                          "max_new_tokens": max_new_tokens}, sort_keys=True, default=str)
    return "judge:" + hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class Judged:
    """Per-question judging columns for samples.parquet, and a summary for results.json."""

    columns: dict[str, list[Any]]
    summary: dict[str, Any] = field(default_factory=dict)


def judge_run(benchmark: Benchmark, questions: Sequence[Question], predictions: dict[int, Prediction],
              judge: Any = None, cache: Any = None, judge_name: str = "",
              max_new_tokens: int = JUDGE_MAX_NEW_TOKENS) -> Judged:
    """Rule and judge-model verdicts for every prediction. A judge failure is that question's
    judge error (stored in `judge_output`), never the run's."""
    n = len(questions)
    rule_score, judge_score = [float("nan")] * n, [float("nan")] * n
    outputs: list[str] = [""] * n
    details: list[dict[str, Any]] = [{} for _ in range(n)]
    prompts: dict[int, list[str]] = {}
    for i, question in enumerate(questions):
        prediction = predictions[i]
        if question.error or prediction.error:
            continue
        try:
            score, info = benchmark.rule_judgement(question, prediction)
            if score is not None:
                rule_score[i] = float(score)
                details[i]["rules"] = info
            if judge is not None:
                found = benchmark.judge_prompts(question, prediction)
                if found:
                    prompts[i] = found
        except Exception as err:  # noqa: BLE001 — a malformed prediction is that question's problem
            details[i]["error"] = f"judging: {type(err).__name__}: {err}"
    summary: dict[str, Any] = {"model": judge_name or None, "n_rule_verdicts": sum(s == s for s in rule_score)}
    if judge is None:
        return Judged(_columns(rule_score, judge_score, outputs, details), summary)

    fingerprint = judge.fingerprint()
    flat = [(i, k, p) for i, ps in prompts.items() for k, p in enumerate(ps)]
    keys = [judge_key(fingerprint, p, max_new_tokens) for _, _, p in flat]
    replies: dict[str, str] = {}
    if cache is not None:
        replies.update({k: v.generated_text for k, v in cache.get_many(keys).items()})
    n_cached = sum(1 for k in keys if k in replies)
    todo = [(key, prompt) for key, (_, _, prompt) in zip(keys, flat) if key not in replies]
    todo = list(dict(todo).items())  # one call per distinct prompt
    failed: dict[str, str] = {}
    for start in range(0, len(todo), JUDGE_BATCH):
        chunk = todo[start:start + JUDGE_BATCH]
        try:
            texts = _ask(judge, [p for _, p in chunk], max_new_tokens)
        except Exception as err:  # noqa: BLE001
            log.error("judge batch failed: %r", err)
            failed.update({k: f"judge error: {type(err).__name__}: {err}" for k, _ in chunk})
            continue
        new = {k: t for (k, _), t in zip(chunk, texts)}
        replies.update(new)
        if cache is not None:
            cache.put_many((k, Prediction(id=k, answer="", generated_text=t)) for k, t in new.items())
    by_question: dict[int, list[str]] = {}
    for (i, _, _), key in zip(flat, keys):
        by_question.setdefault(i, []).append(replies.get(key, failed.get(key, "")))
    for i, texts in by_question.items():
        errors = [failed[k] for (j, _, _), k in zip(flat, keys) if j == i and k in failed]
        outputs[i] = json.dumps(texts, ensure_ascii=False)
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
    summary.update({"n_judged": len(by_question), "n_calls": len(keys), "n_cached": n_cached,
                    "n_computed": len(todo), "n_failed": len(failed), "fingerprint": fingerprint})
    return Judged(_columns(rule_score, judge_score, outputs, details), summary)


def _ask(judge: Any, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    requests = [ModelRequest(messages=({"role": "user", "content": [{"type": "text", "text": p}]},), images=())
                for p in prompts]
    inputs = judge.to_device(judge.prepare(requests))
    texts, _ = judge.generate(inputs, max_new_tokens)
    return list(texts)


def _columns(rule_score: list[float], judge_score: list[float], outputs: list[str],
             details: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {"rule_score": rule_score, "judge_score": judge_score, "judge_output": outputs,
            "judge_details": [json.dumps(d, ensure_ascii=False, default=str) if d else "" for d in details]}
