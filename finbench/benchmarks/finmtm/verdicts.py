"""FinMTM's judges: the MTQA turn and session judge calls and their verdicts, and the offline
agent replay scored on its tool plan."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from finbench.benchmarks.finmtm.eval_metrics import (CAPABILITIES, clamp, dialogue_score, f_beta_score, tool_score,
                                                     turn_capability_score)
from finbench.benchmarks.finmtm.prompts import after_think
from finbench.benchmarks.finmtm.texts import (AGENT, DIALOGUE, JUDGE_FIELDS, JUDGE_MAX_NEW_TOKENS, LEVEL_CHECKLISTS,
                                              SESSION_JUDGE_TEMPLATE, TURN_JUDGE_TEMPLATE)
from finbench.core.requests import Generate, Prompt, Request, user_message
from finbench.core.types import Question


def replies(prediction: Any) -> list[str]:
    """Per-turn replies (after the first `</think>`) of a session or agent prediction."""
    text = prediction.generated_text or prediction.answer or ""
    try:
        values = json.loads(text or "[]")
    except json.JSONDecodeError:
        values = None
    if not isinstance(values, list):  # a one-turn session cached before its text was a list
        values = [text] if text else []
    return [after_think(str(v)) for v in values]


def judge_requests(question: Question, prediction: Any) -> list[Request]:
    """Sessions: one turn-judge call per turn, then the session checklist call, each with the
    session's images first and then the prompt, as the official client sends them
    (judge/MTQA: `client.chat(image=image_paths, text=prompt)`, max_tokens 4096)."""
    if question.meta.get("task") != DIALOGUE:
        return []
    turns = question.fields["turns"]
    answers = replies(prediction) + [""] * len(turns)
    prompts = []
    for k, turn in enumerate(turns):
        context = "\n".join(f"T{i + 1}问：{turns[i]['question']}\nT{i + 1}答：{answers[i]}" for i in range(k))
        prompts.append(TURN_JUDGE_TEMPLATE.format(q=turn["question"], pred=answers[k], gold=turn["gold_answer"],
                                                  ctx=context))
    level = question.meta["level"]
    name, items = LEVEL_CHECKLISTS[level]
    dialogue = json.dumps([{"turn_id": t["turn_id"], "question": t["question"], "gold_answer": t["gold_answer"],
                            "model_answer": a} for t, a in zip(turns, answers)], ensure_ascii=False, indent=2)
    prompts.append(SESSION_JUDGE_TEMPLATE.format(level=level, name=name, dialogue=dialogue,
                                                 checklist=",\n    ".join(f'"{i}": 0-10' for i in items)))
    images = tuple(range(len(question.images)))
    return [Generate(Prompt((user_message(text, len(images)),), images), max_new_tokens=JUDGE_MAX_NEW_TOKENS)
            for text in prompts]


def read_judgement(question: Question, prediction: Any, outputs: Sequence[str]) -> tuple[float | None, dict]:
    """Per turn: the five dimensions clamped to 0–10 and averaged; session: the mean of the
    level's checklist items; final = (0.5·turn mean + 0.5·session) × 10 on the 0–100 scale.

    A reply missing a dimension (or not JSON) scores its turn 0, and one missing a checklist item
    the session 0, as turn_judge.py / session_judge.py do — but the official evaluator also marks
    such a session `evaluation_status: "error"`, and so does this reading: `parsed` is False and
    `unreadable` names the replies ("T2", "session"), so that the runner fails the session closed
    (no judge score, counted and named: runner/judge_step.py) instead of keeping the 0-filled score."""
    turn_scores, capabilities, unreadable = [], [], []
    for k, text in enumerate(outputs[:-1]):
        parsed = parse_judge_json(text)
        if all(f in parsed for f in JUDGE_FIELDS):
            values = dict(zip(CAPABILITIES, (clamp(parsed[f], 0.0, 10.0) for f in JUDGE_FIELDS)))
            turn_scores.append(turn_capability_score(values))
            capabilities.append(values)
        else:
            turn_scores.append(0.0)
            capabilities.append({})
            unreadable.append(f"T{k + 1}")
    session = parse_judge_json(outputs[-1]) if outputs else {}
    items = LEVEL_CHECKLISTS[question.meta["level"]][1]
    checklist = session.get("Checklist_Scores") if isinstance(session.get("Checklist_Scores"), Mapping) else {}
    if all(i in checklist for i in items):
        session_score = sum(clamp(checklist[i], 0.0, 10.0) for i in items) / len(items)
    else:
        session_score = 0.0
        unreadable.append("session")
    turn_score = sum(turn_scores) / len(turn_scores) if turn_scores else 0.0
    final = dialogue_score(turn_score, session_score)
    return final, {"turn_scores": turn_scores, "turn_score": turn_score, "session_score": session_score,
                   "capabilities": capabilities, "parsed": not unreadable, "unreadable": unreadable}


def parse_judge_json(text: str) -> dict:
    """json_utils.safe_parse_json: strip a ``` fence and parse; else retry with curly quotes and
    single quotes turned into double quotes; {} on failure."""
    cleaned = str(text or "").strip()
    for prefix in ("```json", "```"):
        if cleaned.startswith(prefix):
            cleaned = cleaned[len(prefix):]
            break
    if cleaned.endswith("```"):
        cleaned = cleaned[:-3]
    for candidate in (cleaned, str(text or "").replace("“", '"').replace("”", '"').replace("'", '"')):
        try:
            value = json.loads(candidate)
            return value if isinstance(value, dict) else {}
        except json.JSONDecodeError:
            continue
    return {}


