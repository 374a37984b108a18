"""FAMMA's loader: records → Questions, sub-questions of one main question grouped as the official
runner asks them."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.famma.record import Shared, _images, _label, _no_image, _text, record_to_question
from finbench.benchmarks.famma.texts import HUB_ID, HUB_SPLIT, MULTIPLE_CHOICE, N_IMAGES, NAME
from finbench.benchmarks.records import RawRecord, missing_columns, read_table, skipped_note
from finbench.types import OPEN, Question

# Without these a file is not FAMMA data: one start-up line names the file and the columns.
REQUIRED_COLUMNS = ("question", "question_type")
MAX_IDS_NAMED = 5  # in a note


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
