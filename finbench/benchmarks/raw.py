"""The two types every data reader of the loaders' prologue returns (records.py for parquet, arrow
and tsv, json_records.py for JSON and JSON lines): a record as stored, and the error for data
that cannot be used at all. records.py hands both on; loaders import them from there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


class DataError(ValueError):
    """A data source that cannot be used at all: one start-up line."""


@dataclass(frozen=True)
class RawRecord:
    """One record as stored, with where it came from; `values` is empty when `error` is set."""

    origin: str
    values: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    folder: str = ""  # the data file's folder: relative image paths are read from there
    root: str = ""  # the data's folder (--data, or a file's folder): relative paths stay inside it
