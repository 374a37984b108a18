"""Text every writer can write. A model's reply, a program's result or a judge's reason may hold text
UTF-8 cannot encode — a lone surrogate ("\\ud800": a served model's JSON escape, a decoded byte
fallback) — which pyarrow, `write_text` and a terminal refuse with UnicodeEncodeError. The writers
(samples.parquet and the other tables, JSON, HTML, Markdown, CSV, run.log, the console) write such
text escaped instead (`\\ud800`, as Python's "backslashreplace" writes it); what was read, judged
and scored is the text as it was, so a row keeps its verdict."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ENCODING = "utf-8"
ERRORS = "backslashreplace"  # how every writer writes what UTF-8 cannot encode
_SURROGATE = re.compile("[\ud800-\udfff]")  # the only code points UTF-8 cannot encode


def encodable(text: str) -> str:
    """`text` with what UTF-8 cannot encode escaped (`\\ud800`); unchanged when it all encodes."""
    try:
        text.encode(ENCODING)
        return text
    except UnicodeEncodeError:
        return text.encode(ENCODING, ERRORS).decode(ENCODING)


def tokenizable(text: str) -> str:
    """`text` for a tokenizer, which takes only what UTF-8 encodes: a lone surrogate becomes U+FFFD
    (a replacement character, as a byte-level decode writes an undecodable byte)."""
    return _SURROGATE.sub("\ufffd", text)


def encodable_value(value: Any) -> Any:
    """A cell of a table (text, or a list, tuple, array or mapping of them) with its text encodable."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, (list, tuple)):
        return type(value)(encodable_value(v) for v in value)
    if isinstance(value, dict):
        return {encodable_value(k): encodable_value(v) for k, v in value.items()}
    if type(value).__name__ == "ndarray" and getattr(value, "dtype", None) is not None and value.dtype.kind == "O":
        return [encodable_value(v) for v in value.tolist()]
    return value


def encodable_frame(frame: Any) -> Any:
    """A DataFrame whose text columns (object dtype: text, lists of text) are encodable; the
    columns that are already are left as they are (the frame itself when none needs a change)."""
    changed = {}
    for column in frame.columns:
        values = frame[column]
        if values.dtype != object:
            continue
        fixed = values.map(encodable_value)
        if not all(a is b for a, b in zip(values.tolist(), fixed.tolist())):
            changed[column] = fixed
    return frame.assign(**changed) if changed else frame


def text_frame(rows: list[dict[str, Any]]) -> Any:
    """`pd.DataFrame(rows)`; where a text column holds what UTF-8 cannot encode (which pandas'
    Arrow-backed strings refuse), its columns of text are kept as Python strings (object dtype),
    the text as it was: read, judged and scored as given, escaped only when written."""
    import pandas as pd

    try:
        return pd.DataFrame(rows)
    except UnicodeEncodeError:
        columns = list(dict.fromkeys(key for row in rows for key in row))
        values = {key: [row.get(key) for row in rows] for key in columns}
        return pd.DataFrame({key: pd.Series(column, dtype=object) if any(isinstance(v, str) for v in column)
                             else pd.Series(column) for key, column in values.items()})


def write_text(path: Path | str, text: str) -> None:
    """`text` into `path` as UTF-8, what cannot be encoded escaped."""
    Path(path).write_text(text, encoding=ENCODING, errors=ERRORS)


def open_text(path: Path | str, mode: str = "w", **options: Any) -> Any:
    """A text file opened for writing as UTF-8, what cannot be encoded escaped (CSV writers)."""
    return open(path, mode, encoding=ENCODING, errors=ERRORS, **options)


def escape_streams(*streams: Any) -> None:
    """The console's streams (stdout, stderr) set to escape what they cannot encode, where they
    can be reconfigured (a text stream; a test's capture may not be one)."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=ERRORS)
            except (ValueError, OSError, TypeError):  # a stream that cannot change now: left as it is
                pass
