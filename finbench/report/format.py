"""Number formatting and metric names shared by the console, the HTML and the Markdown reports (all
import it; none imports another's helpers). A metric's label, direction, scale and the count it
rests on, and a variant's rule name, are read from the `Scorer` of the score's benchmark
(`declared_scorer`, benchmarks/declared.py; benchmarks/metrics.py), never from a table of metric keys here."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from finbench.benchmarks.declared import declared_parts, declared_scorer, metric_of
from finbench.benchmarks.metrics import ACCURACY, OFFICIAL, Metric

if TYPE_CHECKING:
    from finbench.benchmarks.parts import Part


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def num(value: Any) -> str:
    """A value as 4 significant digits (floats) or as text; "–" when missing."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def scored_parts(scores: dict[str, Any]) -> list[tuple["Part", dict[str, Any]]]:
    """(declaration, values) of each part the benchmark's `Scorer` scores apart that this score
    holds, in the declared order (FinMTM: dialogue, then agent)."""
    return [(part, scores[part.name]) for part in declared_parts(scores.get("benchmark")) if scores.get(part.name)]


def part_value(value: float | None, metric: Metric) -> str:
    """A part metric's value on its shown scale (×100 for a 0–1 value, else as it is)."""
    if value is None:
        return "—"
    return f"{value * metric.scale:.2f}"


