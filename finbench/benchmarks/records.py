"""Raw records from local files or the hub, for every benchmark loader.

Each local file is read by its own format (a folder may mix parquet, arrow, jsonl, json and
VLMEvalKit's tsv, every field of which is text), and
every record carries its origin (`file:line` or `file[row]`) so a bad one can be named. What can
go wrong is split the way the error policy asks:
- a file that cannot be read at all (truncated parquet, not JSON at all, a hub set that is not
  available offline) raises `ValueError` naming it: one start-up line, before any work;
- a bad line or field (malformed JSON, non-UTF-8 bytes, a line that is not an object, a line
  nested too deeply to parse) becomes a `RawRecord` with `error` set, which the benchmark turns
  into that sample's error. A byte that is not UTF-8 fails only the record it sits in, wherever it
  is — a key, a value, or between records (then an entry of its own) — and the error names its
  offset in the file: "not UTF-8 at byte N" (json_records.py for JSON and JSON lines).

A loader gets all of this by reading its data through `open_table` (or `read_table`), never with
its own `json.loads` or `pd.read_json`; a new format is one more reader here, returning
`RawRecord`s with `error` set the same way.

A folder's metadata files are not records: `datasets`' `save_to_disk` bookkeeping
(`dataset_info.json`, `state.json`, `dataset_dict.json`), an image folder's `metadata.jsonl`
and anything under a hidden folder (`.cache/`) are skipped, and the skip is named in `skipped`.
Relative image paths are read inside the data's folder only (`local_file`): one that climbs out
(`../../etc/passwd`) is that record's error; absolute paths are read as given.

pyarrow reads parquet and arrow (the `datasets` package is needed for hub ids only); JSON and JSON
lines are parsed with the standard library (json_records.py), because pyarrow's and `datasets`'
JSON readers fail a whole file on one bad line or byte.

Every loader starts the same way (`open_table`, then `select`): read the records, keep those the
filters ask for, stop at `--limit` — before any question is built or any image read. The rule for
a broken record under a filter, the same in every benchmark: a filter keeps a record whose label
(its domain, its question type) it can read and finds among the values asked, and drops one whose
label it reads as another value. A record whose label cannot be read (an unreadable line, a label
that is not text) is kept as its error when no filter on that label is given, and left out when
one is — so a filtered run holds only records known to match, as the same records' part of an
unfiltered run does — and a note names every record left out that way, so none disappears
silently.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from finbench.benchmarks.json_records import read_json
from finbench.benchmarks.raw import DataError, RawRecord

FORMATS = (".parquet", ".arrow", ".jsonl", ".json", ".tsv")
# files inside a data folder that describe the data instead of holding records
METADATA_FILES = {"dataset_info.json", "state.json", "dataset_dict.json"}  # datasets' save_to_disk
IMAGE_METADATA_FILES = {"metadata.jsonl", "metadata.json"}  # an image folder's captions (hub ImageFolder)


@dataclass
class RawTable:
    records: list[RawRecord]
    columns: set[str]  # every column seen in any file (a JSON line may omit some)
    sources: list[str]  # the files read, or the hub id
    skipped: list[str] = field(default_factory=list)  # metadata files of the folder, not read as records


def data_files(source: str | Path) -> list[Path]:
    """The data files of a local file or folder (recursively, sorted; metadata files left out)."""
    path = Path(source)
    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if p.suffix in FORMATS and p.is_file()]
        files = [p for p in files if not is_metadata(p, path)]
        if not files:
            raise DataError(f"--data {path}: no {'/'.join(s[1:] for s in FORMATS)} files in this folder")
        return files
    if path.suffix not in FORMATS:
        raise DataError(f"--data {path}: unknown file type {path.suffix!r} (expected one of {', '.join(FORMATS)})")
    return [path]


def is_metadata(file: Path, folder: Path) -> bool:
    """A file of a data folder that describes the data (see the module docstring)."""
    parts = file.relative_to(folder).parts
    return (file.name in METADATA_FILES or file.name in IMAGE_METADATA_FILES
            or any(part.startswith(".") for part in parts[:-1]))


def read_table(source: str | Path, hub_split: str) -> RawTable:
    """Records of a local file/folder, or of a hub data set when `source` is not a local path."""
    path = Path(source)
    if not path.exists():
        return _read_hub(str(source), hub_split)
    records: list[RawRecord] = []
    columns: set[str] = set()
    files = data_files(path)
    root = str(path if path.is_dir() else path.parent)
    for file in files:
        file_records, file_columns = _read_file(file)
        records.extend(dataclasses.replace(r, folder=str(file.parent), root=root) for r in file_records)
        columns |= file_columns
    skipped = [str(p) for p in sorted(path.rglob("*")) if p.suffix in FORMATS and p.is_file()
               and is_metadata(p, path)] if path.is_dir() else []
    return RawTable(records, columns, [str(f) for f in files], skipped)


def open_table(source: str | Path, hub_split: str, title: str, required: Sequence[str] = (),
               notes: list[str] | None = None) -> RawTable:
    """The records of `source` for benchmark `title`: an empty source, or one without the
    `required` columns, is a start-up `ValueError` naming the files; the metadata files left out
    are noted in `notes`."""
    table = read_table(source, hub_split)
    if not table.records:
        raise ValueError(f"{', '.join(table.sources)}: no records (the data is empty)")
    missing = missing_columns(table, required)
    if missing:
        raise ValueError(f"{', '.join(table.sources)}: not {title} data — missing required column(s) "
                         f"{', '.join(missing)} (have: {', '.join(sorted(table.columns)) or 'none'})")
    if notes is not None:
        notes.extend(skipped_note(table))
    return table


# (domain, question type) of one record as the filters read it; None where a label cannot be read
Labels = Callable[[RawRecord], tuple[str | None, str | None]]
MAX_ORIGINS_NAMED = 5  # in the note on records left out


def select(records: Sequence[RawRecord], labels: Labels, domains: Sequence[str] = (),
           question_types: Sequence[str] = (), limit: int | None = None,
           notes: list[str] | None = None) -> list[tuple[int, RawRecord]]:
    """(index in `records`, record) of the records a run asks for, in data order: those `domains`
    and `question_types` keep (the rule for an unreadable label is in the module docstring), at
    most `limit`. `labels` is called only when a filter is given; a loader builds questions (and
    reads images) only for what this returns."""
    chosen: list[tuple[int, RawRecord]] = []
    unreadable: dict[str, list[str]] = {}
    for index, raw in enumerate(records):
        if limit is not None and len(chosen) >= limit:
            break
        if domains or question_types:
            domain, question_type = labels(raw)
            for flag, asked, value in (("--domain", domains, domain), ("--question-type", question_types, question_type)):
                if asked and value is None:
                    unreadable.setdefault(flag, []).append(raw.origin)
            if (domains and domain not in domains) or (question_types and question_type not in question_types):
                continue
        chosen.append((index, raw))
    if notes is not None:
        for flag, origins in unreadable.items():
            shown = ", ".join(origins[:MAX_ORIGINS_NAMED]) + (", …" if len(origins) > MAX_ORIGINS_NAMED else "")
            notes.append(f"{len(origins)} record(s) left out by {flag}: the label it filters on cannot be read "
                         f"({shown}); a run without {flag} has each as its error")
    return chosen


def readable_label(value: Any) -> str | None:
    """A label as a filter compares it: str() of the value (None → "None", as the filters always
    compared), a binary column's bytes decoded; None when it is bytes that are not UTF-8."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return str(value)


