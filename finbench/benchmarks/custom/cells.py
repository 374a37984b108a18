"""A custom row's cells read as the file means them: its options, its gold answer (and so the
item's type) and a number's tolerance. Each reading raises `RowProblem` with one line saying what
is wrong; the caller names the file and the row.

The gold answer decides the item's type:
- with options: a letter (`B`) → a single choice; a set (`A;C`, `B,D`, `A C`, `["A","E"]`) → a
  multi-answer item; an option's own text, matched after case and space normalisation → its letter
  (two options of that same text: refused as ambiguous);
- without options: true/false, yes/no, 是/否 → a two-option single choice (the file's own words,
  the positive first); a number (`1,234.5`, `12%`, `(3.2)` — an accountant's negative —, `$40`,
  `−7`) → a numerical item, with an optional `tolerance` (`rel=0.01`, `abs=0.5`, `1%`, `0.5`); any
  other text → an open answer (exact match after normalisation, or `--judge`).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from finbench.benchmarks.custom.tables import blank, cell_text
from finbench.core.types import MULTI, NUMERICAL, OPEN, OPTION_LETTERS, SINGLE

MIN_OPTIONS = 2
MAX_OPTIONS = len(OPTION_LETTERS)  # the letters finbench's constrained reading decodes (A–N)
# two-option answers: the word as written → the options in that language, the positive first
BOOLEANS = {"true": ("True", "False"), "false": ("True", "False"), "yes": ("Yes", "No"), "no": ("Yes", "No"),
            "是": ("是", "否"), "否": ("是", "否"), "对": ("对", "错"), "错": ("对", "错"),
            "正确": ("正确", "错误"), "错误": ("正确", "错误")}
NUMERIC_TYPES = ("numerical", "numeric", "number", "float", "integer", "int")
_NUMBER = re.compile(r"^(?P<open>\()?\s*(?P<sign>[-−+])?\s*[$€£¥]?\s*"
                     r"(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)\s*(?P<percent>%)?\s*(?P<close>\))?$")
_SET_SEPARATORS = re.compile(r"\s*[,;，；、/|&+]\s*|\s+(?:and\s+)?")
_TOLERANCE = re.compile(r"^(?:(?P<kind>rel|relative|abs|absolute)\s*[=:]\s*)?(?P<value>\d+(?:\.\d+)?|\.\d+)\s*(?P<percent>%)?$",
                        re.IGNORECASE)


class RowProblem(ValueError):
    """What is wrong with one row, in one line (the caller names the file and the row)."""


def normal(text: str) -> str:
    """Text as answers are matched: case folded, runs of whitespace as one space, stripped."""
    return " ".join(str(text).casefold().split())


def list_value(value: Any) -> list[Any] | None:
    """A list cell (a list, an array, or a JSON or Python list literal in a string), else None."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        listed = value.tolist()
        return listed if isinstance(listed, list) else None
    if isinstance(value, str) and value.strip().startswith("["):
        text = value.strip()
        try:
            found = json.loads(text)
        except ValueError:
            try:
                found = ast.literal_eval(text)  # data, never model output: a Python list as written
            except (ValueError, SyntaxError):
                return None
        return list(found) if isinstance(found, (list, tuple)) else None
    return None


def options_from_list(value: Any) -> tuple[str, ...]:
    """The options of a list cell; a cell that is not a list is refused."""
    if blank(value):
        return ()
    found = list_value(value)
    if found is None:
        raise RowProblem(f"options {cell_text(value)[:60]!r} are not a list (a list, or a JSON or Python list in text)")
    return tuple(cell_text(option) for option in found)


def options_from_columns(row: dict[str, Any], columns: tuple[str, ...]) -> tuple[str, ...]:
    """The options of per-option columns (VLMEvalKit's A, B, …): the filled ones, which must run
    on from the first without a gap (an empty B before a filled C would shift C's letter)."""
    texts = [cell_text(row.get(column)) for column in columns]
    while texts and not texts[-1]:
        texts.pop()
    if "" in texts:
        gap = texts.index("")
        raise RowProblem(f"option column {columns[gap]!r} is empty but {columns[len(texts) - 1]!r} is not "
                         "(options must run on from the first)")
    return tuple(texts)


def check_option_count(options: tuple[str, ...]) -> None:
    if options and not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
        raise RowProblem(f"{len(options)} option{'s' * (len(options) != 1)}: an item has {MIN_OPTIONS}–{MAX_OPTIONS} "
                         f"(letters {OPTION_LETTERS[0]}–{OPTION_LETTERS[-1]}, what the constrained reading decodes)")


