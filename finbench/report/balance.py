"""The label balance of a run's choice items (scoring/balance.py) as the console, the reports and
the leaderboard show it: accuracy beside the constant-answer baseline, the macro-recall over the
gold labels and the lowest per-label recall, ×100 — so a score that only follows the answer key's
skew is seen at a glance."""

from __future__ import annotations

from typing import Any

from finbench.benchmarks.metrics import ACCURACY
from finbench.core.formatting import pct

LABELS = {"constant_baseline": "constant answer", "macro_recall": "macro-recall", "min_recall": "lowest label recall"}


def _balance(results_or_scores: dict[str, Any]) -> dict[str, Any] | None:
    scores = results_or_scores.get("scores", results_or_scores)
    found = scores.get("label_balance") if isinstance(scores, dict) else None
    return found if found and found.get("n") else None


def named(label: str, found: dict[str, Any]) -> str:
    """A gold label with the answer it stands for where every item shows the same one ('A = none')."""
    texts = found.get("label_texts") or {}
    letter = label.rsplit(" ", 1)[-1]  # 'single A' where a run has several answer types
    return f"{label} = {texts[letter]}" if letter in texts else label


def balance_line(results: dict[str, Any]) -> str | None:
    """The console line for choice items, or None where the run has none."""
    found = _balance(results)
    if found is None:
        return None
    answers = ", ".join(f"{t} {named(a, found)}" if len(found["constant_answers"]) > 1 else named(a, found)
                        for t, a in found["constant_answers"].items())
    return (f"choice items (n {found['n']}, ×100): accuracy {pct(found[ACCURACY.key])} · constant answer "
            f"{pct(found['constant_baseline'])} (always {answers}), one answer per {found['answer_type']} · "
            f"macro-recall {pct(found['macro_recall'])} · lowest label recall {pct(found['min_recall'])} "
            f"({named(found['min_recall_label'], found)})")


def balance_sections(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's section {id, title, tables, note}: per answer type and over all, then each
    label's recall."""
    found = _balance(results)
    if found is None:
        return []
    header = [found["answer_type"], "n", ACCURACY.label, "constant answer", "constant-answer baseline", "macro-recall",
              "lowest recall (label)"]
    rows = [[name, str(g["n"]), pct(g[ACCURACY.key]), named(g["constant_answer"], found), pct(g["constant_baseline"]),
             pct(g["macro_recall"]), f"{pct(g['min_recall'])} ({named(g['min_recall_label'], found)})"]
            for name, g in found["by_type"].items()]
    rows.append(["all", str(found["n"]), pct(found[ACCURACY.key]), "", pct(found["constant_baseline"]),
                 pct(found["macro_recall"]), f"{pct(found['min_recall'])} ({named(found['min_recall_label'], found)})"])
    labels = [[name, named(label, found), str(r["n"]), pct(r["recall"])] for name, g in found["by_type"].items()
              for label, r in g["recall"].items()]
    return [{"id": "label-balance", "title": "What accuracy hides: label balance of the choice items (×100)",
             "tables": [{"header": header, "rows": rows},
                        {"header": [found["answer_type"], "gold label", "n", "recall"], "rows": labels}],
             "note": "Constant answer: always the most frequent gold label of each answer type. Recall of a label: "
                     "the share of its items judged right; macro-recall is their unweighted mean. A model near the "
                     "constant baseline with one label's recall near 0 follows the answer key's skew."}]


def balance_headlines(scores: dict[str, Any]) -> list[dict[str, Any]]:
    """Leaderboard headlines (the shape of report/format.py `run_headlines`) beside the run's own."""
    found = _balance(scores)
    if found is None:
        return []
    return [{"metric": key, "label": LABELS[key], "value": 100.0 * found[key], "low": None, "high": None,
             "n": found["n"], "full": 100.0} for key in LABELS]
