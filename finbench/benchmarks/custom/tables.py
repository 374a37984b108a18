"""A custom data file read as rows of cells, by its extension: `.csv`, `.tsv` (pandas, every cell
text, as VLMEvalKit reads its TSVs), `.jsonl` and `.json` (a list of objects; pandas, values kept as
JSON gives them: lists stay lists), `.parquet` (pyarrow; an image struct stays `{bytes, path}`).
A folder holds one subset per file (its path inside the folder, without the extension).

A file that cannot be read at all, or holds no row, is a `DataError` naming it and the format it was
read as: one start-up line. CSV cells are read whole, however long (a base64 image of megabytes):
pandas' C parser has no field size limit (Python's csv module stops at 128 KiB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finbench.benchmarks.raw import DataError

FORMATS = {".csv": "CSV (comma-separated, a header row)", ".tsv": "TSV (tab-separated, a header row)",
           ".jsonl": "JSON lines (one object a line)", ".json": "JSON (a list of objects)",
           ".parquet": "parquet"}


@dataclass(frozen=True)
class Table:
    """One file's rows (column → value as read) and its columns in file order."""

    file: Path
    subset: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]


def data_files(source: Any) -> list[Path]:
    """The data files of a file or a folder (recursively, sorted; hidden folders left out)."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"--data {path}: no such file or folder")
    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix.lower() in FORMATS
                 and not any(part.startswith(".") for part in p.relative_to(path).parts)]
        if not files:
            raise DataError(f"--data {path}: no {', '.join(FORMATS)} file in this folder")
        return files
    if path.suffix.lower() not in FORMATS:
        raise DataError(f"--data {path}: unknown file type {path.suffix!r} (read by extension: {', '.join(FORMATS)})")
    return [path]


def subset_name(file: Path, source: Any) -> str:
    """A file's subset: its path inside the --data folder without the extension (the file's stem alone)."""
    root = Path(source).expanduser()
    relative = file.relative_to(root) if root.is_dir() else Path(file.name)
    return str(relative.with_suffix("")).replace("\\", "/")


def read_table(file: Path, source: Any) -> Table:
    """The rows of one file; a `DataError` when it cannot be read or holds none."""
    form = FORMATS[file.suffix.lower()]
    try:
        columns, rows = _READERS[file.suffix.lower()](file)
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 — pandas, pyarrow and the OS raise many types for a bad file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataError(f"{file}: cannot be read as {form}: {first[:200]}") from None
    if not rows:
        raise DataError(f"{file}: no rows (read as {form}{', the header row only' if columns else ''})")
    return Table(file, subset_name(file, source), tuple(str(c) for c in columns), tuple(rows))


def _frame_rows(frame: Any) -> tuple[list[str], list[dict[str, Any]]]:
    return [str(c) for c in frame.columns], frame.to_dict("records")


def _read_separated(file: Path, sep: str) -> tuple[list[str], list[dict[str, Any]]]:
    import pandas as pd

    try:
        frame = pd.read_csv(file, sep=sep, dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8-sig",
                            engine="c")
    except pd.errors.EmptyDataError:
        return [], []
    return _frame_rows(frame)


def _read_csv(file: Path) -> tuple[list[str], list[dict[str, Any]]]:
    return _read_separated(file, ",")


def _read_tsv(file: Path) -> tuple[list[str], list[dict[str, Any]]]:
    return _read_separated(file, "\t")


def _read_json(file: Path, lines: bool) -> tuple[list[str], list[dict[str, Any]]]:
    import pandas as pd

    if not file.read_bytes().strip():
        return [], []
    # values as JSON gives them: no type or date inference (pandas 3 says so with dtype=False alone)
    dates = {} if int(pd.__version__.split(".")[0]) >= 3 else {"convert_dates": False, "keep_default_dates": False}
    frame = pd.read_json(file, lines=lines, orient="records", dtype=False, convert_axes=False, encoding="utf-8", **dates)
    if not lines and not isinstance(frame, pd.DataFrame):
        raise DataError(f"{file}: cannot be read as {FORMATS['.json']}: not a list of objects")
    return _frame_rows(frame)


def _read_jsonl(file: Path) -> tuple[list[str], list[dict[str, Any]]]:
    return _read_json(file, lines=True)


def _read_json_list(file: Path) -> tuple[list[str], list[dict[str, Any]]]:
    return _read_json(file, lines=False)


def _read_parquet(file: Path) -> tuple[list[str], list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    table = pq.read_table(file)
    return list(table.column_names), table.to_pylist()


_READERS = {".csv": _read_csv, ".tsv": _read_tsv, ".jsonl": _read_jsonl, ".json": _read_json_list,
            ".parquet": _read_parquet}


def blank(value: Any) -> bool:
    """A missing cell: None, NaN (pandas' missing JSON key), an empty or all-space string, an empty list."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple, dict, bytes, bytearray)):
        return len(value) == 0
    size = getattr(value, "size", None)  # a numpy array (pandas' list cell)
    return size == 0 if isinstance(size, int) else False


def cell_text(value: Any) -> str:
    """A cell as text ("" when blank); an integral float (JSON's 3.0, a parquet double) without '.0'."""
    if blank(value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value).strip()
