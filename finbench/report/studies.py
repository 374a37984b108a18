"""The robustness studies as the reports show them: the majority and prior baselines (every run),
then one section per study the run made, as its declaration renders it (finbench/studies/), built
once from results.json and rendered by report.html, report.md and the console alike. Values ×100
where a header says so (accuracies, rates, shares); `retained` is a ratio (ablated / base)."""

from __future__ import annotations

from typing import Any

from finbench.core.formatting import pct
from finbench.studies import all_studies

BASELINE_NAMES = {"majority_answer": "majority answer", "always_a": "always A",
                  "most_frequent_position": "most frequent position"}
MAX_SHOWN = 30  # characters of a majority answer's text in a table cell


def _cut(text: Any) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 1] + "…"


def _with(value: Any, label: Any) -> str:
    return pct(value) + (f" ({_cut(label)})" if label not in (None, "") and value is not None else "")


def _signed(value: Any) -> str:
    return "–" if value is None else f"{100 * value:+.2f}"


def baseline_line(results: dict[str, Any]) -> str | None:
    """The line beside the headline: the best prior baseline, the model, the margin (×100)."""
    majority = results.get("majority_baseline") or {}
    found = majority.get("all")
    if not found or found.get("best_baseline") is None:
        return None
    return (f"best prior baseline per {majority.get('column') or 'question type'}: "
            f"{BASELINE_NAMES[found['best_baseline']]} {pct(found['best_accuracy'])} · model "
            f"accuracy {pct(found['model_accuracy'])} · above it {_signed(found['above_best'])} (×100, "
            f"{found['n']} choice and numerical items, each given its {majority.get('column') or 'question type'}'s prior)")


def study_lines(results: dict[str, Any]) -> list[str]:
    """The console lines of every study the run made, in the registry's order."""
    return [line for study in all_studies() if results.get(study.block)
            for line in study.console_lines(results[study.block], results.get("benchmark"))]


def study_sections(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Sections {id, title, tables: [{header, rows}], note} in report order: the baselines, then
    each study the run made."""
    sections = []
    majority = results.get("majority_baseline")
    if majority and majority.get("by_type"):
        rows = [[name, str(g["n"]), _with(g["majority_answer_accuracy"], g.get("majority_answer")),
                 pct(g["always_a_accuracy"]),
                 _with(g["most_frequent_position_accuracy"], g.get("most_frequent_position")),
                 pct(g["model_accuracy"]), BASELINE_NAMES.get(g["best_baseline"], "–"), _signed(g["above_best"])]
                for name, g in [*majority["by_type"].items(), ("all", majority["all"])]]
        sections.append({
            "id": "majority-baseline", "title": "Majority and prior baselines (accuracy ×100)",
            "tables": [{"header": [majority["column"], "n", "majority answer", "always A", "most frequent position",
                                   "model", "best baseline", "model − best"], "rows": rows}],
            "note": "Per question type: always the type's most frequent gold answer (option text or number), always "
                    "A, always the type's most frequent gold letter(s). These priors know this run's gold "
                    "distribution and nothing of the items; 'all' gives each item its type's prior."})
    for study in all_studies():
        section = study.section(results[study.block], results.get("benchmark")) if results.get(study.block) else None
        if section:
            sections.append(section)
    return sections


def compare_rows(summaries: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, one row per run) of the studies side by side, for `finbench compare` and sweeps:
    the baselines, then each study's columns (finbench/studies `headlines` of each run)."""
    header = ["run", "best baseline ×100", "model − best ×100"]
    rows = [[name, pct((s.get("majority_baseline") or {}).get("best_accuracy")),
             _signed((s.get("majority_baseline") or {}).get("above_best"))] for name, s in summaries.items()]
    for study in all_studies():
        columns, cells = study.compare_columns({name: s.get(study.block) for name, s in summaries.items()})
        header += columns
        for row, more in zip(rows, cells):
            row += more
    return header, rows
