"""FAMMA's loader: records → Questions, sub-questions of one main question grouped as the official
runner asks them."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.famma.record import Shared, _images, _label, _no_image, _text, record_to_question
from finbench.benchmarks.famma.texts import HUB_ID, HUB_SPLIT, MULTIPLE_CHOICE, N_IMAGES, NAME
from finbench.benchmarks.records import RawRecord, open_table, readable_label, select
from finbench.core.types import OPEN, Question

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
    `owner/name@split`) → Questions. `domains` filters subfields. Filters and `limit` choose the
    records first (records.select): only their main questions are built and only those groups'
    images read. Sub-questions of one main question share the first sub-question's context and
    images, as the official runner does; when that first one's images cannot be read, it is its own
    error and the readable sub-questions are asked as their own group, with the images of the first
    of them that reads (a note names it). Later sub-questions whose own context or images differ
    from the first's are named in a note."""
    source = str(source or HUB_ID)
    split = HUB_SPLIT
    if not Path(source).exists() and "@" in source:
        source, split = source.rsplit("@", 1)
    table = open_table(source, split, "FAMMA", REQUIRED_COLUMNS, notes)
    chosen = [index for index, _ in select(table.records, _filter_labels, domains, question_types, limit, notes)]
    # context, images and the official group come from the whole main question, whatever the
    # filters and the limit keep of it: every sub-question of a chosen one's main question is built
    groups = {_group_of(table.records[i].values) for i in chosen if table.records[i].error is None} - {None}
    members = [i for i, raw in enumerate(table.records) if raw.error is None and _group_of(raw.values) in groups]
    shared = _shared_parts([table.records[i] for i in members])
    built, differing = {}, []
    for index in sorted(set(chosen) | set(members)):
        raw = table.records[index]
        if raw.error is not None:
            built[index] = Question(id=raw.origin, benchmark=NAME, kind=OPEN, text="", error=f"bad record: {raw.error}",
                                    meta={"gold_status": "unreadable"})
            continue
        group = shared.get(_group_of(raw.values))
        own = next((part for part in group.broken if part.raw is raw), None) if group is not None else None
        built[index] = record_to_question(raw.values, index, raw.folder, own or group, raw.root)
        if own is None and group is not None and group.raw is not raw and not _agrees(raw, group):
            differing.append(built[index].id)
    if notes is not None:
        regrouped = [(part.broken[0].qid, part.qid) for part in shared.values() if part.broken and part.error is None]
        if regrouped:
            notes.append(f"{len(regrouped)} main question(s) whose first sub-question's images cannot be read: that one "
                         "is its error, the others are asked as their own group with the images of the first of them "
                         "that reads (" + ", ".join(f"{a} → {b}" for a, b in regrouped[:MAX_IDS_NAMED])
                         + (", …" if len(regrouped) > MAX_IDS_NAMED else "") + ")")
        if differing:
            notes.append(f"{len(differing)} sub-question(s) carry a context or images of their own that differ from "
                         f"their main question's first sub-question ({', '.join(differing[:MAX_IDS_NAMED])}"
                         f"{', …' if len(differing) > MAX_IDS_NAMED else ''}): the first one's are used, as the "
                         "official runner does")
    grouped = dict(zip(built, _with_groups(list(built.values()))))
    return [grouped[index] for index in chosen]


def _filter_labels(raw: RawRecord) -> tuple[str | None, str | None]:
    """(subfield, question_type) as the filters read them (records.select): the labels as the
    analyzer groups them (a missing one is "None"); a binary label that is not UTF-8 cannot be read."""
    if raw.error is not None:
        return None, None
    return _filter_label(raw.values.get("subfield")), _filter_label(raw.values.get("question_type"))


def _filter_label(value: Any) -> str | None:
    return None if readable_label(value) is None else str(_label(value))


def _with_groups(questions: list[Question]) -> list[Question]:
    """Give every sub-question the list of its main question's sub-questions (id, type, question,
    options), in sub_question_id order: the official call asks them together."""
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
    """Per group: the context and images of the record with the lowest sub_question_id (ties: the
    first in the data). When its images cannot be read, the next sub-question's are tried, and so
    on; those that failed are kept in `broken`, each to be its own error (the group's context
    stays the first one's where that reads). A group none of whose parts reads is its first part,
    with every part in `broken`."""
    members: dict[tuple[str, str, str], list[RawRecord]] = defaultdict(list)
    for raw in raws:
        if raw.error is None and (group := _group_of(raw.values)) is not None:
            members[group].append(raw)
    out = {}
    for group, raws_of_group in members.items():
        broken: list[Shared] = []
        for raw in sorted(raws_of_group, key=lambda r: _sub_number(r.values)):
            part = _shared(raw)
            if part.error is None:
                context = part.context or next((b.context for b in broken if b.context), "")
                out[group] = dataclasses.replace(part, context=context, broken=tuple(broken))
                break
            broken.append(part)
        else:
            out[group] = dataclasses.replace(broken[0], broken=tuple(broken))
    return out


def _shared(raw: RawRecord) -> Shared:
    record = raw.values
    qid = _label(record.get("question_id")) or raw.origin
    try:
        context = _text(record.get("context"), "context")
    except ValueError as err:
        return Shared(raw, qid, error=str(err))
    try:
        slots, images = _images(record, raw.folder, raw.root)
        return Shared(raw, qid, context, slots, images)
    except Exception as err:  # noqa: BLE001 — the record itself says what broke (record_to_question)
        return Shared(raw, qid, context, error=str(err))


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
