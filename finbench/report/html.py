"""`report.html`: one self-contained page per run — headline scores with their intervals, every
breakdown, calibration (reliability diagram) and selective-prediction plots, throughput by
stage, and the per-sample errors. Built from `results.json` and `samples.parquet` only, so it can
be rebuilt on any machine (`finbench report RUN_DIR`)."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

HEADLINE_LABELS = {"finscore": "FinScore", "domain_accuracy": "domain-normalised accuracy (F)",
                   "p_h": "multi-answer error rate (P_H)", "accuracy": "accuracy", "domain_score": "domain score",
                   "score": "score", "strict_accuracy": "strict accuracy"}


def write_report(run_dir: str | Path) -> Path:
    """Render RUN_DIR/report.html from the run's results and samples; returns its path."""
    import pandas as pd

    run_dir = Path(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    samples = pd.read_parquet(run_dir / "samples.parquet")
    scores = results["scores"]
    sections = [
        f"<h1>finbench · {_e(results['benchmark'])} · {_e(results['config']['model'])}</h1>",
        f"<p>{_e(scores.get('label', ''))} — protocol <b>{_e(results['protocol'])}</b>, prompt "
        f"{_e(results['prompt_version'])}, {results['n_questions']} questions "
        f"({results['n_cached']} from cache), {results['errors']['count']} sample errors.</p>",
        _headline_table(scores),
        *(_breakdown_table(column, groups) for column, groups in scores.get("breakdowns", {}).items()),
        _plots(scores),
        _throughput_table(results["throughput"]),
        _errors_table(samples),
        f"<h2>Model fingerprint</h2><pre>{_e(json.dumps(results['fingerprint'], indent=2))}</pre>",
    ]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>finbench report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>")
    path = run_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


STYLE = ("body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;"
         "text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
         "pre{background:#f7f7f7;padding:8px;font-size:12px}img{max-width:48%}")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.2f}"


def _headline_table(scores: dict[str, Any]) -> str:
    rows = []
    for key in scores.get("headline", []):
        ci = scores.get("ci", {}).get(key)
        interval = f"[{_pct(ci['low'])}, {_pct(ci['high'])}]" if ci else "–"
        rows.append(f"<tr><td>{_e(HEADLINE_LABELS.get(key, key))}</td><td>{_pct(scores.get(key))}</td>"
                    f"<td>{interval}</td></tr>")
    level = scores.get("bootstrap", {}).get("level")
    head = f"{int(100 * level)}% bootstrap CI" if level else "CI"
    return (f"<h2>Scores (×100)</h2><table><tr><th>metric</th><th>value</th><th>{head}</th></tr>"
            f"{''.join(rows)}</table>")


def _breakdown_table(column: str, groups: dict[str, dict[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{_e(name)}</td><td>{g.get('n', '')}</td><td>{_pct(g.get('accuracy'))}</td></tr>"
                   for name, g in groups.items())
    return (f"<h2>By {_e(column)}</h2><table><tr><th>{_e(column)}</th><th>n</th><th>accuracy</th></tr>"
            f"{rows}</table>")


def _plots(scores: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = []
    calibration = scores.get("calibration")
    if calibration:
        bins = [b for b in calibration["bins"] if b["n"]]
        figure, axis = plt.subplots(figsize=(4.5, 4))
        axis.plot([0, 1], [0, 1], "--", color="#999", label="perfect calibration")
        axis.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o-", label="this run")
        axis.set(xlabel="confidence", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1),
                 title=f"reliability (ECE {100 * calibration['ece']:.1f})")
        axis.legend(loc="upper left")
        images.append(_png(figure))
    selective = scores.get("selective")
    if selective:
        figure, axis = plt.subplots(figsize=(4.5, 4))
        axis.plot([s["coverage"] for s in selective], [s["accuracy"] for s in selective], "o-", label="accuracy")
        if any(s.get("finscore") is not None for s in selective):
            axis.plot([s["coverage"] for s in selective], [s.get("finscore") or 0 for s in selective], "s-",
                      label="FinScore")
        axis.set(xlabel="coverage (answered share)", ylabel="score", xlim=(0, 1.02), ylim=(0, 1),
                 title="selective prediction")
        axis.legend(loc="upper right")
        images.append(_png(figure))
    if not images:
        return ""
    return "<h2>Calibration</h2>" + "".join(f"<img alt='plot' src='data:image/png;base64,{i}'>" for i in images)


def _png(figure: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def _throughput_table(throughput: dict[str, Any]) -> str:
    keys = ["samples", "seconds", "samples_per_s", "image_tokens_per_s", "prefill_tflops_per_s",
            "peak_memory_gib", "peak_rss_gib", "final_max_batch", "oom_retries", "device"]
    rows = "".join(f"<tr><td>{k}</td><td>{_fmt(throughput[k])}</td></tr>" for k in keys if k in throughput)
    stages = "".join(f"<tr><td>{_e(k)}</td><td>{v:.3f}</td></tr>" for k, v in throughput.get("stages_s", {}).items())
    return (f"<h2>Throughput</h2><table>{rows}</table><table><tr><th>stage</th><th>seconds</th></tr>"
            f"{stages}</table>")


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else _e(value)


def _errors_table(samples: Any) -> str:
    errors = samples.loc[samples["error"] != "", ["id", "error"]]
    if errors.empty:
        return "<h2>Errors</h2><p>none</p>"
    rows = "".join(f"<tr><td>{_e(i)}</td><td style='text-align:left'>{_e(m)}</td></tr>"
                   for i, m in errors.head(200).itertuples(index=False))
    more = f"<p>… and {len(errors) - 200} more (see samples.parquet)</p>" if len(errors) > 200 else ""
    return f"<h2>Errors ({len(errors)})</h2><table><tr><th>id</th><th>error</th></tr>{rows}</table>{more}"
