"""Synthetic custom files, one per form `--benchmark custom` reads (benchmarks/custom), with the
gold each row means — for the tests, the demo (`demo_data`) and the scale check (`write_csv(n)`).

Every form holds the same kinds of rows, written the way that form's users write them: a letter,
an option's text, a set (`A;C`, `["B","D"]`), numbers as accountants write them (`1,234.5`,
`12%`, `(3.2)`), true/false, yes/no, 是/否, and an open answer. `GOLD` is what each row means
(kind, gold as finbench holds it), restated here, never read from finbench's reader.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

OPTIONS = ("Revenue", "Net income", "Operating cash flow", "Total assets")
# (row id, answer as the file writes it, options or None, tolerance) → GOLD[row id]
ROWS = (("s1", "B", OPTIONS, ""), ("s2", "net  INCOME", OPTIONS, ""), ("m1", "A;C", OPTIONS, ""),
        ("m2", '["B","D"]', OPTIONS, ""), ("n1", "1,234.5", None, ""), ("n2", "12%", None, "rel=0.01"),
        ("n3", "(3.2)", None, "abs=0.5"), ("b1", "true", None, ""), ("b2", "no", None, ""), ("b3", "是", None, ""),
        ("o1", "Paris", None, ""))
GOLD = {"s1": ("single", "B"), "s2": ("single", "B"), "m1": ("multi", "AC"), "m2": ("multi", "BD"),
        "n1": ("numerical", "1234.5"), "n2": ("numerical", "12"), "n3": ("numerical", "-3.2"), "b1": ("single", "A"),
        "b2": ("single", "B"), "b3": ("single", "A"), "o1": ("open", "Paris")}
CATEGORIES = ("income", "balance")


def png(seed: int, side: int = 24) -> bytes:
    """A small PNG, different for every seed."""
    from PIL import Image

    image = Image.new("RGB", (side, side), ((37 * seed) % 256, (91 * seed + 40) % 256, (53 * seed + 90) % 256))
    image.putpixel((seed % side, (seed // side) % side), (255, 255, 255))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def noise_png(seed: int, side: int) -> bytes:
    """A PNG of random pixels (barely compressible): side 256 is about 200 KB, base64 larger still."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _question(rid: str, k: int) -> str:
    return f"Row {rid}: what does chart {k} show?"


def _record(k: int, row: tuple) -> dict[str, Any]:
    rid, answer, options, tolerance = row
    return {"id": rid, "question": _question(rid, k), "answer": answer, "options": options, "tolerance": tolerance,
            "category": CATEGORIES[k % 2]}


def write_csv(folder: Path, n: int | None = None, name: str = "questions.csv") -> Path:
    """A CSV: options as a JSON list in a cell, images as paths relative to the file (under images/).
    `n`: that many rows, cycling through the kinds (every row its own image)."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "images").mkdir(exist_ok=True)
    records = []
    for k in range(n or len(ROWS)):
        record = _record(k, ROWS[k % len(ROWS)])
        record["id"] = record["id"] if n is None else f"{record['id']}-{k}"
        (folder / "images" / f"chart{k}.png").write_bytes(png(k))
        record["options"] = json.dumps(list(record["options"])) if record["options"] else ""
        records.append({**record, "image": f"images/chart{k}.png"})
    pd.DataFrame(records).to_csv(folder / name, index=False)
    return folder / name


def write_vlmevalkit_tsv(folder: Path) -> Path:
    """VLMEvalKit's MCQ TSV: index, question, hint, A–D, answer, base64 image, category,
    l2-category; row 2 reuses row 1's image by its index (a short value), the open row has two
    images as a list."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for k, (rid, answer, options, tolerance) in enumerate(ROWS):
        letters = dict(zip("ABCD", options or ("", "", "", "")))
        image: Any = b64(png(k))
        if rid == "s2":
            image = "s1"  # VLMEvalKit: another row's index
        if rid == "o1":
            image = json.dumps([b64(png(k)), b64(png(k + 100))])
        records.append({"index": rid, "question": _question(rid, k), "hint": "Figures in USD millions." if k % 3 else "",
                        **letters, "answer": answer, "image": image, "category": CATEGORIES[k % 2],
                        "l2-category": "statements", "tolerance": tolerance})
    path = folder / "vlmevalkit.tsv"
    pd.DataFrame(records).to_csv(path, sep="\t", index=False)
    return path


