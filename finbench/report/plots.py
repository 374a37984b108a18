"""The plots of the HTML reports (report/html.py): every plot is a function returning a matplotlib
Figure, or None when there is nothing to draw — a run's headline, parts, breakdowns, reliability,
selective curve and stages; a sweep's trade-offs, flips, KL and reasoning; a leaderboard's bars.
Values arrive on 0–1 and are drawn ×100 where an axis says so."""

from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING, Any

from finbench.benchmarks.declared import metric_label, penalties
from finbench.benchmarks.metrics import ACCURACY
from finbench.core.formatting import pct

if TYPE_CHECKING:
    from finbench.benchmarks.parts import Part


# Every plot is a function returning a matplotlib Figure (or None when there is nothing to draw),
# laid out by constrained layout, its title wrapped to the figure's width, and saved with a tight
# bounding box: no title, label or legend is ever cut at the image's edge.
BLUE, ORANGE, TEAL = "#4c78a8", "#e45756", "#72b7b2"
TITLE_SIZE, LABEL_SIZE, TICK_SIZE = 10, 9, 8


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(width: float, height: float, **options: Any) -> Any:
    return _pyplot().figure(figsize=(width, height), layout="constrained", **options)


def wrapped(text: str, width_inches: float, size: float = TITLE_SIZE) -> str:
    """`text` broken into lines that fit `width_inches` at `size` points (≤ 0.62 em per character
    in DejaVu Sans, matplotlib's default font)."""
    import textwrap

    width = max(12, int(width_inches * 72 / (0.62 * size)))
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)) or text


def _title(axis: Any, text: str, width_inches: float) -> None:
    """The figure's title, centred on the figure (an axes title centres on the axes and runs off
    the edge when long tick labels push the axes aside), wrapped to the figure's width."""
    axis.figure.suptitle(wrapped(text, width_inches - 0.2), fontsize=TITLE_SIZE)


def png_uri(figure: Any) -> str:
    plt = _pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight", pad_inches=0.12, facecolor="white")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def wilson(accuracy: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson interval of one proportion (scoring/stats.py `wilson_interval`)."""
    import torch

    from finbench.scoring.stats import wilson_interval

    if n <= 0:
        return math.nan, math.nan
    low, high = wilson_interval(torch.tensor([accuracy * n]), torch.tensor([n]), level)
    return float(low[0]), float(high[0])


def _whiskers(values: list[float | None], low: list[float], high: list[float], factor: float = 100.0) -> Any:
    heights = [factor * v if v is not None else 0.0 for v in values]
    return heights, [[max(0.0, h - factor * lo) if lo == lo else 0.0 for h, lo in zip(heights, low)],
                     [max(0.0, factor * hi - h) if hi == hi else 0.0 for h, hi in zip(heights, high)]]


def headline_figure(scores: dict[str, Any]) -> Any:
    """The headline scores as bars with their bootstrap CIs; a penalty (P_H: lower is better)
    stands apart in its own panel, in another colour, never as one more score."""
    keys = [k for k in scores.get("headline", []) if scores.get(k) is not None]
    if not keys:
        return None
    ci = scores.get("ci", {})
    bounds = {k: (ci[k]["low"], ci[k]["high"]) if ci.get(k) and ci[k].get("low") is not None else (math.nan, math.nan)
              for k in keys}
    penalised = penalties(scores.get("benchmark"), keys)  # lower is better: drawn apart
    groups = [[k for k in keys if k not in penalised], [k for k in keys if k in penalised]]
    groups = [g for g in groups if g]
    width = 1.6 + 1.15 * len(keys)
    figure = _figure(max(width, 4.2), 3.4)
    axes = figure.subplots(1, len(groups), squeeze=False, width_ratios=[max(len(g), 1) for g in groups])[0]
    for axis, group in zip(axes, groups):
        penalty = group[0] in penalised
        heights, errors = _whiskers([scores[k] for k in group], [bounds[k][0] for k in group],
                                    [bounds[k][1] for k in group])
        axis.bar(range(len(group)), heights, yerr=errors, capsize=3, color=ORANGE if penalty else BLUE)
        axis.set_xticks(range(len(group)))
        axis.set_xticklabels([wrapped(metric_label(scores.get("benchmark"), k), 1.1, TICK_SIZE) for k in group], fontsize=TICK_SIZE)
        axis.set_ylim(0, 100)
        axis.set_ylabel("penalty ×100 (lower is better)" if penalty else "score ×100", fontsize=LABEL_SIZE)
        if penalty:
            axis.set_title("penalty", fontsize=LABEL_SIZE)
    figure.suptitle(wrapped("headline scores ×100 (whiskers: bootstrap CI)", max(width, 4.2) - 0.2), fontsize=TITLE_SIZE)
    return figure


