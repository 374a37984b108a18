"""FinMTM's loader: JSONL records of the three kinds (objective, dialogue, agent) → Questions."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.finmtm.texts import (AGENT, DIALOGUE, HUB_ID, HUB_SPLIT, NAME, OBJECTIVE, _OPTION_LINE)
from finbench.benchmarks.recognise import columns_by_file, no_data_files
from finbench.benchmarks.records import local_file, open_table, select
from finbench.core.types import MULTI, OPEN, OPTION_LETTERS, SINGLE, Question


# ---- loading ---------------------------------------------------------------------------------
KIND_FIELDS = {"messages": OBJECTIVE, "turns": DIALOGUE, "ActionTrace": AGENT, "reference_tool_calls": AGENT}


def load_questions(
    source: str | Path | None = None,
    limit: int | None = None,
    domains: Sequence[str] = (),
    question_types: Sequence[str] = (),
    notes: list[str] | None = None,
) -> list[Question]:
    """FinMTM items from JSONL files (a folder may hold all three kinds) or a hub id. `domains`
    filters the task (objective, dialogue, agent), `question_types` the item type (single,
    multi, L1–L4, agent). A record that cannot say its task (a malformed line, a record of no
    known kind) takes the task of its file (`_file_tasks`), so that it is scored as wrong there; a
    filter cannot read its labels, so `--domain` and `--question-type` leave it out (records.py)."""
    table = open_table(_local(str(source or HUB_ID)), HUB_SPLIT, "FinMTM", notes=notes)
    if not set(KIND_FIELDS) & table.columns:
        raise ValueError(_not_finmtm(table.sources, table.columns))
    file_tasks = _file_tasks(table.records)
    questions = []
    for index, raw in select(table.records, _filter_labels, domains, question_types, limit, notes):
        if raw.error is not None:
            question = _broken(raw.origin, index, file_tasks.get(_file_of(raw.origin)), f"bad record: {raw.error}",
                               qid=raw.origin)
        else:
            question = record_to_question(raw.values, index, raw.origin, raw.root)
            if question.meta.get("task") is None:
                question = _broken(raw.origin, index, file_tasks.get(_file_of(raw.origin)), question.error or "",
                                   qid=question.id)
        questions.append(question)
    return questions


def recognise(source: Any) -> str:
    """`Benchmark.recognise`: FinMTM data holds records of at least one of its kinds."""
    if no_data_files("FinMTM", source):
        return no_data_files("FinMTM", source)
    by_file = columns_by_file(source)
    have = set().union(*by_file.values()) if by_file else set()
    return _not_finmtm([str(f) for f in by_file], have) if have and not set(KIND_FIELDS) & have else ""


def _not_finmtm(sources: Sequence[str], have: set[str]) -> str:
    return (f"{', '.join(sources)}: not FinMTM data — no record has messages (objective), turns (session) or "
            f"ActionTrace (agent) (have: {', '.join(sorted(have)) or 'none'})")


def _filter_labels(raw: Any) -> tuple[str | None, str | None]:
    """(task, question type) as the filters read them (records.select), without reading images:
    what `record_to_question` puts in the meta. A record that cannot say its kind has neither —
    the task of its file, under which it is scored (`_broken`), is a guess, not a label."""
    record = raw.values
    if raw.error is not None:
        return None, None
    if "messages" in record:
        multi = Path(_file_of(raw.origin)).stem.upper().startswith("MC")
        try:
            _message_parts(record["messages"])
            multi = multi or len(_gold(record)[1]) > 1
        except (ValueError, KeyError, IndexError, TypeError):
            pass
        return OBJECTIVE, "multi" if multi else "single"
    if "turns" in record:
        return DIALOGUE, _level(record, raw.origin)
    if "ActionTrace" in record or "reference_tool_calls" in record:
        return AGENT, AGENT
    return None, None


def _file_of(origin: str) -> str:
    return origin.rsplit(":", 1)[0] if ":" in origin else origin.split("[")[0]


def _file_tasks(raws: Sequence[Any]) -> dict[str, str]:
    """Each file's task: the one its readable records have (FinMTM files hold one kind each)."""
    tasks: dict[str, str] = {}
    for raw in raws:
        if raw.error is None:
            kind = next((task for name, task in KIND_FIELDS.items() if name in raw.values), None)
            if kind is not None:
                tasks.setdefault(_file_of(raw.origin), kind)
    return tasks


