"""JSON and JSON lines files → raw records, read so that a byte that is not UTF-8 fails the one
record it sits in (or, between records, an entry of its own) and nothing else: the loaders' shared
prologue (records.py) reads every .json and .jsonl file through `read_json`.

`json.loads` refuses a whole document over one bad byte, so a file that is not all UTF-8 is
decoded with `surrogateescape` — each bad byte becomes one lone surrogate (U+DC80–U+DCFF), which
JSON strings may hold, so a bad byte inside a key or a value still parses — and then read:
- JSON lines: line by line, as always;
- a JSON array: element by element (`JSONDecoder.raw_decode`), so that a bad byte outside any
  string (between records, or between two fields of one record) fails only what holds it; text
  between records that is not a record is an entry of its own (`file[between 2 and 3]`), an error
  counted like any bad record;
- an object (`{id: record}`, or one record): whole, each record checked by itself.
Every such error names the byte's offset in the file: "not UTF-8 at byte 1234 (0xff)". A file
that is all UTF-8 takes the fast path (one `json.loads`) and is read exactly as before.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.raw import DataError, RawRecord

BOM = b"\xef\xbb\xbf"  # Windows editors write one; it is not part of record 1
BAD_BYTE = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, as `surrogateescape` keeps it
# one JSON token that matters for finding where a broken element ends: a whole string, or a bracket or comma
TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.S)
VALUE_START = re.compile(r'[{\["\-0-9tfnNI]')  # what a JSON value (or Python's NaN/Infinity) starts with
JUNK_END = re.compile(r'[{\[",\]]')  # text that is no record ends where a record, a comma or the end begins
WHITESPACE = re.compile(r"[ \t\n\r]*")


class ByteOffsets:
    """Character index of the decoded text → byte offset in the file, walked forward (a bad byte
    is one character; other text is its UTF-8 length). `base` is the length of a skipped BOM."""

    def __init__(self, text: str, base: int) -> None:
        self.text, self.char, self.byte = text, 0, base

    def __call__(self, index: int) -> int:
        if index < self.char:  # asked out of order: start again (rare: errors come in file order)
            self.char, self.byte = 0, self.byte - len(self.text[:self.char].encode("utf-8", "surrogateescape"))
        self.byte += len(self.text[self.char:index].encode("utf-8", "surrogateescape"))
        self.char = index
        return self.byte


def read_json(path: Path) -> tuple[list[RawRecord], set[str]]:
    """A .json file holding one array (or object) of records, or JSON lines in either suffix."""
    data = path.read_bytes()
    base = len(BOM) if data.startswith(BOM) else 0
    data = data[base:]
    if path.suffix == ".json":
        try:
            whole = json.loads(_strict(data))  # (bytes: UTF-16 and UTF-32 files are detected too)
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="surrogateescape")
            if text.lstrip(" \t\n\r").startswith("["):
                return _array(text, path, ByteOffsets(text, base))
            whole = _loads_or_none(text)
        except (json.JSONDecodeError, RecursionError):
            whole = None  # maybe JSON lines with a .json suffix
        if isinstance(whole, list):
            return _objects(whole, lambda n: f"{path}[{n}]")
        if isinstance(whole, dict):
            if whole and all(isinstance(v, Mapping) for v in whole.values()):  # {id: record}
                return _objects([{"id": k, **v} if "id" not in v else v for k, v in whole.items()],
                                lambda n: f"{path}[{n}]")
            return _objects([whole], lambda n: str(path))
    return _lines(data, path, base)


def _strict(data: bytes) -> str | bytes:
    """A UTF-8 file as text, refused (UnicodeDecodeError) when any byte is not UTF-8 — an encoded
    surrogate (ED A0 80) included, which `json.loads` would let through; a UTF-16 or UTF-32 file
    as bytes, for `json.loads` to detect."""
    return data.decode("utf-8") if json.detect_encoding(data) == "utf-8" else data


def _lines(data: bytes, path: Path, base: int) -> tuple[list[RawRecord], set[str]]:
    """JSON lines, one record per line; a line that cannot be read is that record's error."""
    records: list[RawRecord] = []
    columns: set[str] = set()
    start = base
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        origin, text, line_start = f"{path}:{number}", line.decode("utf-8", errors="surrogateescape"), start
        start += len(line)
        if not text.strip():
            continue
        offsets = ByteOffsets(text, line_start)
        try:
            values = json.loads(text)
        except json.JSONDecodeError as err:
            records.append(_unreadable(origin, text, 0, len(text), offsets,
                                       f"malformed JSON ({err.msg} at column {err.colno})"))
            continue
        except RecursionError:
            records.append(RawRecord(origin, error=f"{origin}: JSON nested too deeply to read"))
            continue
        records.append(_record(origin, values, text, 0, len(text), offsets))
        columns |= set(values) if isinstance(values, dict) else set()
    if data.strip() and all(r.error for r in records):
        raise DataError(f"cannot read {path}: neither a JSON array of records nor JSON lines "
                        f"({records[0].error.split(': ', 1)[-1]})")
    return records, columns


