"""A custom row's images, as the peers' files give them, each read to its bytes and checked to decode:

- a path, relative to the data file's folder or to `--image-root` (or absolute);
- a `data:image/…;base64,…` URL, or raw base64 (VLMEvalKit's `image` column);
- VLMEvalKit's reference to another row's image: a short value (≤ 64 characters) that is the
  `index` of a row whose own image is there (`ImageBaseDataset`: "a row may reuse another's image");
- parquet's `{bytes, path}` struct (the Hugging Face `Image` feature), or raw bytes;
- several per row: a list (or a JSON list in text) in one column, or one column each (`image_1` …).

An http(s) URL is refused (finbench runs offline); a missing file, or bytes that do not decode as
an image, too — each naming the value. `<image k>` (or `<image_k>`) in a question places image k
there (MMMU, evalscope's general_vmcq); a placeholder without its image is refused.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.custom.cells import RowProblem, list_value
from finbench.benchmarks.custom.tables import blank, cell_text
from finbench.benchmarks.records import image_problem

ROW_REFERENCE_MAX = 64  # VLMEvalKit: an image value this short is another row's index
PLACEHOLDER = re.compile(r"<image[ _](\d+)>", re.IGNORECASE)
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}\s*$")


def references(value: Any) -> list[Any]:
    """The image references of one cell: its items when it holds a list, else the cell itself."""
    if blank(value):
        return []
    if isinstance(value, (str, bytes, bytearray, Mapping)):
        listed = list_value(value) if isinstance(value, str) else None
        return [v for v in listed if not blank(v)] if listed is not None else [value]
    listed = list_value(value)
    return [v for v in listed if not blank(v)] if listed is not None else [value]


def _text_bytes(text: str, folders: Sequence[Path], by_id: Mapping[str, Any], depth: int) -> bytes:
    shown = text if len(text) <= 80 else text[:40] + f"…({len(text)} characters)"
    lowered = text.lower()
    if lowered.startswith(("http://", "https://")):
        raise RowProblem(f"image {shown!r} is a URL: finbench runs offline — download the images and give their "
                         "folder with --image-root (paths relative to it)")
    if lowered.startswith("data:"):
        header, _, payload = text.partition(",")
        if ";base64" not in header.lower():
            raise RowProblem(f"image {shown!r}: a data: URL that is not base64")
        return _base64(payload, shown)
    if len(text) <= 4096 and "\n" not in text:
        for folder in folders:
            path = Path(text).expanduser() if Path(text).expanduser().is_absolute() else folder / text
            if path.is_file():
                return path.read_bytes()
    if len(text) <= ROW_REFERENCE_MAX and text in by_id and depth == 0:
        return _one(by_id[text], folders, by_id, depth + 1)  # VLMEvalKit: another row's image
    if len(text) > ROW_REFERENCE_MAX and _BASE64.match(text[:4096]):
        return _base64(text, shown)
    where = " or ".join(str(f) for f in folders)
    raise RowProblem(f"image file {shown!r} does not exist (looked in {where}; --image-root names another folder)")


def _base64(payload: str, shown: str) -> bytes:
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        raise RowProblem(f"image {shown!r} is not valid base64") from None


def _one(value: Any, folders: Sequence[Path], by_id: Mapping[str, Any], depth: int = 0) -> bytes:
    if isinstance(value, Mapping):  # parquet / datasets' Image struct
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return _text_bytes(str(value["path"]), folders, by_id, depth)
        raise RowProblem("image struct has neither bytes nor a path")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return _text_bytes(cell_text(value), folders, by_id, depth)


def row_images(row: Mapping[str, Any], columns: Sequence[str], folders: Sequence[Path],
               by_id: Mapping[str, Any]) -> tuple[bytes, ...]:
    """The row's images in column order, each read and checked to decode (`folders`: where a
    relative path is looked for; `by_id`: each row id's first image cell, for VLMEvalKit's
    references)."""
    images = []
    for column in columns:
        for value in references(row.get(column)):
            data = _one(value, folders, by_id)
            problem = image_problem(data)
            if problem:
                shown = cell_text(value) if not isinstance(value, (bytes, bytearray, Mapping)) else f"in {column!r}"
                raise RowProblem(f"image {shown[:80]!r} does not decode as an image ({problem})")
            images.append(data)
    return tuple(images)


def placements(text: str, n_images: int) -> tuple[int, ...]:
    """The image numbers (0-based) the question's `<image k>` placeholders name, in order; a
    placeholder beyond the row's images is refused."""
    found = tuple(int(k) - 1 for k in PLACEHOLDER.findall(text))
    missing = sorted({k + 1 for k in found if not 0 <= k < n_images})
    if missing:
        raise RowProblem(f"the question names <image {missing[0]}> but the row has {n_images} image"
                         f"{'s' * (n_images != 1)}")
    return found