def breakdown_figure(column: str, groups: dict[str, dict[str, Any]], max_groups: int = 30) -> Any:
    """Accuracy per group as horizontal bars (long group names read across), with each group's
    95% Wilson interval (stored in the breakdown; recomputed for older results)."""
    items = sorted(groups.items(), key=lambda kv: -kv[1]["n"])[:max_groups]
    if not items:
        return None
    intervals = [(g["ci"]["low"], g["ci"]["high"]) if g.get("ci") else wilson(g[ACCURACY.key], g["n"]) for _, g in items]
    heights, errors = _whiskers([g[ACCURACY.key] for _, g in items], [i[0] for i in intervals], [i[1] for i in intervals])
    labels = [f"{wrapped(name, 2.6, TICK_SIZE)} ({g['n']})" for name, g in items]
    # each row as tall as its label's lines (a long group name wraps onto several), so labels never overlap
    lines = max(label.count("\n") + 1 for label in labels)
    figure = _figure(6.4, 1.1 + max(0.32, 0.16 * lines) * len(items))
    axis = figure.subplots()
    rows = list(range(len(items)))[::-1]  # largest group on top
    axis.barh(rows, heights, xerr=errors, capsize=3, color=BLUE)
    axis.set_yticks(rows)
    axis.set_yticklabels(labels, fontsize=TICK_SIZE)
    axis.set_xlim(0, 100)
    axis.set_xlabel("accuracy ×100", fontsize=LABEL_SIZE)
    _title(axis, f"accuracy by {column} (whiskers: 95% Wilson interval; n in brackets)", 6.4)
    return figure


def reliability_figure(calibration: dict[str, Any]) -> Any:
    bins = [b for b in calibration["bins"] if b["n"]]
    figure = _figure(4.8, 4.2)
    axis = figure.subplots()
    axis.plot([0, 1], [0, 1], "--", color="#999", label="perfect calibration")
    axis.bar([(b["low"] + b["high"]) / 2 for b in bins], [b[ACCURACY.key] for b in bins],
             width=[b["high"] - b["low"] for b in bins], alpha=0.35, edgecolor=BLUE, label="accuracy per bin")
    axis.plot([b["confidence"] for b in bins], [b[ACCURACY.key] for b in bins], "o-", color=BLUE,
              label="mean confidence → accuracy")
    axis.set_xlabel("confidence (probability of the answer)", fontsize=LABEL_SIZE)
    axis.set_ylabel(ACCURACY.label, fontsize=LABEL_SIZE)
    axis.set(xlim=(0, 1), ylim=(0, 1))
    _title(axis, f"reliability (n {calibration['n']}, ECE ×100 {pct(calibration.get('ece'), 1)})", 4.8)
    figure.legend(loc="outside lower center", fontsize=7, ncols=2, frameon=False)
    return figure


def selective_figure(selective: list[dict[str, Any]], primary: str, benchmark: str | None = None) -> Any:
    figure = _figure(4.8, 4.2)
    axis = figure.subplots()
    coverage = [s["coverage"] for s in selective]
    # a missing value (nothing answered) is a gap in the line, never a 0
    nan = float("nan")
    axis.plot(coverage, [s[ACCURACY.key] if s.get(ACCURACY.key) is not None else nan for s in selective], "o-",
              label=ACCURACY.label)
    if primary != ACCURACY.key and any(s.get(primary) is not None for s in selective):
        axis.plot(coverage, [s[primary] if s.get(primary) is not None else nan for s in selective], "s-",
                  label=metric_label(benchmark, primary))
    axis.set_xlabel(wrapped("coverage (answered share; answer when confidence > τ)", 4.4, LABEL_SIZE), fontsize=LABEL_SIZE)
    axis.set_ylabel("score (0–1)", fontsize=LABEL_SIZE)
    axis.set(xlim=(-0.02, 1.02), ylim=(0, 1))
    _title(axis, "selective prediction", 4.8)
    figure.legend(loc="outside lower center", fontsize=7, ncols=2, frameon=False)
    return figure


