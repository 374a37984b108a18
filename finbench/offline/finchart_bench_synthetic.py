"""Synthetic FinChart-Bench data in the official repository layout, for the demo and the tests:
`MC_data.json`, `TF_data.json`, `QA_data.json` (every published field: `image` as
`<chart>_qN.jpg`, `question`, MC `choices` as a dict A–D, `answer` a letter / "True" / "False" /
a number, QA `reasoning`) and `MC_images/`, `TF_images/`, `QA_images/` holding `<chart>.jpg`. Two
questions per chart, as in the real set; each answer is true of the drawn bars."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

from finbench.offline.mme_finance_synthetic import bar_chart

YEARS = ("2019", "2020", "2021", "2022")


def _jpeg(png: bytes) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _items(task: str, chart: str, values: list[int], rng: random.Random) -> list[dict[str, Any]]:
    """Two questions of one chart for `task`."""
    top = YEARS[values.index(max(values))]
    if task == "MC":
        order = rng.sample(YEARS, 4)
        return [{"image": f"{chart}_q{q}.jpg", "question": "Which year had the highest revenue according to the chart?",
                 "choices": dict(zip("ABCD", order)), "answer": "ABCD"[order.index(top)]} for q in (1, 2)]
    if task == "TF":
        return [{"image": f"{chart}_q1.jpg", "question": f"Revenue was highest in {top}.", "answer": "True"},
                {"image": f"{chart}_q2.jpg", "question": f"Revenue increased from {YEARS[0]} to {YEARS[-1]}.",
                 "answer": "True" if values[-1] > values[0] else "False"}]
    return [{"image": f"{chart}_q1.jpg", "question": f"What is the revenue in {YEARS[0]} ($M)?",
             "reasoning": f"The first bar reads {values[0]}.", "answer": values[0]},
            {"image": f"{chart}_q2.jpg", "question": f"What is the difference in revenue between {YEARS[-1]} and {YEARS[0]}?",
             "reasoning": f"{values[-1]} - {values[0]}.", "answer": float(values[-1] - values[0]) + 0.5}]


def write_folder(folder: str | Path, n_per_task: int = 6, seed: int = 0) -> Path:
    """A checkout-shaped folder with `n_per_task` questions per task (two per chart)."""
    rng = random.Random(seed)
    root = Path(folder)
    for task in ("MC", "TF", "QA"):
        (root / f"{task}_images").mkdir(parents=True, exist_ok=True)
        records: list[dict[str, Any]] = []
        for k in range((n_per_task + 1) // 2):
            chart = f"{1240000000 + k}_{k % 7}_crop_{k % 3}"
            values = rng.sample(range(8, 70), 4)
            (root / f"{task}_images" / f"{chart}.jpg").write_bytes(_jpeg(bar_chart(values, list(YEARS), seed=k)))
            records += _items(task, chart, values, rng)
        (root / f"{task}_data.json").write_text(json.dumps(records[:n_per_task], indent=2), encoding="utf-8")
    return root


def demo_data(folder: str | Path, n_per_task: int | None = None) -> tuple[Path, bool]:
    """`finbench demo --benchmark finchart-bench`'s data: FOLDER/finchart-bench-synthetic-N (6 per task)."""
    n = n_per_task or 6
    root = Path(folder) / f"finchart-bench-synthetic-{n}"
    if (root / "QA_data.json").exists():
        return root, False
    write_folder(root, n_per_task=n)
    return root, True
