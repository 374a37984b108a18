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
The content digest of the questions (rows and image bytes: benchmarks/base.py `questions_digest`)
is printed: the one results.json records (`provenance.data.content`) for a run of every question.

A benchmark that checks its data in full itself (`Benchmark.inspect`: a user's own file, whose every
problem refuses a run) gives the report instead: its counts, sections of lines (the schema it
resolved, rendered prompts) and every problem by row; the data options it reads (`--spec`,
`--image-root`: `Benchmark.data_options`) are given as a run gives them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from finbench.benchmarks import data_source, get_benchmark, looks_like, refusal_of
from finbench.benchmarks.base import Inspection, questions_digest
from finbench.benchmarks.records import image_problem
from finbench.config.run_options import check_data_options
from finbench.sandbox import isolation

MAX_IDS_SHOWN = 3  # ids named per error message
MISSING = "(missing)"  # the count of records without the field (an unreadable record has none)
COUNT_FIELDS = ("task", "domain", "subfield", "question_type", "level", "language", "difficulty", "asset_class",
                "chart_type", "gold_status")


def message_kind(message: str) -> str:
    """An error message with its particulars (quoted values, numbers) blanked, so that the same
    problem in many records is counted once: "image '…' not found" for every missing file."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
    return re.sub(r"\d+", "N", text)[:160]


def check_data(benchmark_name: str, source: str | Path, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report (a JSON-ready dict); ValueError when the source cannot be read at all. `options`:
    the data options given (name → value; a benchmark reads those it declares)."""
    benchmark = get_benchmark(benchmark_name)
    given = {name: value for name, value in (options or {}).items() if value is not None}
    check_data_options(benchmark.name, given.get)
    local = Path(source).expanduser()
    named, source = str(source), data_source(benchmark, str(local) if local.exists() else str(source), given)
    if benchmark.inspect is not None:
        try:
            inspection = benchmark.inspect(source)
        except ValueError as err:  # a source it cannot read at all: another benchmark's data is named, as below
            raise ValueError(f"{err}{looks_like(benchmark, source)}") from err
        return _inspected(benchmark.name, named, inspection)
    refusal = refusal_of(benchmark, source)  # another benchmark's data: "not FinMMR data", not a file of errors
    if refusal:
        raise ValueError(refusal)
    files = [str(f) for f in benchmark.files(local)] if local.exists() else [str(source)]
    notes: list[str] = []
    questions = benchmark.load(source, notes=notes)
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
    counts, same = _counts(benchmark, questions)
    n_errors = sum(1 for q in questions if q.error)
    if benchmark.program_protocols:  # which isolation its model-written programs would get here
        found = isolation()
        notes.append(f"programs of --protocol {', '.join(benchmark.program_protocols)} run in: " + (
            found.detail if found.mode == "jail" else f"{found.detail} (no kernel jail: {found.reason})"
            if found.mode == "landlock" else f"no isolation here ({found.reason}): refused at start-up unless "
                                             "--unsafe-sandbox"))
    return {"benchmark": benchmark.name, "source": named, "files": files, "n_records": len(questions),
            "n_errors": n_errors, "errors": {m: {"n": len(ids), "ids": ids[:MAX_IDS_SHOWN]} for m, ids in errors.items()},
            "n_images": n_images, "n_bad_images": sum(len(ids) for ids in bad_images.values()),
            "bad_images": {m: {"n": len(ids), "ids": ids[:MAX_IDS_SHOWN]} for m, ids in bad_images.items()},
            "counts": counts, "same": same, "notes": notes, "digest": questions_digest(questions),
            "ok": n_errors == 0 and not bad_images and len(questions) > 0}


def _counts(benchmark: Any, questions: list[Any]) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Counts per split, kind, the domain field and COUNT_FIELDS (records without a field counted
    apart), and the fields shown with an earlier one (`_count_fields`)."""
    counts: dict[str, dict[str, int]] = {}
    splits = Counter(str(q.fields.get("release")) for q in questions if q.fields.get("release"))
    if splits:
        counts["split"] = dict(splits)
    counts["kind"] = dict(Counter(q.kind for q in questions))
    same = _count_fields(questions, (benchmark.domain_field, *COUNT_FIELDS), counts)
    return counts, same


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


def _inspected(name: str, source: str, inspection: Inspection) -> dict[str, Any]:
    """The report of a benchmark's own full check: every problem is a row a run would refuse."""
    return {"benchmark": name, "source": source, "files": list(inspection.files), "n_records": inspection.n_records,
            "n_errors": len(inspection.problems), "errors": {}, "n_images": inspection.n_images, "n_bad_images": 0,
            "bad_images": {}, "counts": {k: dict(v) for k, v in inspection.counts.items()},
            "sections": {k: list(v) for k, v in inspection.sections.items()}, "problems": list(inspection.problems),
            "notes": list(inspection.notes), "digest": inspection.digest,
            "ok": not inspection.problems and inspection.n_records > 0}


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
    for title, lines in report.get("sections", {}).items():
        console.print(f"{title}:", markup=False, highlight=False)
        for line in lines:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    if report.get("problems"):
        console.print(f"problems ({report['n_errors']}; each refuses `finbench run` at start-up):", markup=False,
                      highlight=False)
        for line in report["problems"]:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
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
    if report.get("digest"):
        console.print(f"content digest (rows and image bytes): {report['digest']}", markup=False, highlight=False,
                      soft_wrap=True)
    verdict = ("ok: every record loads and every image decodes" if report["ok"] else
               f"problems: {report['n_errors']} rows a run refuses" if report.get("problems") else
               f"problems: {report['n_errors']} records with an error, {report['n_bad_images']} images that do not "
               "decode (a run keeps going: each becomes that sample's error)")
    console.print(verdict, markup=False, highlight=False)