def stages_figure(stages: dict[str, float]) -> Any:
    figure = _figure(5.2, 0.32 * len(stages) + 1.2)
    axis = figure.subplots()
    axis.barh(list(stages)[::-1], list(stages.values())[::-1], color=TEAL)
    axis.tick_params(labelsize=TICK_SIZE)
    axis.set_xlabel("seconds", fontsize=LABEL_SIZE)
    _title(axis, "time by stage", 5.2)
    return figure


def part_figure(part: "Part", found: dict[str, Any]) -> Any:
    """A part the rule scores apart (FinMTM's dialogue: turn and session 0–10, final 0–100; agent:
    precision, recall, F2 ×100, Qt 0–25) as bars with their bootstrap CIs, each as a share of its
    own full scale (`Metric.full`)."""
    metrics = [m for m in part.metrics if found.get(m.key) is not None]
    if not metrics or not found.get("n_scored"):
        return None
    ci = found.get("ci") or {}
    figure = _figure(1.6 + 1.25 * len(metrics), 3.4)
    axis = figure.subplots()
    shares, low, high = [], [], []
    for metric in metrics:  # drawn as a share of each metric's full scale
        full = metric.full
        shares.append(found[metric.key] / full)
        interval = ci.get(metric.key) or {}
        low.append(interval["low"] / full if interval.get("low") is not None else math.nan)
        high.append(interval["high"] / full if interval.get("high") is not None else math.nan)
    heights, errors = _whiskers(shares, low, high)
    axis.bar(range(len(metrics)), heights, yerr=errors, capsize=3, color=TEAL)
    axis.set_xticks(range(len(metrics)))
    axis.set_xticklabels([wrapped(m.label, 1.2, TICK_SIZE) for m in metrics], fontsize=TICK_SIZE)
    axis.set_ylim(0, 100)
    axis.set_ylabel("% of each metric's full scale", fontsize=LABEL_SIZE)
    _title(axis, f"{part.figure}: n {found['n_scored']} (whiskers: bootstrap CI)", 1.6 + 1.25 * len(metrics))
    return figure


# ---- sweep ------------------------------------------------------------------------------------
def tradeoff_figure(variants: list[dict[str, Any]], key: str, xlabel: str) -> Any:
    """Accuracy against a cost, one marker per variant, named in a legend below the axes (names
    written beside close points overlap)."""
    points = [(v[key], v[ACCURACY.key], v["name"]) for v in variants if v.get(key) and v.get(ACCURACY.key) is not None]
    if not points:
        return None
    figure = _figure(5.2, 4.0 + 0.22 * len(points))
    axis = figure.subplots()
    markers = "osD^vP*X<>"
    for k, (x, y, name) in enumerate(points):
        axis.scatter([x], [100 * y], marker=markers[k % len(markers)], s=42, label=name)
    axis.set_xlabel(wrapped(xlabel, 4.8, LABEL_SIZE), fontsize=LABEL_SIZE)
    axis.set_ylabel("accuracy ×100", fontsize=LABEL_SIZE)
    axis.tick_params(labelsize=TICK_SIZE)
    axis.margins(0.15)
    _title(axis, f"accuracy vs {xlabel.split(' (')[0]}", 5.2)
    figure.legend(loc="outside lower center", fontsize=7, ncols=1, frameon=False)
    return figure


def flip_figure(flips: dict[str, Any]) -> Any:
    counts = flips["counts"]
    size = 1.0 * len(counts) + 2.4
    figure = _figure(size + 0.6, size)
    axis = figure.subplots()
    axis.imshow(counts, cmap="Blues")
    for i, row in enumerate(counts):
        for j, value in enumerate(row):
            axis.text(j, i, str(value), ha="center", va="center", fontsize=9)
    axis.set_xticks(range(len(counts)))
    axis.set_yticks(range(len(counts)))
    axis.set_xticklabels(flips["runs"], rotation=30, ha="right", fontsize=7)
    axis.set_yticklabels(flips["runs"], fontsize=7)
    axis.set_xlabel("wrong in", fontsize=LABEL_SIZE)
    axis.set_ylabel("right in", fontsize=LABEL_SIZE)
    _title(axis, f"flips ({flips['n']} shared questions)", size + 0.6)
    return figure