def part_cells(part: "Part", found: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, CI) of each metric of a part, on the metric's own scale (the console, the
    HTML and the Markdown reports show the same cells)."""
    cells = []
    for metric in part.metrics:
        ci = (found.get("ci") or {}).get(metric.key) or {}
        interval = (f"[{part_value(ci['low'], metric)}, {part_value(ci['high'], metric)}]"
                    if ci.get("low") is not None else "–")
        cells.append((metric.label, part_value(found.get(metric.key), metric), interval))
    return cells


def _interval(ci: Any, factor: float) -> tuple[float | None, float | None]:
    if not ci or ci.get("low") is None:
        return None, None
    return ci["low"] * factor, ci["high"] * factor


def _metric_entry(scores: dict[str, Any], name: str) -> dict[str, Any]:
    """A metric of the rule as the reports show it (×100 for a 0–1 metric), with its CI."""
    metric = metric_of(scores.get("benchmark"), name)
    low, high = _interval((scores.get("ci") or {}).get(name), metric.scale)
    value = scores.get(name)
    return {"metric": name, "label": metric.label, "value": None if value is None else metric.scale * value,
            "low": low, "high": high, "n": scores.get("n"), "full": metric.shown_full}


def _part_entry(part: "Part", found: dict[str, Any]) -> dict[str, Any] | None:
    """A part's headline metric (its declaration's `headline`) on its shown scale; None when the
    part declares none or scored nothing."""
    metric = next((m for m in part.metrics if m.key == part.headline), None)
    if metric is None or found.get(metric.key) is None:
        return None
    low, high = _interval((found.get("ci") or {}).get(metric.key), metric.scale)
    return {"metric": f"{part.name}.{metric.key}", "label": part.headline_label or metric.label,
            "value": metric.scale * found[metric.key], "low": low, "high": high, "n": found.get("n_scored"),
            "full": metric.shown_full}


def headline_score(scores: dict[str, Any]) -> dict[str, Any]:
    """The one number a run is known by, on the 0–100 scale with its CI: the rule's primary metric
    (FinScore, accuracy, FinMTM's Eq. 1 score); for a run whose primary metric scored nothing (a
    FinMTM run of sessions or agent items only) the headline metric of the first part its
    `Scorer` declares that has one (FinMTM: the dialogue score, else the agent F2)."""
    return {k: v for k, v in _headline_entry(scores).items() if k != "full"}


def _headline_entry(scores: dict[str, Any]) -> dict[str, Any]:
    """`headline_score` with `full`, the top of the scale its value is on (100, or a part
    metric's own full scale)."""
    primary = scores.get("primary", ACCURACY.key)
    if scores.get(primary) is not None:
        return _metric_entry(scores, primary)
    for part, found in scored_parts(scores):
        if (entry := _part_entry(part, found)) is not None:
            return entry
    return _metric_entry(scores, primary)


def _items_behind(scores: dict[str, Any], name: str) -> Any:
    """How many items a metric rests on: its subset's count where the scorer reports one."""
    count = metric_of(scores.get("benchmark"), name).n_key
    return scores.get(count) if scores.get(count) is not None else scores.get("n")


def run_headlines(scores: dict[str, Any], also: tuple[str, ...] = (ACCURACY.key,)) -> list[dict[str, Any]]:
    """Every number a run is known by, each as `headline_score` gives it (×100 or on its part's
    own scale, with CI), with `full`, the top of that scale: the headline first, then the metrics `also` names (the benchmark's
    `leaderboard_metrics`, 0–1 keys of `scores`) the score holds, then the headline metric of
    each part its `Scorer` scored apart (FinMTM: the dialogue score, the agent tool F2)."""
    out = [_headline_entry(scores)]
    candidates = [{**_metric_entry(scores, name), "n": _items_behind(scores, name)} for name in also
                  if scores.get(name) is not None]
    candidates += [e for part, found in scored_parts(scores) if (e := _part_entry(part, found)) is not None]
    for entry in candidates:
        if entry["metric"] not in {e["metric"] for e in out}:
            out.append(entry)
    return out


def headline_label(entry: dict[str, Any]) -> str:
    """A headline's label, with its scale where it is not ×100 (a part metric on 0–10)."""
    full = entry.get("full") or 100.0
    return entry["label"] if full == 100.0 else f"{entry['label']} (0–{full:g})"


def also_text(row: dict[str, Any]) -> str:
    """The run's other headlines in one cell of the Markdown and HTML tables:
    'binary accuracy 50.00 [0.00, 100.00] (n 6); …', '–' where it has none."""
    return "; ".join(f"{headline_label(h)} {interval_text(h['value'], h['low'], h['high'])} (n {h['n']})"
                     for h in row.get("headlines", [])[1:]) or "–"


def power_line(c: dict[str, Any], check: bool = False) -> str:
    """A paired comparison in one sentence a reader can act on: the difference of the mean
    per-question score with its clustered 95% interval (t, G − 1 degrees of freedom) and the
    verdict that interval gives (`clustered.verdict`: significant when it excludes 0, else the
    smallest difference the set detects, or that it cannot estimate its power); '' for
    comparisons written before they had an interval. `check` (the reports, never the console)
    adds the paired bootstrap of the same difference, named as a check of that one interval."""
    from finbench.scoring.clustered import verdict

    if c.get("diff") is None or "ci_diff" not in c:
        return ""
    ci = c.get("ci_diff") or {}
    interval = f" [{100 * ci['low']:+.2f}, {100 * ci['high']:+.2f}]" if ci.get("low") is not None else ""
    sampled = " (per-question means over the K samples)" if c.get("per_question") else ""
    return (f"{c['run']} vs {c['baseline']}: Δ score{sampled} {100 * c['diff']:+.2f} points{interval} (SE "
            f"{100 * (c.get('se_diff') or 0):.2f}, clustered by {c.get('cluster_by', 'id')}, {c.get('n_clusters')} "
            f"clusters): {verdict(ci, c.get('mde'))}" + (_bootstrap_check(c) if check else ""))


def sampled_label(comparisons: list[dict[str, Any]], metric: str) -> str:
    """A Δ column's label where its differences are of per-question means over the K samples of
    --samples runs (`compare_runs`' `per_question`), not of sample 0: the same difference as the
    power line's."""
    sampled = any((c.get("delta") or {}).get(metric, {}).get("per_question") for c in comparisons)
    return " (per-question means over the K samples)" if sampled else ""


def _bootstrap_check(c: dict[str, Any]) -> str:
    found = next((d["bootstrap_check"] for d in (c.get("delta") or {}).values()
                  if (d.get("bootstrap_check") or {}).get("low") is not None), None)
    return "" if found is None else (f" (check: paired bootstrap [{100 * found['low']:+.2f}, "
                                     f"{100 * found['high']:+.2f}])")


def delta_text(row: dict[str, Any]) -> str:
    """A leaderboard row's Δ cell (leaderboard.py): '+2.50 *', with the metric it is a difference of
    in brackets where that is not the run's headline metric ('+2.50 * (accuracy)'); 'reference'
    for the reference run."""
    if row["reference"] == "(reference)":
        return "reference"
    text = f"{'–' if row['delta'] is None else format(row['delta'], '+.2f')} {row['mark']}".strip()
    return text if row.get("delta_metric") in (None, row["metric"]) else f"{text} ({row['delta_metric']})"


def bootstrap_label(scores: dict[str, Any]) -> str:
    """What the headline CIs are, as every report names them (scoring/tables.py `score_samples`'
    `bootstrap`): '95% CI (percentile bootstrap ×1000, clusters resampled)'; 'CI' without one."""
    found = scores.get("bootstrap") or {}
    if not found:
        return "CI"
    unit = "clusters" if found.get("unit") == "cluster" else "questions"
    return (f"{found.get('level', 0.95):.0%} CI ({found.get('method', 'percentile')} bootstrap "
            f"×{found.get('n_resamples')}, {unit} resampled)")


def interval_text(value: float | None, low: float | None, high: float | None) -> str:
    """'12.34 [8.10, 15.20]' (values already ×100), without the interval when it is missing, '–'
    for a missing value."""
    if value is None:
        return "–"
    return f"{value:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")


