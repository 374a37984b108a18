"""A small synthetic data set in FinMME's format, for offline demos and tests.

This is NOT FinMME. FinMME (ACL 2025) lives only on the Hugging Face hub (`luojunyu/FinMME`), and
finbench must run, demo and test without a network. So this module draws financial charts of made-up
numbers with matplotlib (bar, line, pie, candlestick and a rendered table), asks FinMME-style
questions about them and computes every gold answer exactly from the generated numbers.

The records carry FinMME's fields (`image`, `question_text`, `question_type`, `options`, `answer`,
`unit`, `tolerance`, `verified_caption`, `related_sentences`, `knowledge_domain`, plus `id`,
`asset_class`, `chart_type`, `cognitive_dimension`), and `write_parquet` stores them the way Hugging
Face `datasets` stores a data set with an Image feature (an `image` struct {bytes, path} and the
`huggingface` schema metadata), so `datasets.load_dataset("parquet", ...)` yields the same fields,
a decoded PIL image included, as the hub set.

Determinism: item `i` depends only on (seed, i), so a shorter set is a prefix of a longer one, and
the same seed gives a byte-identical parquet file (images are encoded by PIL without metadata,
matplotlib's rc settings are reset to its defaults while drawing, arithmetic is exact).

Each record from `generate_items` also has a private `_data` field (the chart's numbers and what
the question asked) so tests can recompute answers; `write_parquet` leaves it out.

The charts themselves are drawn by `charts.py` (data model, exact numbers, drawing),
`chart_themes.py` (what a chart is about) and `chart_kinds.py` (bar, line, pie, candlestick, table).

    python -m finbench.offline.finmme_synthetic OUT.parquet [--n 72] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
from pathlib import Path
from typing import Any, Iterator, Sequence

from finbench.offline.chart_kinds import CHART_KINDS
from finbench.offline.charts import ASPECTS, MULTIPLE, NUMERICAL, SINGLE, WIDTHS, Chart, Plan

COLUMNS = (
    "id", "image", "question_text", "question_type", "options", "answer", "unit", "tolerance",
    "verified_caption", "related_sentences", "knowledge_domain", "asset_class", "chart_type",
    "cognitive_dimension",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The data set
# ---------------------------------------------------------------------------------------------


def plan_item(i: int, rng: random.Random) -> Plan:
    # Types cycle single, multiple, single, numerical (50/25/25); with five chart kinds the
    # cycles are coprime, so every chart kind gets every question type.
    qtype = (SINGLE, MULTIPLE, SINGLE, NUMERICAL)[i % 4]
    n_options = rng.choices((4, 5, 6), weights=(7, 2, 1))[0]
    # Most multi-answer items have 2+ gold letters; every fifth has exactly one, as in FinMME.
    n_gold = 1 if (i // 4) % 5 == 2 else rng.randint(2, n_options - 1)
    width = rng.choice(WIDTHS)
    height = int(width * rng.choice(ASPECTS))
    image_format = "jpeg" if i % 7 == 3 else "png"  # a few JPEGs, as loaders must accept both
    return Plan(qtype, n_options, n_gold, width, height, image_format)


def make_item(i: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"finmme-synthetic/{seed}/{i}")  # str seeds hash with SHA-512: stable
    plan = plan_item(i, rng)
    draw, themes = CHART_KINDS[i % len(CHART_KINDS)]
    theme = themes[(i // len(CHART_KINDS)) % len(themes)]
    chart = draw(theme, plan, rng)
    q = chart.questions[plan.question_type]
    item_id = f"synth-{seed}-{i:04d}"
    suffix = "jpg" if plan.image_format == "jpeg" else "png"
    return {
        "id": item_id,
        "image": {"bytes": chart.image, "path": f"{item_id}.{suffix}"},
        "question_text": q.text,
        "question_type": q.question_type,
        "options": list(q.options),
        "answer": q.answer,
        "unit": q.unit,
        "tolerance": q.tolerance,
        "verified_caption": chart.caption,
        "related_sentences": chart.context,
        "knowledge_domain": chart.knowledge_domain,
        "asset_class": chart.asset_class,
        "chart_type": chart.chart_type,
        "cognitive_dimension": q.cognitive_dimension,
        "_data": {"figure": dict(chart.data), "asked": dict(q.asked)},
    }


def synthetic_chart(i: int, seed: int, tag: str) -> Chart:
    """Chart i of another synthetic set (`tag` names it: FAMMA's and FinMTM's demo data), drawn
    as `make_item` draws FinMME's, with a question of every type; call it inside `charts_context`."""
    rng = random.Random(f"{tag}/{seed}/{i}")
    plan = plan_item(i, rng)
    draw, themes = CHART_KINDS[i % len(CHART_KINDS)]
    return draw(themes[(i // len(CHART_KINDS)) % len(themes)], plan, rng)


@contextlib.contextmanager
def charts_context() -> Iterator[None]:
    """matplotlib's defaults, whatever the user's matplotlibrc says, while charts are drawn."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        yield


def generate_items(n_items: int = 72, seed: int = 0) -> list[dict[str, Any]]:
    """`n_items` FinMME-format records; item i depends only on (seed, i)."""
    import matplotlib

    # A user's matplotlibrc or style must not change the images (or their bytes).
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        return [make_item(i, seed) for i in range(n_items)]


def arrow_schema():  # -> pyarrow.Schema
    import pyarrow as pa

    string = pa.string()
    fields = [
        ("id", string), ("image", pa.struct([("bytes", pa.binary()), ("path", string)])),
        ("question_text", string), ("question_type", string), ("options", pa.list_(string)),
        ("answer", string), ("unit", string), ("tolerance", pa.float64()),
        ("verified_caption", string), ("related_sentences", string), ("knowledge_domain", string),
        ("asset_class", string), ("chart_type", string), ("cognitive_dimension", string),
    ]  # fmt: skip
    # The metadata `datasets` writes, so load_dataset decodes `image` as an Image feature.
    # "Sequence" (not "List") is what both datasets 3.x and newer versions read.
    features: dict[str, Any] = {name: {"dtype": "string", "_type": "Value"} for name, _ in fields}
    features["image"] = {"_type": "Image"}
    features["options"] = {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"}
    features["tolerance"] = {"dtype": "float64", "_type": "Value"}
    meta = {"huggingface": json.dumps({"info": {"features": features}})}
    return pa.schema(fields, metadata=meta)


def write_parquet(path: str | Path, n_items: int = 72, seed: int = 0) -> Path:
    """Write the synthetic set as one parquet file with FinMME's columns; returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = generate_items(n_items, seed)
    table = pa.Table.from_pylist([{k: item[k] for k in COLUMNS} for item in items],
                                 schema=arrow_schema())  # fmt: skip
    partial = path.with_name(f".{path.name}.partial")  # renamed into place: a killed write leaves no such file
    pq.write_table(table, partial)
    partial.replace(path)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output .parquet path")
    parser.add_argument("--n", type=int, default=72, help="number of items (default 72)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write_parquet(args.out, args.n, args.seed)
    print(f"wrote {args.n} items to {path}")


if __name__ == "__main__":
    main()


def demo_data(folder: str | Path, n_items: int | None = None) -> tuple[Path, bool]:
    """`finbench demo`'s FinMME data: FOLDER/finmme-synthetic-N.parquet (72 items), written once."""
    n = n_items or 72
    path = Path(folder) / f"finmme-synthetic-{n}.parquet"
    if path.exists():
        return path, False
    return write_parquet(path, n_items=n), True