def write_general_vmcq_jsonl(folder: Path) -> Path:
    """evalscope's general_vmcq JSONL: `<image k>` in the question, `options` a list, `image_1`,
    `image_2` (a path beside the file and a data: URL), no id column."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for k, (rid, answer, options, tolerance) in enumerate(ROWS):
        (folder / f"img{k}.png").write_bytes(png(k))
        record: dict[str, Any] = {"question": f"<image 1> Compare with <image 2>. {_question(rid, k)}",
                                  "answer": answer, "image_1": f"img{k}.png",
                                  "image_2": "data:image/png;base64," + b64(png(k + 50)), "subject": CATEGORIES[k % 2]}
        if options:
            record["options"] = list(options)
        if tolerance:
            record["tolerance"] = tolerance
        lines.append(json.dumps(record, ensure_ascii=False))
    path = folder / "general_vmcq.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _shaped(options: Any, image_column: str, image: Any) -> list[dict[str, Any]]:
    """Every row as a record with its options as `options(texts or None)` writes them and its
    image(s) under `image_column` as `image(k)` writes them."""
    return [{**_record(k, row), "options": options(row[2]), image_column: image(k)} for k, row in enumerate(ROWS)]


def write_json_list(folder: Path) -> Path:
    """A JSON list: options as a Python list in text, a set answer as a list, images as a list."""
    folder.mkdir(parents=True, exist_ok=True)
    records = _shaped(lambda o: repr(list(o)) if o else None, "images",
                      lambda k: ["data:image/png;base64," + b64(png(k))])
    for record in records:
        record["answer"] = ["B", "D"] if record["id"] == "m2" else record["answer"]
    path = folder / "questions.json"
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return path


def write_parquet(folder: Path) -> Path:
    """Parquet with Hugging Face `Image` structs ({bytes, path}) and list-typed options."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    records = _shaped(lambda o: list(o or []), "image", lambda k: {"bytes": png(k), "path": f"chart{k}.png"})
    path = folder / "questions.parquet"
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def write_folder(folder: Path) -> Path:
    """A folder of two CSV files: two subsets (the ids repeat across them: each is its subset's)."""
    write_csv(folder, name="q1.csv")
    write_csv(folder, name="q2.csv")
    return folder


def write_renamed(folder: Path) -> tuple[Path, Path, Path]:
    """A CSV whose columns have the user's own names, its spec file, and its images under another
    folder (for --image-root): (data, spec, image folder)."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    images = folder / "charts"
    images.mkdir(exist_ok=True)
    records = []
    for k, (rid, answer, options, tolerance) in enumerate(ROWS):
        (images / f"c{k}.png").write_bytes(png(k))
        opts = list(options or ("", "", "", ""))
        records.append({"qid": rid, "prompt": _question(rid, k), "label": answer, "choice_a": opts[0],
                        "choice_b": opts[1], "choice_c": opts[2], "choice_d": opts[3], "chart": f"c{k}.png",
                        "sector": CATEGORIES[k % 2], "tol": tolerance})
    data = folder / "mine.csv"
    pd.DataFrame(records).to_csv(data, index=False)
    spec = folder / "spec.yaml"
    spec.write_text("id: qid\nquestion: prompt\nanswer: label\noptions: [choice_a, choice_b, choice_c, choice_d]\n"
                    "images: chart\ntolerance: tol\nbreakdowns: [sector]\n", encoding="utf-8")
    return data, spec, images


def write_long_cell_csv(folder: Path) -> Path:
    """A CSV whose image cells are base64 of a noise PNG over 128 KiB (Python's csv field limit)."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    records = [{**_record(k, row), "options": json.dumps(list(row[2])) if row[2] else "",
                "image": b64(noise_png(k, 256))} for k, row in enumerate(ROWS[:3])]
    path = folder / "long.csv"
    pd.DataFrame(records).to_csv(path, index=False)
    return path


def demo_data(folder: Path, size: int | None) -> tuple[Path, bool]:
    """`finbench demo --benchmark custom`: a CSV of `size` rows (default: 2 of each kind), once per size."""
    rows = size or 2 * len(ROWS)
    target = Path(folder) / f"custom-{rows}"
    if (target / "questions.csv").is_file():
        return target / "questions.csv", False
    return write_csv(target, rows), True