def _array(text: str, path: Path, offsets: ByteOffsets) -> tuple[list[RawRecord], set[str]]:
    """A JSON array that is not all UTF-8, element by element: each element is its record (or its
    error); text between elements that is none is an entry of its own."""
    decoder = json.JSONDecoder()
    records: list[RawRecord] = []
    columns: set[str] = set()
    n, pos = 0, _skip(text, text.index("[") + 1)
    while pos < len(text) and text[pos] != "]":
        if text[pos] == ",":  # after text that was no record
            pos = _skip(text, pos + 1)
            continue
        if not VALUE_START.match(text, pos):
            found = JUNK_END.search(text, pos)
            end = found.start() if found else len(text)
            where = f"between {n - 1} and {n}" if n else "before 0"
            records.append(_unreadable(f"{path}[{where}]", text, pos, end, offsets, "not a record"))
            pos = _skip(text, end)
            continue
        origin = f"{path}[{n}]"
        try:
            values, end = decoder.raw_decode(text, pos)
            records.append(_record(origin, values, text, pos, end, offsets))
            columns |= set(values) if isinstance(values, dict) else set()
        except (json.JSONDecodeError, RecursionError) as err:
            end = _element_end(text, pos)
            reason = f"malformed JSON ({err.msg})" if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            records.append(_unreadable(origin, text, pos, end, offsets, reason))
        n, pos = n + 1, _skip(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
    after = _skip(text, pos + 1)
    if after < len(text):  # text after the array's end: no record, but not nothing
        records.append(_unreadable(f"{path}[after {n - 1}]", text, after, len(text), offsets, "text after the array"))
    return records, columns


def _skip(text: str, pos: int) -> int:
    return WHITESPACE.match(text, pos).end()


def _element_end(text: str, pos: int) -> int:
    """Where an element that does not parse ends: after the bracket that closes the one it opens,
    or at the comma or bracket that ends the array's slot (strings skipped whole)."""
    depth = 0
    for token in TOKEN.finditer(text, pos):
        kind = token.group()
        if kind in "[{":
            depth += 1
        elif kind in "]}":
            depth -= 1
            if depth == 0:
                return token.end()
            if depth < 0:
                return token.start()
        elif kind == "," and depth == 0:
            return token.start()
    return len(text)


def _unreadable(origin: str, text: str, start: int, end: int, offsets: ByteOffsets, reason: str) -> RawRecord:
    """Text that cannot be read as a record: its first byte that is not UTF-8, if it holds one
    (that is what broke it), else `reason`."""
    bad = BAD_BYTE.search(text, start, end)
    return RawRecord(origin, error=f"{origin}: {_at(bad, offsets) if bad else reason}")


def _at(bad: re.Match, offsets: ByteOffsets) -> str:
    return f"not UTF-8 at byte {offsets(bad.start())} (0x{ord(bad.group()) - 0xDC00:02x})"


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _objects(items: Sequence[Any], origin_of: Any) -> tuple[list[RawRecord], set[str]]:
    records, columns = [], set()
    for n, values in enumerate(items):
        records.append(_record(origin_of(n), values))
        columns |= set(values) if isinstance(values, dict) else set()
    return records, columns


def _record(origin: str, values: Any, text: str = "", start: int = 0, end: int = 0,
            offsets: ByteOffsets | None = None) -> RawRecord:
    """One parsed JSON record, or its error: not an object, or a field (its name or its text)
    holding a lone surrogate — a byte that was not UTF-8 (named by its offset in the file when the
    record's text `text[start:end]` is known) or a surrogate escape (valid JSON, e.g. "\\udcff",
    but not text: the tokenizer and Parquet refuse it later, for the whole run)."""
    if not isinstance(values, dict):
        return RawRecord(origin, error=f"{origin}: expected a JSON object, got {type(values).__name__}")

    def where() -> str:  # (searched only for a record that fails)
        bad = BAD_BYTE.search(text, start, end) if offsets is not None else None
        return _at(bad, offsets) if bad else "not valid UTF-8 (a byte that is not UTF-8, or a lone surrogate escape)"

    for name in values:  # a bad byte in a field's name would hide the field ("question is empty")
        if not _is_text(name):
            shown = name.encode("utf-8", errors="replace").decode("utf-8")
            return RawRecord(origin, error=f"{origin}: field name {shown!r} is {where()}")
    for name, value in values.items():
        try:  # every string inside the field, nested ones included
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return RawRecord(origin, error=f"{origin}: field {name!r} is {where()}")
        except RecursionError:
            return RawRecord(origin, error=f"{origin}: field {name!r} is nested too deeply to read")
    return RawRecord(origin, values)


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
