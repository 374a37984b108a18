"""`report.md`: the tables of a run or a sweep in Markdown, for papers (no plots). Values ×100
where the header says so; files elsewhere keep the 0–1 scale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from finbench.benchmarks.declared import metric_label, penalties
from finbench.benchmarks.metrics import ACCURACY, SCORE
from finbench.core.encodable import write_text
from finbench.core.formatting import pct
from finbench.report.balance import balance_sections
from finbench.report.format import (also_text, bootstrap_label, delta_text, headline_score, interval_text, num,
                                    part_cells, power_line, quantization_study, sampled_label, score_text, scored_by,
                                    scored_parts)
from finbench.report.run_sections import run_sections
from finbench.report.studies import baseline_line, compare_rows, study_sections


def _table(header: list[str], rows: list[list[str]]) -> str:
    rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _ci(ci: dict[str, Any] | None) -> str:
    return f"[{pct(ci['low'])}, {pct(ci['high'])}]" if ci and ci.get("low") is not None else "–"


def run_markdown(results: dict[str, Any]) -> str:
    scores = results["scores"]
    headline = headline_score(scores)
    parts = [f"# finbench · {results['benchmark']} · {results['config']['model']}",
             f"{scores.get('label', '')}; protocol {results['protocol']}; {results['n_questions']} questions; "
             f"{results['errors']['count']} sample errors.",
             f"**{score_text(headline)}** (×100) · n {headline['n']}"]
    if baseline_line(results):
        parts.append(f"{baseline_line(results)}.")
    if scores.get("n"):
        parts += ["## Scores (×100)",
                  _table(["metric", "value ×100", f"{bootstrap_label(scores)} ×100"],
                         [[metric_label(results["benchmark"], k)
                           + (" (penalty: lower is better)" if k in penalties(results["benchmark"], [k]) else ""),
                           pct(scores.get(k)), _ci(scores.get("ci", {}).get(k))] for k in scores.get("headline", [])]),
                  f"{scores['n']} scored questions, {scores.get('n_errors', 0)} of them with an error (scored as wrong); "
                  f"scored by {scored_by(scores)}."]
    else:
        parts += [f"No item of this run is scored by this rule ({scores.get('label', '')})."]
    for part, found in scored_parts(scores):
        parts.append(f"## {part.title}")
        if not found.get("n_scored"):
            parts.append(f"{part.name}: {found.get('unscored') or 'nothing scored'}")
            continue
        parts += [_table(["metric", "value", "95% bootstrap CI"], [list(cells) for cells in part_cells(part, found)]),
                  f"n = {found['n_scored']} of {found['n']} scored ({found.get('n_errors', 0)} with an error, scored 0)"
                  + (f"; {found['unscored']}" if found.get("unscored") else "") + f". {found.get('scale', '')}."]
        if found.get("by_level"):
            parts.append(_table(["level", "n", SCORE.key], [[level, str(g["n"]), f"{g[SCORE.key]:.2f}"]
                                                          for level, g in found["by_level"].items()]))
    for section in study_sections(results) + balance_sections(results) + run_sections(results):  # studies, clustered error bars, cost
        parts.append(f"## {section['title']}")
        parts += [_table(table["header"], table["rows"]) for table in section["tables"]]
        parts.append(section["note"])
    for column, groups in scores.get("breakdowns", {}).items():
        has_score = any(SCORE.key in g for g in groups.values())
        parts += [f"## By {column}",
                  _table([column, "n", "accuracy ×100", "95% CI (Wilson) ×100"] + (["score ×100"] if has_score else []),
                         [[name, str(g["n"]), pct(g[ACCURACY.key]), _ci(g.get("ci"))]
                          + ([pct(g.get(SCORE.key))] if has_score else []) for name, g in groups.items()])]
    calib = scores.get("calibration")
    if calib:
        parts += ["## Calibration", f"{calib['items']}: ECE ×100 {pct(calib['ece'])}, Brier {num(calib['brier'])}, "
                                    f"mean confidence ×100 {pct(calib['mean_confidence'])}."]
    throughput = results.get("throughput", {})
    keys = [k for k in ("samples_per_s", "image_tokens_per_s", "reasoning_tokens", "model_memory_gib",
                        "peak_memory_gib", "peak_rss_gib") if k in throughput]
    parts += ["## Throughput" + (" (of the run that computed the answers)" if throughput.get("all_from_cache") else ""),
              _table(["quantity", "value"], [[k, num(throughput[k])] for k in keys])]
    return "\n\n".join(parts) + "\n"


def write_markdown(run_dir: str | Path, results: dict[str, Any] | None = None) -> Path:
    run_dir = Path(run_dir)
    results = results or json.loads((run_dir / "results.json").read_text())
    path = run_dir / "report.md"
    write_text(path, run_markdown(results))
    return path


def sweep_markdown(summary: dict[str, Any]) -> str:
    headline = summary["comparison"]["headline"]
    comparisons = {c["run"]: c for c in summary["comparison"]["comparisons"]}
    distributions = summary["distributions"]["runs"]
    rows = []
    for v in summary["variants"]:
        rows.append([v["name"], *[f"{pct(v['scores'].get(m))} {_ci(v['ci'].get(m))}" for m in headline],
                     num(v.get("model_memory_gib")), num(v.get("samples_per_s")),
                     num(v.get("reasoning_tokens_mean"))])
    deltas = []
    for v in summary["variants"][1:]:
        c, d = comparisons[v["name"]], distributions.get(v["name"], {})
        deltas.append([v["name"], *[f"{pct(c['delta'][m]['value'])} {_ci(c['delta'][m].get('ci'))}" for m in headline],
                       f"{num(c['mcnemar']['p'])}", f"{num(c['p_holm'])}", num(d.get("kl_mean")),
                       pct(d.get("agreement")), pct(d.get("gold_shift_mean"))])
    return "\n\n".join([
        f"# finbench sweep · {summary['benchmark']}",
        f"Reference: {summary['reference']}; {summary['comparison']['n_shared']} shared questions.",
        "## Variants (×100, 95% bootstrap CI)",
        _table(["variant", *[metric_label(summary.get("benchmark"), m) for m in headline], "model memory GiB", "samples/s",
                "reasoning tokens"], rows),
        f"## Against {summary['reference']} (×100; 95% CI: clustered t for mean scores, else paired bootstrap; "
        "exact McNemar, Holm)",
        _table(["variant", *[f"Δ {metric_label(summary.get('benchmark'), m)}{sampled_label(summary['comparison']['comparisons'], m)}"
                             for m in headline], "McNemar p", "Holm p",
                "KL mean (nats)", "top-1 agreement", "gold prob shift"], deltas),
        *_power_markdown(summary["comparison"]["comparisons"]),
        *_study_markdown(summary),
        *_robustness_markdown(summary),
    ]) + "\n"


def _power_markdown(comparisons: list[dict[str, Any]]) -> list[str]:
    """One line per comparison: its clustered difference and the smallest one the set detects."""
    lines = [f"- {line}" for line in (power_line(c, check=True) for c in comparisons) if line]
    return ["\n".join(lines)] if lines else []


def _robustness_markdown(summary: dict[str, Any]) -> list[str]:
    """The robustness studies of every variant side by side (sweeps whose variants carry them)."""
    studies = {v["name"]: v.get("studies") or {} for v in summary["variants"]}
    if not any(studies.values()):
        return []
    header, rows = compare_rows(studies)
    return ["## Robustness studies", _table(header, rows)]


def _study_markdown(summary: dict[str, Any]) -> list[str]:
    """The quantization study and per-domain sensitivity tables (sweeps written since they exist)."""
    study, domains = quantization_study(summary), (summary.get("domain_sensitivity") or {}).get("domains") or []
    parts = []
    if study:
        rows = [[r["name"], r["quant_label"], r["quantized"], f"{pct(r['delta'])} {_ci(r.get('delta_ci'))}",
                 str(r["right_to_wrong"]), str(r["wrong_to_right"]), num(r["mcnemar_p"]), num(r["p_holm"]),
                 num(r["kl_mean"]), pct(r["agreement"]), pct(r["gold_shift_mean"]),
                 f"{pct(r['ece'])} ({pct(r['ece_delta'])})",
                 "; ".join(f"{d['domain']} {pct(d['delta'])}" for d in r["domains_losing_most"]) or "none",
                 num(r["memory_ratio"]), num(r["speed_ratio"])] for r in study]
        parts += [f"## Quantization study (against {summary['reference']}; ×100)",
                  _table(["variant", "runs as", "what is quantized", f"Δ {metric_label(summary.get('benchmark'), study[0]['primary'])}",
                          "right → wrong", "wrong → right", "McNemar p", "Holm p", "KL mean (nats)", "top-1 agreement",
                          "gold prob shift", "ECE (Δ)", "domains losing most", "memory ×", "speed ×"], rows)]
    if domains:
        names = [v["name"] for v in summary["variants"]]
        rows = [[d["domain"], str(d["n"]), pct(d[ACCURACY.key].get(names[0])),
                 *[pct(d["delta"].get(n)) for n in names[1:]]] for d in domains]
        parts += ["## Per-domain sensitivity (accuracy ×100; most sensitive first)",
                  _table(["domain", "n", names[0], *[f"Δ {n}" for n in names[1:]]], rows)]
    return parts


def write_sweep_markdown(out: str | Path, summary: dict[str, Any]) -> Path:
    path = Path(out) / "report.md"
    write_text(path, sweep_markdown(summary))
    return path


def leaderboard_markdown(board: dict[str, Any]) -> str:
    """The leaderboard's tables: one row per run (its headline, then the other headlines its
    benchmark declares: format.also_text), then per benchmark the accuracy by domain."""
    rows = [[r["run"], r["model"], r["quant"], r["thinking"], r["protocol"], r["benchmark"], r["metric"],
             _board_score(r), also_text(r), str(r["n"]), str(r["errors"]), num(r["samples_per_s"]),
             delta_text(r)]
            for r in board["rows"]]
    parts = ["# finbench leaderboard",
             _table(["run", "model", "quant", "thinking", "protocol", "benchmark", "metric", "score ×100 [95% CI]",
                     "also ×100 [95% CI]", "n", "errors", "samples/s", "Δ vs reference"], rows),
             board["mark"] + ".",
             *_power_markdown([r["comparison"] for r in board["rows"] if r.get("comparison")]),
             *_mcnemar_check(board["rows"])]
    for benchmark in dict.fromkeys(r["benchmark"] for r in board["rows"]):
        members = [r for r in board["rows"] if r["benchmark"] == benchmark]
        domains = sorted({d for r in members for d in r["domains"]})
        if domains:
            parts += [f"## {benchmark}: accuracy ×100 by {members[0]['domain_column']}",
                      _table(["run", *domains], [[r["run"], *(_number(r["domains"].get(d, {}).get(ACCURACY.key))
                                                           for d in domains)] for r in members])]
    parts += [f"note: {note}" for note in board["notes"]]
    return "\n\n".join(parts) + "\n"


def _mcnemar_check(rows: list[dict[str, Any]]) -> list[str]:
    """The exact McNemar test (Holm over the runs of a benchmark) on per-question correctness: a
    secondary check, never the verdict; it tests a different quantity and may disagree with it."""
    checked = [r for r in rows if r.get("mcnemar_p_holm") is not None]
    if not checked:
        return []
    return ["Secondary check, not the verdict (exact McNemar on per-question correctness, Holm-adjusted p): "
            + "; ".join(f"{r['run']} vs {r['reference']} p = {num(r['mcnemar_p_holm'])}" for r in checked) + "."]


def _number(value: Any, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _board_score(row: dict[str, Any]) -> str:
    """The run's headline score [CI] (its first headline: format.run_headlines)."""
    headline = row["headlines"][0]
    return interval_text(headline["value"], headline["low"], headline["high"])
