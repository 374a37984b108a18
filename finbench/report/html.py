"""`report.html`: one self-contained page per run (and one per sweep) — inline CSS and JS, plots
and thumbnails as data URIs, nothing fetched from the network.

A run's page: headline scores with bootstrap CIs; a bar chart with CI whiskers for the headline
and for every breakdown (breakdown whiskers are 95% Wilson intervals of the group's accuracy: the
run's bootstrap covers the headline numbers only); the reliability diagram and the selective-
prediction curve, both from the `confidence` column; throughput by stage; a per-sample browser
(thumbnail, question, options with probabilities, prediction, gold, reasoning, error) filterable by
domain, kind, correctness and confidence; the run's configuration and model fingerprint.

Thumbnails: samples.parquet holds no images (it stays small). The report re-reads the first
`MAX_THUMBNAILS` questions from the data source recorded in results.json and embeds 96-px JPEGs;
when the data is not on this machine the browser shows the text only. Built from the run folder
alone (`finbench report RUN_DIR`), so it can be rebuilt anywhere. Values are stored on 0–1 and
shown ×100 where a column or axis says so.
"""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from typing import Any

from finbench.report.format import HEADLINE_LABELS, num, pct

MAX_THUMBNAILS = 200
THUMBNAIL_SIDE = 96
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

    from finbench.report.markdown import write_markdown

    run_dir = Path(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    samples = pd.read_parquet(run_dir / "samples.parquet")
    scores = results["scores"]
    plots = {"headline": _headline_plot(scores)}
    for column, groups in scores.get("breakdowns", {}).items():
        plots[f"by {column}"] = _breakdown_plot(column, groups)
    if scores.get("calibration"):
        plots["reliability"] = _reliability_plot(scores["calibration"])
    if scores.get("selective"):
        plots["selective"] = _selective_plot(scores["selective"], scores.get("primary", "accuracy"))
    if results.get("throughput", {}).get("stages_s"):
        plots["throughput by stage"] = _stages_plot(results["throughput"]["stages_s"])
    rows = _browser_rows(samples, _thumbnails(results, samples))
    page = _environment().get_template("run.html.j2").render(
        results=results, scores=scores, labels=HEADLINE_LABELS, plots={k: v for k, v in plots.items() if v},
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


def _write(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


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
            "options": [str(o) for o in (record.get("options") if record.get("options") is not None else [])],
            "probs": [float(p) for p in probs] if probs is not None else [],
            "answer": str(record.get("answer", "")), "gold": str(record.get("gold", "")),
            "correct": clean(record.get("correct")), "confidence": clean(record.get("confidence")),
            "reasoning": str(record.get("reasoning_text", "") or ""),
            "reasoning_tokens": clean(record.get("reasoning_tokens", 0)),
            "budget_cut": bool(record.get("budget_cut", False)),
            "error": str(record.get("error", "") or ""), "thumb": thumbnails.get(str(record.get("id")), ""),
        })
    return rows


def _thumbnails(results: dict[str, Any], samples: Any) -> dict[str, str]:
    """id → JPEG data URI for the first MAX_THUMBNAILS questions, re-read from the run's data
    source; {} when it cannot be read here (the report never fails for a missing image)."""
    from finbench.benchmarks import get_benchmark

    config = results.get("config", {})
    wanted = set(samples["id"].astype(str).head(MAX_THUMBNAILS))
    try:
        benchmark = get_benchmark(results["benchmark"])
        limit = min(config.get("limit") or MAX_THUMBNAILS, MAX_THUMBNAILS)
        questions = benchmark.load(config.get("data"), limit, tuple(config.get("domains") or ()),
                                   tuple(config.get("question_types") or ()))
    except Exception:  # noqa: BLE001 — data not on this machine, no network, …
        return {}
    out = {}
    for question in questions:
        if question.id in wanted and question.images:
            uri = _thumbnail(question.images[0])
            if uri:
                out[question.id] = uri
    return out


def _thumbnail(data: bytes) -> str:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image = image.convert("RGB")
            image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=70)
    except Exception:  # noqa: BLE001 — a broken image is that sample's error, shown elsewhere
        return ""
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