def score_text(headline: dict[str, Any]) -> str:
    """'FinScore 12.34 [8.10, 15.20]' (×100), '–' for a missing value."""
    return f"{headline['label']} {interval_text(headline['value'], headline['low'], headline['high'])}"


# Sources of a scorer's `correct_sources` that are finbench's own rules, not the benchmark's:
# a rule stands in where the official code asks an LLM judge and no --judge was given.
OWN_RULE_SOURCES = ("rules", "rule_fallback")


def scored_by(scores: dict[str, Any]) -> str:
    """What really scored the answers: the rule's name, and, where the scorer counts them, how
    many answers finbench's own rules decided in the official judge's place."""
    rule = rule_name(scores)
    sources = scores.get("correct_sources") or {}
    own = sum(int(sources.get(k) or 0) for k in OWN_RULE_SOURCES)
    if not own:
        return rule
    total = sum(int(v or 0) for v in sources.values())
    return (f"{rule} for {total - own} of {total} answers; the other {own} by finbench's own rules "
            "(a number within tolerance, the option's letter or text), not the official judge (--judge)")


def rule_name(scores: dict[str, Any]) -> str:
    """The name of the rule that scored: its variant's declared `rule` ("the benchmark's official
    rule", FinMME's "the paper's formula"), "variant NAME" for one its scorer does not declare."""
    scorer = declared_scorer(scores.get("benchmark"))
    variants = (OFFICIAL,) if scorer is None else scorer.variants
    found = next((v for v in variants if v.name == scores.get("variant")), None)
    return f"variant {scores.get('variant')}" if found is None else found.rule


def quantization_study(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A sweep's quantization study rows, only where quantization varies: a thinking or dtype
    sweep's rows would all say "not quantized"."""
    quant = {v.get("quant_label") or v.get("quant") or "none" for v in summary.get("variants", [])}
    varies = len(set((summary.get("axes") or {}).get("quant") or [])) > 1 or len(quant) > 1
    return (summary.get("study") or []) if varies else []
