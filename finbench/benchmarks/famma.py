"""FAMMA — financial multilingual multimodal question answering (Xue et al., arXiv 2410.04526).

~1,945 answered questions (`release_basic`) and 103 live questions with withheld answers
(`release_livepro`) in English, Chinese and French, 8 subfields, multiple-choice and open.
Data: the hub set `weaverbirdllm/famma` (Arrow/parquet, images as {bytes, path} structs), the
official downloader's JSON (relative JPEG paths) or the early JSON (inline base64 images).
Official code: famma-bench/bench-script @ fcb95d7 (generation_runner, eval_runner, analyzer).

Two protocols:
- `constrained` (default): one sub-question per request, images interleaved where `<image_n>`
  stands; multiple-choice read from option-letter logits, open questions generated and judged.
- `official`: the grouped JSON prompt (all sub-questions of a main question in one call, the first
  sub-question's images after the text), json-repair parsing, then judging as the official runner.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, Demo
from finbench.benchmarks.finmme import parse_options
from finbench.benchmarks.records import RawRecord, as_text, local_file, missing_columns, read_table, skipped_note
from finbench.requests import Choose, Generate, Prompt, Request, image_part, text_part, user_message
from finbench.scoring import famma as scoring
from finbench.types import MULTI, OPEN, OPTION_LETTERS, SINGLE, Question

NAME = "famma"
HUB_ID = "weaverbirdllm/famma"
HUB_SPLIT = "release_basic"
# the score's breakdowns: the record's labels, then the analyzer's derived tables (scoring/famma.py)
GROUP_COLUMNS = ("question_type", "kind", "language", "difficulty", "subfield", *scoring.DERIVED_GROUP_COLUMNS)
DOMAIN_FIELD = "subfield"  # the meta field --domain filters on
FORMS = ("hub Arrow/parquet (image structs)", "downloader JSON (relative image paths)",
         "early JSON (base64 images, options as a python-list string)")
PROTOCOLS = ("constrained", "official")
METRICS = "accuracy: consolidated, arithmetic / non-arithmetic, by subfield, difficulty, language, language×difficulty"

N_IMAGES = 7
MULTIPLE_CHOICE = "multiple-choice"
OPEN_QUESTION = "open question"
MISSING_ANSWERS = ("", "nan", "none", "null")  # how the live set (and pandas) spell "no gold answer"
PLACEHOLDER = re.compile(r"<image_(\d+)>")

# ---- official protocol (famma_runner/utils/prompt_utils.py QuestionPrompt, JudgePrompt) --------------
# The leading spaces are the template's own indentation: the model sees them.
OFFICIAL_QUESTION_TEMPLATE = """You are a highly knowledgeable financial expert. Please answer the questions in the finance domain. You are given context, images, questions and options.
        The questions are multilingual (either in English, Chinese, or French) and multimodal (containing images as part of the question).  
        
        Question Format:
        - Context: The given financial context.
        - Sub_questions: A list of sub-questions, where each contains:
        id: unique identifier for the sub-question
        type: question type ('multiple-choice' or 'open-ended')
        question: the actual question text
        - Images: Image placeholders like '<image_1>', '<image_2>' refer to accompanying images. If images are mentioned, they will be included alongside the textual context. If no images are provided, answer based solely on the textual context.
        
        Answering Guidelines:
        For each sub_question, provide:        
        - Answer:
            For multiple-choice questions, return the option index A, B, C, D, etc.
            For open-ended questions, provide a concise and precise answer.
        - Explanation: Provide a clear and detailed explanation (maximum 200 words) for your answer in the same language as the question.
        - Explanation Format: Write explanations in clear, natural language without using special characters or symbols that could interfere with JSON parsing (avoid \\n, \\t, etc.). Keep explanations concise and focused.

        Your response must be in a standard JSON format and should follow this structure:
        ```json
        {
            "<question_id>": {
                "answer": "<answer>",
                "explanation": "<explanation>"
            },
            "<question_id>": {
                "answer": "<answer>",
                "explanation": "<explanation>"
            },
            ...
        }
        ```
        Ensure that the response strictly adheres to JSON syntax without any additional content. 
        Now please answer the following question:
        context: {{context}}
        {{sub_questions}} 
        """
OFFICIAL_JUDGE_TEMPLATE = """You are a highly knowledgeable expert and teacher in the finance domain. 
        You are reviewing a student's answers to financial questions. 
        The questions are multilingual (either in English, Chinese, or French) and multimodal (containing images as part of the question). '<image_1>, <image_2> ...' mentioned in the text of the context or question are sequential placeholders for images, which are fed at the same time as the textual information.
        You are given the context, the question, the student's answer and the student's explanation and the ground-truth answer. 
        Please use the given information and refer to the ground-truth answer to determine if the student's answer is correct.
        
        Question Format:
        {
            "question_id": "<unique_identifier>",
            "context": "<financial_context>",
            "type": "<multiple-choice|open-ended>",
            "question": "<question_text>",
            "student_answer": "<student's_answer>",
            "student_explanation": "<student's_explanation>",
            "ground_truth": "<correct_answer>"
        }

        Evaluation Guidelines:
        For multiple-choice questions:
        Correct if student's answer matches the ground truth content, regardless of format
        Example: If correct answer is "A. Stock market", both "A" and "Stock market" are considered correct
        Focus on whether the student selected the right concept/answer, not the format
        For open-ended questions:
        Compare key concepts and accuracy of student's response with ground truth
        Respond directly as either 'correct' or 'incorrect'.

        Your response must be in a standard JSON format and should follow this structure:
        ```json
        {
            "<question_id>": "correct" or "incorrect"
        }
        ```
        Now please evaluate the following response:
        {{question}}
        """
# eval_runner.py tests 'multiple_choice' (underscore) while the data says 'multiple-choice': the
# judge is never shown the options. Kept, so verdicts match the official judge's inputs.
OFFICIAL_JUDGE_OPTIONS_TYPE = "multiple_choice"
OFFICIAL_MAX_NEW_TOKENS = 1280
JUDGE_MAX_NEW_TOKENS = 64

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "famma-constrained-v1"  # bump whenever the template below changes: it is in the cache key
CONSTRAINED_INSTRUCTIONS = {
    SINGLE: "Answer with the letter of the single correct option.",
    MULTI: "Answer with the letters of all correct options, separated by ','.",
    OPEN: "Answer the question concisely; give a number where a number is asked.",
}
ANSWER_PREFIX = "Answer:"
RELATIVE_TOLERANCE = 0.01  # rule judge: a number within 1 % of the gold ...
ABSOLUTE_TOLERANCE = 1e-6  # ... or within this absolute distance (golds of 0)


# ---- loading ---------------------------------------------------------------------------------
# Without these a file is not FAMMA data: one start-up line names the file and the columns.
REQUIRED_COLUMNS = ("question", "question_type")
TEXT_FIELDS = ("question_id", "context", "question", "question_type", "explanation", "release")
MAX_IDS_NAMED = 5  # in a note


@dataclass(frozen=True)
class Shared:
    """What every sub-question of one main question takes from its first sub-question (the
    official call's context and images), read once; `error` when that record's part is broken."""

    raw: RawRecord
    qid: str
    context: str = ""
    slots: tuple[int, ...] = ()
    images: tuple[bytes, ...] = ()
    error: str | None = None


def load_questions(
    source: str | Path | None = None,
    limit: int | None = None,
    domains: Sequence[str] = (),
    question_types: Sequence[str] = (),
    notes: list[str] | None = None,
) -> list[Question]:
    """FAMMA records from a local file/folder (any published form) or a hub id (`owner/name` or
    `owner/name@split`) → Questions. `domains` filters subfields. Sub-questions of one main question
    share the first sub-question's context and images, as the official runner does; a first
    sub-question whose shared part is broken fails its group with an error naming it, and later
    sub-questions whose own context or images differ from the first's are named in a note."""
    source = str(source or HUB_ID)
    split = HUB_SPLIT
    if not Path(source).exists() and "@" in source:
        source, split = source.rsplit("@", 1)
    table = read_table(source, split)
    if not table.records:
        raise ValueError(f"{', '.join(table.sources)}: no records (the data is empty)")
    missing = missing_columns(table, REQUIRED_COLUMNS)
    if missing:
        raise ValueError(f"{', '.join(table.sources)}: not FAMMA data — missing required column(s) "
                         f"{', '.join(missing)} (have: {', '.join(sorted(table.columns)) or 'none'})")
    # context, images and the official group come from the whole main question, whatever the
    # filters and the limit keep of it
    shared = _shared_parts(table.records)
    questions, differing = [], []
    for index, raw in enumerate(table.records):
        if raw.error is not None:
            questions.append(Question(id=raw.origin, benchmark=NAME, kind=OPEN, text="", error=f"bad record: {raw.error}",
                                      meta={"gold_status": "unreadable"}))
            continue
        group = shared.get(_group_of(raw.values))
        questions.append(record_to_question(raw.values, index, raw.folder, group, raw.root))
        if group is not None and group.raw is not raw and group.error is None and not _agrees(raw, group):
            differing.append(questions[-1].id)
    if notes is not None:
        notes.extend(skipped_note(table))
        if differing:
            notes.append(f"{len(differing)} sub-question(s) carry a context or images of their own that differ from "
                         f"their main question's first sub-question ({', '.join(differing[:MAX_IDS_NAMED])}"
                         f"{', …' if len(differing) > MAX_IDS_NAMED else ''}): the first one's are used, as the "
                         "official runner does")
    kept = []
    for question in _with_groups(questions):
        if question.meta.get("gold_status") != "unreadable" or question.text:
            if domains and str(question.meta.get("subfield")) not in domains:
                continue
            if question_types and str(question.meta.get("question_type")) not in question_types:
                continue
        kept.append(question)
        if limit is not None and len(kept) >= limit:
            break
    return kept


def _with_groups(questions: list[Question]) -> list[Question]:
    """Give every sub-question the list of its main question's sub-questions (id, type, question,
    options), in sub_question_id order: the official call asks them together."""
    import dataclasses

    def key(q: Question) -> tuple:
        return q.meta.get("language"), q.meta.get("main_question_id"), q.fields.get("release", "")

    members: dict[tuple, list[Question]] = defaultdict(list)
    for q in questions:
        if q.meta.get("main_question_id") is not None and not q.error:
            members[key(q)].append(q)
    out = []
    for q in questions:
        group = members.get(key(q), [q] if not q.error else [])
        entries = []
        for m in sorted(group, key=lambda m: _sub_number({"sub_question_id": m.fields.get("sub_question_id")})):
            entry = {"id": m.id, "type": m.meta.get("question_type"), "question": m.text}
            if m.meta.get("question_type") == MULTIPLE_CHOICE:
                entry["options"] = m.fields.get("raw_options")
            entries.append(entry)
        out.append(dataclasses.replace(q, fields={**q.fields, "group": entries}))
    return out


def _group_of(record: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(language, main_question_id, release): one official call. The release keeps a folder holding
    release_basic and release_livepro from merging their main questions of the same number."""
    main = record.get("main_question_id")
    if main is None or (isinstance(main, float) and math.isnan(main)):
        return None
    try:
        return tuple(_text(record.get(name), name).strip() for name in ("language", "main_question_id", "release"))
    except ValueError:
        return None  # a label that is not text: the record's own error says so


def _sub_number(record: Mapping[str, Any]) -> float:
    try:
        return float(record.get("sub_question_id"))
    except (TypeError, ValueError):
        return math.inf


def _shared_parts(raws: Sequence[RawRecord]) -> dict[tuple[str, str, str], Shared]:
    """Per group: the context and images of the record with the lowest sub_question_id."""
    first: dict[tuple[str, str, str], RawRecord] = {}
    for raw in raws:
        if raw.error is not None or (group := _group_of(raw.values)) is None:
            continue
        if group not in first or _sub_number(raw.values) < _sub_number(first[group].values):
            first[group] = raw
    return {group: _shared(raw) for group, raw in first.items()}


def _shared(raw: RawRecord) -> Shared:
    record = raw.values
    qid = _label(record.get("question_id")) or raw.origin
    try:
        slots, images = _images(record, raw.folder, raw.root)
        return Shared(raw, qid, _text(record.get("context"), "context"), slots, images)
    except Exception as err:  # noqa: BLE001 — the group's members say which record broke it
        return Shared(raw, qid, error=str(err))


def _agrees(raw: RawRecord, group: Shared) -> bool:
    """Does a later sub-question's own context and images agree with its group's first one (an
    empty context and no images of its own agree: the official data often leaves them out)?"""
    record, first = raw.values, group.raw.values
    try:
        context = _text(record.get("context"), "context")
    except ValueError:
        return False
    if context.strip() and context != group.context:
        return False
    fields = [f"image_{n}" for n in range(1, N_IMAGES + 1)]
    own = [record.get(f) for f in fields]
    if all(map(_no_image, own)) or own == [first.get(f) for f in fields]:
        return True
    try:
        return _images(record, raw.folder, raw.root) == (group.slots, group.images)
    except Exception:  # noqa: BLE001 — own images unreadable: they differ
        return False


def _no_image(value: Any) -> bool:
    """An empty image slot in any published form (null, NaN, "None", '', an empty struct)."""
    if isinstance(value, Mapping):
        return not value.get("bytes") and not value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return not value
    return value is None or (isinstance(value, float) and math.isnan(value)) or \
        str(value).strip() in ("", "None", "none", "null")


def record_to_question(record: Mapping[str, Any], index: int, root: str | Path | None = None,
                       first: Shared | None = None, data_root: str | Path = "") -> Question:
    """One raw record → Question; anything malformed becomes `Question.error`, never an exception.
    `root` is the data file's folder (relative image paths are read from there, never climbing out
    of `data_root`); `first` the shared part of its main question (context and images come from
    its first sub-question)."""
    try:
        text = {name: _text(record.get(name), name) for name in TEXT_FIELDS}
    except ValueError as err:
        qid = _label(record.get("question_id")) or str(index)
        return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta={"gold_status": "unreadable"},
                        error=f"bad record: {err}")
    qid = text["question_id"] or str(record.get("idx", index))
    qtype, release = text["question_type"], text["release"]
    meta = {
        "subfield": _label(record.get("subfield")),
        "language": _label(record.get("language")),
        "difficulty": _label(record.get("topic_difficulty")),
        "question_type": _label(record.get("question_type")),
        "is_arithmetic": _label(record.get("is_arithmetic")),
        "main_question_id": _label(record.get("main_question_id")),
        "image_type": _label(record.get("image_type")),
    }
    context = first.context if first is not None and first.context else text["context"]
    fields = {"context": context, "raw_options": record.get("options"), "release": release,
              "sub_question_id": _label(record.get("sub_question_id")), "explanation": text["explanation"]}
    base = dict(id=qid, benchmark=NAME, text=text["question"], fields=fields)
    kind = OPEN if qtype == OPEN_QUESTION else SINGLE
    try:
        gold_text = answer_text(record.get("answers"), decode="livepro" in release.lower() or "livepro" in qid)
        if not text["question"].strip():
            raise ValueError("question is empty")
        if qtype == MULTIPLE_CHOICE:
            options = _options(record.get("options"))
            if not options:
                raise ValueError("multiple-choice question without options")
            gold = _gold_letters(gold_text, options) if gold_text else ""
            kind = MULTI if len(gold) > 1 else SINGLE
        elif qtype == OPEN_QUESTION:
            options, gold = (), gold_text
        else:
            raise ValueError(f"unknown question_type {qtype!r} (expected {MULTIPLE_CHOICE!r} or {OPEN_QUESTION!r})")
        if first is not None and first.error is not None:
            raise ValueError(first.error if first.raw.values is record else
                             f"its main question's context and images come from the first sub-question {first.qid} "
                             f"({first.raw.origin}), which is broken: {first.error}")
        slots, images = (first.slots, first.images) if first is not None else _images(record, root, data_root)
        fields.update(image_slots=slots, gold_text=gold_text)
        meta["gold_status"] = "answered" if gold_text else "unanswered"
        return Question(kind=kind, options=options, gold=gold, images=images, meta=meta, **base)
    except Exception as err:  # noqa: BLE001 — any malformed field is a per-sample error
        meta["gold_status"] = "unreadable"
        return Question(kind=kind, meta=meta, error=f"bad record: {err}", **base)


_text = as_text  # a text field as str; a binary column's bytes must be UTF-8


def _label(value: Any) -> str | None:
    """Metadata as the analyzer groups it: None stays None (a missing label), "" stays "" ."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def answer_text(raw: Any, decode: bool = False) -> str:
    """The gold answer as text, "" when there is none. `decode`: the live set's base64 masking,
    undone when the value decodes to UTF-8 text (else kept as stored)."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return ""
    text = _text(raw, "answers").strip()
    if decode and text:
        try:
            text = base64.b64decode(text).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            pass
    return "" if text.lower() in MISSING_ANSWERS else text


def _options(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, (bytes, bytearray)):
        raw = _text(raw, "options")
    if isinstance(raw, str) and raw.strip().startswith("["):
        try:
            raw = ast.literal_eval(raw.strip())  # the early JSON's python-list string
        except (ValueError, SyntaxError):
            pass
    return parse_options(raw)


# a gold naming letters only: 'B', '(B)', 'B.', 'A, C', 'A and C', 'A & C', 'A/C', 'AC' (one letter
# each, upper case, A–N)
_LETTER = r"\(?[A-N]\)?"
_GOLD_LETTERS = re.compile(rf"^(?:{_LETTER}(?:\s*(?:[,;/&、，]|(?i:and|et|y|und)|和|及|与)\s*{_LETTER}|\s+{_LETTER})*"
                           rf"|[A-N]{{2,}})\s*[.。]?$")
_GOLD_LETTER_THEN_TEXT = re.compile(r"^\(?([A-N])\s*[.):：、]\s*\S")


def _gold_letters(text: str, options: Sequence[str]) -> str:
    """The gold's ascending letters. A gold naming letters only ('B', 'B.', '(B)', 'A, C',
    'A and C', 'AC'), an option's exact text, or one letter followed by its text ('A. Stock
    market'); a gold naming an option beyond the list, or anything else, is this question's error
    (never its first letter: 'A and C' is {A, C})."""
    head = text.strip()
    if _GOLD_LETTERS.match(head):
        letters = "".join(sorted(set(re.findall(r"[A-N]", re.sub(r"(?i:and|et|und)", " ", head)))))
    elif (by_text := [letter for letter, option in zip(OPTION_LETTERS, options) if _normal(option) == _normal(head)]):
        letters = by_text[0]
    elif (match := _GOLD_LETTER_THEN_TEXT.match(head)):
        letters = match.group(1)
    else:
        raise ValueError(f"no option letter in answer {text!r}")
    if any(c not in OPTION_LETTERS[:len(options)] for c in letters):
        raise ValueError(f"answer {text!r} names an option beyond the {len(options)} given")
    return letters


def _images(record: Mapping[str, Any], root: str | Path | None,
            data_root: str | Path = "") -> tuple[tuple[int, ...], tuple[bytes, ...]]:
    """(slot numbers, bytes) of image_1..image_7 that are present, in slot order."""
    slots, images = [], []
    for n in range(1, N_IMAGES + 1):
        data = image_bytes(record.get(f"image_{n}"), root, data_root)
        if data is not None:
            slots.append(n)
            images.append(data)
    return tuple(slots), tuple(images)


def image_bytes(value: Any, root: str | Path | None, data_root: str | Path = "") -> bytes | None:
    """One image field in any published form; None when the slot is empty ("None", null, '').
    A relative path is read from the data file's folder `root` and must not climb out of it (or of
    the data's folder `data_root`); an absolute one is read as given."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, Mapping):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return image_bytes(str(value["path"]), root, data_root)
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value) or None
    text = str(value).strip()
    if text in ("", "None", "none", "null"):
        return None
    if len(text) < 4096:
        candidates = [Path(text)] if Path(text).is_absolute() else \
            [local_file(text, root, data_root)] if root is not None else []
        for path in candidates:
            if path.is_file():
                return path.read_bytes()
    if text.lower().endswith((".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp")):
        raise ValueError(f"image file {text!r} not found (relative paths are read from the JSON file's folder)")
    payload = text.split(",", 1)[1] if text.startswith("data:") else text
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"image value is neither a readable path nor base64 ({text[:40]!r}…)") from None


# ---- prompts -----------------------------------------------------------------------------------
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


# ---- answers -----------------------------------------------------------------------------------
def answer(question: Question, text: str, protocol: str) -> str:
    """The answer as judged. Official: this sub-question's `answer` in the grouped JSON (see
    `parse_grouped_response`); constrained open questions: the generated text, stripped."""
    if protocol != "official":
        return text.strip()
    entry = parse_grouped_response(text, [question.id]).get(question.id, {})
    answer = entry.get("answer", "") if isinstance(entry, Mapping) else ""
    return "" if answer is None else str(answer).strip()


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


# ---- judging -----------------------------------------------------------------------------------
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


def _normal(text: str) -> str:
    return " ".join(str(text).casefold().split()).strip(" .")


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
    return float(value == "correct" or value is True), {"verdict": value}


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=scoring.SCORER,
    load=load_questions, request=request, answer=answer, rule_judgement=rule_judgement,
    judge_requests=judge_requests, read_judgement=read_judgement, forms=FORMS, protocols=PROTOCOLS, metrics=METRICS,
    demo=Demo(module="finbench.offline.famma_synthetic", sizes="FAMMA main questions of two sub-questions (12)"))
