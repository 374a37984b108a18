"""Synthetic FCMR data in the official repository layout, for the demo and the tests:
`dataset/<grade>/<grade>_data.csv` (every published column), `chart_images/<filename>.png`,
`<grade>_test_table_modality/table_modality_<anchor_num>.csv` (a Compustat-like table: conm, year,
tic and two value columns) and `<grade>_test_text_modality_chunk/anchor_table_test_<anchor_num>_text.txt`
(a "<COMPANY> report:" chunk). The statements are true or false of the drawn table and chart; the
gold sets cycle through all eight."""

from __future__ import annotations

import csv
import random
from pathlib import Path

from finbench.offline.mme_finance_synthetic import bar_chart

GRADES = ("easy", "medium", "hard")
SETS = ("none", "1", "2", "3", "1, 2", "1, 3", "2, 3", "1, 2, 3")
COMPANIES = ("ACME CORP", "GLOBEX INC", "INITECH LLC")
COLUMNS = ("anchor_num", "filename", "correct_answer", "option1", "option2", "option3", "chart_column", "trend_year",
           "ranking_year", "option_type", "modality_order_type", "library", "chart_type")


def _statements(truth: set[int], values: dict[str, int], company: str) -> list[str]:
    best = max(values, key=values.get)
    worst = min(values, key=values.get)
    return [f"{best if 1 in truth else worst} holds the largest at value in 2022.",
            f"The at value of {company} in 2022 is {values[company] if 2 in truth else values[company] + 7}.0.",
            f"{company} reports {'a' if 3 in truth else 'no'} risk from privately held investments."]


def write_folder(folder: str | Path, n_per_grade: int = 4, seed: int = 0) -> Path:
    """A checkout-shaped folder (give `--data FOLDER`)."""
    rng = random.Random(seed)
    root = Path(folder)
    for g, grade in enumerate(GRADES):
        base = root / "dataset" / grade
        for sub in ("chart_images", f"{grade}_test_table_modality", f"{grade}_test_text_modality_chunk"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        rows = []
        for k in range(n_per_grade):
            anchor = 100 * (g + 1) + k
            values = {c: rng.randint(10, 70) for c in COMPANIES}
            company = COMPANIES[k % len(COMPANIES)]
            answer = SETS[(k + 3 * g) % len(SETS)]
            truth = set() if answer == "none" else {int(x) for x in answer.split(", ")}
            name = f"chart{grade}{k:02d}.png"
            (base / "chart_images" / name).write_bytes(bar_chart(list(values.values()), ["A", "G", "I"], seed=anchor))
            with open(base / f"{grade}_test_table_modality" / f"table_modality_{anchor}.csv", "w", newline="",
                      encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow(["conm", "year", "tic", "at", "lct"])
                writer.writerows([c, "2022", c[:3], f"{v}.0", f"{v // 2}.0"] for c, v in values.items())
            text = f"{company} report:\n" + ("All of our investments, particularly those in privately held companies, "
                                             "are subject to a risk of loss." if 3 in truth else "We hold no private investments.")
            (base / f"{grade}_test_text_modality_chunk" / f"anchor_table_test_{anchor}_text.txt").write_text(text, encoding="utf-8")
            rows.append([anchor, name, answer, *_statements(truth, values, company), "at", "(2019, 2023)", "2022",
                         "{'Text': 'Only_Text', 'Table': 'Arithmetic', 'Chart': 'Ranking'}", "table, chart, text",
                         "matplotlib", ("bar", "line", "scatter")[k % 3]])
        with open(base / f"{grade}_data.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            writer.writerows(rows)
    return root


def demo_data(folder: str | Path, n_per_grade: int | None = None) -> tuple[Path, bool]:
    """`finbench demo --benchmark fcmr`'s data: FOLDER/fcmr-synthetic-N (N items per difficulty, 4)."""
    n = n_per_grade or 4
    root = Path(folder) / f"fcmr-synthetic-{n}"
    if (root / "dataset" / "hard" / "hard_data.csv").exists():
        return root, False
    write_folder(root, n_per_grade=n)
    return root, True
