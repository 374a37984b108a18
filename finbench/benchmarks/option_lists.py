"""Option lists as benchmarks publish them (a list, a JSON or Python list literal in a string, a
letter→text dict, "A." prefixes): read once here for every benchmark whose records hold them in
these forms (FinMME's loader, FAMMA's record reader), none importing another benchmark's loader."""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Iterable, Mapping

from finbench.benchmarks.records import as_text
from finbench.core.types import OPTION_LETTERS

_LETTER_PREFIX = re.compile(r"^\s*\(?([A-N])[\.\):：]\s*")


def parse_options(raw: Any) -> tuple[str, ...]:
    """Options as published: a list, a JSON/python list literal in a string, or a letter→text
    dict. A leading "A." / "(A)" / "A:" is stripped when the letters run A, B, C… in order. A
    string that parses to anything but a list or a dict (the quoted string "'yes'", a number) is
    an error, never its characters as options."""
    if isinstance(raw, (bytes, bytearray)):
        raw = as_text(raw, "options")
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return ()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            raw = ast.literal_eval(text)  # raises ValueError/SyntaxError on garbage: a per-sample error
        if not isinstance(raw, (list, tuple, Mapping)):
            raise ValueError(f"options {text[:60]!r} hold a {type(raw).__name__}, not a list of options")
    if isinstance(raw, Mapping):
        keys = sorted(str(k).strip().upper() for k in raw)
        if keys != list(OPTION_LETTERS[: len(keys)]):
            raise ValueError(f"option keys {keys} are not A, B, C, ...")
        lookup = {str(k).strip().upper(): v for k, v in raw.items()}
        return tuple(str(lookup[k]).strip() for k in keys)
    if raw is None:
        return ()
    if isinstance(raw, (str, bytes, int, float)) or not isinstance(raw, Iterable):
        raise ValueError(f"options of type {type(raw).__name__} are not a list of options")
    options = [as_text(o, "options").strip() for o in raw]
    if len(options) > len(OPTION_LETTERS):
        raise ValueError(f"{len(options)} options; at most {len(OPTION_LETTERS)} are supported")
    prefixes = [_LETTER_PREFIX.match(o) for o in options]
    if options and all(m and m.group(1) == OPTION_LETTERS[i] for i, m in enumerate(prefixes)):
        options = [o[m.end():] for o, m in zip(options, prefixes)]
    return tuple(options)
