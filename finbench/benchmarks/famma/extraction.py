"""FAMMA's answers: the grouped JSON reply read as the official runner reads it (json-repair)."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from finbench.core.types import Question


def answer(question: Question, text: str, protocol: str) -> str:
    """The answer as judged. Official: this sub-question's `answer` in the grouped JSON (see
    `parse_grouped_response`); constrained open questions: the generated text, stripped."""
    if protocol != "official":
        return text.strip()
    entry = parse_grouped_response(text, [question.id]).get(question.id, {})
    answer = entry.get("answer", "") if isinstance(entry, Mapping) else ""
    return "" if answer is None else str(answer).strip()


def reply_form(text: str) -> bool:
    """A reply in the official runner's form (a JSON object the lenient parser reads: the grouped
    `{question_id: {answer, explanation}}`), not an answer already read from one ("A", "12.5%")."""
    return "{" in (text or "") and isinstance(_lenient_json(text), Mapping)


def extract_official(text: str) -> str:
    """Without the question id the grouped JSON cannot be read: the stripped text."""
    return text.strip()


def parse_grouped_response(text: str, question_ids: Sequence[str]) -> dict[str, Any]:
    """gen_utils.safe_parse_response: a lenient (json-repair) parse of the whole response; when
    nothing parses, a regex per question id for `"id": {"answer": "...", "explanation": "..."}`,
    and the first id keeps the unparsed text as its explanation. Quirk kept: a JSON block inside
    a ```json fence is found by the lenient parser, prose around it is ignored."""
    parsed = _lenient_json(text)
    if isinstance(parsed, Mapping) and parsed:
        return dict(parsed)
    out: dict[str, Any] = {}
    for n, qid in enumerate(question_ids):
        pattern = (rf'"{re.escape(qid)}"\s*:\s*\{{\s*"answer"\s*:\s*"(.*?)"\s*,\s*"explanation"\s*:\s*"(.*?)"\s*\}}')
        match = re.search(pattern, text or "")
        if match:
            out[qid] = {"answer": match.group(1).strip(), "explanation": match.group(2).strip()}
        else:
            out[qid] = {"answer": "", "explanation": text if n == 0 else ""}
    return out


def _lenient_json(text: str) -> Any:
    """json_repair.loads when installed; otherwise the first balanced {...} block (fences and
    prose removed) through json.loads, then with trailing commas dropped."""
    if not text:
        return None
    try:
        import json_repair  # optional: the official parser

        return json_repair.loads(text)
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 — json_repair raises on hopeless input
        return None
    body = text.replace("```json", "```")
    start = body.find("{")
    while start >= 0:
        depth, in_string, escape = 0, False, False
        for end in range(start, len(body)):
            char = body[end]
            if in_string:
                escape = char == "\\" and not escape
                if char == '"' and not escape:
                    in_string = False
                continue
            if char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    block = body[start:end + 1]
                    for candidate in (block, re.sub(r",\s*([}\]])", r"\1", block)):
                        try:
                            return json.loads(candidate)
                        except json.JSONDecodeError:
                            continue
                    break
        start = body.find("{", start + 1)
    return None
