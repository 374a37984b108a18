"""Synthetic FAMMA data in every published form, for tests and demos (no download).

`records(seed)` builds a small set in memory: the five real answered records of
`shared/data/famma/mock.json` when given, plus generated ones that exercise what the loaders
must handle — an open numerical question, a main question whose later sub-questions carry no
context or images of their own, images named out of order (`<image_2>` before `<image_1>`), a
live question without an answer, a base64-masked live answer, and one malformed record.
`write_*` store them as the hub's parquet / Arrow (images as {bytes, path} structs, options
prefixed "A. "), the official downloader's JSON (relative JPEG paths, "None" for a missing
image) and the early JSON (inline base64, options as a python-list string).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any, Sequence

from finbench.offline.charts import NUMERICAL, SINGLE
from finbench.offline.finmme_synthetic import charts_context, synthetic_chart

N_IMAGES = 7
COLUMNS = ("idx", "question_id", "context", "question", "options", *(f"image_{n}" for n in range(1, N_IMAGES + 1)),
           "image_type", "answers", "explanation", "topic_difficulty", "question_type", "subfield", "language",
           "main_question_id", "sub_question_id", "is_arithmetic", "release")


def jpeg(color: tuple[int, int, int], size: tuple[int, int] = (56, 42)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def records(mock: str | Path | None = None) -> list[dict[str, Any]]:
    """Canonical in-memory records: images as bytes or None, options as a list of texts."""
    out: list[dict[str, Any]] = []
    if mock is not None:
        for n, r in enumerate(json.loads(Path(mock).read_text())):
            out.append({**{c: None for c in COLUMNS}, **{k: v for k, v in r.items() if k in COLUMNS},
                        "idx": n, "options": _literal_list(r["options"]), "release": "release_basic",
                        **{f"image_{i}": base64.b64decode(r[f"image_{i}"]) if r.get(f"image_{i}") not in (None, "None")
                           else None for i in range(1, N_IMAGES + 1)}})
    red, green, blue = jpeg((200, 30, 30)), jpeg((30, 200, 30), (70, 28)), jpeg((30, 30, 200), (28, 84))
    base = {c: None for c in COLUMNS}
    generated = [
        dict(base, question_id="english_1_1_r1", context="A bond pays 5% on 100. See <image_1>.",
             question="What is the annual coupon in dollars?", options=None, image_1=red,
             answers="5", explanation="5% of 100.", topic_difficulty="easy", question_type="open question",
             subfield="fixed income", language="english", main_question_id=1, sub_question_id=1, is_arithmetic=1),
        dict(base, question_id="english_2_1_r1", context="Compare <image_2> with <image_1>.",
             question="Which chart shows the larger value?", options=["left", "right", "neither"],
             image_1=green, image_2=blue, answers="B", topic_difficulty="medium", question_type="multiple-choice",
             subfield="equity", language="english", main_question_id=2, sub_question_id=1, is_arithmetic=0),
        dict(base, question_id="english_2_2_r1", context="", question="By how much, in percent?", options=None,
             answers="12.5%", topic_difficulty="medium", question_type="open question", subfield="equity",
             language="english", main_question_id=2, sub_question_id=2, is_arithmetic=1),
        dict(base, question_id="chinese_3_1_r2", context="某公司利润表。<image_1>", question="净利润是多少？", options=None,
             image_1=red, answers="nan", topic_difficulty="hard", question_type="open question",
             subfield="financial statement analysis", language="chinese", main_question_id=3, sub_question_id=1,
             is_arithmetic=1, release="release_livepro"),
        dict(base, question_id="french_4_1_r2", context="Un graphique <image_1>.", question="Quel est le rendement ?",
             options=None, image_1=green, answers=base64.b64encode("3.2%".encode()).decode(), topic_difficulty="hard",
             question_type="open question", subfield="derivatives", language="french", main_question_id=4,
             sub_question_id=1, is_arithmetic=None, release="release_livepro"),
        dict(base, question_id="english_5_1_r1", context="Broken.", question="?", options=["a", "b"], answers="A",
             question_type="true-false", subfield="", language="english", main_question_id=5, sub_question_id=1),
    ]
    for n, r in enumerate(generated, start=len(out)):
        r["idx"] = n
        r["release"] = r["release"] or "release_basic"
        r["image_type"] = r["image_type"] or "chart"
        r["explanation"] = r["explanation"] or ""
    return out + generated


LANGUAGES = ("english", "chinese", "french")
DIFFICULTIES = ("easy", "medium", "hard")
SUBFIELDS = ("alternative investments", "corporate finance", "derivatives", "economics", "equity",
             "financial statement analysis", "fixed income", "portfolio management")


def chart_records(n_main: int = 12, seed: int = 0, start: int = 0) -> list[dict[str, Any]]:
    """FAMMA records drawn from synthetic charts (finmme_synthetic): per main question a context
    with `<image_1>`, a multiple-choice sub-question and an open numerical one sharing it (the
    second without context or images of its own, as on the hub), cycling through languages,
    difficulties and subfields. Gold answers are read off each chart."""
    out = []
    with charts_context():
        for k in range(n_main):
            chart = synthetic_chart(k, seed, "famma-synthetic")
            main = 100 + k
            language = LANGUAGES[k % len(LANGUAGES)]
            base = {c: None for c in COLUMNS}
            shared = dict(base, topic_difficulty=DIFFICULTIES[(k // 3) % 3], subfield=SUBFIELDS[k % len(SUBFIELDS)],
                          language=language, main_question_id=main, image_type="chart", release="release_basic",
                          explanation="")
            choice = chart.questions[SINGLE]  # FAMMA multiple choice has one gold letter
            numerical = chart.questions[NUMERICAL]
            out.append(dict(shared, question_id=f"{language}_{main}_1_synthetic", sub_question_id=1,
                            context=f"{chart.caption} {chart.context} <image_1>", question=choice.text,
                            options=list(choice.options), image_1=_as_jpeg(chart.image), answers=choice.answer,
                            question_type="multiple-choice", is_arithmetic=0))
            out.append(dict(shared, question_id=f"{language}_{main}_2_synthetic", sub_question_id=2, context="",
                            question=numerical.text, options=None, answers=numerical.answer,
                            question_type="open question", is_arithmetic=1))
    for n, record in enumerate(out, start=start):
        record["idx"] = n
    return out


def _as_jpeg(data: bytes) -> bytes:
    """FAMMA ships JPEG images."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _literal_list(text: str) -> list[str]:
    import ast

    return list(ast.literal_eval(text))


