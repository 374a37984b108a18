"""FAMMA's judges: finbench's rule judge (numbers within tolerance, option text) and the official
LLM judge's call and verdict."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from finbench.benchmarks.famma.extraction import _lenient_json, parse_grouped_response
from finbench.benchmarks.famma.prompts import fill_template
from finbench.benchmarks.famma.record import _normal
from finbench.benchmarks.famma.texts import (ABSOLUTE_TOLERANCE, JUDGE_MAX_NEW_TOKENS, OFFICIAL_JUDGE_OPTIONS_TYPE,
                                             OFFICIAL_JUDGE_TEMPLATE, RELATIVE_TOLERANCE)
from finbench.core.requests import Generate, Prompt, Request, user_message
from finbench.core.types import OPEN, OPTION_LETTERS, Question


def rule_judgement(question: Question, prediction: Any) -> tuple[float | None, dict[str, Any]]:
    """`rule_verdict` on the prediction's answer, with the rule named."""
    verdict = rule_verdict(question, prediction.answer)
    return verdict, ({"rule": "number within tolerance or option text"} if verdict is not None else {})


def rule_verdict(question: Question, answer: str) -> float | None:
    """finbench's rule judge for open answers (and free-text multiple-choice answers): 1 when the
    first number of the answer is within RELATIVE_TOLERANCE (or ABSOLUTE_TOLERANCE) of the gold's
    only number, or when the answer names the gold option by letter or by its text; None when
    there is no gold. Not the official LLM judge — reported as its own source."""
    gold = question.fields.get("gold_text", "") if question.kind == OPEN else question.gold
    if not gold or question.error:
        return None
    answer = (answer or "").strip()
    if not answer:
        return 0.0
    if question.kind != OPEN:
        letters = _answer_letters(answer, question.options)
        return float(letters == question.gold)
    gold_numbers = _numbers(gold)
    if len(gold_numbers) == 1:
        found = _numbers(answer)
        if not found:
            return 0.0
        target, value = gold_numbers[0], found[0]
        return float(abs(value - target) <= max(ABSOLUTE_TOLERANCE, RELATIVE_TOLERANCE * abs(target)))
    return float(_normal(answer) == _normal(gold) or (len(_normal(gold)) > 3 and _normal(gold) in _normal(answer)))


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _numbers(text: str) -> list[float]:
    values = []
    for token in _NUMBER.findall(text.replace("−", "-")):
        try:
            values.append(float(token.replace(",", "")))
        except ValueError:
            continue
    return values



def _answer_letters(answer: str, options: Sequence[str]) -> str:
    """Letters an answer names: 'B', 'B.', 'A, C', 'A and C', or an option's exact text."""
    head = answer.strip()
    match = re.match(r"^\(?([A-N](?:\s*(?:[,;/& 、，]|(?i:and)|和)\s*[A-N])*)\)?(?:[.:：)]|\s|$)", head)
    if match:
        return "".join(sorted(set(re.findall(r"[A-N]", re.sub(r"(?i:and)", " ", match.group(1))))))
    for letter, option in zip(OPTION_LETTERS, options):
        if _normal(option) == _normal(head):
            return letter
    return ""


def judge_requests(question: Question, prediction: Any) -> list[Request]:
    """eval_runner's judge call for one sub-question: JudgePrompt filled with the python str() of
    the question dict (keys as eval_runner builds them), text only (generate_response_from_llm is
    called without images). None without a gold answer, and none for a constrained choice answer
    (canonical letters: exact match decides, see scoring/famma.py)."""
    gold = question.fields.get("gold_text", "")
    answer = prediction.answer
    if not gold or question.error or (question.kind != OPEN and not prediction.generated_text):
        return []
    explanation = ""
    if "{" in (prediction.generated_text or ""):
        entry = parse_grouped_response(prediction.generated_text, [question.id]).get(question.id, {})
        explanation = str(entry.get("explanation", "")) if isinstance(entry, Mapping) else ""
    qtype = question.meta.get("question_type")
    options = question.fields.get("raw_options")
    text = question.text + str(options) if qtype == OFFICIAL_JUDGE_OPTIONS_TYPE else question.text
    entry = {"question_id": question.id, "context": question.fields.get("context", ""), "question_type": qtype,
             "question": text, "student_answer": answer, "student_explanation": explanation, "ground_truth": gold}
    return [Generate(Prompt((user_message(fill_template(OFFICIAL_JUDGE_TEMPLATE, question=entry)),)),
                     max_new_tokens=JUDGE_MAX_NEW_TOKENS)]


def read_judgement(question: Question, prediction: Any, outputs: Sequence[str]) -> tuple[float | None, dict[str, Any]]:
    """The verdict as the analyzer reads it: 1 when the value under this question id is the
    string "correct" or True, else 0 ('Correct', 1 and unparseable replies are 0, as there)."""
    if not outputs:
        return None, {}
    parsed = _lenient_json(outputs[0])
    value = parsed.get(question.id) if isinstance(parsed, Mapping) else None
    return float(value == "correct" or value is True), {"verdict": value, "parsed": value is not None}
