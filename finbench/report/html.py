"""`report.html`: one self-contained page per run (and one per sweep or leaderboard) — inline CSS and JS, plots
and thumbnails as data URIs, nothing fetched from the network.

A run's page: headline scores with bootstrap CIs; the parts a rule scores apart (its `Scorer.parts`: FinMTM's dialogue
and agent, with n and CIs, or why a part is unscored); a bar chart with CI whiskers for the
headline (a penalty such as P_H in its own panel) and for every breakdown (breakdown whiskers are
95% Wilson intervals of the group's accuracy: the run's bootstrap covers the headline numbers
only); the reliability diagram and the selective-
prediction curve, both from the `confidence` column; throughput by stage; a per-sample browser
(thumbnail, question, options with probabilities, prediction, gold, reasoning, error) filterable by
domain, kind, correctness and confidence; the run's configuration and model fingerprint.

Thumbnails: samples.parquet holds no images (it stays small). The run writes 96-px JPEGs of its
first questions' images into its folder (thumbnails.parquet, report/thumbnails.py) and the page
embeds them; a run folder without them (written before they were) shows the text only. Built from
the run folder alone (`finbench report RUN_DIR`), never the data, so it can be rebuilt anywhere. Values are stored on 0–1 and
shown ×100 where a column or axis says so. The plots are drawn by report/plots.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from finbench.benchmarks.declared import metric_labels, penalties
from finbench.benchmarks.metrics import ACCURACY
from finbench.core.encodable import write_text
from finbench.core.formatting import pct
from finbench.core.types import OPTION_LETTERS
from finbench.report.balance import balance_sections
from finbench.report.format import (bootstrap_label, headline_score, num, part_cells, power_line, quantization_study,
                                    scored_by, scored_parts)
from finbench.report.markdown import write_markdown
from finbench.report.plots import (breakdown_figure, flip_figure, headline_figure, kl_figure, leaderboard_figure,
                                   part_figure, png_uri, reasoning_figure, reliability_figure, selective_figure,
                                   stages_figure, tradeoff_figure)
from finbench.report.run_sections import run_sections
from finbench.report.studies import baseline_line, compare_rows, study_sections
from finbench.report.thumbnails import read_thumbnails

MAX_BROWSER_ROWS = 5000  # beyond this the page gets slow; the rest is in samples.parquet
TEMPLATES = Path(__file__).parent / "templates"


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = pct
    env.filters["num"] = num
    return env


def _script_json(payload: Any) -> str:
    """JSON safe inside <script>: no '</' can close the tag early."""
    return json.dumps(payload, default=str, allow_nan=False).replace("</", "<\\/")


# ---- run report -----------------------------------------------------------------------------
def write_report(run_dir: str | Path) -> Path:
    """Render RUN_DIR/report.html (and RUN_DIR/report.md) from the run's results and samples."""
    import pandas as pd

    run_dir = Path(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    samples = pd.read_parquet(run_dir / "samples.parquet")
    scores = results["scores"]
    rows = _browser_rows(samples, read_thumbnails(run_dir))  # written by the run: the data is never re-read
    page = _environment().get_template("run.html.j2").render(
        results=results, scores=scores, labels=metric_labels(results["benchmark"], scores.get("headline", [])),
        ci_label=bootstrap_label(scores),
        plots=_uris(run_figures(results)), parts=part_rows(scores), headline=headline_score(scores), scored_by=scored_by(scores),
        penalties=penalties(results["benchmark"], scores.get("headline", [])),
        studies=study_sections(results) + balance_sections(results) + run_sections(results), baseline=baseline_line(results),
        browser_json=_script_json(rows), n_browser=len(rows), n_samples=len(samples),
        domains=sorted({r["domain"] for r in rows}), kinds=sorted({r["kind"] for r in rows}),
        errors=samples.loc[samples["error"].astype(str) != "", ["id", "error"]].head(200).to_dict("records"),
        throughput=results.get("throughput", {}),
        config_json=json.dumps(results.get("config", {}), indent=2, default=str),
        fingerprint_json=json.dumps(results.get("fingerprint", {}), indent=2, default=str))
    path = run_dir / "report.html"
    _write(path, page)
    write_markdown(run_dir, results)
    return path


def run_figures(results: dict[str, Any]) -> dict[str, Any]:
    """name → Figure of every plot of a run's page (those with nothing to draw left out)."""
    scores = results["scores"]
    figures = {"headline": headline_figure(scores)}
    for part, found in scored_parts(scores):
        figures[part.figure] = part_figure(part, found)
    for column, groups in scores.get("breakdowns", {}).items():
        figures[f"by {column}"] = breakdown_figure(column, groups)
    if scores.get("calibration"):
        figures["reliability"] = reliability_figure(scores["calibration"])
    if scores.get("selective"):
        figures["selective"] = selective_figure(scores["selective"], scores.get("primary", ACCURACY.key), results["benchmark"])
    if results.get("throughput", {}).get("stages_s"):
        figures["throughput by stage"] = stages_figure(results["throughput"]["stages_s"])
    return {name: figure for name, figure in figures.items() if figure is not None}


def _uris(figures: dict[str, Any]) -> dict[str, str]:
    return {name: png_uri(figure) for name, figure in figures.items()}


def part_rows(scores: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts the benchmark's rule scores apart (its `Scorer.parts`) as the page shows them: a
    title, n, one row per metric (value and CI on the metric's own scale), or the line saying why
    the part is unscored."""
    out = []
    for part, found in scored_parts(scores):
        rows = [{"metric": label, "value": value, "ci": ci} for label, value, ci in part_cells(part, found)]
        out.append({"part": part.name, "title": part.title, "n": found.get("n"), "n_scored": found.get("n_scored"),
                    "n_errors": found.get("n_errors", 0), "unscored": found.get("unscored"),
                    "scale": found.get("scale"), "rows": rows if found.get("n_scored") else [],
                    "by_level": found.get("by_level") or {}})
    return out


def _write(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    write_text(temporary, text)  # what UTF-8 cannot encode (a lone surrogate in a reply) written escaped
    temporary.replace(path)


def option_label(letter: str, text: str) -> str:
    """An option as the sample browser shows it: 'A. text', or the text alone where it already
    begins with its own letter ('A. Government bonds', 'A) …', '(A) …', 'A：…'), as some data
    sets store their options."""
    return text if re.match(rf"\s*\(?{re.escape(letter)}\s*[.)、:：]", text) else f"{letter}. {text}"


def _browser_rows(samples: Any, thumbnails: dict[str, str]) -> list[dict[str, Any]]:
    import numpy as np

    def clean(value: Any) -> Any:
        if isinstance(value, (float, np.floating)):
            return None if math.isnan(value) else float(value)
        if isinstance(value, (np.integer,)):
            return int(value)
        return value

    rows = []
    for record in samples.head(MAX_BROWSER_ROWS).to_dict("records"):
        probs = record.get("option_probs")
        rows.append({
            "id": str(record.get("id", "")), "kind": str(record.get("kind", "")),
            "domain": str(record.get("domain", "") or ""), "question": str(record.get("question", "") or ""),
            "options": [option_label(letter, str(o)) for letter, o in  # lettered once (option_label)
                        zip(OPTION_LETTERS, record.get("options") if record.get("options") is not None else [])],
            "probs": [float(p) for p in probs] if probs is not None else [],
            "answer": str(record.get("answer", "")), "gold": str(record.get("gold", "")),
            "correct": clean(record.get("correct")), "confidence": clean(record.get("confidence")),
            "reasoning": str(record.get("reasoning_text", "") or ""),
            "reasoning_tokens": clean(record.get("reasoning_tokens", 0)),
            "budget_cut": bool(record.get("budget_cut", False)),
            "error": str(record.get("error", "") or ""), "thumb": thumbnails.get(str(record.get("id")), ""),
        })
    return rows


# ---- sweep report ---------------------------------------------------------------------------
def _sweep_metrics(summary: dict[str, Any]) -> list[str]:
    """The metrics a sweep's page names: its headline, and the quantization study's primary."""
    study = quantization_study(summary)
    return list(summary["comparison"]["headline"]) + ([study[0]["primary"]] if study else [])


def write_sweep_report(out: str | Path, summary: dict[str, Any]) -> Path:
    """Render OUT/report.html of a sweep from its summary (sweep.json's content)."""
    out = Path(out)
    variants = summary["variants"]
    comparisons = {c["run"]: c for c in summary["comparison"]["comparisons"]}
    page = _environment().get_template("sweep.html.j2").render(
        summary=summary, variants=variants, comparisons=comparisons,
        labels=metric_labels(summary.get("benchmark"), _sweep_metrics(summary)),
        study=quantization_study(summary),
        headline=summary["comparison"]["headline"], plots=_uris(sweep_figures(summary)),
        distributions=summary["distributions"], flips=summary["flip_matrix"],
        robustness=compare_rows({v["name"]: v.get("studies") or {} for v in variants})
        if any(v.get("studies") for v in variants) else None,
        power=[line for line in (power_line(c, check=True) for c in summary["comparison"]["comparisons"]) if line],
        browser_json=_script_json([]), out=out)
    path = out / "report.html"
    _write(path, page)
    return path


def sweep_figures(summary: dict[str, Any]) -> dict[str, Any]:
    variants = summary["variants"]
    figures = {"accuracy vs memory": tradeoff_figure(variants, "model_memory_gib", "model memory (GiB)"),
               "accuracy vs speed": tradeoff_figure(variants, "samples_per_s", "samples/s (run that computed them)"),
               "flip matrix": flip_figure(summary["flip_matrix"]),
               "KL per domain": kl_figure(summary["distributions"])}
    if any(v.get("reasoning_tokens_mean") for v in variants):
        figures["accuracy vs reasoning tokens"] = reasoning_figure(variants)
    return {name: figure for name, figure in figures.items() if figure is not None}


# ---- leaderboard ----------------------------------------------------------------------------
def write_leaderboard_report(board: dict[str, Any], path: str | Path) -> Path:
    """A self-contained, sortable leaderboard page (finbench/app/leaderboard.py builds `board`)."""
    path = Path(path)
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in board["rows"]))
    by_benchmark = []
    for benchmark in benchmarks:
        members = [r for r in board["rows"] if r["benchmark"] == benchmark]
        by_benchmark.append({"benchmark": benchmark, "rows": members, "column": members[0]["domain_column"],
                             "domains": sorted({d for r in members for d in r["domains"]})})
    figures = {f"{benchmark} headline": leaderboard_figure([r for r in board["rows"] if r["benchmark"] == benchmark])
               for benchmark in benchmarks}
    page = _environment().get_template("leaderboard.html.j2").render(
        board=board, by_benchmark=by_benchmark,
        power=[line for r in board["rows"] if r.get("comparison") and (line := power_line(r["comparison"]))],
        plots=_uris({name: figure for name, figure in figures.items() if figure is not None}))
    _write(path, page)
    return path
