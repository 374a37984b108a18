"""Which column holds what: the conventional names a custom file uses (the ones VLMEvalKit's TSVs,
evalscope's general_vmcq JSONL and MMMU-style sets use), renamable with `--spec FILE.yaml`.

Roles and their conventional columns:
- `id`: `id` or `index` (VLMEvalKit); none: the row number, with a note;
- `question` (required) and `context`: `context`, `hint` (shown before the question);
- `options`: `options` (a list, or a JSON or Python list in a string), or the columns `A`, `B`, … (VLMEvalKit);
- `answer` (required); `tolerance` (a number's, per row); `type` (`answer_type`, `question_type`: a
  numeric type there makes a gold that is not a number a refusal);
- `images`: `image`, `image_path`, `images`, `image_paths`, then `image_1` … `image_k` in order;
- `cluster`: `cluster` (what the error bars cluster on; default: the image's content);
- breakdowns: `category`, `l2-category`, `subcategory`, `subject`, `subfield`, `topic`, `domain`,
  `difficulty`, `level`, `split`, `source`, `question_type`, `img_type`, `image_type`.

A spec file maps roles to the file's own columns (a string, or a list for `images`, `options`,
`context` and `breakdowns`) and may name `image_root` (a folder, relative to the spec file):

    question: prompt
    options: [choice_a, choice_b, choice_c, choice_d]
    answer: label
    images: chart
    breakdowns: [sector, region]
    image_root: charts/
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.raw import DataError

ID_COLUMNS = ("id", "index")
CONTEXT_COLUMNS = ("context", "hint")
OPTION_LIST_COLUMNS = ("options",)
TYPE_COLUMNS = ("answer_type", "question_type")
IMAGE_COLUMNS = ("image", "image_path", "images", "image_paths")
NUMBERED_IMAGE = re.compile(r"^image_(\d+)$")
BREAKDOWN_COLUMNS = ("category", "l2-category", "l2_category", "subcategory", "subject", "subfield", "topic", "domain",
                     "difficulty", "level", "split", "source", "question_type", "img_type", "image_type")
LETTER_COLUMNS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
SPEC_KEYS = ("id", "question", "context", "options", "answer", "tolerance", "type", "images", "cluster", "breakdowns",
             "image_root")
LIST_KEYS = ("context", "options", "images", "breakdowns")


@dataclass(frozen=True)
class Spec:
    """A spec file's renames (role → the file's column or columns) and its image folder."""

    columns: tuple[tuple[str, Any], ...] = ()
    image_root: str | None = None
    file: str = ""

    def get(self, role: str) -> Any:
        return dict(self.columns).get(role)


@dataclass(frozen=True)
class Schema:
    """The columns one file's roles resolved to (None or () where it has none)."""

    question: str
    answer: str
    id: str | None = None
    context: tuple[str, ...] = ()
    options: str | None = None  # one column holding the list
    option_columns: tuple[str, ...] = ()  # or one column per option, in letter order
    tolerance: str | None = None
    type: str | None = None
    images: tuple[str, ...] = ()
    cluster: str | None = None
    breakdowns: tuple[str, ...] = ()

    def lines(self) -> tuple[str, ...]:
        """The schema as `finbench data check` shows it: role ← column(s)."""
        options = (f"{self.options!r} (a list)" if self.options else
                   f"columns {', '.join(self.option_columns)}" if self.option_columns else "none (numbers, open answers)")
        return (f"id ← {self.id!r}" if self.id else "id ← the row number (no id column)",
                f"question ← {self.question!r}", f"context ← {', '.join(map(repr, self.context)) or 'none'}",
                f"options ← {options}", f"answer ← {self.answer!r}",
                f"tolerance ← {self.tolerance!r}" if self.tolerance else "tolerance ← none (numbers judged exactly)",
                f"images ← {', '.join(map(repr, self.images)) or 'none'}",
                f"cluster ← {self.cluster!r}" if self.cluster else "cluster ← the images' content (else each row its own)",
                f"breakdowns ← {', '.join(map(repr, self.breakdowns)) or 'none'}")


