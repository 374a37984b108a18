"""Repeated sampling (`--samples K`) as the reports show it: one console line and one section,
from results.json's `sampling` (scoring/sampling.py). Values ×100 except k, n and the SE's
interval half-width, which is ×100 too."""

from __future__ import annotations

from typing import Any

from finbench.report.format import pct

COLUMNS = ["n", "mean ×100", "± 1.96·SE ×100", "maj@k ×100", "pass@k ×100", "agreement ×100"]


def _row(found: dict[str, Any]) -> list[str]:
    se = found.get("se")
    return [str(found["n"]), pct(found["mean"]), "–" if se is None else pct(1.96 * se), pct(found["maj_at_k"]),
            pct(found["pass_at_k"]), pct(found["agreement"])]


def sampling_line(results: dict[str, Any]) -> str | None:
    found = results.get("sampling")
    if not found:
        return None
    if not found["n"]:
        unscored = found.get("n_unscored") or 0
        return (f"repeated sampling (K {found['k']}): {unscored} sampled questions, none with a per-question score "
                "(variants.parquet holds the samples)" if unscored
                else f"repeated sampling (K {found['k']}): no generated answer sampled (see the notes)")
    n, mean, half, maj, passed, agree = _row(found)
    return (f"repeated sampling (K {found['k']}, {n} questions, ×100): mean {mean} ± {half} · maj@k {maj} · "
            f"pass@k {passed} · agreement {agree}")


def sampling_section(results: dict[str, Any]) -> dict[str, Any] | None:
    """The report section {id, title, tables, note}: overall, then every breakdown's groups."""
    found = results.get("sampling")
    if not found:
        return None
    tables = [{"header": ["", *COLUMNS], "rows": [["all", *_row(found)]]}]
    for column, groups in (found.get("by") or {}).items():
        tables.append({"header": [column, *COLUMNS], "rows": [[g, *_row(v)] for g, v in groups.items()]})
    return {"id": "sampling", "title": f"Repeated sampling (K = {found['k']})", "tables": tables,
            "note": "Every generated answer asked K times with seeds seed…seed+K−1. mean: over all samples, with the "
                    "95% half-width of its SE (within-question variance included); maj@k: the most frequent answer's "
                    "score; pass@k: the best sample's; agreement: the share of samples giving the modal answer."}
