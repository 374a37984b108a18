"""Synthetic FinMMR data in the official repository layout, for the demo and the tests:
`data/validation/<grade>_validation.json` records (every published field: question_id,
question, context with its `<image n>` markers, images as `./MultiFinance/images/NAME`,
ground_images, ground_truth as a number, python_solution, source, subfield, grade, language,
img_type as the string of a Python list) and `images/`. Each chart is a small bar chart drawn
with PIL; its ground truth is true of the drawn values, so a real model could answer it."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from finbench.offline.mme_finance_synthetic import bar_chart

GRADES = ("Easy", "Medium", "Hard")
SUBFIELDS = ("accounting", "corporate", "strategy", "banking")
SOURCES = ("CRRQA", "FinQA", "TAT-QA")


def _item(grade: str, k: int, rng: random.Random) -> tuple[dict[str, Any], dict[str, bytes]]:
    n_images = 1 + (k + GRADES.index(grade)) % 2
    values = [[rng.randint(5, 60) for _ in range(3)] for _ in range(n_images)]
    labels = ["A", "B", "C"]
    stem = f"{grade.lower()}{k}"
    images = {f"{stem}-{j + 1}.png": bar_chart(v, labels, seed=k * 7 + j) for j, v in enumerate(values)}
    english = k % 2 == 0
    total = sum(sum(v) for v in values)
    question = (f"What is the total of all bars in the chart{'s' if n_images > 1 else ''}?" if english
                else f"请计算图中所有柱形的数值总和。")
    truth: float | int = total if grade == "Easy" else round(total / n_images / 3, 2)
    if grade != "Easy":
        question = ("What is the average bar value? Answer to two decimal places." if english
                    else "请计算柱形的平均值，保留两位小数。")
    context = "".join(f"<image {j + 1}>\n" for j in range(n_images)) + (
        "Bars are in millions." if english else "单位：百万元。")
    names = [f"./MultiFinance/images/{name}" for name in images]
    record = {"question_id": f"{grade.lower()}-validation-{k}", "question": question, "context": context,
              "images": names, "ground_images": names[:1], "ground_truth": truth,
              "python_solution": f"def solution():\n    return {truth!r}", "source": SOURCES[k % len(SOURCES)],
              "subfield": SUBFIELDS[k % len(SUBFIELDS)], "grade": grade, "language": "English" if english else "Chinese",
              "img_type": "['Plots and Charts']"}
    return record, images


def write_folder(folder: str | Path, n_per_grade: int = 4, seed: int = 0) -> Path:
    """A checkout-shaped folder: data/validation/ and images/ (give `--data FOLDER/data/validation`
    or a file of it; a checkout root reads its test split, which this folder does not have)."""
    rng = random.Random(seed)
    root = Path(folder)
    (root / "data" / "validation").mkdir(parents=True, exist_ok=True)
    (root / "images").mkdir(exist_ok=True)
    for grade in GRADES:
        records = []
        for k in range(n_per_grade):
            record, images = _item(grade, k, rng)
            records.append(record)
            for name, data in images.items():
                (root / "images" / name).write_bytes(data)
        path = root / "data" / "validation" / f"{grade.lower()}_validation.json"
        path.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    return root


def demo_data(folder: str | Path, n_per_grade: int | None = None) -> tuple[Path, bool]:
    """`finbench demo --benchmark finmmr`'s data: FOLDER/finmmr-synthetic-N/data/validation (N
    items per difficulty, 4)."""
    n = n_per_grade or 4
    root = Path(folder) / f"finmmr-synthetic-{n}"
    data = root / "data" / "validation"
    if (data / "hard_validation.json").exists():
        return data, False
    write_folder(root, n_per_grade=n)
    return data, True
