"""`finbench leaderboard RUN_DIR...`: finished runs side by side, one row each.

A row: the run, model, quantization, thinking budget, protocol, benchmark, the headline score
with its CI (report/format.py `headline_score`), accuracy, n, sample errors, samples/s, the
other headlines its benchmark declares (`headlines`, report/format.py `run_headlines`: the
`Benchmark.leaderboard_metrics` the score holds, MME-Finance's binary accuracy, and each scored
part's headline, FinMTM's dialogue score and agent tool F2; then the label balance of its choice items:
constant answer, macro-recall, lowest label recall, report/balance.py), and the
paired difference against a reference run on the same benchmark: `scoring.compare_runs` over the
questions those two answered (`n_shared`; a run that shares none with its reference is not
compared, and a note says so): the difference of the mean per-question score (`delta`, ×100, named in
`delta_metric` by the headline metric it equals — the primary where that is a per-question mean,
accuracy for FinMME's FinScore, a weighted score — else "mean per-question score"), marked "*"
where its clustered t(G−1) interval excludes 0 (its `significant`, the verdict compare, sweep and
the line under the table print): the cell and its mark judge the same difference, one interval
each, in every output. Exact McNemar with Holm is
kept only as a secondary check, named as such in report.md (`mcnemar_p_holm`). The reference is
the run given as `reference`, or the first run of each benchmark — of a sweep folder, the sweep's own
reference (sweep.json `reference`), not the alphabetically first variant. Per-domain accuracy is the
benchmark's own breakdown, as its `Benchmark` declares it (`breakdown_column`: FinMME `domain`,
FAMMA `subfield`, FinMTM `question_type`).

A folder holding a multi-benchmark run (summary.json) or a sweep (sweep.json) stands for the run
folders inside it. Nothing is recomputed but the paired tests, from the run folders alone.
Written as CSV, Markdown or a sortable HTML page (report/html.py), by the file's suffix.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Sequence

from finbench.benchmarks import get_benchmark
from finbench.benchmarks.declared import metric_label
from finbench.benchmarks.metrics import ACCURACY
from finbench.core.encodable import open_text, write_text
from finbench.core.types import RESULTS_FILE
from finbench.report.balance import balance_headlines
from finbench.report.console import model_name
from finbench.report.fit import fit_words, word_room
from finbench.report.format import also_text, delta_text, headline_label, interval_text, power_line, run_headlines
from finbench.report.html import write_leaderboard_report
from finbench.report.markdown import leaderboard_markdown
from finbench.studies import question_means

FORMATS = (".csv", ".md", ".html")
MARK = "*"  # the one mark: the paired difference's clustered interval excludes 0
MARK_NOTE = ("Δ vs reference = the paired difference of the mean per-question score (×100; the metric it equals "
             "in brackets where that is not the run's headline metric); * = that difference is significant at "
             "α = 0.05 (two-sided) by its clustered t(G−1) interval (the verdict printed under the table)")
MEAN_SCORE = "mean per-question score"  # what `delta` is named where no headline metric equals it
COLUMNS = ("run", "model", "model_source", "quant", "thinking", "protocol", "benchmark", "metric", "score", "ci_low", "ci_high",
           ACCURACY.key, "n", "errors", "samples_per_s", "reference", "delta", "delta_metric", "significant", "mark",
           "n_shared")


def _declared(benchmark: str) -> Any:
    try:
        return get_benchmark(benchmark)
    except ValueError:
        return None


def breakdown_column(benchmark: str) -> str | None:
    """The breakdown a benchmark's `Benchmark` puts on the leaderboard; None for a benchmark not
    registered in this process (its run shows its first breakdown)."""
    declared = _declared(benchmark)
    return None if declared is None else declared.breakdown_column


def leaderboard_metrics(benchmark: str) -> tuple[str, ...]:
    """The metrics a benchmark's `Benchmark` shows beside its headline (`leaderboard_metrics`);
    accuracy for a benchmark not registered in this process."""
    declared = _declared(benchmark)
    return (ACCURACY.key,) if declared is None else declared.leaderboard_metrics


def run_folders(paths: Sequence[str | Path]) -> list[Path]:
    """The run folders the paths stand for: a run folder itself, or the run folders directly inside
    a multi-benchmark or sweep folder; anything else is one clear error."""
    out: list[Path] = []
    for path in map(Path, paths):
        if (path / RESULTS_FILE).is_file():
            out.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if (p / RESULTS_FILE).is_file()) if path.is_dir() else []
        if not inside:
            raise ValueError(f"{path}: not a finbench run folder (no results.json), nor a folder of run folders")
        reference = _sweep_reference(path)
        out.extend(sorted(inside, key=lambda p: p.name != reference))  # a sweep's own reference first
    if len({p.resolve() for p in out}) != len(out):
        raise ValueError("a run folder is named twice")
    return out


def _sweep_reference(folder: Path) -> str | None:
    """The variant a sweep folder compares against (its sweep.json `reference`: the first of its
    axes, `quant-none` before `quant-int4wo`); None for any other folder."""
    from finbench.app.sweep import SWEEP_FILE  # here: the sweep's imports load only for a folder of folders

    try:
        return json.loads((folder / SWEEP_FILE).read_text()).get("reference")
    except (OSError, ValueError, AttributeError):
        return None


def mark(significant: bool | None) -> str:
    """The board's mark of a difference: its interval's verdict (`clustered.paired_difference`
    `significant`), never a test of its own, so the board cannot contradict compare or sweep."""
    return MARK if significant else ""


def _names(folders: Sequence[Path]) -> list[str]:
    """Short distinct names: the folder's name, with its parent's where two names collide."""
    names = [f.name for f in folders]
    if len(set(names)) == len(names):
        return names
    names = [f"{f.parent.name}/{f.name}" for f in folders]
    return names if len(set(names)) == len(names) else [str(f) for f in folders]


def _row(name: str, folder: Path, results: dict[str, Any]) -> dict[str, Any]:
    scores = results["scores"]
    headlines = run_headlines(scores, leaderboard_metrics(results["benchmark"])) + balance_headlines(scores)
    headline = headlines[0]
    thinking = results.get("thinking")
    throughput = results.get("throughput", {})
    column = breakdown_column(results["benchmark"])
    breakdowns = scores.get("breakdowns", {})
    domains = breakdowns.get(column) or next(iter(breakdowns.values()), {})
    row = {"run": name, "path": str(folder), "model": model_name(results), "model_source": results["config"]["model"],
              "quant": results.get("fingerprint", {}).get("quant") or results["config"].get("quant", "none"),
              "thinking": f"budget {thinking['budget']}" if thinking else "off", "protocol": results["protocol"],
              "benchmark": results["benchmark"], "metric": headline["label"], "score": headline["value"],
              "ci_low": headline["low"], "ci_high": headline["high"],
              ACCURACY.key: 100 * scores[ACCURACY.key] if scores.get(ACCURACY.key) is not None else None,
              "n": headline["n"], "errors": results["errors"]["count"], "samples_per_s": throughput.get("samples_per_s"),
              "all_from_cache": bool(throughput.get("all_from_cache")),
              "domain_column": column if column in breakdowns else next(iter(breakdowns), None),
              "domains": {label: {"n": g["n"], ACCURACY.key: 100 * g[ACCURACY.key]} for label, g in domains.items()},
              "headlines": headlines,  # the headline, then what the benchmark declares beside it (format.run_headlines)
              "reference": None, "delta": None, "delta_metric": None, "significant": None, "mark": "", "mcnemar_p_holm": None,
              "n_shared": None}
    row["also"] = also_text(row)
    return row


def build(paths: Sequence[str | Path], reference: str | Path | None = None) -> dict[str, Any]:
    """The leaderboard of the runs `paths` stand for (see the module docstring), JSON-ready."""
    from finbench.scoring.tables import compare_runs
    from finbench.app.runs import load_samples

    folders = run_folders(paths)
    names = _names(folders)
    results = [json.loads((f / RESULTS_FILE).read_text()) for f in folders]
    rows = [_row(name, folder, result) for name, folder, result in zip(names, folders, results)]
    chosen = None
    if reference is not None:
        matches = [i for i, f in enumerate(folders) if f.resolve() == Path(reference).resolve()]
        if not matches:
            raise ValueError(f"--reference {reference}: not one of the run folders given")
        chosen = matches[0]
    notes = []
    for benchmark in dict.fromkeys(r["benchmark"] for r in rows):
        members = [i for i, r in enumerate(rows) if r["benchmark"] == benchmark]
        base = chosen if chosen in members else members[0]
        frames = {i: load_samples(folders[i]) for i in members}
        spec = get_benchmark(benchmark)
        others, disjoint = _sharing(base, [i for i in members if i != base], frames, spec)
        notes += [f"{names[i]}: no scored question in common with the reference {names[base]}: not compared"
                  for i in disjoint]
        if not others:
            continue
        order = [base, *others]
        means = [question_means(folders[i], frames[i], spec) for i in order]
        comparison = compare_runs([frames[i] for i in order], [names[i] for i in order], benchmark=spec, n_bootstrap=0,
                                  means=means)
        for i, c in zip(others, comparison["comparisons"]):
            delta = c.get("diff")  # what `significant` judges: the paired difference of the mean per-question score
            rows[i].update(reference=names[base], delta=None if delta is None else 100 * delta,
                           delta_metric=judged_metric(comparison, c), significant=c.get("significant"),
                           mark=mark(c.get("significant")), mcnemar_p_holm=c["p_holm"], n_shared=c["n"],
                           comparison=power_entry(c))
        rows[base].update(reference="(reference)", n_shared=max(c["n"] for c in comparison["comparisons"]))
        notes += comparison.get("notes", [])
        protocols = {rows[i]["protocol"] for i in members}
        if len(protocols) > 1:
            notes.append(f"{benchmark}: runs of different protocols ({', '.join(sorted(protocols))}) are compared "
                         "question by question on their correctness")
    return {"rows": rows, "notes": notes, "columns": list(COLUMNS), "mark": MARK_NOTE}


def _sharing(base: int, others: list[int], frames: dict[int, Any], spec: Any) -> tuple[list[int], list[int]]:
    """(the runs that share a scored question with the reference, those that share none): each run
    is compared with the reference on the questions its benchmark's rule scored in both."""
    from finbench.scoring.tables import build_table

    ids = {i: set(build_table(frame, spec).ids.tolist()) for i, frame in frames.items()}
    return [i for i in others if ids[i] & ids[base]], [i for i in others if not ids[i] & ids[base]]