# ---- plots ----------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure: Any) -> str:
    plt = _pyplot()
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def wilson(accuracy: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (Wilson, 1927)."""
    if n <= 0:
        return math.nan, math.nan
    centre = (accuracy + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(accuracy * (1 - accuracy) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _bars(labels: list[str], values: list[float], low: list[float], high: list[float], title: str,
          ylabel: str) -> str:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(min(2 + 0.45 * len(labels), 11), 3.6))
    heights = [100 * v if v is not None else 0.0 for v in values]
    errors = [[max(0.0, h - 100 * lo) if lo == lo else 0.0 for h, lo in zip(heights, low)],
              [max(0.0, 100 * hi - h) if hi == hi else 0.0 for h, hi in zip(heights, high)]]
    axis.bar(range(len(labels)), heights, yerr=errors, capsize=3, color="#4c78a8")
    axis.set_xticks(range(len(labels)))
    axis.set_xticklabels(labels, rotation=30 if len(labels) > 2 else 0, ha="right" if len(labels) > 2 else "center",
                         fontsize=8)
    axis.set(title=title, ylabel=ylabel, ylim=(0, 100))
    return _png(figure)


def _headline_plot(scores: dict[str, Any]) -> str:
    keys = [k for k in scores.get("headline", []) if scores.get(k) is not None]
    if not keys:
        return ""
    ci = scores.get("ci", {})
    low = [ci[k]["low"] if ci.get(k) and ci[k].get("low") is not None else math.nan for k in keys]
    high = [ci[k]["high"] if ci.get(k) and ci[k].get("high") is not None else math.nan for k in keys]
    return _bars([HEADLINE_LABELS.get(k, k) for k in keys], [scores[k] for k in keys], low, high,
                 "headline (whiskers: bootstrap CI)", "score ×100")


def _breakdown_plot(column: str, groups: dict[str, dict[str, Any]]) -> str:
    items = sorted(groups.items(), key=lambda kv: -kv[1]["n"])[:30]
    if not items:
        return ""
    intervals = [wilson(g["accuracy"], g["n"]) for _, g in items]
    return _bars([f"{name} ({g['n']})" for name, g in items], [g["accuracy"] for _, g in items],
                 [i[0] for i in intervals], [i[1] for i in intervals],
                 f"accuracy by {column} (whiskers: 95% Wilson)", "accuracy ×100")


def _reliability_plot(calibration: dict[str, Any]) -> str:
    plt = _pyplot()
    bins = [b for b in calibration["bins"] if b["n"]]
    figure, axis = plt.subplots(figsize=(4.5, 4))
    axis.plot([0, 1], [0, 1], "--", color="#999", label="perfect calibration")
    axis.bar([(b["low"] + b["high"]) / 2 for b in bins], [b["accuracy"] for b in bins],
             width=[b["high"] - b["low"] for b in bins], alpha=0.35, edgecolor="#4c78a8", label="accuracy per bin")
    axis.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o-", color="#4c78a8",
              label="mean confidence → accuracy")
    ece = calibration.get("ece")
    axis.set(xlabel="confidence (probability of the answer)", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1),
             title=f"reliability (n {calibration['n']}, ECE ×100 {pct(ece, 1)})")
    axis.legend(loc="upper left", fontsize=7)
    return _png(figure)


def _selective_plot(selective: list[dict[str, Any]], primary: str) -> str:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(4.5, 4))
    coverage = [s["coverage"] for s in selective]
    # a missing value (nothing answered) is a gap in the line, never a 0
    nan = float("nan")
    axis.plot(coverage, [s["accuracy"] if s.get("accuracy") is not None else nan for s in selective], "o-",
              label="accuracy")
    if primary != "accuracy" and any(s.get(primary) is not None for s in selective):
        axis.plot(coverage, [s[primary] if s.get(primary) is not None else nan for s in selective], "s-",
                  label=HEADLINE_LABELS.get(primary, primary))
    axis.set(xlabel="coverage (answered share; answer when confidence > τ)", ylabel="score (0–1)",
             xlim=(-0.02, 1.02), ylim=(0, 1), title="selective prediction")
    axis.legend(loc="upper right", fontsize=7)
    return _png(figure)


def _stages_plot(stages: dict[str, float]) -> str:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(5, 0.4 * len(stages) + 1))
    axis.barh(list(stages), list(stages.values()), color="#72b7b2")
    axis.set(xlabel="seconds", title="time by stage")
    return _png(figure)


# ---- sweep report ---------------------------------------------------------------------------
def write_sweep_report(out: str | Path, summary: dict[str, Any]) -> Path:
    """Render OUT/report.html of a sweep from its summary (sweep.json's content)."""
    out = Path(out)
    variants = summary["variants"]
    plots = {"accuracy vs memory": _tradeoff_plot(variants, "model_memory_gib", "model memory (GiB)"),
             "accuracy vs speed": _tradeoff_plot(variants, "samples_per_s", "samples/s (run that computed them)"),
             "flip matrix": _flip_plot(summary["flip_matrix"]),
             "KL per domain": _kl_plot(summary["distributions"])}
    if any(v.get("reasoning_tokens_mean") for v in variants):
        plots["accuracy vs reasoning tokens"] = _reasoning_plot(variants)
    comparisons = {c["run"]: c for c in summary["comparison"]["comparisons"]}
    page = _environment().get_template("sweep.html.j2").render(
        summary=summary, variants=variants, comparisons=comparisons, labels=HEADLINE_LABELS,
        headline=summary["comparison"]["headline"], plots={k: v for k, v in plots.items() if v},
        distributions=summary["distributions"], flips=summary["flip_matrix"],
        browser_json=_script_json([]), out=out)
    path = out / "report.html"
    _write(path, page)
    return path


def _tradeoff_plot(variants: list[dict[str, Any]], key: str, xlabel: str) -> str:
    points = [(v[key], v["accuracy"], v["name"]) for v in variants if v.get(key) and v.get("accuracy") is not None]
    if not points:
        return ""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(4.8, 3.8))
    for x, y, name in points:
        axis.scatter([x], [100 * y])
        axis.annotate(name, (x, 100 * y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axis.set(xlabel=xlabel, ylabel="accuracy ×100", title=f"accuracy vs {xlabel.split(' (')[0]}")
    return _png(figure)


def _flip_plot(flips: dict[str, Any]) -> str:
    plt = _pyplot()
    counts = flips["counts"]
    figure, axis = plt.subplots(figsize=(1.2 * len(counts) + 2.5, 1.0 * len(counts) + 1.8))
    axis.imshow(counts, cmap="Blues")
    for i, row in enumerate(counts):
        for j, value in enumerate(row):
            axis.text(j, i, str(value), ha="center", va="center", fontsize=9)
    axis.set_xticks(range(len(counts)))
    axis.set_yticks(range(len(counts)))
    axis.set_xticklabels(flips["runs"], rotation=30, ha="right", fontsize=7)
    axis.set_yticklabels(flips["runs"], fontsize=7)
    axis.set(xlabel="wrong in", ylabel="right in", title=f"flips ({flips['n']} shared questions)")
    return _png(figure)


def _kl_plot(distributions: dict[str, Any]) -> str:
    runs = {name: d for name, d in distributions.get("runs", {}).items() if d.get("by_group")}
    if not runs:
        return ""
    groups = sorted({g for d in runs.values() for g in d["by_group"]})
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(min(3 + 0.5 * len(groups), 11), 3.8))
    width = 0.8 / len(runs)
    for r, (name, d) in enumerate(runs.items()):
        values = [(d["by_group"].get(g) or {}).get("kl") or 0.0 for g in groups]
        axis.bar([i + r * width for i in range(len(groups))], values, width=width, label=name)
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    axis.set_xticklabels(groups, rotation=35, ha="right", fontsize=7)
    axis.set(ylabel="mean KL(reference ‖ variant), nats",
             title=f"option-distribution shift by {distributions.get('group')}")
    axis.legend(fontsize=7)
    return _png(figure)


def _reasoning_plot(variants: list[dict[str, Any]]) -> str:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(4.8, 3.8))
    xs = [v.get("reasoning_tokens_mean") or 0.0 for v in variants]
    ys = [100 * v["accuracy"] if v.get("accuracy") is not None else float("nan") for v in variants]
    axis.plot(xs, ys, "o-")
    for x, y, v in zip(xs, ys, variants):
        axis.annotate(v["name"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axis.set(xlabel="mean reasoning tokens per question", ylabel="accuracy ×100", title="accuracy vs reasoning")
    return _png(figure)
