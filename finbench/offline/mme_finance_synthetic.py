"""Synthetic MME-Finance data in the official VLMEvalKit layout, for the demo and the tests:
`MMfin.tsv` (English open questions), `MMfin_CN.tsv` (Chinese), `MMfin_Binary.tsv` (是/否), the
images under `images/<set>/`, every field the fork reads (index, image_path, question, answer,
task_category, image_type, image_style, background). Charts are small bar charts drawn with PIL;
their answers are true of the drawn values, so a real model could answer them."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path
from typing import Any

CATEGORIES = ("OCR", "Entity Recognition", "Spatial Awareness", "Accurate Numerical Calculation",
              "Numerical Calculation", "Image Caption", "Financial Knowledge", "Not Applicable")
IMAGE_TYPES = ("Statistical chart", "Table", "Candlestick chart")
IMAGE_STYLES = ("Computer Screenshot", "Mobile Photograph")
COLUMNS = ("index", "image_path", "question", "answer", "task_category", "image_type", "image_style", "background")


def bar_chart(values: list[int], labels: list[str], seed: int) -> bytes:
    """A PNG bar chart of `values` (64×48 px bars on white), labels under the bars."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (32 * len(values) + 16, 96), "white")
    draw = ImageDraw.Draw(image)
    colour = random.Random(seed).choice([(31, 119, 180), (214, 39, 40), (44, 160, 44)])
    for k, (value, label) in enumerate(zip(values, labels)):
        x = 8 + 32 * k
        draw.rectangle([x, 80 - value, x + 20, 80], fill=colour)
        draw.text((x, 82), label, fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _open_items(language: str, n: int, rng: random.Random) -> list[dict[str, Any]]:
    items = []
    for k in range(n):
        values = [rng.randint(10, 70) for _ in range(4)]
        quarters = ["Q1", "Q2", "Q3", "Q4"]
        best = quarters[values.index(max(values))]
        category = CATEGORIES[k % len(CATEGORIES)]
        if language == "en":
            question, answer = {
                "OCR": ("What is the revenue in Q2?", str(values[1])),
                "Entity Recognition": ("Which periods are shown on the horizontal axis?", "Q1<AND>Q2<AND>Q3<AND>Q4"),
                "Spatial Awareness": ("Which quarter has the highest revenue?", best),
                "Accurate Numerical Calculation": ("What is the total revenue of Q1 and Q2?", str(values[0] + values[1])),
                "Numerical Calculation": ("By how much did revenue change from Q1 to Q4?", str(values[3] - values[0])),
                "Image Caption": ("What does the image depict?", "A bar chart of quarterly revenue, Q1 to Q4."),
                "Financial Knowledge": ("Explain what revenue is.", "Revenue is the income from sales of goods and services."),
                "Not Applicable": ("What is the dividend yield shown in the chart?", "Not Applicable"),
            }[category]
        else:
            question, answer = {
                "OCR": ("第二季度的营收是多少？", str(values[1])),
                "Entity Recognition": ("横轴显示了哪些时期？", "Q1<AND>Q2<AND>Q3<AND>Q4"),
                "Spatial Awareness": ("哪个季度的营收最高？", best),
                "Accurate Numerical Calculation": ("第一和第二季度的营收合计是多少？", str(values[0] + values[1])),
                "Numerical Calculation": ("从第一季度到第四季度营收变化了多少？", str(values[3] - values[0])),
                "Image Caption": ("图中展示了什么内容？", "一张按季度展示营收的柱状图。"),
                "Financial Knowledge": ("解释什么是营收。", "营收是销售商品和服务获得的收入。"),
                "Not Applicable": ("图中显示的股息率是多少？", "不适用"),
            }[category]
        items.append({"values": values, "labels": quarters, "question": question, "answer": answer,
                      "task_category": category, "image_type": IMAGE_TYPES[k % len(IMAGE_TYPES)],
                      "image_style": IMAGE_STYLES[k % len(IMAGE_STYLES)],
                      "background": "" if k % 3 else ("Revenue in millions." if language == "en" else "营收单位为百万。")})
    return items


def _binary_items(n: int, rng: random.Random) -> list[dict[str, Any]]:
    items = []
    for k in range(n):
        values = [rng.randint(10, 70) for _ in range(4)]
        claim_true = k % 2 == 0
        shown = max(values) if claim_true else min(values)
        items.append({"values": values, "labels": ["Q1", "Q2", "Q3", "Q4"],
                      "question": f"图中最高的柱子数值是{shown}吗？请回答是或否。", "answer": "是" if claim_true else "否",
                      "task_category": "Binary", "image_type": "Statistical chart", "image_style": "Computer Screenshot",
                      "background": ""})
    return items


def write_tsv_set(folder: str | Path, name: str, items: list[dict[str, Any]]) -> Path:
    """`<folder>/<name>.tsv` and its images under `<folder>/images/<name>/`."""
    folder = Path(folder)
    images = folder / "images" / name
    images.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.tsv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE, escapechar="\\")
        writer.writerow(COLUMNS)
        for index, item in enumerate(items):
            file = f"{name.lower()}_{index:03d}.png"
            (images / file).write_bytes(bar_chart(item["values"], item["labels"], index))
            writer.writerow([index, file] + [item[c] for c in COLUMNS[2:]])
    return path


def write_folder(folder: str | Path, n_open: int = 8, n_binary: int = 6, seed: int = 0) -> Path:
    """The three sets in one folder (what `--data FOLDER` reads)."""
    rng = random.Random(seed)
    write_tsv_set(folder, "MMfin", _open_items("en", n_open, rng))
    write_tsv_set(folder, "MMfin_CN", _open_items("zh", n_open, rng))
    write_tsv_set(folder, "MMfin_Binary", _binary_items(n_binary, rng))
    return Path(folder)


def demo_data(folder: str | Path, n_open: int | None = None) -> tuple[Path, bool]:
    """`finbench demo --benchmark mme-finance`'s data: FOLDER/mme-finance-synthetic-N with the three
    sets (N open questions per language, 8; 6 binary items), the official layout."""
    n = n_open or 8
    path = Path(folder) / f"mme-finance-synthetic-{n}"
    if (path / "MMfin_Binary.tsv").exists():
        return path, False
    return write_folder(path, n_open=n), True