def _hub_row(record: dict[str, Any]) -> dict[str, Any]:
    row = dict(record)
    for n in range(1, N_IMAGES + 1):
        data = record[f"image_{n}"]
        row[f"image_{n}"] = {"bytes": data, "path": f"{record['question_id']}_image_{n}.jpg"} if data else None
    options = record["options"] or []
    row["options"] = [f"{'ABCDEFG'[i]}. {o}" for i, o in enumerate(options)]  # the hub prefixes letters
    row["main_question_id"] = str(record["main_question_id"])
    row["sub_question_id"] = str(record["sub_question_id"])
    return row


def _hub_table(rows: Sequence[dict[str, Any]]) -> Any:
    import pyarrow as pa

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    fields = [pa.field(c, image if c.startswith("image_") and c != "image_type" else
                       pa.list_(pa.string()) if c == "options" else pa.int64() if c in ("idx", "is_arithmetic")
                       else pa.string()) for c in COLUMNS]
    schema = pa.schema(fields)
    return pa.Table.from_pylist([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema)


def write_parquet(path: str | Path, data: Sequence[dict[str, Any]]) -> Path:
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_hub_table([_hub_row(r) for r in data]), path)
    return path


def write_arrow(path: str | Path, data: Sequence[dict[str, Any]]) -> Path:
    """The Arrow streaming format `datasets` keeps in its cache (data-00000-of-00001.arrow)."""
    import pyarrow as pa

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = _hub_table([_hub_row(r) for r in data])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def write_downloader_json(folder: str | Path, data: Sequence[dict[str, Any]], split: str = "release_basic") -> Path:
    """download_data's layout: {split}.json beside images_{split}/{question_id}_{key}.jpg."""
    folder = Path(folder)
    images = folder / f"images_{split}"
    images.mkdir(parents=True, exist_ok=True)
    out = []
    for record in data:
        row = dict(record, options=_hub_row(record)["options"])  # downloaded from the hub: "A. …" kept
        for n in range(1, N_IMAGES + 1):
            blob = record[f"image_{n}"]
            if blob:
                name = f"{record['question_id']}_image_{n}.jpg"
                (images / name).write_bytes(blob)
                row[f"image_{n}"] = f"images_{split}/{name}"
            else:
                row[f"image_{n}"] = "None"
        out.append(row)
    path = folder / f"{split}.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1))
    return path


def write_early_json(path: str | Path, data: Sequence[dict[str, Any]]) -> Path:
    """mock.json's form: base64 images, options as the python str() of the list, None when absent."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for record in data:
        row = dict(record)
        for n in range(1, N_IMAGES + 1):
            blob = record[f"image_{n}"]
            row[f"image_{n}"] = base64.b64encode(blob).decode() if blob else None
        row["options"] = str(record["options"]) if record["options"] is not None else None
        out.append(row)
    path.write_text(json.dumps(out, ensure_ascii=False))
    return path


def demo_data(folder: str | Path, n_main: int | None = None) -> tuple[Path, bool]:
    """`finbench demo --benchmark famma`'s data: the edge-case records (no broken one) and N chart
    main questions of two sub-questions (12), as FOLDER/famma-synthetic-N/release_basic.parquet."""
    n = n_main or 12
    path = Path(folder) / f"famma-synthetic-{n}" / "release_basic.parquet"
    if path.exists():
        return path, False
    edge_cases = [r for r in records() if r["question_type"] != "true-false"]
    return write_parquet(path, edge_cases + chart_records(n, start=len(edge_cases))), True