def rule_judgement(question: Question, prediction: Any) -> tuple[float | None, dict]:
    """Agent items: the predicted tool calls of every round against the reference ActionTrace."""
    if question.meta.get("task") != AGENT:
        return None, {}
    predicted = unique_calls([c for reply in replies(prediction) for c in tool_calls(reply)])
    reference = unique_calls(question.fields["reference_calls"])
    pairs = match_calls(predicted, reference)
    precision = len(pairs) / len(predicted) if predicted else 0.0
    recall = len(pairs) / len(reference) if reference else 0.0
    f2 = f_beta_score(precision, recall, 2.0)
    qt = tool_score(precision, recall)
    return qt, {"predicted_calls": predicted, "matched_pairs": pairs, "precision": precision,
                "recall": recall, "f2": f2, "tool_score": qt,
                       "emr": int(len(pairs) == len(predicted) == len(reference))}


def tool_calls(reply: str) -> list[dict]:
    """The ActionTrace of one agent reply: the first JSON object holding one; [] if none."""
    start = reply.find("{")
    decoder = json.JSONDecoder()
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(reply[start:])
            if isinstance(value, dict) and isinstance(value.get("ActionTrace"), list):
                return [c for c in value["ActionTrace"] if isinstance(c, Mapping)]
        except json.JSONDecodeError:
            pass
        start = reply.find("{", start + 1)
    return []


def unique_calls(calls: Sequence[Any]) -> list[Any]:
    """Exact duplicates removed, first occurrence kept (judge/Agent/utils.unique_tool_calls)."""
    seen, out = set(), []
    for call in calls:
        try:
            key = json.dumps(call, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        except TypeError:
            key = str(call)
        if key not in seen:
            seen.add(key)
            out.append(call)
    return out


def match_calls(predicted: Sequence[Mapping], reference: Sequence[Mapping]) -> list[dict[str, int]]:
    """One-to-one matches (each index used once) of predicted to reference calls with the same
    tool name, the reference with the most shared query words first. The official matcher is a
    semantic LLM judgement; this offline rule is stricter on the tool and looser on the query."""
    used: set[int] = set()
    pairs = []
    for i, call in enumerate(predicted):
        tool = str(call.get("tool", "")).strip().lower()
        words = set(str(call.get("query", "")).lower().split())
        best, best_overlap = None, -1
        for j, ref in enumerate(reference):
            if j in used or str(ref.get("tool", "")).strip().lower() != tool:
                continue
            overlap = len(words & set(str(ref.get("query", "")).lower().split()))
            if overlap > best_overlap:
                best, best_overlap = j, overlap
        if best is not None:
            used.add(best)
            pairs.append({"predicted_index": i, "reference_index": best})
    return pairs
