"""One FAMMA record → Question: its text fields, labels, options, gold letters and images in every
published form (hub structs, relative paths, inline base64)."""

from __future__ import annotations

import ast
import base64
import binascii
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.famma.texts import MISSING_ANSWERS, MULTIPLE_CHOICE, N_IMAGES, NAME, OPEN_QUESTION
from finbench.benchmarks.option_lists import parse_options
from finbench.benchmarks.records import RawRecord, as_text, local_file
from finbench.core.types import MULTI, OPEN, OPTION_LETTERS, SINGLE, Question

TEXT_FIELDS = ("question_id", "context", "question", "question_type", "explanation", "release")


@dataclass(frozen=True)
class Shared:
    """What every sub-question of one main question takes from its first sub-question (the
    official call's context and images), read once; `error` when that record's part is broken.
    `broken`: the parts of earlier sub-questions whose images could not be read (each its own error;
    the group is asked without them, with this part's images)."""

    raw: RawRecord
    qid: str
    context: str = ""
    slots: tuple[int, ...] = ()
    images: tuple[bytes, ...] = ()
    error: str | None = None
    broken: tuple["Shared", ...] = ()



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


def _normal(text: str) -> str:
    return " ".join(str(text).casefold().split()).strip(" .")
