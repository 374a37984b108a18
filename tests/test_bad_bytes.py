"""Issue 44 item 1: one byte that is not UTF-8 in a JSON or JSON lines file — inside a key, inside a
value, or between two records — fails only what holds it, in every loader that reads JSON: the
record (or, between records, an entry of its own) is there as its own error, "not UTF-8 at byte N"
with N the byte's offset in the file as written here, and every other record is read. FAMMA in the
issue's own shape (the downloader's JSON array, `ensure_ascii=False`, indented) goes through
`finbench run` end to end, and results.json counts it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from helpers import shared
from finbench.benchmarks import BENCHMARKS
from finbench.cli import app

MOCK = shared("data", "famma", "mock.json")
MARK = "MARKED"  # in the text of the second record only: where the bad byte goes


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 24), (20, 120, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


def famma(n: int, text: str) -> dict:
    return {"question_id": f"r{n}", "context": "Sales by year. <image_1>", "question": f"{text} year is highest?",
            "options": ["2021", "2022", "2023"], "image_1": "img.png", "answers": "B",
            "question_type": "multiple-choice", "subfield": "equity", "language": "english",
            "topic_difficulty": "easy", "main_question_id": n, "sub_question_id": 1, "release": "release_basic"}


def finmtm(n: int, text: str) -> dict:
    return {"id": f"r{n}", "messages": [{"role": "user", "content": [
                {"type": "text", "text": f"{text}: which?\nA. x\nB. y"},
                {"type": "image_url", "image_url": {"url": "img.png"}}]}],
            "choices": [{"message": {"content": [{"text": '{"answer": ["A"]}'}]}}]}


# benchmark → (file name in the folder, record n whose question holds `text`, the id a loader gives record n)
LOADERS = {
    "finmme": ("finmme.jsonl", lambda n, text: {
        "id": f"r{n}", "question_text": f"{text} bar?", "question_type": "single_choice", "options": ["a", "b"],
        "answer": "A", "image": "img.png", "knowledge_domain": "Banking"}, lambda n: f"r{n}"),
    "famma": ("famma.jsonl", famma, lambda n: f"r{n}"),
    "finmtm": ("SC.jsonl", finmtm, lambda n: f"r{n}"),
    "mme-finance": ("mme.jsonl", lambda n, text: {
        "index": n, "question": f"{text}: what is shown?", "answer": "A bar chart", "task_category": "OCR",
        "image_path": "img.png"}, lambda n: f"mmfin-{n}"),
    "finmmr": ("validation/easy_validation.json", lambda n, text: {
        "question_id": f"r{n}", "question": f"{text}: how much?", "context": "", "ground_truth": 3,
        "images": ["./MultiFinance/images/img.png"], "grade": "easy", "subfield": "bank", "language": "English"},
        lambda n: f"r{n}"),
}
# where the one bad byte goes in the second record's bytes (or before it): (old, new) on the file's bytes
PLACEMENTS = {
    "in-a-key": lambda text_key: (f'"{text_key}": '.encode(), f'"{text_key[:2]}\xff{text_key[2:]}": '.encode("latin-1")),
    "in-a-value": lambda text_key: (MARK.encode(), b"MAR\xffKED"),
    "between-records": None,  # before the second record's opening brace, after the comma
}
TEXT_KEYS = {"finmme": "question_text", "famma": "question", "finmtm": "text", "mme-finance": "question",
             "finmmr": "question"}


def write(folder: Path, name: str, form: str) -> tuple[Path, bytes]:
    """Three readable records of benchmark `name` (the second with MARK in its question) as an
    indented JSON array written with ensure_ascii=False (the downloaders' form) or as JSON lines,
    beside the image they name."""
    file_name, record, _ = LOADERS[name]
    if form == "array":
        file_name = file_name.replace(".jsonl", ".json")
    path = folder / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "img.png").write_bytes(png())
    (folder / "images").mkdir(exist_ok=True)
    (folder / "images" / "img.png").write_bytes(png())
    records = [record(n, MARK if n == 1 else "Plain é") for n in range(3)]
    if form == "array":
        data = json.dumps(records, ensure_ascii=False, indent=2).encode()
    else:
        data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)
    return path, data


def spoil(name: str, placement: str, data: bytes, form: str) -> bytes:
    """`data` with one 0xFF byte placed as asked, in or before the second record: between records,
    right after the array's comma, or on a line of its own."""
    second = data.index(MARK.encode())
    if placement == "between-records":
        start = data.rindex(b"{", 0, data.rindex(b'"r1"' if name != "mme-finance" else b'"index": 1', 0, second) + 1)
        if form == "lines":
            return data[:start] + b"\xff\n" + data[start:]
        while data[start - 1:start] in (b" ", b"\n"):  # back over the indentation, to right after the comma
            start -= 1
        assert data[start - 1:start] == b","
        return data[:start] + b"\xff" + data[start:]
    old, new = PLACEMENTS[placement](TEXT_KEYS[name])
    at = data.rindex(old, 0, second + len(MARK)) if placement == "in-a-key" else second
    assert data[at:at + len(old)] == old
    return data[:at] + new + data[at + len(old):]


CASES = [pytest.param(name, form, placement, id=f"{name}-{form}-{placement}")
         for name in LOADERS for form in (("array",) if name == "finmmr" else ("array", "lines"))
         for placement in PLACEMENTS]


@pytest.mark.parametrize("name, form, placement", CASES)
def test_one_bad_byte_fails_only_what_holds_it_in_every_json_loader(name, form, placement, tmp_path):
    path, data = write(tmp_path, name, form)
    spoiled = spoil(name, placement, data, form)
    assert spoiled.count(b"\xff") == 1
    path.write_bytes(spoiled)
    byte = spoiled.index(b"\xff")
    questions = BENCHMARKS[name].load(str(tmp_path))
    ids = LOADERS[name][2]
    errors = [q for q in questions if q.error]
    assert len(errors) == 1, [(q.id, q.error) for q in questions]
    assert f"not UTF-8 at byte {byte} (0xff)" in errors[0].error
    read = [q.id for q in questions if not q.error]
    if placement == "between-records":  # an entry of its own; all three records read
        assert len(questions) == 4 and read == [ids(0), ids(1), ids(2)]
        assert "between" in errors[0].id or ":" in errors[0].id  # `file[between 0 and 1]`, or its own line
    else:  # the second record is its error, the others read
        assert len(questions) == 3 and read == [ids(0), ids(2)]
        assert errors[0] is questions[1]
        if placement == "in-a-key" and name != "finmtm":  # (FinMTM's text key sits inside `messages`)
            assert "field name" in errors[0].error


@pytest.fixture(scope="module")
def mock_records():
    if not MOCK.exists():
        pytest.skip("../shared/data/famma/mock.json is absent")
    return json.loads(MOCK.read_text(encoding="utf-8"))


@pytest.mark.parametrize("placement", ["in-a-value", "in-a-key", "between-records"])
def test_the_issue_s_famma_file_through_finbench_run(placement, mock_records, tiny_qwen_dir, tmp_path):
    """The five real FAMMA records as the downloader writes a JSON array (ensure_ascii=False,
    indented); one 0xFF byte in the first record's question ("highest \\xff modified duration"),
    in its `question` key, or between the first and the second record."""
    data = json.dumps(mock_records, ensure_ascii=False, indent=2).encode()
    if placement == "in-a-value":
        data = data.replace(b"highest modified duration", b"highest \xff modified duration", 1)
    elif placement == "in-a-key":
        data = data.replace(b'"question": "The portfolio', b'"ques\xfftion": "The portfolio', 1)
    else:
        data = data.replace(b'},\n  {\n    "question_id": "dev_11"', b'},\xff\n  {\n    "question_id": "dev_11"', 1)
    assert data.count(b"\xff") == 1
    (tmp_path / "famma.json").write_bytes(data)
    out = tmp_path / "run"
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", "famma", "--data",
                                    str(tmp_path / "famma.json"), "--out", str(out), "--device", "cpu", "--dtype",
                                    "float32", "--max-new-tokens", "4", "--bootstrap", "0", "--no-progress"])
    assert done.exit_code == 0, done.output[-3000:]
    samples = pd.read_parquet(out / "samples.parquet").set_index("id")
    results = json.loads((out / "results.json").read_text())
    bad, byte = samples[samples["error"] != ""], data.index(b"\xff")
    assert len(bad) == 1 and f"not UTF-8 at byte {byte} (0xff)" in bad["error"].iloc[0]
    assert bad["correct"].iloc[0] == 0.0
    good = [r["question_id"] for r in mock_records] if placement == "between-records" else \
        [r["question_id"] for r in mock_records[1:]]
    assert sorted(samples[samples["error"] == ""].index) == sorted(good)
    assert results["scores"]["n"] == len(good) + 1 == len(samples)
    assert results["scores"]["n_errors"] == 1 and results["errors"]["count"] == 1
    assert [s["id"] for s in results["errors"]["samples"]] == list(bad.index)


@pytest.mark.parametrize("data, expected", [
    # a BOM counts in the offset: N is the byte's place in the file as stored
    (b'\xef\xbb\xbf[{"id": "a", "q": "x\xff"}, {"id": "b"}]', [("[0]", 23), ("[1]", None)]),
    # text after the array's end is no record, but is not dropped either
    (b'[{"id": "a"}]\n\xff\n', [("[0]", None), ("[after 0]", 14)]),
    # an encoded surrogate (ED A0 80) is a bad byte like any other, though json.loads would take it
    (b'[{"id": "a", "q": "\xed\xa0\x80"}]', [("[0]", 19)]),
])
def test_the_byte_offset_is_the_file_s(data, expected, tmp_path):
    from finbench.benchmarks.records import read_table

    (tmp_path / "d.json").write_bytes(data)
    records = read_table(tmp_path / "d.json", "").records
    assert [r.origin.removeprefix(str(tmp_path / "d.json")) for r in records] == [o for o, _ in expected]
    for record, (_, byte) in zip(records, expected):
        assert (record.error is None) if byte is None else f"not UTF-8 at byte {byte} (0x{data[byte]:02x})" in record.error
