"""FinMTM's requests and answers: sessions turn by turn, agent replays, objective items."""

from __future__ import annotations

import json

from finbench.benchmarks.finmtm.texts import (AGENT, AGENT_OBSERVATION, AGENT_PROMPT, ANSWER_PREFIX,
                                              CONSTRAINED_INSTRUCTIONS, DIALOGUE, OFFICIAL_MAX_NEW_TOKENS,
                                              OPEN_ENDED_SYSTEM_PROMPT, THINK_CLOSE)
from finbench.core.requests import Choose, Generate, Prompt, Request, Session, Turn, system_message, user_message
from finbench.core.types import MULTI, Question


def request(question: Question, protocol: str) -> Request:
    """The one request a question makes. Sessions (dialogues, agents) are asked turn by turn under
    both protocols: system prompt, earlier turns as text only (question, reply after the first
    `</think>`), the current question with the images attached again; an agent item is the tool
    prompt, then the recorded tool results as the observation of round 2. Objective items: the
    item's own message (official) or our instruction with letter logits (constrained)."""
    task = question.meta.get("task")
    images = tuple(range(len(question.images)))
    n = len(images)
    if task == DIALOGUE:
        turns = tuple(Turn(ask=user_message(t["question"], n), recall=user_message(t["question"]))
                      for t in question.fields["turns"])
        return Session(prefix=(system_message(OPEN_ENDED_SYSTEM_PROMPT),), turns=turns, images=images,
                       max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, reply_after=THINK_CLOSE)
    if task == AGENT:
        plan = user_message(AGENT_PROMPT.format(question=question.text), n)
        results = json.dumps(question.fields.get("tool_results", []), ensure_ascii=False)
        observe = user_message(AGENT_OBSERVATION.format(results=results))
        return Session(prefix=(), turns=(Turn(ask=plan, recall=plan), Turn(ask=observe, recall=observe)),
                       images=images, max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, reply_after=THINK_CLOSE)
    if protocol == "official":
        return Generate(Prompt(messages=(user_message(question.text, n),), images=images),
                        max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    text = question.text.rstrip() + "\n" + CONSTRAINED_INSTRUCTIONS[question.kind]
    return Choose(Prompt(messages=(user_message(text, n),), images=images, answer_prefix=ANSWER_PREFIX),
                  n_options=len(question.options), multi=question.kind == MULTI)


def after_think(text: str) -> str:
    """The official client's reply: the text after the FIRST `</think>`, stripped."""
    return (text or "").split(THINK_CLOSE, 1)[-1].strip()


def extract_official(text: str) -> str:
    """The reply as the scorer must read it, or '' when it holds no answer: the official client
    keeps the text after the FIRST `</think>`, and a reply without '{' there cannot parse. The
    reply itself is kept whole: scoring/finmtm.py does the client's split and etest.py's parse
    exactly once (splitting here too would read `<think>a</think><think>b</think>{…}` wrongly)."""
    return (text or "").strip() if "{" in after_think(text) else ""


def answer(question: Question, text: str, protocol: str) -> str:
    task = question.meta.get("task")
    if task in (DIALOGUE, AGENT):
        return text  # the JSON list of per-turn replies, kept whole for the judge
    return extract_official(text)
