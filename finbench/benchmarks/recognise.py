"""Whose data is this? Every benchmark declares `Benchmark.recognise(source) -> str`: "" when a
`--data` source looks like its data (or cannot be told without loading it: a hub id), else one line
saying why not — "…: not FinMMR data — missing required column(s) …". It is asked at start-up
(runner/startup.py `validate`, before torch is imported or any model loads) and by `finbench data
check`, so another benchmark's file is refused in one line instead of run as a file of broken records.

It must be cheap: the column names of each data file from what names them — a parquet file's
schema, a TSV's or CSV's header, the first lines of a JSONL file — and, for JSON and Arrow files, their
records. A file that cannot be read at all says nothing here: the loader names it. The builders
below cover what a benchmark usually declares (columns every record set has; one of several
kinds of record); a benchmark with another test writes its own function of the source.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from finbench.benchmarks.records import data_files, read_table

JSONL_LINES_READ = 200  # the first lines of a JSONL file name its columns (a record may omit some)

Recognise = Callable[[Any], str]


def anything(source: Any) -> str:
    """The recogniser of a benchmark that declares none: every source is given to its loader."""
    return ""


def file_columns(file: Path) -> set[str] | None:
    """The column names of one data file; None when it cannot be read or holds no record (the loader
    says so: "no records" is its line, not "not X data")."""
    try:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            metadata = pq.read_metadata(file)
            return set(metadata.schema.to_arrow_schema().names) if metadata.num_rows else None
        if file.suffix in (".tsv", ".csv"):
            with file.open(encoding="utf-8-sig", errors="replace") as text:
                header, first = text.readline(), text.readline()
            delimiter = "\t" if file.suffix == ".tsv" else ","
            names = next(csv.reader([header.rstrip("\r\n")], delimiter=delimiter), [])  # a quoted header, as pandas reads it
            return {name.strip() for name in names if name.strip()} if first.strip() else None
        if file.suffix == ".jsonl":
            columns: set[str] = set()
            with file.open(encoding="utf-8", errors="replace") as text:
                for _, line in zip(range(JSONL_LINES_READ), text):
                    record = _object(line)
                    columns |= set(record) if isinstance(record, dict) else set()
            return columns
        return read_table(file, "").columns
    except Exception:  # noqa: BLE001 — a file that cannot be read is the loader's one line, not ours
        return None


def _object(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def columns_by_file(source: Any, files: Callable[[Any], Iterable[Path]] | None = None) -> dict[Path, set[str]]:
    """{data file: its columns} of a local source (`files`: which of its files hold records; default
    every data file, records.data_files); {} for a hub id or a source that cannot be listed."""
    if source is None or not Path(str(source)).expanduser().exists():
        return {}
    try:
        chosen = list((files or data_files)(Path(str(source)).expanduser()))
    except (ValueError, OSError):  # no data files: the loader's one line
        return {}
    found = {file: file_columns(file) for file in chosen}
    return {file: columns for file, columns in found.items() if columns is not None}


def no_data_files(title: str, source: Any, files: Callable[[Any], Iterable[Path]] | None = None) -> str:
    """One line when a local source holds none of the benchmark's data files (`files`, default every
    data file, raises a DataError naming what it looked for), else ""."""
    if source is None or not Path(str(source)).expanduser().exists():
        return ""  # a hub id, or a missing path: the loader's one line
    try:
        list((files or data_files)(Path(str(source)).expanduser()))
    except ValueError as err:  # DataError: "--data PATH: no … files" → the reason after the path
        return f"{source}: not {title} data — {str(err).split(': ', 1)[-1]}"
    return ""


FILES_NAMED = 3  # a refusal names up to this many files; more are the source and their count


def _named(source: Any, files: Sequence[Path]) -> str:
    """The files a refusal speaks of: their paths, or the source and how many files it holds."""
    return ", ".join(str(f) for f in files) if len(files) <= FILES_NAMED else f"{source} ({len(files)} data files)"


def requires_columns(title: str, required: Sequence[str], *, any_of: Sequence[str] = (), per_file: bool = False,
                     files: Callable[[Any], Iterable[Path]] | None = None) -> Recognise:
    """A recogniser: the data has every `required` column and, when given, at least one of `any_of`
    — across its files, or in each file (`per_file`: every file of the set must be one of its files)."""

    def recognise(source: Any) -> str:
        missing_files = no_data_files(title, source, files)
        if missing_files:
            return missing_files
        by_file = columns_by_file(source, files)
        groups = ({str(f): c for f, c in by_file.items()} if per_file else
                  {_named(source, by_file): set().union(*by_file.values())} if by_file else {})
        for where, have in groups.items():
            missing = [name for name in required if name not in have]
            if any_of and not have & set(any_of):
                missing.append(" or ".join(any_of))
            if have and missing:
                return (f"{where}: not {title} data — missing required column(s) {', '.join(missing)} "
                        f"(have: {', '.join(sorted(have))})")
        return ""

    return recognise

