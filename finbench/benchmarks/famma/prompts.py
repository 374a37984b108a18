"""FAMMA's requests: the constrained per-sub-question prompt with images where `<image_n>` stands,
and the official grouped call."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from finbench.benchmarks.famma.texts import (ANSWER_PREFIX, CONSTRAINED_INSTRUCTIONS, OFFICIAL_MAX_NEW_TOKENS,
                                             OFFICIAL_QUESTION_TEMPLATE, PLACEHOLDER)
from finbench.core.requests import Choose, Generate, Prompt, Request, image_part, text_part, user_message
from finbench.core.types import MULTI, OPEN, Question


def request(question: Question, protocol: str) -> Request:
    """The one request a question makes. Official: the grouped call (`official_prompt`), the same
    request for every sub-question of a main question, so it is generated once for all of them.
    Constrained: one sub-question per request, images where its `<image_n>` placeholders stand;
    choice items from letter logits, open questions generated."""
    if protocol == "official":
        return Generate(official_prompt(question), max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    slots = list(question.fields.get("image_slots", ()))[:len(question.images)]
    by_slot = {slot: index for index, slot in enumerate(slots)}
    parts: list[dict[str, Any]] = []
    ordered: list[int] = []
    text = f"Context: {question.fields.get('context', '')}\nQuestion: {question.text}\n"
    placed = _interleave(text, by_slot, parts, ordered)
    unplaced = [by_slot[s] for s in slots if s not in placed]  # images no placeholder names go first
    parts = [image_part() for _ in unplaced] + parts
    ordered = unplaced + ordered
    tail = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    parts.append(text_part(tail + CONSTRAINED_INSTRUCTIONS[question.kind]))
    messages = ({"role": "user", "content": _merge_text(parts)},)
    if question.kind == OPEN:
        return Generate(Prompt(messages=messages, images=tuple(ordered)), max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    return Choose(Prompt(messages=messages, images=tuple(ordered), answer_prefix=ANSWER_PREFIX),
                  n_options=len(question.options), multi=question.kind == MULTI)


def open_prompt(question: Question) -> Prompt:
    """A choice sub-question asked as an open one (the open-ended probe): context, images where
    they stand, no options, the open instruction."""
    return request(replace(question, kind=OPEN, options=(), gold=""), "constrained").prompt


def _interleave(text: str, by_slot: Mapping[int, int], parts: list, ordered: list) -> set[int]:
    """Split `text` at `<image_n>`: each placeholder whose image exists becomes an image part at
    that position (its first occurrence; later ones stay text)."""
    placed: set[int] = set()
    position = 0
    for match in PLACEHOLDER.finditer(text):
        slot = int(match.group(1))
        if slot not in by_slot or slot in placed:
            continue
        parts.append(text_part(text[position:match.end()]))
        parts.append(image_part())
        ordered.append(by_slot[slot])
        placed.add(slot)
        position = match.end()
    parts.append(text_part(text[position:]))
    return placed


def _merge_text(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text" and merged and merged[-1]["type"] == "text":
            merged[-1] = text_part(merged[-1]["text"] + part["text"])
        elif part["type"] != "text" or part["text"]:
            merged.append(part)
    return merged


def official_prompt(question: Question) -> Prompt:
    """generation_runner's call for one main question: the shared context and every sub-question
    (id, type, question, options for multiple-choice) in QuestionPrompt, then the first
    sub-question's images after the text (as its litellm message does). Identical for every
    sub-question of the group."""
    text = fill_template(OFFICIAL_QUESTION_TEMPLATE, context=question.fields.get("context", ""),
                         sub_questions=list(question.fields.get("group") or []))
    images = tuple(range(len(question.images)))
    return Prompt(messages=(user_message(text, len(images), images_first=False),), images=images)


def fill_template(template: str, **values: Any) -> str:
    """easyllm_kit's PromptTemplate.format as the official prompts use it: `{{name}}` → str(value)."""
    for name, value in values.items():
        template = template.replace("{{" + name + "}}", str(value))
    return template
