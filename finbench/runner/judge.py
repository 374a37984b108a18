"""Judging open answers: by the benchmark's rules, and by a local `--judge` chat model.

The runner hands over every prediction once decoding is done. For each question the benchmark
says (see `finbench.benchmarks`) what its rules conclude (`rule_judgement`) and which prompts the
judge model must answer (`judge_prompts`); the judge's raw replies are read back by the benchmark
(`read_judgement`). The judge is any local transformers chat model: a vision-language checkpoint
through the model adapter (used text-only), or a text-only causal LM. Its replies are greedy and
cached in the run's SQLite cache like any answer, keyed by the judge's fingerprint and the full
prompt, so a rerun computes nothing and a changed answer is judged again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from finbench import benchmarks as hooks
from finbench.types import ModelRequest, Prediction, Question

JUDGE_PROMPT_VERSION = "judge-v1"  # bump when the way prompts reach the judge changes
JUDGE_MAX_NEW_TOKENS = 256
JUDGE_BATCH = 8
log = logging.getLogger("finbench")


def load_judge(source: str, dtype: str = "auto", device: str = "auto", model: Any = None) -> Any:
    """The judge model, or a ValueError with one line. `model` is reused when it is the same checkpoint."""
    if model is not None and getattr(model, "source", None) == source:
        return model
    if not Path(source).exists() and source.count("/") != 1:
        raise ValueError(f"--judge {source}: no such model folder (or hub id owner/name)")
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(source)
    except Exception as err:  # noqa: BLE001 — offline, missing, not a model: one start-up line
        raise ValueError(f"--judge {source}: cannot load its config ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    if hasattr(config, "vision_config"):
        from finbench.models import load_model

        return load_model(source, dtype=dtype, device=device)
    return TextChatModel.load(source, dtype=dtype, device=device)


class TextChatModel:
    """A text-only causal LM with the same three methods the judge uses from a model adapter:
    `prepare(requests)`, `to_device(inputs)`, `generate(inputs, max_new_tokens)`, `fingerprint()`."""

    def __init__(self, model: Any, tokenizer: Any, source: str) -> None:
        self.model, self.tokenizer, self.source = model.eval(), tokenizer, source
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = next(model.parameters()).device

    @classmethod
    def load(cls, source: str, dtype: str = "auto", device: str = "auto") -> "TextChatModel":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from finbench.models.base import resolve_device, resolve_dtype

        target = resolve_device(device)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=resolve_dtype(dtype, target)).to(target)
        return cls(model, AutoTokenizer.from_pretrained(source), source)

    def prepare(self, requests: Sequence[ModelRequest]) -> Any:
        texts = [self.tokenizer.apply_chat_template([_text_message(m) for m in r.messages], tokenize=False,
                                                    add_generation_prompt=True) for r in requests]
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    def to_device(self, inputs: Any) -> Any:
        return {k: v.to(self.device) for k, v in inputs.items()}

    def generate(self, inputs: Any, max_new_tokens: int) -> tuple[list[str], list[int]]:
        import torch

        with torch.inference_mode():
            output = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                         pad_token_id=self.tokenizer.pad_token_id)
        new = output[:, inputs["input_ids"].shape[1]:]
        counts = [int((row != self.tokenizer.pad_token_id).sum()) for row in new]
        return self.tokenizer.batch_decode(new, skip_special_tokens=True), counts

    def fingerprint(self) -> dict[str, Any]:
        from finbench.models.base import weights_digest

        return {"source": self.source, "model_type": self.model.config.model_type,
                "weights": weights_digest(self.source), "dtype": str(self.model.dtype)}


def _text_message(message: Any) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return {"role": message["role"], "content": content}
    return {"role": message["role"], "content": "".join(p.get("text", "") for p in content if p.get("type") == "text")}


def judge_key(fingerprint: Any, prompt: str, max_new_tokens: int) -> str:
    payload = json.dumps({"judge": fingerprint, "version": JUDGE_PROMPT_VERSION, "prompt": prompt,
                          "max_new_tokens": max_new_tokens}, sort_keys=True, default=str)
    return "judge:" + hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class Judged:
    """Per-question judging columns for samples.parquet, and a summary for results.json."""

    columns: dict[str, list[Any]]
    summary: dict[str, Any] = field(default_factory=dict)


def judge_run(benchmark: Any, questions: Sequence[Question], predictions: dict[int, Prediction],
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
        try:
            score, info = hooks.rule_judgement(benchmark, question, prediction)
            if score is not None:
                rule_score[i] = float(score)
                details[i]["rules"] = info
            if judge is not None:
                found = hooks.judge_prompts(benchmark, question, prediction)
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
            score, info = hooks.read_judgement(benchmark, questions[i], predictions[i], texts)
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
