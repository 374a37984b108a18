"""The run's thumbnails, for report.html's sample browser: the first image of each of the run's
first `MAX_THUMBNAILS` questions as a `THUMBNAIL_SIDE`-pixel JPEG, written by the run into its
folder (`thumbnails.parquet`: id, jpeg; at most ~200 × 3 kB) beside samples.parquet, which holds no
images. The report reads them from the run folder and never the data: a folder from before (no
thumbnails file) renders without them."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Sequence

from finbench.core.encodable import encodable
from finbench.core.types import Question

THUMBNAILS_FILE = "thumbnails.parquet"
MAX_THUMBNAILS = 200
THUMBNAIL_SIDE = 96


def write_thumbnails(questions: Sequence[Question], path: Path) -> None:
    """thumbnails.parquet of the first MAX_THUMBNAILS `questions` (those with an image that decodes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shown = [(q.id, jpeg_thumbnail(q.images[0])) for q in questions[:MAX_THUMBNAILS] if q.images]
    shown = [(qid, jpeg) for qid, jpeg in shown if jpeg]
    table = pa.table({"id": pa.array([encodable(qid) for qid, _ in shown], pa.string()),
                      "jpeg": pa.array([jpeg for _, jpeg in shown], pa.binary())})
    pq.write_table(table, path)


def read_thumbnails(run_dir: Path) -> dict[str, str]:
    """id → JPEG data URI of the thumbnails the run wrote; {} for a folder without them (or one
    whose file cannot be read: the report never fails for a missing image)."""
    import pyarrow.parquet as pq

    path = Path(run_dir) / THUMBNAILS_FILE
    try:
        table = pq.read_table(path, columns=["id", "jpeg"]).to_pydict()
    except Exception:  # noqa: BLE001 — no file (a run from before), a broken one
        return {}
    return {str(qid): "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
            for qid, jpeg in zip(table["id"], table["jpeg"]) if jpeg}


def jpeg_thumbnail(data: Any) -> bytes:
    """The image `data` (encoded bytes) as a JPEG at most THUMBNAIL_SIDE pixels a side; b"" when
    it does not decode (a broken image is that sample's error, shown elsewhere)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image = image.convert("RGB")
            image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=70)
    except Exception:  # noqa: BLE001
        return b""
    return buffer.getvalue()
