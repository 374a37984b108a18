"""A custom file's problems refuse the run at start-up (benchmarks/custom): one bad file per refusal,
each written here, refused by `finbench run` in at most two lines that name the file and the row's
id, before any model loads, with nothing written (no run folder, no results.json); `finbench data
check` lists every problem by row. A good file checks clean beside them."""

from __future__ import annotations

import base64
import io
import json

import pytest
from helpers import cli


def png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def _csv(folder, name, header, rows):
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pd.DataFrame(rows, columns=header).to_csv(path, index=False)
    return path


FOUR = json.dumps(["10", "20", "30", "40"])
HEADER = ["id", "question", "options", "answer"]
WITH_IMAGE = [*HEADER, "image"]


def _broken_png(folder):
    (folder / "broken.png").write_bytes(b"\x89PNG but not really an image")


def _placeholder_row() -> list[str]:
    return ["q12", "Compare <image 1> with <image 2>.", FOUR, "B",
            "data:image/png;base64," + base64.b64encode(png()).decode()]


# name: (file, header, rows, the row it names (None: the file alone), the refusal, what to write beside it)
CASES = {
    "empty_csv": ("empty.csv", HEADER, [], None, "no rows (read as CSV", None),
    "missing_question": ("noq.csv", ["id", "questions", "options", "answer"], [["q1", "What?", FOUR, "A"]], None,
                         "no 'question' column (columns: 'id', 'questions', 'options', 'answer'); nearest: 'questions'",
                         None),
    "duplicate_ids": ("dup.csv", HEADER, [["q1", "What?", FOUR, "A"], ["q2", "Why?", FOUR, "B"],
                                          ["q2", "Who?", FOUR, "C"]], "'q2'", "duplicate id", None),
    "gold_not_an_option": ("gold.csv", HEADER, [["q1", "What?", FOUR, "A"], ["q7", "Why?", FOUR, "E"]], "'q7'",
                           "gold 'E' is not among the 4 options (A–D)", None),
    "gold_an_unknown_text": ("text.csv", HEADER, [["q1", "What?", FOUR, "fifty"]], "'q1'",
                             "gold 'fifty' is not among the 4 options", None),
    "gold_ambiguous": ("ambiguous.csv", HEADER, [["q3", "What?", json.dumps(["Yes", "no", "YES "]), "yes"]], "'q3'",
                       "gold 'yes' is the text of options A, C: ambiguous", None),
    "one_option": ("one.csv", HEADER, [["q4", "What?", json.dumps(["only"]), "A"]], "'q4'",
                   "1 option: an item has 2–14", None),
    "fifteen_options": ("many.csv", HEADER, [["q5", "What?", json.dumps([str(k) for k in range(15)]), "A"]], "'q5'",
                        "15 options: an item has 2–14", None),
    "option_gap": ("gap.csv", ["id", "question", "A", "B", "C", "answer"], [["q6", "What?", "1", "", "3", "A"]], "'q6'",
                   "option column 'B' is empty but 'C' is not", None),
    "missing_image": ("image.csv", WITH_IMAGE, [["q8", "What?", FOUR, "A", "charts/nowhere.png"]], "'q8'",
                      "image file 'charts/nowhere.png' does not exist", None),
    "unreadable_image": ("unreadable.csv", WITH_IMAGE, [["q9", "What?", FOUR, "A", "broken.png"]], "'q9'",
                         "image 'broken.png' does not decode as an image", _broken_png),
    "http_image": ("http.csv", WITH_IMAGE, [["q10", "What?", FOUR, "A", "https://example.com/chart.png"]], "'q10'",
                   "is a URL: finbench runs offline — download the images and give their folder with --image-root",
                   None),
    "numeric_gold": ("number.csv", ["id", "question", "answer", "tolerance"],
                     [["q11", "How much?", "about five", "abs=0.5"]], "'q11'", "numeric gold 'about five' is not a number",
                     None),
    "placeholder": ("placeholder.csv", WITH_IMAGE, [_placeholder_row()], "'q12'",
                    "the question names <image 2> but the row has 1 image", None),
}
ROW_CASES = [name for name, case in CASES.items() if case[3] is not None]