def _broken(origin: str, index: int, task: str | None, error: str, qid: str) -> Question:
    """A record that is an error before its kind is known, given its file's task (or one guessed
    from the file's path: MTQA/L1–L4 sessions, Agent, else objective) so that it is scored there."""
    path = Path(_file_of(origin))
    if task is None:
        name = str(path).upper()
        task = AGENT if "AGENT" in name else DIALOGUE if "MTQA" in name or _level({}, origin) else OBJECTIVE
    if task == OBJECTIVE:
        multi = path.stem.upper().startswith("MC")
        return Question(id=qid, benchmark=NAME, kind=MULTI if multi else SINGLE, text="", error=error,
                        meta={"task": OBJECTIVE, "level": None, "question_type": "multi" if multi else "single",
                              "gold_status": "unreadable"})
    level = _level({}, origin) if task == DIALOGUE else None
    return Question(id=qid, benchmark=NAME, kind=OPEN, text="", error=error,
                    meta={"task": task, "level": level, "question_type": level if task == DIALOGUE else AGENT,
                          "gold_status": "unreadable"})


def _local(source: str) -> str:
    """A hub id → its snapshot in the local Hugging Face cache (the set's JSONL files differ in
    schema, so they are read as files, not through `datasets`); a local path as it is."""
    if Path(source).exists():
        return source
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(source, repo_type="dataset", local_files_only=True)
    except Exception as err:  # noqa: BLE001 — not cached, offline, unknown id: one start-up line
        raise ValueError(f"--data {source}: not a local path and not in the local Hugging Face cache "
                         f"({type(err).__name__}); download it once (huggingface-cli download --repo-type dataset "
                         f"{source}) or pass the folder") from None


def record_to_question(record: Mapping[str, Any], index: int, origin: str = "", data_root: str = "") -> Question:
    """One JSONL record of any kind → Question; malformed → `Question.error`, never an exception.
    Relative image paths are read beside the file (or in image/), never climbing out of the data's
    folder `data_root`."""
    root = Path(_file_of(origin)).parent if origin else None
    if "messages" in record:
        return _objective(record, index, origin, root, data_root)
    if "turns" in record:
        return _dialogue(record, index, origin, root, data_root)
    if "ActionTrace" in record or "reference_tool_calls" in record:
        return _agent(record, index, root, data_root)
    qid = str(record.get("sample_id") or record.get("id") or index)
    return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta={"task": None},
                    error="bad record: neither an objective item (messages), a session (turns) nor an agent item "
                          "(ActionTrace)")


def _objective(record: Mapping[str, Any], index: int, origin: str, root: Path | None, data_root: str) -> Question:
    qid = str(record.get("id") or record.get("sample_id") or f"{Path(_file_of(origin)).stem}-{index}")
    multi_file = Path(_file_of(origin)).stem.upper().startswith("MC")
    meta = {"task": OBJECTIVE, "level": None, "question_type": "multi" if multi_file else "single",
            "gold_status": "unreadable"}
    unreadable = dict(id=qid, benchmark=NAME, kind=MULTI if multi_file else SINGLE, text="", meta=meta)
    try:
        text, urls = _message_parts(record["messages"])
        gold_raw, gold_list = _gold(record)
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return Question(error=f"bad record: {err}", **unreadable)
    options = _options_in(text)
    multi = len(gold_list) > 1 or multi_file
    kind = MULTI if multi else SINGLE
    meta.update(question_type="multi" if multi else "single",
                gold_status="answered" if any(g.strip() for g in gold_list) else "empty")
    fields = {"gold_raw": gold_raw, "message_text": text}
    base = dict(id=qid, benchmark=NAME, kind=kind, text=text, meta=meta, fields=fields,
                gold=canonical_gold(gold_list, gold_raw))
    if not options:
        return Question(error="bad record: no option lines (A. …) in the question text", **base)
    beyond = [g for g in gold_list if g.strip() and g.strip().upper() not in OPTION_LETTERS[:len(options)]]
    if beyond:
        return Question(options=options, error=f"bad record: gold {beyond[0]!r} is not one of the {len(options)} "
                                               f"options ({OPTION_LETTERS[0]}–{OPTION_LETTERS[len(options) - 1]}) "
                                               "in the question text", **base)
    try:
        images = tuple(_image(url, root, data_root) for url in urls)
    except Exception as err:  # noqa: BLE001 — a missing or undecodable image is this item's error
        return Question(options=options, error=f"bad record: {err}", **base)
    return Question(options=options, images=images, **base)