def read_spec(path: str | Path | None) -> Spec:
    """A spec file (YAML); None: no spec. A file that is not a mapping of known keys is a DataError."""
    if not path:
        return Spec()
    import yaml

    file = Path(path).expanduser()
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise DataError(f"--spec {file}: cannot be read as YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(loaded, Mapping):
        raise DataError(f"--spec {file}: expected a mapping of roles to columns ({', '.join(SPEC_KEYS)})")
    unknown = sorted(str(k) for k in loaded if k not in SPEC_KEYS)
    if unknown:
        raise DataError(f"--spec {file}: unknown key(s) {', '.join(unknown)}; known: {', '.join(SPEC_KEYS)}")
    columns = []
    for key, value in loaded.items():
        if key == "image_root":
            continue
        if isinstance(value, list) and key not in LIST_KEYS:
            raise DataError(f"--spec {file}: {key} names one column, not a list")
        if not isinstance(value, (str, list)) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            raise DataError(f"--spec {file}: {key} must name a column (text){' or a list of columns' * (key in LIST_KEYS)}")
        columns.append((str(key), tuple(value) if isinstance(value, list) else value))
    root = loaded.get("image_root")
    if root is not None and not isinstance(root, str):
        raise DataError(f"--spec {file}: image_root must be a folder (text)")
    root = str((file.parent / root).resolve()) if root else None
    return Spec(tuple(columns), root, str(file))


def nearest(name: str, columns: Sequence[str]) -> str:
    """'; nearest: X' for the column most like `name` (case and separators ignored), or ''."""
    folded = {re.sub(r"[^a-z0-9]", "", c.lower()): c for c in columns}
    found = difflib.get_close_matches(re.sub(r"[^a-z0-9]", "", name.lower()), list(folded), n=1, cutoff=0.5)
    if not found:
        found = [k for k in folded if re.sub(r"[^a-z0-9]", "", name.lower()) in k][:1]
    return f"; nearest: {folded[found[0]]!r} (rename it with --spec FILE.yaml: {name}: {folded[found[0]]})" if found else ""


def _listed(columns: Sequence[str]) -> str:
    shown = ", ".join(repr(c) for c in columns[:20])
    return shown + (f", … ({len(columns)} in all)" if len(columns) > 20 else "")


def _required(role: str, spec: Spec, columns: Sequence[str], file: Path) -> str:
    named = spec.get(role)
    if named is not None:
        if named not in columns:
            raise DataError(f"{file}: --spec names column {named!r} for {role}, which the file lacks (columns: "
                            f"{_listed(columns)}){nearest(named, columns)}")
        return named
    if role in columns:
        return role
    raise DataError(f"{file}: no {role!r} column (columns: {_listed(columns)}){nearest(role, columns)}")


def _optional(role: str, spec: Spec, columns: Sequence[str], file: Path, conventional: Sequence[str]) -> tuple[str, ...]:
    named = spec.get(role)
    if named is None:
        return tuple(c for c in conventional if c in columns)
    named = (named,) if isinstance(named, str) else tuple(named)
    missing = [n for n in named if n not in columns]
    if missing:
        raise DataError(f"{file}: --spec names column(s) {', '.join(map(repr, missing))} for {role}, which the file "
                        f"lacks (columns: {_listed(columns)}){nearest(missing[0], columns)}")
    return named


def _first(found: tuple[str, ...]) -> str | None:
    return found[0] if found else None


def _option_columns(spec: Spec, columns: Sequence[str], file: Path) -> tuple[str | None, tuple[str, ...]]:
    """(a list column, or the per-option columns in order)."""
    named = spec.get("options")
    if named is not None:
        found = _optional("options", spec, columns, file, ())
        return (found[0], ()) if isinstance(named, str) else (None, found)
    listed = _first(tuple(c for c in OPTION_LIST_COLUMNS if c in columns))
    if listed:
        return listed, ()
    letters = []
    for letter in LETTER_COLUMNS:  # A, B, C, … as VLMEvalKit names them, while they run on
        if letter not in columns:
            break
        letters.append(letter)
    return None, tuple(letters)


def _image_columns(spec: Spec, columns: Sequence[str], file: Path) -> tuple[str, ...]:
    if spec.get("images") is not None:
        return _optional("images", spec, columns, file, ())
    numbered = sorted((int(m.group(1)), c) for c in columns if (m := NUMBERED_IMAGE.match(c)))
    return tuple(c for c in IMAGE_COLUMNS if c in columns) + tuple(c for _, c in numbered)


def resolve(columns: Sequence[str], spec: Spec, file: Path, subset_breakdown: bool) -> Schema:
    """The schema of one file with `columns`; a DataError when `question` or `answer` (or a column
    the spec names) is missing. `subset_breakdown`: the data is a folder, its files a breakdown."""
    question, answer = _required("question", spec, columns, file), _required("answer", spec, columns, file)
    options, option_columns = _option_columns(spec, columns, file)
    taken = {question, answer, options, *option_columns}
    breakdowns = tuple(c for c in _optional("breakdowns", spec, columns, file, BREAKDOWN_COLUMNS) if c not in taken)
    return Schema(question=question, answer=answer, id=_first(_optional("id", spec, columns, file, ID_COLUMNS)),
                  context=_optional("context", spec, columns, file, CONTEXT_COLUMNS), options=options,
                  option_columns=option_columns,
                  tolerance=_first(_optional("tolerance", spec, columns, file, ("tolerance",))),
                  type=_first(_optional("type", spec, columns, file, TYPE_COLUMNS)),
                  images=_image_columns(spec, columns, file),
                  cluster=_first(_optional("cluster", spec, columns, file, ("cluster",))),
                  breakdowns=(("subset",) if subset_breakdown else ()) + breakdowns)