def skipped_note(table: RawTable) -> list[str]:
    """The note a loader adds when metadata files were left out."""
    if not table.skipped:
        return []
    shown = ", ".join(table.skipped[:5]) + (f", … ({len(table.skipped)} in all)" if len(table.skipped) > 5 else "")
    return [f"not read as records (metadata files of the data folder): {shown}"]


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


def local_file(text: str, base: str | Path, root: str | Path = "") -> Path:
    """The path a record names, `text`, read from `base` (the data file's folder, or a folder a
    loader looks in). An absolute path is taken as given; a relative one must stay inside `base`
    or the data's folder `root` once `..` are resolved (lexically: a hub snapshot's symlinks to
    its blobs stay allowed), else ValueError naming it."""
    path = Path(text)
    if path.is_absolute():
        return path
    candidate = Path(os.path.normpath(Path(base) / path))
    allowed = [Path(os.path.normpath(Path(b).absolute())) for b in (base, root) if str(b)]
    if not any(Path(os.path.normpath(candidate.absolute())).is_relative_to(a) for a in allowed):
        raise ValueError(f"image path {text!r} climbs out of the data's folder (relative paths must stay inside "
                         "it; an absolute path is read as given)")
    return candidate


def as_text(value: Any, name: str) -> str:
    """A text field as str ("" for None and NaN, a missing cell of a table); bytes (a binary Arrow
    column) must be UTF-8 — never shown to the model as `b'…'`."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, (bytes, bytearray)):
        return _utf8(bytes(value), name)
    return str(value)


def _read_file(path: Path) -> tuple[list[RawRecord], set[str]]:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return _from_arrow(pq.read_table(path), path)
        if path.suffix == ".arrow":
            return _from_arrow(_read_arrow(path), path)
        if path.suffix == ".tsv":
            return _read_tsv(path)
        return read_json(path)
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 — pyarrow and the OS raise many types for a bad file
        raise DataError(f"cannot read {path}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None


def _read_arrow(path: Path) -> Any:
    import pyarrow as pa

    try:  # `datasets` writes the streaming format; plain Arrow IPC files are the file format
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_stream(source).read_all()
    except pa.ArrowInvalid:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()


def _from_arrow(table: Any, path: Path) -> tuple[list[RawRecord], set[str]]:
    """Rows of an Arrow table. Text columns are read as bytes and decoded per field, so one
    non-UTF-8 value is that row's error instead of a failure of the whole column."""
    import pyarrow as pa

    text_columns = [name for name, kind in zip(table.column_names, table.schema.types)
                    if pa.types.is_string(kind) or pa.types.is_large_string(kind)]
    if text_columns:
        table = table.cast(pa.schema([pa.field(f.name, pa.binary() if f.name in text_columns else f.type)
                                      for f in table.schema]))
    records = []
    for row, values in enumerate(table.to_pylist()):
        origin = f"{path}[{row}]"
        try:
            for name in text_columns:
                if values[name] is not None:
                    values[name] = _utf8(values[name], name)
            records.append(RawRecord(origin, values))
        except ValueError as err:
            records.append(RawRecord(origin, error=f"{origin}: {err}"))
    return records, set(table.column_names)


