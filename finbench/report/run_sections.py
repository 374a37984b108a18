"""Two sections of a single run's report, built once from results.json and rendered by report.html
and report.md (in the shape of report/studies.py's sections) and in one console line each:

- clustered error bars (`scores.clustered`, scoring/clustered.py): per mean-type metric the iid and
  the cluster-robust SE, the design effect (their variance ratio) and the clustered 95% interval —
  questions that share an image or a session are not independent, and the iid interval is too
  narrow by √(design effect);
- cost (`cost`, runner/cost.py): tokens and seconds per kind of question, in total, and per
  correct answer.
Values ×100 where a header says so (SEs and intervals of 0–1 metrics).
"""

from __future__ import annotations

import math
from typing import Any

from finbench.benchmarks.declared import metric_label
from finbench.core.formatting import pct
from finbench.report.format import num


def _ratio(value: Any) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _count(value: Any) -> str:
    return "–" if value is None else f"{int(value):,}"


def _clustered(results: dict[str, Any]) -> dict[str, Any] | None:
    found = (results.get("scores") or {}).get("clustered")
    return found if found and found.get("metrics") else None


def clustered_line(results: dict[str, Any]) -> str | None:
    """'clustered by image (G 36): accuracy SE ×1.41 of iid (…)' for the first metric with both SEs."""
    found = _clustered(results)
    if found is None:
        return None
    for name, m in found["metrics"].items():
        if m.get("se") is not None and m.get("se_iid"):
            ci = m.get("ci") or {}
            interval = f", 95% CI [{pct(ci.get('low'))}, {pct(ci.get('high'))}]" if ci.get("low") is not None else ""
            return (f"clustered by {found['by']} (G {found['n_clusters']}): {metric_label(results.get('benchmark'), name)} SE "
                    f"×{m['se'] / m['se_iid']:.2f} of iid ({pct(m['se'])} vs {pct(m['se_iid'])} ×100, design effect "
                    f"{_ratio(m.get('design_effect'))}{interval})")
    return None


def clustered_section(results: dict[str, Any]) -> dict[str, Any] | None:
    found = _clustered(results)
    if found is None:
        return None
    rows = []
    for name, m in found["metrics"].items():
        ci = m.get("ci") or {}
        rows.append([metric_label(results.get("benchmark"), name), pct(m.get("se_iid")), pct(m.get("se")),
                     _ratio(m.get("design_effect")),
                     f"[{pct(ci.get('low'))}, {pct(ci.get('high'))}]" if ci.get("low") is not None else "–"])
    return {"id": "clustered", "title": "Clustered error bars (×100)",
            "tables": [{"header": ["metric", "iid SE", "clustered SE", "design effect",
                                   "clustered 95% CI (t, G − 1 df)"], "rows": rows}],
            "note": f"clustered by {found['by']}, {found['n_clusters']} clusters: questions of one cluster are "
                    "not independent, so the iid SE understates the uncertainty by √(design effect); the "
                    "clustered interval is the mean ± the t(G − 1) quantile × the cluster-robust SE (G the "
                    "metric's own clusters), clipped to [0, 1] for a proportion."}


def cost_section(results: dict[str, Any]) -> dict[str, Any] | None:
    cost = results.get("cost")
    if not cost or not cost.get("by_kind"):
        return None
    header = ["kind", "n", "prompt tokens", "image tokens", "generated tokens", "seconds"]
    rows = [[kind, str(c["n"]), _count(c.get("prompt_tokens")), _count(c.get("image_tokens")),
             _count(c.get("generated_tokens")), num(c.get("seconds"))]
            for kind, c in [*cost["by_kind"].items(), ("total", cost["total"])]]
    per = cost.get("per_correct") or {}
    tables = [{"header": header, "rows": rows},
              {"header": ["per correct answer", "tokens", "seconds"],
               "rows": [[f"{num(per.get('correct'))} correct", num(per.get("tokens")), num(per.get("seconds"))]]}]
    uncounted = cost["total"]["n"] - cost["total"]["n_counted"]
    return {"id": "cost", "title": "Cost", "tables": tables,
            "note": "Tokens prefilled (text and image placeholders) and generated (reasoning and answer; 0 for a "
                    "choice read from option scores) per sample, and each sample's share of its batch's seconds, "
                    "split by tokens; each distinct request once, a cached sample with the counts of the run that "
                    "computed it. Per correct answer: prompt + generated tokens and seconds over the sum of correct."
                    + (f" {uncounted} samples were cached before counts existed: their tokens are not counted."
                       if uncounted else "")}


def run_sections(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The sections above that the run has, in report order."""
    return [s for s in (clustered_section(results), cost_section(results)) if s is not None]


def cost_line(results: dict[str, Any]) -> str | None:
    """'cost: 12,345 tokens (10,000 image), 3.21 s; per correct answer 1,234 tokens, 0.32 s'."""
    cost = results.get("cost")
    if not cost or not cost.get("by_kind"):
        return None
    total, per = cost["total"], cost.get("per_correct") or {}
    prompt = total.get("prompt_tokens")
    tokens = None if prompt is None else prompt + (total.get("generated_tokens") or 0)
    return (f"cost: {_count(tokens)} tokens ({_count(total.get('image_tokens'))} image, "
            f"{_count(total.get('generated_tokens'))} generated), {num(total.get('seconds'))} s; per correct answer "
            f"{num(per.get('tokens'))} tokens, {num(per.get('seconds'))} s")