def write(name: str, folder):
    """(the bad file, the row it names, the refusal) of case `name`; `empty_jsonl`: a 0-byte JSONL."""
    folder.mkdir(parents=True, exist_ok=True)
    if name == "empty_jsonl":
        (folder / "empty.jsonl").write_text("")
        return folder / "empty.jsonl", None, "no rows (read as JSON lines"
    file, header, rows, row, message, beside = CASES[name]
    if beside is not None:
        beside(folder)
    return _csv(folder, file, header, rows), row, message


def _lines(done) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


@pytest.mark.parametrize("name", [*CASES, "empty_jsonl"])
def test_a_bad_file_is_refused_in_two_lines_naming_the_file_and_row_before_any_model_loads(
        name, tiny_qwen_dir, tmp_path, no_model):
    path, row, message = write(name, tmp_path / "data")
    out = tmp_path / "run"
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "custom", "--data", str(path), "--out", str(out),
               "--device", "cpu", "--no-progress")
    lines = _lines(done)
    assert done.returncode == 2, lines
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error:"), lines
    assert str(path) in lines[0] and message in lines[0], lines
    if row is not None:
        assert f"row {row}" in lines[0], lines
    assert not out.exists()  # no run folder, no results.json


@pytest.mark.parametrize("name", ROW_CASES)
def test_data_check_lists_the_problem_by_row(name, tmp_path):
    path, row, message = write(name, tmp_path / "data")
    done = cli("data", "check", "--benchmark", "custom", str(path))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    listed = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith(f"{path}, row {row}")]
    assert len(listed) == 1 and message in listed[0], done.stdout[-3000:]


def test_several_problems_are_refused_with_the_first_and_a_count(tmp_path, tiny_qwen_dir, no_model):
    rows = [["q1", "What?", FOUR, "Z"], ["q2", "Why?", FOUR, "B"], ["q2", "Who?", FOUR, "C"],
            ["q3", "How?", json.dumps(["x"]), "A"]]
    path = _csv(tmp_path, "three.csv", HEADER, rows)
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "custom", "--data", str(path),
               "--out", str(tmp_path / "run"), "--device", "cpu")
    lines = _lines(done)
    assert done.returncode == 2 and len(lines) == 2, lines
    assert "row 'q1': gold 'Z'" in lines[0] and "(and 2 more problems:" in lines[1] and "data check" in lines[1]
    check = cli("data", "check", "--benchmark", "custom", str(path))
    assert check.returncode == 1 and "problems (3; each refuses `finbench run` at start-up)" in check.stdout


def test_an_unreadable_file_and_a_spec_that_names_a_missing_column_are_one_line(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "a", "answer": "b"}\n{not json\n')
    done = cli("data", "check", "--benchmark", "custom", str(broken))
    assert done.returncode == 2 and f"{broken}: cannot be read as JSON lines" in done.stderr
    data = _csv(tmp_path, "mine.csv", ["prompt", "label"], [["What?", "yes"]])
    spec = tmp_path / "spec.yaml"
    spec.write_text("question: prompt\nanswer: gold_label\n")
    done = cli("data", "check", "--benchmark", "custom", str(data), "--spec", str(spec))
    assert done.returncode == 2 and len(_lines(done)) == 1, _lines(done)
    assert "--spec names column 'gold_label' for answer, which the file lacks (columns: 'prompt', 'label')" in done.stderr
    spec.write_text("question: prompt\nanswers: label\n")
    done = cli("data", "check", "--benchmark", "custom", str(data), "--spec", str(spec))
    assert done.returncode == 2 and "unknown key(s) answers" in done.stderr
    spec.write_text("question: prompt\nanswer: label\n")
    assert cli("data", "check", "--benchmark", "custom", str(data), "--spec", str(spec)).returncode == 0


def test_spec_and_image_root_are_refused_for_a_benchmark_that_does_not_read_them(tmp_path, tiny_qwen_dir, no_model):
    spec = tmp_path / "spec.yaml"
    spec.write_text("question: prompt\n")
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finmme", "--spec", str(spec),
               "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and _lines(done) == ["error: --spec: finmme does not read it (read by: custom)"]
    done = cli("data", "check", "--benchmark", "finmme", str(tmp_path), "--image-root", str(tmp_path))
    assert done.returncode == 2 and _lines(done) == ["error: --image-root: finmme does not read it (read by: custom)"]
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "custom", "--data", str(spec),
               "--spec", str(tmp_path / "nowhere.yaml"), "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and f"--spec {tmp_path / 'nowhere.yaml'}: no such file" in done.stderr