def _message_parts(messages: Any) -> tuple[str, list[str]]:
    """(text, image urls) of `messages[0].content`, as etest.py reads them; anything else is an error."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], Mapping):
        raise ValueError("messages must be a non-empty list of chat messages")
    parts = messages[0].get("content")
    if not isinstance(parts, list) or not all(isinstance(p, Mapping) for p in parts):
        raise ValueError("messages[0].content must be a list of {type, text | image_url} parts")
    texts = [p.get("text") for p in parts if p.get("type") == "text"]
    urls = [(p.get("image_url") or {}).get("url") if isinstance(p.get("image_url"), Mapping) else None
            for p in parts if p.get("type") == "image_url"]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("a text part of messages[0].content is not text")
    if not all(isinstance(u, str) and u.strip() for u in urls):
        raise ValueError("an image_url part of messages[0].content has no url")
    return "".join(texts), urls


def _gold(record: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(the gold JSON text, its option labels) from `choices[0].message.content[0].text`, read as
    etest.py `get_ground_truth` does — but a gold that cannot be read is this item's error, not an
    empty gold: no choices, not JSON, not an object with `answer`, labels that are not text. A
    well-formed empty gold (`{"answer": []}`, `""`, null) is returned empty (etest.py skips it)."""
    try:
        text = record["choices"][0]["message"]["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("no gold: choices[0].message.content[0].text is missing") from None
    if not isinstance(text, str):
        raise ValueError(f"gold {text!r} is not text")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"gold {text[:60]!r} is not JSON (expected {{\"answer\": …}})") from None
    if not isinstance(value, dict) or "answer" not in value:
        raise ValueError(f"gold {text[:60]!r} has no \"answer\" field")
    answer = value["answer"]
    labels = [] if answer is None else [answer] if isinstance(answer, str) else answer
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"gold answer {answer!r} is not an option label or a list of them")
    return text, labels


def canonical_gold(gold_list: Sequence[Any], gold_raw: str) -> str:
    """Ascending letters when every gold option is exactly one letter A–N (the usual case); else the
    raw gold JSON, which the scorer parses as the official code does (lower case, letters beyond N,
    padded strings keep their identity)."""
    items = [str(g) for g in gold_list]
    if items and all(len(g) == 1 and g in OPTION_LETTERS for g in items):
        return "".join(sorted(set(items)))
    return gold_raw if items else ""


def _options_in(text: str) -> tuple[str, ...]:
    """Option labels in the question text: lines starting 'A.' / 'B)' / 'C、' …, in order from A."""
    letters = [m.group(1) for m in _OPTION_LINE.finditer(text)]
    count = 0
    while count < len(OPTION_LETTERS) and OPTION_LETTERS[count] in letters:
        count += 1
    lines = {m.group(1): text[m.start():text.find("\n", m.start()) if "\n" in text[m.start():] else None].strip()
             for m in _OPTION_LINE.finditer(text)}
    return tuple(lines[OPTION_LETTERS[i]] for i in range(count))


