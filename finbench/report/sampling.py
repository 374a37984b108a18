"""Repeated sampling (`--samples K`) as the reports show it: one console line and one section,
from results.json's `sampling` (scoring/sampling.py). Values ×100 except k and n; the mean's
interval is its clustered 95% interval (t with G − 1 degrees of freedom, within [0, 100])."""

from __future__ import annotations

from typing import Any

from finbench.report.format import pct

COLUMNS = ["n", "mean ×100", "95% CI (clustered) ×100", "maj@k ×100", "pass@k ×100", "agreement ×100",
           "unparsed samples"]


def _interval(found: dict[str, Any]) -> str:
    ci = found.get("ci") or {}
    return "–" if ci.get("low") is None else f"[{pct(ci['low'])}, {pct(ci['high'])}]"


def _row(found: dict[str, Any]) -> list[str]:
    return [str(found["n"]), pct(found["mean"]), _interval(found), pct(found["maj_at_k"]),
            pct(found["pass_at_k"]), pct(found["agreement"]), str(found.get("n_unparsed", "–"))]


def sampling_line(results: dict[str, Any]) -> str | None:
    found = results.get("sampling")
    if not found:
        return None
    if not found["n"]:
        unscored = found.get("n_unscored") or 0
        return (f"repeated sampling (K {found['k']}): {unscored} sampled questions, none with a per-question score "
                "(variants.parquet holds the samples)" if unscored
                else f"repeated sampling (K {found['k']}): no generated answer sampled (see the notes)")
    n, mean, interval, maj, passed, agree, unparsed = _row(found)
    return (f"repeated sampling (K {found['k']}, {n} questions, ×100): mean {mean} {interval} · maj@k {maj} · "
            f"pass@k {passed} · agreement {agree} (parsed answers; {unparsed} unparsed samples)")


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
                    "clustered 95% interval of the per-question means (t, G − 1 degrees of freedom); maj@k: the most "
                    "frequent parsed answer's score; pass@k: the best sample's; agreement: the share of a question's "
                    "parsed samples giving its modal answer (an unparsed sample is no vote)."}