def read_csv(path: Path) -> list[RawRecord]:
    """The records of one comma-separated file with a header row (FCMR's `<grade>_data.csv`), read
    as the TSV below is: every field text, a bad record that record's error; `folder` and `root`
    are the file's folder."""
    records, _ = _read_tsv(path, sep=",")
    return [dataclasses.replace(r, folder=str(path.parent), root=str(path.parent)) for r in records]


def _read_tsv(path: Path, sep: str = "\t") -> tuple[list[RawRecord], set[str]]:
    """VLMEvalKit's TSV, tokenized as VLMEvalKit reads it (pandas `read_csv(sep='\\t')`): a header
    row, then one record per row, with pandas' quoting (a field in double quotes may hold tabs,
    newlines and `""` for a quote; VLMEvalKit's writer quotes every field). Every field stays text
    (no NA strings, no number inference). A record with a field that is not UTF-8, or with more
    fields than the header, fails that record only; a record with fewer fields reads the missing
    ones as empty, as pandas pads them (an empty question or answer is then that record's error).
    A quote left open swallows the rest of the file in pandas too: the file cannot be read."""
    import pandas as pd

    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    width = 1 + max((line.count(sep.encode()) for line in data.split(b"\n")), default=0)
    for _ in range(8):  # a quoted field spanning lines may hide more fields than any one line shows
        try:
            frame = pd.read_csv(io.BytesIO(data), sep=sep, header=None, names=range(width), dtype=object,
                                keep_default_na=False, na_filter=False, encoding_errors="surrogateescape")
            break
        except pd.errors.ParserError as err:
            seen = re.search(r"Expected \d+ fields in line \d+, saw (\d+)", str(err))
            if seen is None:
                raise
            width = int(seen.group(1))
    else:
        raise DataError(f"cannot read {path}: its rows have too many fields")
    rows = frame.to_numpy(dtype=object).tolist()
    if not rows:
        raise DataError(f"cannot read {path}: no header row")
    header = list(rows[0])
    while header and header[-1] == "":
        header.pop()
    if any(_surrogates(name) for name in header):
        raise DataError(f"cannot read {path}: its header row is not UTF-8")
    records = []
    for row, fields in enumerate(rows[1:]):
        origin = f"{path}[{row}]"
        extra = [n for n, value in enumerate(fields[len(header):]) if value != ""]
        if extra:
            records.append(RawRecord(origin, error=f"{origin}: {len(header) + extra[-1] + 1} tab-separated fields, "
                                                   f"the header has {len(header)}"))
            continue
        try:
            for name, value in zip(header, fields):
                if _surrogates(value):
                    _utf8(value.encode("utf-8", "surrogateescape"), name)
        except ValueError as err:
            records.append(RawRecord(origin, error=f"{origin}: {err}"))
            continue
        records.append(RawRecord(origin, dict(zip(header, fields))))
    return records, set(header)


def _surrogates(text: str) -> bool:
    """A byte that was not UTF-8, kept by `surrogateescape`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _utf8(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"field {name!r} is not valid UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})") from None


def _read_hub(hub_id: str, split: str) -> RawTable:
    """A hub data set through `datasets` (offline: only what is in the local HF cache). Images are
    left as {bytes, path} structs: decoding them is the runner's parallel, per-sample job."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"--data {hub_id}: reading a hub data set needs the `datasets` package "
                         "(or pass a local parquet/jsonl file or folder)") from None
    try:
        table = datasets.load_dataset(hub_id, split=split)
    except Exception as err:  # noqa: BLE001 — offline, unknown id, no such split: one start-up line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        where = ("HF_HUB_OFFLINE is set: only sets already in the local Hugging Face cache load" if offline else
                 "is it in the local Hugging Face cache, or reachable? (HF_HUB_OFFLINE=1 skips the network)")
        raise DataError(f"--data {hub_id}: cannot load this hub data set (split {split!r}) — {first[:300]}. "
                        f"{where}; otherwise pass a local file or folder") from None
    for name, feature in table.features.items():
        if isinstance(feature, datasets.Image):
            table = table.cast_column(name, datasets.Image(decode=False))
    records = [RawRecord(f"{hub_id}[{row}]", values) for row, values in enumerate(table)]
    return RawTable(records, set(table.column_names), [hub_id])


def missing_columns(table: RawTable, required: Iterable[str]) -> list[str]:
    return [name for name in required if name not in table.columns]