def kl_figure(distributions: dict[str, Any]) -> Any:
    """KL(reference ‖ variant) per group as horizontal bars, one colour per variant (group names
    read across; a legend below)."""
    runs = {name: d for name, d in distributions.get("runs", {}).items() if d.get("by_group")}
    if not runs:
        return None
    groups = sorted({g for d in runs.values() for g in d["by_group"]})
    figure = _figure(6.4, 1.6 + 0.22 * len(groups) * max(len(runs), 2) + 0.2 * len(runs))
    axis = figure.subplots()
    bar = 0.8 / len(runs)
    rows = list(range(len(groups)))[::-1]
    for r, (name, d) in enumerate(runs.items()):
        values = [(d["by_group"].get(g) or {}).get("kl") or 0.0 for g in groups]
        axis.barh([y + 0.4 - bar / 2 - r * bar for y in rows], values, height=bar, label=name)
    axis.set_yticks(rows)
    axis.set_yticklabels([wrapped(g, 2.4, TICK_SIZE) for g in groups], fontsize=TICK_SIZE)
    axis.tick_params(axis="x", labelsize=TICK_SIZE)
    axis.set_xlabel("mean KL(reference ‖ variant), nats", fontsize=LABEL_SIZE)
    _title(axis, f"option-distribution shift by {distributions.get('group')}", 6.4)
    figure.legend(loc="outside lower center", fontsize=7, ncols=1, frameon=False)
    return figure


def reasoning_figure(variants: list[dict[str, Any]]) -> Any:
    figure = _figure(5.2, 4.0 + 0.22 * len(variants))
    axis = figure.subplots()
    xs = [v.get("reasoning_tokens_mean") or 0.0 for v in variants]
    ys = [100 * v[ACCURACY.key] if v.get(ACCURACY.key) is not None else float("nan") for v in variants]
    axis.plot(xs, ys, "-", color="#bbb", zorder=1)
    markers = "osD^vP*X<>"
    for k, (x, y, v) in enumerate(zip(xs, ys, variants)):
        axis.scatter([x], [y], marker=markers[k % len(markers)], s=42, label=v["name"], zorder=2)
    axis.set_xlabel("mean reasoning tokens per question", fontsize=LABEL_SIZE)
    axis.set_ylabel("accuracy ×100", fontsize=LABEL_SIZE)
    axis.margins(0.15)
    _title(axis, "accuracy vs reasoning", 5.2)
    figure.legend(loc="outside lower center", fontsize=7, ncols=1, frameon=False)
    return figure


# ---- leaderboard --------------------------------------------------------------------------------
def leaderboard_figure(rows: list[dict[str, Any]]) -> Any:
    """Each run's headline score with its CI, one horizontal bar per run (its mark beside it)."""
    rows = [r for r in rows if r["headlines"][0]["value"] is not None]
    if not rows:
        return None
    figure = _figure(6.4, 1.2 + 0.36 * len(rows))
    axis = figure.subplots()
    positions = list(range(len(rows)))[::-1]
    low = [r["ci_low"] / 100 if r["ci_low"] is not None else math.nan for r in rows]
    high = [r["ci_high"] / 100 if r["ci_high"] is not None else math.nan for r in rows]
    heights, errors = _whiskers([r["headlines"][0]["value"] / 100 for r in rows], low, high)
    axis.barh(positions, heights, xerr=errors, capsize=3, color=BLUE)
    axis.set_yticks(positions)
    axis.set_yticklabels([f"{wrapped(r['run'], 2.4, TICK_SIZE)} {r['mark']}".strip() for r in rows], fontsize=TICK_SIZE)
    axis.set_xlim(0, 100)
    axis.set_xlabel(f"{rows[0]['metric']} ×100", fontsize=LABEL_SIZE)
    _title(axis, f"{rows[0]['benchmark']}: {rows[0]['metric']} by run (whiskers: bootstrap CI; *: paired "
                 "difference vs the reference significant, clustered interval)", 6.4)
    return figure