def parse_number(text: str) -> tuple[str, bool] | None:
    """(the number as a plain decimal string, whether it was a percentage) or None: `1,234.5` →
    1234.5, `12%` → 12 (percent), `(3.2)` → -3.2, `$40` → 40, `−7` → -7."""
    match = _NUMBER.match(text.strip())
    if match is None or bool(match.group("open")) != bool(match.group("close")):
        return None
    if match.group("open") and match.group("sign"):
        return None  # "(-3)": not an accountant's form
    digits = match.group("digits").replace(",", "")
    digits = "0" + digits if digits.startswith(".") else digits
    negative = bool(match.group("open")) or match.group("sign") in ("-", "−")
    value = float(digits)
    plain = f"{'-' if negative and value != 0 else ''}{digits}"
    return plain, bool(match.group("percent"))


def parse_tolerance(text: str) -> tuple[str, float]:
    """('relative' or 'absolute', value) of a tolerance cell: `rel=0.01`, `abs=0.5`, `1%` (relative
    0.01), a plain number (absolute)."""
    match = _TOLERANCE.match(text.strip())
    if match is None:
        raise RowProblem(f"tolerance {text!r} is not rel=X, abs=X, X% or a number")
    value = float(match.group("value"))
    kind = (match.group("kind") or "").lower()
    if match.group("percent"):
        if kind.startswith("abs"):
            raise RowProblem(f"tolerance {text!r}: a percentage is relative")
        return "relative", value / 100
    return ("relative" if kind.startswith("rel") else "absolute"), value


def _by_text(answer: str, options: tuple[str, ...]) -> str | None:
    """The letter of the one option whose text is the answer (normalised); ambiguous → RowProblem."""
    matches = [OPTION_LETTERS[i] for i, option in enumerate(options) if normal(option) == normal(answer)]
    if len(matches) > 1:
        raise RowProblem(f"gold {answer!r} is the text of options {', '.join(matches)}: ambiguous")
    return matches[0] if matches else None


def _letters_or_texts(items: list[str], options: tuple[str, ...], raw: str) -> str:
    """The letters of a set's items, each a letter or an option's text."""
    letters = set()
    for item in items:
        letter = _by_text(item, options) if len(item) != 1 or not item.isalpha() else item.upper()
        if letter is None or letter not in OPTION_LETTERS[:len(options)]:
            raise RowProblem(f"gold {raw!r}: {item!r} is not among the {len(options)} options "
                             f"({OPTION_LETTERS[0]}–{OPTION_LETTERS[len(options) - 1]})")
        letters.add(letter)
    return "".join(sorted(letters))


def choice_gold(raw: Any, options: tuple[str, ...]) -> tuple[str, str]:
    """(kind, gold letters) of a choice item's answer cell."""
    listed = list_value(raw)
    if listed is not None:
        items = [cell_text(item) for item in listed if cell_text(item)]
        if not items:
            raise RowProblem("the answer is an empty list")
        return MULTI, _letters_or_texts(items, options, cell_text(raw))
    text = cell_text(raw)
    by_text = _by_text(text, options)
    if by_text is not None:
        return SINGLE, by_text
    span = f"{OPTION_LETTERS[0]}–{OPTION_LETTERS[len(options) - 1]}"
    if len(text) == 1 and text.isalpha():
        if text.upper() not in OPTION_LETTERS[:len(options)]:
            raise RowProblem(f"gold {text!r} is not among the {len(options)} options ({span})")
        return SINGLE, text.upper()
    parts = [p for p in _SET_SEPARATORS.split(text) if p]
    if len(parts) == 1 and re.fullmatch(r"[A-Z]{2,}", text):
        parts = list(text)  # "ACD": the letters of a set written together
    if len(parts) > 1 and all(len(p) == 1 and p.isalpha() for p in parts):
        return MULTI, _letters_or_texts(parts, options, text)
    raise RowProblem(f"gold {text[:80]!r} is not among the {len(options)} options ({span}): neither a letter, a set "
                     "of letters nor an option's text")


def free_gold(raw: Any, numeric: bool) -> tuple[str, str, tuple[str, ...], bool]:
    """(kind, gold, options, percent) of an answer without options: a true/false-like word → a
    two-option choice, a number → numerical, else open (`numeric`: the row's type says number)."""
    text = cell_text(raw)
    if normal(text) in BOOLEANS and not numeric:
        options = BOOLEANS[normal(text)]
        return SINGLE, OPTION_LETTERS[[normal(o) for o in options].index(normal(text))], options, False
    number = parse_number(text)
    if number is not None:
        return NUMERICAL, number[0], (), number[1]
    if numeric:
        raise RowProblem(f"numeric gold {text[:80]!r} is not a number (forms read: 1,234.5  12%  (3.2)  -7  $40)")
    return OPEN, text, (), False
