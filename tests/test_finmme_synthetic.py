"""The synthetic FinMME-format set: shape, determinism, storage format and correct gold answers."""

from __future__ import annotations

import io
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before `datasets` is imported anywhere

from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from finbench.offline import finmme_synthetic as synth

TYPES = {"single_choice", "multiple_choice", "numerical"}
DIMENSIONS = {"comprehensive perception", "fine-grained perception", "cognition & reasoning"}


@pytest.fixture(scope="module")
def items() -> list[dict]:
    return synth.generate_items()  # the default set, 72 items


@pytest.fixture(scope="module")
def parquet_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The same small set written twice, independently."""
    base = tmp_path_factory.mktemp("synth")
    return synth.write_parquet(base / "a.parquet", n_items=10), synth.write_parquet(
        base / "b.parquet", n_items=10
    )


def letters(n: int) -> str:
    return "ABCDEFGHIJKLMN"[:n]


def test_shape_of_the_default_set(items):
    assert len(items) >= 60
    assert len({it["knowledge_domain"] for it in items}) >= 6
    assert {it["question_type"] for it in items} == TYPES
    assert {it["cognitive_dimension"] for it in items} == DIMENSIONS
    assert {it["chart_type"] for it in items} >= {
        "bar chart", "line chart", "pie chart", "candlestick chart", "table",
    }  # fmt: skip
    ids = [it["id"] for it in items]
    assert len(set(ids)) == len(ids)
    share = {t: sum(it["question_type"] == t for it in items) / len(items) for t in TYPES}
    assert 0.4 <= share["single_choice"] <= 0.6
    assert 0.15 <= share["multiple_choice"] <= 0.35
    assert 0.15 <= share["numerical"] <= 0.35
    for it in items:
        assert set(synth.COLUMNS) <= set(it)
        for key in ("question_text", "verified_caption", "related_sentences", "knowledge_domain"):
            assert isinstance(it[key], str) and it[key]


def test_answers_are_consistent_with_options(items):
    n_gold = []
    for it in items:
        options, answer = it["options"], it["answer"]
        if it["question_type"] == "numerical":
            assert options == []
            float(answer.rstrip("%"))  # parses
            assert it["tolerance"] is not None and it["tolerance"] > 0
            continue
        assert it["tolerance"] is None
        assert 4 <= len(options) <= 6
        assert all(isinstance(o, str) and o for o in options)
        assert len(set(options)) == len(options)  # distinct distractors
        assert not any(o[:2] in {f"{c}." for c in letters(6)} for o in options)  # no "A." prefixes
        assert answer and set(answer) <= set(letters(len(options)))
        if it["question_type"] == "single_choice":
            assert len(answer) == 1
        else:
            assert list(answer) == sorted(set(answer))  # ascending, no repeats
            assert len(answer) < len(options)
            n_gold.append(len(answer))
    assert sum(k >= 2 for k in n_gold) > len(n_gold) / 2  # mostly several gold letters
    assert 1 in n_gold  # and a few with exactly one, as in FinMME


def test_images_decode_and_sizes_vary(items):
    sizes = set()
    for it in items:
        image = it["image"]
        assert set(image) == {"bytes", "path"}
        assert image["bytes"][:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0")
        with Image.open(io.BytesIO(image["bytes"])) as im:
            im.load()
            assert 320 <= im.width <= 640 and im.height >= 150
            sizes.add(im.size)
            assert image["path"].endswith(".png" if im.format == "PNG" else ".jpg")
    assert len(sizes) >= 6
    assert len({w / h for w, h in sizes}) >= 3  # several aspect ratios


def test_same_seed_gives_identical_parquet_bytes(parquet_pair, items):
    a, b = parquet_pair
    assert a.read_bytes() == b.read_bytes()
    # item i depends only on (seed, i): the small set is a prefix of the default one
    small = pq.read_table(a).to_pylist()
    assert [r["id"] for r in small] == [it["id"] for it in items[:10]]
    assert [r["image"]["bytes"] for r in small] == [it["image"]["bytes"] for it in items[:10]]
    assert synth.generate_items(3, seed=1)[0]["image"] != items[0]["image"]  # the seed matters


def test_parquet_schema_is_the_hf_image_layout(parquet_pair):
    schema = pq.read_schema(parquet_pair[0])
    assert schema.names == list(synth.COLUMNS)
    assert schema.field("image").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert schema.field("options").type == pa.list_(pa.string())
    assert schema.field("tolerance").type == pa.float64()
    assert b"huggingface" in schema.metadata
    rows = pq.read_table(parquet_pair[0]).to_pylist()
    assert all("_data" not in r for r in rows)


def test_load_dataset_reads_it_back(parquet_pair, tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(
        "parquet", data_files=str(parquet_pair[0]), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert len(ds) == 10
    assert set(synth.COLUMNS) <= set(ds.column_names)
    ds = ds.cast_column("image", datasets.Image())
    row = ds[0]
    assert isinstance(row["image"], Image.Image) and row["image"].width >= 320
    assert isinstance(row["options"], list)
    assert row["question_type"] in TYPES


def test_cli_writes_a_file(tmp_path, capsys):
    out = tmp_path / "cli.parquet"
    synth.main([str(out), "--n", "3", "--seed", "2"])
    assert pq.read_table(out).num_rows == 3
    assert "wrote 3 items" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------
# Gold answers, recomputed from the generated numbers (never hard-coded)
# ------------------------------------------------------------------------------------------


def chosen(it: dict) -> set[str]:
    return {it["options"][letters(14).index(c)] for c in it["answer"]}


def number(it: dict) -> float:
    return float(it["answer"].rstrip("%"))


def close(it: dict, value: float, places: int) -> bool:
    """The answer is `value` rounded to `places` decimals (half a unit, plus float slack)."""
    return abs(number(it) - value) <= 0.5 * 10**-places + 1e-9


def check_series(it: dict, fig: dict, asked: dict) -> None:
    values = dict(zip(fig["labels"], (Fraction(v) for v in fig["values"])))
    template = asked["template"]
    if template == "extreme":
        pick = max if asked["which"] == "highest" else min
        assert chosen(it) == {pick(values, key=values.get)}
    elif template == "above":
        t = Fraction(asked["threshold"])
        assert chosen(it) == {o for o in it["options"] if values[o] > t}
    elif template in ("pct_change", "difference"):
        a, b = values[asked["from"]], values[asked["to"]]
        if template == "pct_change":
            expected, places = float((b - a) / a * 100), 1
        else:
            expected, places = float(b - a), max(len(v.split(".")[1]) for v in fig["values"])
        if it["question_type"] == "numerical":
            assert close(it, expected, places)
        else:
            (option,) = chosen(it)
            assert abs(float(option.rstrip("%")) - expected) <= 0.5 * 10**-places + 1e-9
    else:
        raise AssertionError(f"unchecked template {template}")


def check_pie(it: dict, fig: dict, asked: dict) -> None:
    shares = dict(zip(fig["labels"], (Fraction(s) for s in fig["shares"])))
    assert sum(shares.values()) == 100
    template = asked["template"]
    if template == "rank":
        ranked = sorted(shares, key=shares.get, reverse=True)
        assert chosen(it) == {ranked[asked["rank"]]}
    elif template == "above":
        t = Fraction(asked["threshold"])
        assert chosen(it) == {o for o in it["options"] if shares[o] > t}
    elif template == "combined":
        assert close(it, float(sum(shares[p] for p in asked["parts"])), 1)
    elif template == "value_of":
        assert close(it, float(Fraction(asked["total"]) * shares[asked["part"]] / 100), 2)
    else:
        raise AssertionError(f"unchecked template {template}")


def check_candles(it: dict, fig: dict, asked: dict) -> None:
    days = fig["labels"]
    o, h, l, c = ([Fraction(x) for x in fig[k]] for k in ("open", "high", "low", "close"))
    template = asked["template"]
    if template == "count_up":
        assert number(it) == sum(ci > oi for oi, ci in zip(o, c))
    elif template == "bearish":
        assert chosen(it) == {o_ for o_ in it["options"] if c[days.index(o_)] < o[days.index(o_)]}
    elif template == "extreme_wick":
        i = h.index(max(h)) if asked["which"] == "highest" else l.index(min(l))
        assert chosen(it) == {days[i]}
        assert sorted(h).count(max(h)) == 1 and sorted(l).count(min(l)) == 1
    else:
        raise AssertionError(f"unchecked template {template}")


def check_table(it: dict, fig: dict, asked: dict) -> None:
    def ratio(row: str, spec: list) -> Fraction:
        cells = [Fraction(v) for v in fig["cells"][fig["rows"].index(row)]]
        num, den, percent = spec
        return cells[num] / cells[den] * (100 if percent else 1)

    template = asked["template"]
    if template == "ratio":
        assert close(it, float(ratio(asked["row"], fig["ratio1"])), 2)
    elif template == "extreme_ratio":
        pick = max if asked["which"] == "highest" else min
        assert chosen(it) == {pick(fig["rows"], key=lambda r: ratio(r, fig["ratio1"]))}
    elif template == "ratio_above":
        t = Fraction(asked["threshold"])
        assert chosen(it) == {r for r in it["options"] if ratio(r, fig["ratio2"]) > t}
    else:
        raise AssertionError(f"unchecked template {template}")


CHECKS = {
    "bar chart": check_series,
    "line chart": check_series,
    "pie chart": check_pie,
    "candlestick chart": check_candles,
    "table": check_table,
}


def test_gold_answers_recompute_from_the_numbers(items):
    for it in items:
        data = it["_data"]
        try:
            CHECKS[it["chart_type"]](it, data["figure"], data["asked"])
        except AssertionError as e:
            raise AssertionError(f"{it['id']}: {it['question_text']} {it['options']} "
                                 f"{it['answer']}: {e}") from e  # fmt: skip


def test_numerical_tolerance_matches_the_rounding_asked(items):
    for it in items:
        if it["question_type"] != "numerical":
            continue
        decimals = len(it["answer"].rstrip("%").partition(".")[2])
        # one unit of the last decimal asked for; half a day for whole counts
        assert it["tolerance"] == pytest.approx(10**-decimals if decimals else 0.5), it["id"]
