"""`finbench data check --benchmark B PATH`: is a local copy of a benchmark's data usable, before a
model is ever loaded?

It reads the data with the benchmark's own loader (so what it accepts is exactly what a run
accepts), then reports: the files read; how many records load and how many are per-sample errors
(fields missing or malformed, missing images), grouped by message with the first ids; whether
every image decodes (PIL, header and size; the run would make an unreadable one a preprocess
error); and the counts per split, task or domain, question type and kind — to compare with the
published sizes (FinMME 11,099 items; FAMMA release_basic ~1,945; FinMTM 11,133; FinChart-Bench
MC 2,350 / TF 2,384 / QA 2,285; FCMR 757 / 728 / 714). A benchmark names its data files (`Benchmark.files`). Nothing is
written. A source that cannot be read at all is the same one-line start-up error as in a run.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path
from typing import Any

from finbench.benchmarks import get_benchmark, refusal_of
from finbench.sandbox import isolation

MAX_IDS_SHOWN = 3  # ids named per error message
MISSING = "(missing)"  # the count of records without the field (an unreadable record has none)
COUNT_FIELDS = ("task", "domain", "subfield", "question_type", "level", "language", "difficulty", "asset_class",
                "chart_type", "gold_status")


def image_problem(data: bytes) -> str:
    """'' when the bytes are an image PIL can read (header and size), else why not."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Exception as err:  # noqa: BLE001 — any failure is this image's problem
        return f"{type(err).__name__}: {str(err)[:120]}"
    return "" if width > 0 and height > 0 else f"empty image ({width}×{height})"


def message_kind(message: str) -> str:
    """An error message with its particulars (quoted values, numbers) blanked, so that the same
    problem in many records is counted once: "image '…' not found" for every missing file."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
    return re.sub(r"\d+", "N", text)[:160]


def check_data(benchmark_name: str, source: str | Path) -> dict[str, Any]:
    """The report (a JSON-ready dict); ValueError when the source cannot be read at all."""
    benchmark = get_benchmark(benchmark_name)
    refusal = refusal_of(benchmark, source)  # another benchmark's data: "not FinMMR data", not a file of errors
    if refusal:
        raise ValueError(refusal)
    local = Path(source).expanduser()
    files = [str(f) for f in benchmark.files(local)] if local.exists() else [str(source)]
    notes: list[str] = []
    questions = benchmark.load(str(local) if local.exists() else str(source), notes=notes)
    errors: dict[str, list[str]] = {}
    for question in questions:
        if question.error:
            errors.setdefault(message_kind(question.error), []).append(question.id)
    bad_images: dict[str, list[str]] = {}
    n_images = 0
    for question in questions:
        for data in question.images:
            n_images += 1
            problem = image_problem(data)
            if problem:
                bad_images.setdefault(problem, []).append(question.id)
    counts: dict[str, dict[str, int]] = {}
    splits = Counter(str(q.fields.get("release")) for q in questions if q.fields.get("release"))
    if splits:
        counts["split"] = dict(splits)
    counts["kind"] = dict(Counter(q.kind for q in questions))
    same = _count_fields(questions, (benchmark.domain_field, *COUNT_FIELDS), counts)
    n_errors = sum(1 for q in questions if q.error)
    if benchmark.program_protocols:  # which isolation its model-written programs would get here
        found = isolation()
        notes.append(f"programs of --protocol {', '.join(benchmark.program_protocols)} run in: " + (
            found.detail if found.mode == "jail" else f"{found.detail} (no kernel jail: {found.reason})"
            if found.mode == "landlock" else f"no isolation here ({found.reason}): refused at start-up unless "
                                             "--unsafe-sandbox"))
    return {"benchmark": benchmark.name, "source": str(source), "files": files, "n_records": len(questions),
            "n_errors": n_errors, "errors": {m: {"n": len(ids), "ids": ids[:MAX_IDS_SHOWN]} for m, ids in errors.items()},
            "n_images": n_images, "n_bad_images": sum(len(ids) for ids in bad_images.values()),
            "bad_images": {m: {"n": len(ids), "ids": ids[:MAX_IDS_SHOWN]} for m, ids in bad_images.items()},
            "counts": counts, "same": same, "notes": notes,
            "ok": n_errors == 0 and not bad_images and len(questions) > 0}


def _count_fields(questions: list[Any], fields: tuple[str, ...], counts: dict[str, dict[str, int]]) -> dict[str, str]:
    """Each field's counts into `counts` (a blank value counted as missing, never as a '' group);
    returns field → the earlier field that holds the same value for every record (FCMR's
    question_type is its difficulty), so that one table shows both."""
    seen: dict[tuple[str, ...], str] = {}
    same: dict[str, str] = {}
    for field in fields:
        if field in counts:
            continue
        column = tuple("" if q.meta.get(field) is None else str(q.meta[field]).strip() for q in questions)
        values = Counter(value for value in column if value)
        if not values:
            continue
        missing = len(questions) - sum(values.values())  # every record counted: those without it too
        counts[field] = {**values, **({MISSING: missing} if missing else {})}
        if column in seen:
            same[field] = seen[column]
        seen.setdefault(column, field)
    return same


def print_check(report: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    files = report["files"]
    console.print(f"{report['benchmark']}: {report['source']} — {len(files)} file{'s' * (len(files) != 1)}, "
                  f"{report['n_records']} records, {report['n_images']} images", markup=False, highlight=False)
    same = report.get("same") or {}
    for name, values in report["counts"].items():
        if name in same:  # the same values as an earlier field: shown under its title
            continue
        alike = "".join(f" = {other}" for other, first in same.items() if first == name)
        table = Table(title=f"by {name}{alike}")
        table.add_column(f"{name}{alike}", overflow="fold")
        table.add_column("n", justify="right")
        for value, n in sorted(values.items(), key=lambda kv: (-kv[1], kv[0])):
            table.add_row(value, str(n))
        console.print(table)
    for title, key in (("records with an error (each would be that sample's error)", "errors"),
                       ("images that do not decode", "bad_images")):
        if report[key]:
            table = Table(title=title)
            table.add_column("message", overflow="fold")
            table.add_column("n", justify="right")
            table.add_column("first ids", overflow="fold")
            for message, found in report[key].items():
                table.add_row(message, str(found["n"]), ", ".join(found["ids"]))
            console.print(table)
    for note in report["notes"]:
        console.print(f"note: {note}", markup=False)
    verdict = ("ok: every record loads and every image decodes" if report["ok"] else
               f"problems: {report['n_errors']} records with an error, {report['n_bad_images']} images that do not "
               "decode (a run keeps going: each becomes that sample's error)")
    console.print(verdict, markup=False, highlight=False)
