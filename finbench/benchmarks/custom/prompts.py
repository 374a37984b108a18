"""The custom benchmark's prompts and readings, per item type (finbench's own texts: `PROMPT_VERSION`
is in the cache key):

- a single choice (and a true/false, yes/no, 是/否 item) → `Choose`: the option letters' logits of one
  prefill;
- a multi-answer item → `Choose(multi=True)`: greedy set decoding of ascending letters;
- a number → `Number`: decoding inside the number grammar, judged exactly and within the row's tolerance;
- an open answer → `Generate` (`OPEN_MAX_NEW_TOKENS`, `--max-new-tokens` overrides it), its reply
  not begun with an answer prefix (a served model continues none: `transformers serve`): its first
  line, matched to the gold after normalisation (case, spaces, a final full stop), or by `--judge`.

The question's `<image k>` placeholders put image k where they stand (the text around them is kept);
images no placeholder names come first. A row's context (`context`, `hint`) comes before the question.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from finbench.benchmarks.custom.cells import normal
from finbench.benchmarks.custom.images import PLACEHOLDER
from finbench.core.judging import Judgement, Judging
from finbench.core.requests import Choose, Generate, Number, Prompt, Request, image_part, text_part
from finbench.core.types import MULTI, NUMERICAL, OPEN, Prediction, Question

PROMPT_VERSION = "custom-v1"  # bump whenever a text below changes: it is in the cache key
ANSWER_PREFIX = "Answer:"
OPEN_MAX_NEW_TOKENS = 64
INSTRUCTIONS = {
    "single": "Answer with the letter of the correct option.",
    MULTI: "Answer with the letters of all correct options, separated by ','.",
    NUMERICAL: "Answer with a number only{unit}.",
    OPEN: "Answer in a few words or a number, on one line.",
}
JUDGE_MAX_NEW_TOKENS = 8
JUDGE_TEMPLATE = ("You grade an answer against the reference answer of a question.\n"
                  "Question: {question}\nReference answer: {gold}\nCandidate answer: {answer}\n"
                  "Does the candidate answer say the same as the reference answer? Reply with yes or no.")
_VERDICT = re.compile(r"^\W*(yes|no|是|否)\b", re.IGNORECASE)


def _content(question: Question, body: str) -> tuple[list[dict[str, Any]], tuple[int, ...]]:
    """Message parts and the image order: images no placeholder names first, then the body with each
    `<image k>` replaced by image k."""
    placed = tuple(int(k) - 1 for k in PLACEHOLDER.findall(body))
    unplaced = tuple(i for i in range(len(question.images)) if i not in placed)
    parts: list[dict[str, Any]] = [image_part() for _ in unplaced]
    position = 0
    for match in PLACEHOLDER.finditer(body):
        if body[position:match.start()]:
            parts.append(text_part(body[position:match.start()]))
        parts.append(image_part())
        position = match.end()
    if body[position:]:
        parts.append(text_part(body[position:]))
    return parts, unplaced + placed


def _body(question: Question) -> str:
    context = question.fields.get("context", "")
    text = (f"{context}\n" if context else "") + f"Question: {question.text}\n"
    if question.options:
        text += "Options:\n" + "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    unit = f" (in {question.unit})" if question.unit else ""
    return text + INSTRUCTIONS.get(question.kind, INSTRUCTIONS["single"]).format(unit=unit)


def prompt(question: Question, body: str | None = None, prefix: str = ANSWER_PREFIX) -> Prompt:
    parts, order = _content(question, _body(question) if body is None else body)
    return Prompt(messages=({"role": "user", "content": parts},), images=order, answer_prefix=prefix)


def request(question: Question, protocol: str) -> Request:
    """The one request a row makes, by its type."""
    if question.kind == OPEN:
        return Generate(prompt(question, prefix=""), max_new_tokens=OPEN_MAX_NEW_TOKENS)
    shown = prompt(question)
    if question.kind == NUMERICAL:
        return Number(shown)
    return Choose(shown, n_options=len(question.options), multi=question.kind == MULTI)


def open_prompt(question: Question) -> Prompt:
    """A choice item without its options, answered in free text (the open-ended probe)."""
    return prompt(question, (f"{question.fields['context']}\n" if question.fields.get("context") else "")
                  + f"Question: {question.text}\n" + INSTRUCTIONS[OPEN])


def rendered(question: Question) -> str:
    """The prompt as text, an image shown as <image>, then the answer prefix (for `finbench data check`)."""
    shown = request(question, "constrained")
    parts = shown.prompt.messages[0]["content"]
    text = "".join("<image>" if part["type"] == "image" else part["text"] for part in parts)
    return text + (f"\n{shown.prompt.answer_prefix}" if shown.prompt.answer_prefix else "")


def answer(question: Question, text: str, protocol: str) -> str:
    """An open answer: the generated text's first non-empty line, stripped."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def same_answer(answer_text: str, gold: str) -> bool:
    """Exact match after normalisation: case, runs of spaces, a final full stop (. or 。)."""
    def folded(text: str) -> str:
        return normal(text).rstrip(".。").strip()

    return bool(folded(gold)) and folded(answer_text) == folded(gold)


def rule_judgement(question: Question, prediction: Prediction) -> Judgement:
    """Open answers: 1 when the answer is the gold (`same_answer`), else 0; other types: nothing to judge."""
    if question.kind != OPEN:
        return None, {}
    return float(same_answer(prediction.answer, question.gold)), {"rule": "exact match after normalisation"}


def judge_requests(question: Question, prediction: Prediction) -> list[Request]:
    """An open answer the rule did not match is asked of the --judge model, text only."""
    if question.kind != OPEN or same_answer(prediction.answer, question.gold) or not prediction.answer.strip():
        return []
    text = JUDGE_TEMPLATE.format(question=question.text, gold=question.gold, answer=prediction.answer)
    return [Generate(Prompt(messages=({"role": "user", "content": [text_part(text)]},)),
                     max_new_tokens=JUDGE_MAX_NEW_TOKENS)]


def read_judgement(question: Question, prediction: Prediction, replies: Sequence[str]) -> Judgement:
    """yes/是 → 1, no/否 → 0; a reply without either is unparsed (no judge score)."""
    if not replies:
        return None, {}
    match = _VERDICT.match(replies[0] or "")
    if match is None:
        return None, {"parsed": False, "reply": (replies[0] or "")[:200]}
    return float(match.group(1).lower() in ("yes", "是")), {"parsed": True}


JUDGING = Judging(judge_requests=judge_requests, read_judgement=read_judgement)