def judged_metric(comparison: dict[str, Any], c: dict[str, Any]) -> str:
    """The name of the difference a row's Δ and mark judge (`diff`, the paired difference of the
    mean per-question score): the label of the first headline metric, the primary first, whose
    difference it is (accuracy, FinMTM's score; FinMME's accuracy, FinScore being a weighted score,
    not a per-question mean), else "mean per-question score"."""
    diff = c.get("diff")
    metrics = dict.fromkeys([comparison["primary"], *comparison.get("headline", [])])
    same = next((m for m in metrics if diff is not None and (c["delta"].get(m) or {}).get("value") is not None
                 and abs(c["delta"][m]["value"] - diff) <= 1e-9), None)
    label = MEAN_SCORE if same is None else metric_label(comparison["benchmark"], same)
    return label + (" (per-question means over the K samples)" if c.get("per_question") else "")


def to_csv(board: dict[str, Any], path: Path) -> Path:
    """One line per run: the columns above, then the other headlines of each run (`headline:<metric>`,
    `headline:binary_accuracy`, `headline:dialogue.score`, ×100 or on their part's scale), then the
    accuracy (×100) of each group of each benchmark's domain breakdown, as `<breakdown>:<group>`
    columns (`domain:Banking`, `subfield:equity`)."""
    groups = sorted({(r["domain_column"], d) for r in board["rows"] for d in r["domains"]})
    also = list(dict.fromkeys(h["metric"] for r in board["rows"] for h in r.get("headlines", [])[1:]))
    with open_text(path, newline="") as handle:  # what UTF-8 cannot encode written escaped
        writer = csv.writer(handle)
        writer.writerow([*COLUMNS, *(f"headline:{m}" for m in also), *(f"{column}:{d}" for column, d in groups)])
        for row in board["rows"]:
            shown = {h["metric"]: h["value"] for h in row.get("headlines", [])[1:]}
            writer.writerow([_csv_value(row[c]) for c in COLUMNS] + [_csv_value(shown.get(m)) for m in also]
                            + [_csv_value(row["domains"].get(d, {}).get(ACCURACY.key)) if row["domain_column"] == column
                               else "" for column, d in groups])
    return path


