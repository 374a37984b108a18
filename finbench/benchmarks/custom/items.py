"""A custom source read whole: every file's rows turned into questions, and every problem named by
file and row id (each one a start-up refusal of `finbench run`, and a line of `finbench data check`).

A row becomes one `Question`: its id (the file's, or the row number; in a folder of several files,
`subset/id`), its text, options and gold as cells.py reads them, its images (images.py), and in
`meta` its breakdowns (with `subset` for a folder), its answer type (single, multi, true/false,
yes/no, …, numerical, open) and what its error bars cluster on (`cluster_id`: the row's cluster
column, else the content of its images, else nothing — the row alone). Ids must be unique.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from finbench.benchmarks.base import DataSource
from finbench.benchmarks.custom.cells import (NUMERIC_TYPES, RowProblem, check_option_count, choice_gold, free_gold,
                                              normal, options_from_columns, options_from_list, parse_tolerance)
from finbench.benchmarks.custom.columns import Schema, Spec, read_spec, resolve
from finbench.benchmarks.custom.images import placements, references, row_images
from finbench.benchmarks.custom.tables import Table, cell_text, data_files, read_table
from finbench.benchmarks.raw import DataError
from finbench.core.types import MULTI, NUMERICAL, OPEN, SINGLE, Question

NAME = "custom"
SPEC_OPTION, IMAGE_ROOT_OPTION = "data_spec", "image_root"  # the run options its loader reads (config/run_options.py)
MAX_PROBLEMS_SHOWN = 200  # in `finbench data check`; the count is always whole


@dataclass(frozen=True)
class Problem:
    file: str
    row: str  # the row's id as the data gives it (or its row number)
    message: str

    def line(self) -> str:
        return f"{self.file}, row {self.row}: {self.message}"


@dataclass(frozen=True)
class Reading:
    """Everything read of a source: its files with their schemas, the questions of the good rows,
    the problems of the rest, and notes (an id made from row numbers)."""

    files: tuple[str, ...]
    schemas: tuple[tuple[str, Schema], ...]
    questions: tuple[Question, ...]
    problems: tuple[Problem, ...]
    notes: tuple[str, ...]
    n_rows: int


def _path_and_options(source: Any) -> tuple[str, Spec, str | None]:
    if source is None:
        raise DataError(f"--benchmark {NAME}: give your file with --data (csv, tsv, jsonl, json, parquet, or a folder)")
    spec = read_spec(source.option(SPEC_OPTION)) if isinstance(source, DataSource) else Spec()
    root = source.option(IMAGE_ROOT_OPTION) if isinstance(source, DataSource) else None
    return str(source), spec, root or spec.image_root


def read_source(source: Any) -> Reading:
    """Read and check a whole source; a DataError when a file cannot be used at all."""
    path, spec, image_root = _path_and_options(source)
    files = data_files(path)
    folder = len(files) > 1 or Path(path).expanduser().is_dir()
    tables = [read_table(file, path) for file in files]
    schemas = [resolve(table.columns, spec, table.file, folder) for table in tables]
    questions: list[Question] = []
    problems: list[Problem] = []
    notes = []
    for table, schema in zip(tables, schemas):
        roots = [table.file.parent] + ([Path(image_root).expanduser()] if image_root else [])
        made, wrong = _table_questions(table, schema, roots, prefix=f"{table.subset}/" if len(tables) > 1 else "")
        questions += made
        problems += wrong
        if schema.id is None:
            notes.append(f"{table.file}: no id column: each row's id is its row number (1 = the first row)")
    problems += _duplicates(questions, tables, schemas)
    return Reading(tuple(str(f) for f in files), tuple((str(t.file), s) for t, s in zip(tables, schemas)),
                   tuple(questions), tuple(problems), tuple(notes), sum(len(t.rows) for t in tables))


def _row_id(row: dict[str, Any], schema: Schema, number: int) -> str:
    return cell_text(row.get(schema.id)) if schema.id else str(number)


def _table_questions(table: Table, schema: Schema, roots: Sequence[Path], prefix: str
                     ) -> tuple[list[Question], list[Problem]]:
    ids = [_row_id(row, schema, n + 1) for n, row in enumerate(table.rows)]
    first_image = {rid: references(row.get(schema.images[0]))[0] for rid, row in zip(ids, table.rows)
                   if schema.images and references(row.get(schema.images[0]))}
    questions, problems = [], []
    for rid, row in zip(ids, table.rows):
        try:
            if not rid:
                raise RowProblem(f"the id column {schema.id!r} is empty")
            questions.append(row_question(row, schema, prefix + rid, table.subset, roots, first_image))
        except RowProblem as problem:
            problems.append(Problem(str(table.file), repr(rid) if rid else "(empty id)", str(problem)))
    return questions, problems


def _duplicates(questions: Sequence[Question], tables: Sequence[Table], schemas: Sequence[Schema]) -> list[Problem]:
    seen: dict[str, str] = {}
    found = []
    for question in questions:
        subset = question.meta.get("subset", "")
        where = next((str(t.file) for t in tables if t.subset == subset), str(tables[0].file))
        if question.id in seen:
            found.append(Problem(where, repr(question.id), "duplicate id (ids must be unique: results are kept by id)"))
        seen.setdefault(question.id, where)
    return found


def _options(row: dict[str, Any], schema: Schema) -> tuple[str, ...]:
    if schema.options:
        options = options_from_list(row.get(schema.options))
    else:
        options = options_from_columns(row, schema.option_columns)
    check_option_count(options)
    return options


def _answer_type(kind: str, options: tuple[str, ...], boolean: bool) -> str:
    if boolean:
        return "/".join(normal(o) for o in options)  # "true/false", "yes/no", "是/否"
    return {SINGLE: f"single ({len(options)} options)", MULTI: "multi"}.get(kind, kind)


def row_question(row: dict[str, Any], schema: Schema, qid: str, subset: str, roots: Sequence[Path],
                 first_image: dict[str, Any]) -> Question:
    """One row as a Question; a RowProblem saying what is wrong."""
    text = cell_text(row.get(schema.question))
    if not text:
        raise RowProblem(f"the question ({schema.question!r}) is empty")
    if not cell_text(row.get(schema.answer)) and not isinstance(row.get(schema.answer), (list, tuple)):
        raise RowProblem(f"the answer ({schema.answer!r}) is empty")
    options = _options(row, schema)
    numeric = normal(cell_text(row.get(schema.type))) in NUMERIC_TYPES if schema.type else False
    tolerance = cell_text(row.get(schema.tolerance)) if schema.tolerance else ""
    boolean, percent = False, False
    if options:
        kind, gold = choice_gold(row.get(schema.answer), options)
    else:
        kind, gold, options, percent = free_gold(row.get(schema.answer), numeric or bool(tolerance))
        boolean = bool(options)
    tolerance_kind, tolerance_value = parse_tolerance(tolerance) if tolerance and kind == NUMERICAL else ("", 0.0)
    images = row_images(row, schema.images, roots, first_image)
    context = "\n".join(t for t in (cell_text(row.get(c)) for c in schema.context) if t)
    placements("\n".join((context, text, *options)), len(images))  # every <image k> the prompt shows has its image
    meta = {"subset": subset, **{c: cell_text(row.get(c)) for c in schema.breakdowns if c != "subset"},
            "answer_type": _answer_type(kind, options, boolean), "tolerance_kind": tolerance_kind,
            "cluster_id": _cluster(row, schema, images), "breakdown_columns": ",".join(schema.breakdowns)}
    return Question(id=qid, benchmark=NAME, kind=kind, text=text, options=options, gold=gold, images=images,
                    tolerance=tolerance_value if kind == NUMERICAL else None, unit="%" if percent else "",
                    meta=meta, fields={"context": context,
                                       "gold_text": cell_text(row.get(schema.answer)) if kind == OPEN else ""})


def _cluster(row: dict[str, Any], schema: Schema, images: Sequence[bytes]) -> str:
    """What the row's error bars cluster on: its cluster column, else its images' content, else ""
    (the row alone: benchmarks/base.py `cluster_key`)."""
    if schema.cluster and cell_text(row.get(schema.cluster)):
        return cell_text(row.get(schema.cluster))
    if not images:
        return ""
    digest = hashlib.sha256()
    for image in images:
        digest.update(hashlib.sha256(image).digest())
    return "image:" + digest.hexdigest()[:20]


def refusal(reading: Reading) -> str:
    """The start-up refusal of a reading with problems: at most two lines, the first naming the
    file and the row; "" when there is none."""
    if not reading.problems:
        return ""
    first = reading.problems[0].line()
    rest = len(reading.problems) - 1
    return first + (f"\n(and {rest} more problem{'s' * (rest != 1)}: `finbench data check --benchmark {NAME} "
                    f"{reading.files[0] if len(reading.files) == 1 else 'DATA'}` lists every one)" if rest else "")


def selected(questions: Sequence[Question], domains: Sequence[str], question_types: Sequence[str],
             limit: int | None) -> list[Question]:
    """The questions the filters keep: --domain on the category (else the subset), --question-type
    on the kind (single, multi, numerical, open) or the answer type; at most `limit`."""
    kept = [q for q in questions
            if (not domains or q.meta.get("category", q.meta.get("subset")) in domains)
            and (not question_types or q.kind in question_types or q.meta.get("answer_type") in question_types)]
    return kept[:limit] if limit is not None else kept