def _image(url: Any, root: Path | None, data_root: str = "") -> bytes:
    text = str(url or "").strip()
    if text.startswith("data:"):
        return base64.b64decode(text.split(",", 1)[1])
    if text.startswith(("http://", "https://")):
        raise ValueError(f"image {text[:60]!r} is a URL; finbench reads no network: download it beside the data")
    if text and Path(text).is_absolute():
        candidates = [Path(text)]
    else:  # beside the file, in its image/, or in the hub layout's image/ one level up
        candidates = [local_file(text, base, data_root) for base in
                      ([root, root / "image", root.parent / "image"] if root else [])] if text else []
    for path in candidates:
        if path.is_file():
            return path.read_bytes()
    raise ValueError(f"image {text!r} not found (relative paths are read beside the JSONL file or in image/)")


def _images_of(record: Mapping[str, Any], root: Path | None, data_root: str = "") -> tuple[bytes, ...]:
    paths = record.get("image_paths")
    if paths is None:
        paths = record.get("image_path")
    paths = [paths] if isinstance(paths, str) else list(paths or [])
    return tuple(_image(p, root, data_root) for p in paths if p)


def _level(record: Mapping[str, Any], origin: str) -> str | None:
    for value in (record.get("task_type"), record.get("level"), Path(_file_of(origin)).stem):
        match = re.search(r"L([1-4])", str(value or "").upper())
        if match:
            return f"L{match.group(1)}"
    return None


def _question_text(value: Any, where: str) -> str:
    """A turn's or an agent item's question: text that is not blank (a JSON object would be asked
    as its Python repr, an empty turn run for nothing)."""
    if not isinstance(value, str):
        raise ValueError(f"{where} is {'missing' if value is None else 'a ' + type(value).__name__}, not text")
    if not value.strip():
        raise ValueError(f"{where} is empty")
    return value


def _dialogue(record: Mapping[str, Any], index: int, origin: str, root: Path | None, data_root: str) -> Question:
    qid = str(record.get("session_id") or record.get("sample_id") or f"session-{index}")
    level = _level(record, origin)
    meta = {"task": DIALOGUE, "level": level, "question_type": level, "gold_status": "answered"}
    try:
        if not isinstance(record["turns"], list) or not all(isinstance(t, Mapping) for t in record["turns"]):
            raise ValueError("turns must be a list of {turn_id, question, gold_answer} objects")
        turns = [{"turn_id": t.get("turn_id", n + 1), "question": _question_text(t.get("question"), f"turn {n + 1}'s question"),
                  "gold_answer": str(t.get("gold_answer") or "")} for n, t in enumerate(record["turns"])]
        if not turns:
            raise ValueError("a session needs at least one turn")
        if level is None:
            raise ValueError("no level L1–L4 (task_type, level or the file name)")
        return Question(id=qid, benchmark=NAME, kind=OPEN, text=turns[0]["question"], meta=meta,
                        images=_images_of(record, root, data_root), fields={"turns": turns})
    except Exception as err:  # noqa: BLE001
        return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta=meta, error=f"bad record: {err}")


def _agent(record: Mapping[str, Any], index: int, root: Path | None, data_root: str) -> Question:
    qid = str(record.get("sample_id") or record.get("id") or f"agent-{index}")
    meta = {"task": AGENT, "level": None, "question_type": AGENT, "gold_status": "answered"}
    try:
        turn = record.get("turn") if isinstance(record.get("turn"), Mapping) else {}
        question = record.get("question") if record.get("question") is not None else turn.get("question")
        question = _question_text(question, "the agent question")
        calls = record.get("ActionTrace", record.get("reference_tool_calls"))
        if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
            raise ValueError("ActionTrace must be a list of {tool, query} objects")
        fields = {"reference_calls": [dict(c) for c in calls],
                  "tool_results": record.get("ToolResults", record.get("reference_tool_results", [])),
                  "gold_answer": str(record.get("answer") or record.get("gold_answer")
                                     or record.get("reference_gold_answer") or "")}
        return Question(id=qid, benchmark=NAME, kind=OPEN, text=question, meta=meta,
                        images=_images_of(record, root, data_root), fields=fields)
    except Exception as err:  # noqa: BLE001
        return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta=meta, error=f"bad record: {err}")