def _csv_value(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    return "" if value is None else value


def write(board: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    if path.suffix not in FORMATS:
        raise ValueError(f"--out {path}: the suffix says the format: {', '.join(FORMATS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        return to_csv(board, path)
    if path.suffix == ".md":
        write_text(path, leaderboard_markdown(board))
        return path

    return write_leaderboard_report(board, path)


POWER_FIELDS = ("run", "baseline", "diff", "se_diff", "ci_diff", "significant", "mde", "verdict", "per_question",
                "cluster_by", "n_clusters")


def power_entry(comparison: dict[str, Any]) -> dict[str, Any]:
    """A row's paired difference against its reference (0–1 scale, clustered SE, `mde`)."""
    return {k: comparison.get(k) for k in POWER_FIELDS}


IDENTITY = ("model", "quant", "thinking", "protocol")  # a column only where the runs differ in it
OPTIONAL = ("errors", "samples/s")  # shown only where they fit the console's width
NUMERIC = ("score [CI]", "n", "Δ vs ref")  # right-aligned; a cell wraps between its numbers, never inside one


def _board_lines(r: dict[str, Any]) -> list[dict[str, str]]:
    """The console lines of one run: one per headline (format.run_headlines), the run's own cells
    on its first line."""
    delta = "ref" if r["reference"] == "(reference)" else "" if r["delta"] is None else delta_text(r)
    first = {"run": r["run"], **{k: str(r[k]) for k in IDENTITY}, "benchmark": r["benchmark"],
             "Δ vs ref": delta, "errors": str(r["errors"]),
             "samples/s": "–" if not r["samples_per_s"] else f"{r['samples_per_s']:.2f}"}
    lines = []
    for i, h in enumerate(r.get("headlines") or [{"label": r["metric"], "value": r["score"], "low": r["ci_low"],
                                                  "high": r["ci_high"], "n": r["n"]}]):
        line = dict(first) if i == 0 else {}
        line.update({"metric": headline_label(h), "score [CI]": interval_text(h["value"], h["low"], h["high"]),
                     "n": "–" if h.get("n") is None else str(h["n"])})
        lines.append(line)
    return lines


def _board_table(lines: list[list[dict[str, str]]], columns: list[str], title: str, caption: str,
                 whole: bool = True) -> Any:
    """The board's table; `whole`: a number cell kept on one line (else it wraps between its numbers)."""
    from rich.table import Table

    table = Table(title=title, caption=caption)
    for name in columns:
        numeric = name in (*NUMERIC, *OPTIONAL)
        table.add_column(name, justify="right" if numeric else "left", no_wrap=whole and numeric,
                         overflow="fold")  # a word longer than any width the board can give folds, never cut
    for run in lines:
        for i, line in enumerate(run):
            table.add_row(*(line.get(c, "") for c in columns), end_section=i == len(run) - 1)
    return table


def print_board(board: dict[str, Any], console: Any) -> None:
    """One row per run and headline (its benchmark's declared headlines: format.run_headlines),
    fitted to the console's width: the settings every run shares (model, quantization, thinking,
    protocol) go into the title, not a column; cells wrap between words, never inside a name, a
    label or a number (report/fit.py); the optional columns (errors, samples/s) are left out
    where they would not fit with every number on one line, and only where the words still would
    not fit a score's CI goes under it (a name longer than the terminal allows folds)."""
    rows = board["rows"]
    shared = [k for k in IDENTITY if len({str(r[k]) for r in rows}) <= 1]
    lines = [_board_lines(r) for r in rows]
    columns = ["run", *[k for k in IDENTITY if k not in shared], "benchmark", "metric", *NUMERIC, *OPTIONAL]
    if not any(run[0]["Δ vs ref"] for run in lines):  # no benchmark has two runs: nothing compared
        columns.remove("Δ vs ref")
    title = "leaderboard (scores ×100 unless a metric names its scale)"
    if rows and shared:
        title += ": " + " · ".join(f"{k} {rows[0][k]}" for k in shared)
    table = _board_table(lines, columns, title, board["mark"])
    for name in reversed(OPTIONAL):  # the least needed goes first
        if not word_room(console, table):
            columns.remove(name)
            table = _board_table(lines, columns, title, board["mark"])
    if not word_room(console, table, tightest=True):  # narrower still: a score and its CI on two lines
        narrower = _board_table(lines, columns, title, board["mark"], whole=False)
        table = narrower if word_room(console, narrower, tightest=True) else table  # else a name too long folds
    fit_words(console, table)
    console.print(table)
    for r in rows:
        if r.get("comparison") and (line := power_line(r["comparison"])):
            console.print(line, markup=False)
    for note in board["notes"]:
        console.print(f"note: {note}", markup=False)
