"""`finbench score` and `finbench compare` on cached run folders (CPU only, no model needed).

A run folder holds `samples.parquet` (see finbench/report/schema.py); scores are recomputed from
it, printed as rich tables and written as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from finbench.report.format import plural
from finbench.scoring import compare_runs, score_samples
from finbench.scoring.api import _jsonable
from finbench.scoring.stats import LOWER_IS_BETTER, distribution_comparison
from finbench.types import RESULTS_FILE

SAMPLES_FILE = "samples.parquet"
PERCENT_METRICS = {"finscore", "domain_accuracy", "domain_score", "p_h", "accuracy", "score", "score_old", "execution_rate"}


# ---- IO ---------------------------------------------------------------------------------------------
def load_samples(run_dir: Path) -> pd.DataFrame:
    """The run's samples table; a clear error when the folder is not a run folder."""
    path = Path(run_dir) / SAMPLES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a finbench run folder")
    return pd.read_parquet(path)


def detect_benchmark(df: pd.DataFrame, run_dir: Path | None = None) -> str:
    """Benchmark name from the samples' `benchmark` column, else results.json, else finmme."""
    if "benchmark" in df.columns:
        names = df["benchmark"].dropna().astype(str)
        names = names[names != ""]
        if len(names):
            return names.iloc[0].lower()
    if run_dir is not None and (Path(run_dir) / RESULTS_FILE).is_file():
        try:
            return str(json.loads((Path(run_dir) / RESULTS_FILE).read_text())["benchmark"]).lower()
        except (KeyError, ValueError):
            pass
    return "finmme"


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Strict JSON (scores contain no NaN: missing values are null)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


# ---- commands ---------------------------------------------------------------------------------------
def score_command(run_dir: Path, variant: str = "official", n_bootstrap: int = 1000, seed: int = 0,
                  console: Any = None) -> dict[str, Any]:
    """Score RUN_DIR/samples.parquet, write RUN_DIR/scores_<variant>.json, print the tables."""
    run_dir = Path(run_dir)
    df = load_samples(run_dir)
    scores = score_samples(df, benchmark=detect_benchmark(df, run_dir), variant=variant,
                           n_bootstrap=n_bootstrap, seed=seed)
    scores["run_dir"] = str(run_dir)
    path = write_json(run_dir / f"scores_{variant}.json", scores)
    print_scores(scores, console)
    _console(console).print(f"wrote {path}")
    return scores


def run_protocols(run_dirs: Sequence[Path]) -> dict[str, str]:
    """Each run folder's protocol (constrained, official, ...) from its results.json, if it has one."""
    protocols = {}
    for run_dir in run_dirs:
        path = Path(run_dir) / "results.json"
        if path.exists():
            try:
                protocols[str(run_dir)] = str(json.loads(path.read_text()).get("protocol", ""))
            except (OSError, ValueError):
                continue
    return protocols


def coverage_notes(dfs: Sequence[pd.DataFrame], names: Sequence[str]) -> list[str]:
    """Say when a comparison narrows to the questions every run has (never silently)."""
    ids = [set(df["id"].astype(str)) for df in dfs]
    shared = set.intersection(*ids)
    return [f"{name}: {len(own) - len(shared)} of its {len(own)} questions are not in every run and are left "
            f"out of the comparison (compared on {len(shared)} shared questions)"
            for name, own in zip(names, ids) if len(own) > len(shared)]


def compare_command(run_dirs: Sequence[Path], out: Path | None = None, n_bootstrap: int = 1000, seed: int = 0,
                    console: Any = None, allow_mixed_protocols: bool = False) -> dict[str, Any]:
    """Compare runs against the first (baseline); print tables and write the JSON to `out`
    (default RUN_A/compare.json)."""
    run_dirs = [Path(d) for d in run_dirs]
    if len(run_dirs) < 2:
        raise ValueError("compare needs at least two run folders")
    dfs = [load_samples(d) for d in run_dirs]
    benchmarks = {detect_benchmark(df, d) for df, d in zip(dfs, run_dirs)}
    if len(benchmarks) != 1:
        raise ValueError(f"runs are on different benchmarks: {sorted(benchmarks)}")
    protocols = run_protocols(run_dirs)
    mixed = len(set(protocols.values())) > 1
    if mixed and not allow_mixed_protocols:
        raise ValueError("runs use different protocols (" + ", ".join(f"{d}: {p}" for d, p in protocols.items())
                         + "); their answers are not comparable item by item — pass --allow-mixed-protocols "
                           "to compare them anyway")
    names = [d.name or str(d) for d in run_dirs]
    if len(set(names)) != len(names):
        names = [str(d) for d in run_dirs]
    result = compare_runs(dfs, names, benchmark=benchmarks.pop(), n_bootstrap=n_bootstrap, seed=seed)
    result["notes"] = list(result.get("notes", [])) + coverage_notes(dfs, names) + (
        ["runs use different protocols: " + ", ".join(f"{d}: {p}" for d, p in protocols.items())] if mixed else [])
    result["run_dirs"] = [str(d) for d in run_dirs]
    result["distributions"] = _jsonable(distribution_comparison(dfs, names))
    result.update(robustness_comparison(run_dirs, dfs, names, protocols, result["benchmark"]))
    path = write_json(Path(out) if out is not None else run_dirs[0] / "compare.json", result)
    print_comparison(result, console)
    _console(console).print(f"wrote {path}")
    return result


def robustness_comparison(run_dirs: Sequence[Path], dfs: Sequence[pd.DataFrame], names: Sequence[str],
                          protocols: dict[str, str], benchmark: str) -> dict[str, Any]:
    """`studies`: each run's robustness studies side by side (from its results.json); and, for each
    run made with another protocol than the baseline (constrained vs official), `disagreements`:
    the shared items whose answers differ, with the official raw output and which run is right."""
    from finbench.scoring.robustness import answer_disagreements, study_summary

    out: dict[str, Any] = {}
    summaries = {}
    for name, run_dir in zip(names, run_dirs):
        try:
            summaries[name] = study_summary(json.loads((Path(run_dir) / RESULTS_FILE).read_text()))
        except (OSError, ValueError):
            continue
    if any(summaries.values()):
        out["studies"] = summaries
    protocol = [protocols.get(str(d), "") for d in run_dirs]
    pairs = {name: answer_disagreements([dfs[0], df], [names[0], name], benchmark,
                                        official=next((n for n, p in ((names[0], protocol[0]), (name, protocol[k]))
                                                       if p == "official"), None))
             for k, (name, df) in enumerate(zip(names, dfs)) if k and protocol[k] != protocol[0]}
    if pairs:
        out["disagreements"] = pairs
    return out


# ---- tables -------------------------------------------------------------------------------------------
def _console(console: Any = None) -> Any:
    if console is not None:
        return console
    from rich.console import Console

    return Console()


def _fmt(name: str, value: float | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value * 100:.{digits}f}" if name in PERCENT_METRICS else f"{value:.4g}"


def _fmt_ci(name: str, ci: dict[str, Any] | None) -> str:
    if not ci or ci.get("low") is None:
        return ""
    return f"[{_fmt(name, ci['low'])}, {_fmt(name, ci['high'])}]"


RULE_NAMES = {"official": "the benchmark's official rule", "paper": "the paper's formula (not the headline)"}
SMALL_N = 30  # below this many items a headline CI is shown with a word of caution


def print_scores(scores: dict[str, Any], console: Any = None, max_groups: int = 30, verbose: bool = True,
                 protocol: str | None = None) -> None:
    """Rich tables of a `score_samples` result: the headline (×100, with CIs), the parts a rule
    scores apart (FinMTM dialogue and agent), breakdowns (n, accuracy, 95% Wilson CI), calibration.
    `verbose=False` shows only the breakdown with the largest spread; `protocol` names how the
    answers were produced (the scoring rule is another thing: `variant`)."""
    con = _console(console)
    _print_headline(con, scores, protocol)
    _print_parts(con, scores)
    breakdowns = {c: g for c, g in scores.get("breakdowns", {}).items() if g}
    single = {c: g for c, g in breakdowns.items() if len(g) == 1}  # one group: a line, not a table
    breakdowns = {c: g for c, g in breakdowns.items() if len(g) > 1} or breakdowns
    if verbose:
        for column, groups in breakdowns.items():
            _print_breakdown(con, column, groups, max_groups)
        for column, groups in single.items():
            if column not in breakdowns:
                (label, g), = groups.items()
                con.print(f"by {column}: one group, {label} (n {g['n']}, accuracy {_fmt('accuracy', g['accuracy'])} "
                          f"{_fmt_ci('accuracy', g.get('ci'))})", markup=False, soft_wrap=True)
    elif breakdowns:
        column = widest_breakdown(breakdowns)
        rest = len(breakdowns) - 1
        _print_breakdown(con, column, groups=breakdowns[column], max_groups=max_groups,
                         title=f"by {column} (×100) — the largest spread"
                               + (f"; {plural(rest, 'other breakdown')}: --verbose-tables or report.html" if rest else ""))
    if verbose:
        _print_calibration(con, scores)
    for note in scores.get("notes", []) + _small_sample_notes(scores):
        con.print(f"note: {note}", markup=False)


def widest_breakdown(breakdowns: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The breakdown whose groups differ most in accuracy (max − min), over groups of at least two
    questions where there are such; ties go to the first."""
    def spread(groups: dict[str, dict[str, Any]]) -> float:
        values = [g["accuracy"] for g in groups.values() if g.get("n", 0) >= 2 and g.get("accuracy") is not None]
        values = values or [g["accuracy"] for g in groups.values() if g.get("accuracy") is not None]
        return max(values) - min(values) if len(values) > 1 else -1.0

    return max(breakdowns, key=lambda column: spread(breakdowns[column]))


def _print_headline(con: Any, scores: dict[str, Any], protocol: str | None) -> None:
    from rich.table import Table

    n = int(scores.get("n") or 0)
    rule = RULE_NAMES.get(scores.get("variant"), f"variant {scores.get('variant')}")
    how = (f"protocol {protocol}, " if protocol else "") + f"scored by {rule}"
    title = f"{scores.get('label', scores.get('benchmark'))}"
    if n == 0:
        con.print(f"{title}: no item of this run is scored by this rule ({how})", markup=False, soft_wrap=True)
        return
    ci = scores.get("ci", {})
    level = next(iter(ci.values()))["level"] if ci else None
    errors = int(scores.get("n_errors") or 0)
    caption = (f"{how}; {plural(n, 'scored question')}"
               + (f", {errors} of them with an error (scored as wrong)" if errors else "") + "; values × 100")
    head = Table(title=title)
    head.add_column("metric")
    head.add_column("value", justify="right")
    if ci:
        head.add_column(f"{level:.0%} CI (bootstrap ×{scores['bootstrap']['n_resamples']})", justify="right")
    for name in scores.get("headline", []):
        label = f"{name} (penalty: lower is better)" if name in LOWER_IS_BETTER else name
        row = [label, _fmt(name, scores.get(name))]
        if ci:
            row.append(_fmt_ci(name, ci.get(name)))
        head.add_row(*row)
    con.print(head)
    con.print(caption, markup=False, highlight=False, soft_wrap=True)  # under the table, never squeezed into its width


PART_METRICS = {  # the parts a rule scores apart: (key, label, ×100?) in display order
    "dialogue": (("turn", "turn (judge, 0–10)", False), ("session", "session checklist (0–10)", False),
                 ("score", "final = (0.5·turn + 0.5·session)×10 (0–100)", False)),
    "agent": (("precision", "tool precision ×100", True), ("recall", "tool recall ×100", True),
              ("f2", "tool F2 ×100", True), ("tool_score", "Qt = 25·F2 (0–25)", False)),
}
PART_TITLES = {"dialogue": "FinMTM dialogue sessions (judged by --judge)",
               "agent": "FinMTM agent items (offline replay of the tool plan)"}


def part_value(value: float | None, percent: bool) -> str:
    if value is None:
        return "—"
    return f"{value * 100:.2f}" if percent else f"{value:.2f}"


def part_cells(part: str, found: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, CI) of each metric of a part, on the metric's own scale (the console, the
    HTML and the Markdown reports show the same cells)."""
    cells = []
    for key, label, percent in PART_METRICS[part]:
        ci = (found.get("ci") or {}).get(key) or {}
        interval = (f"[{part_value(ci['low'], percent)}, {part_value(ci['high'], percent)}]"
                    if ci.get("low") is not None else "–")
        cells.append((label, part_value(found.get(key), percent), interval))
    return cells


def _print_parts(con: Any, scores: dict[str, Any]) -> None:
    """FinMTM's dialogue and agent parts: a table each with n and CIs, or one line saying why the
    part is unscored."""
    from rich.table import Table

    for part in PART_METRICS:
        found = scores.get(part)
        if not found:
            continue
        if not found.get("n_scored"):
            con.print(f"{part}: {found.get('unscored') or 'nothing scored'}", markup=False, soft_wrap=True)
            continue
        caption = f"{found['n_scored']} of {found['n']} scored"
        if found.get("n_errors"):
            caption += f" ({found['n_errors']} with an error, scored 0)"
        if found.get("unscored"):
            caption += f"; {found['unscored']}"
        table = Table(title=PART_TITLES[part], caption=caption)
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_column("95% CI (bootstrap)" if found.get("ci") else "CI", justify="right")
        for cells in part_cells(part, found):
            table.add_row(*cells)
        con.print(table)
        if found.get("by_level"):
            con.print("by level: " + " · ".join(f"{level} {g['score']:.2f} (n {g['n']})"
                                                 for level, g in found["by_level"].items()), markup=False)


def _print_breakdown(con: Any, column: str, groups: dict[str, dict[str, Any]], max_groups: int,
                     title: str | None = None) -> None:
    from rich.table import Table

    has_score = any("score" in g for g in groups.values())
    table = Table(title=title or f"by {column} (×100)")
    table.add_column(column)
    table.add_column("n", justify="right")
    table.add_column("accuracy", justify="right")
    table.add_column("95% CI (Wilson)", justify="right")
    if has_score:
        table.add_column("score", justify="right")
    ordered = sorted(groups.items(), key=lambda kv: -kv[1]["n"])
    for label, g in ordered[:max_groups]:
        row = [label, str(g["n"]), _fmt("accuracy", g["accuracy"]), _fmt_ci("accuracy", g.get("ci"))]
        if has_score:
            row.append(_fmt("score", g.get("score")))
        table.add_row(*row)
    if len(ordered) > max_groups:
        table.add_row(f"… {len(ordered) - max_groups} more", "", "", "")
    con.print(table)


def _print_calibration(con: Any, scores: dict[str, Any]) -> None:
    from rich.table import Table

    calib = scores.get("calibration")
    if calib:
        con.print(f"calibration ({calib['items']}, n = {calib['n']}): ECE {_fmt('accuracy', calib['ece'])} "
                  f"· Brier {calib['brier']:.4f} · mean confidence {_fmt('accuracy', calib['mean_confidence'])} "
                  f"· accuracy {_fmt('accuracy', calib['accuracy'])}  (×100)", markup=False)
    selective = scores.get("selective")
    if selective:
        primary = scores.get("primary", "accuracy")
        table = Table(title="selective prediction (answer only when confidence > τ; ×100)",
                      caption=scores.get("selective_items"))
        for col in ("τ", "coverage", "accuracy", primary) if primary != "accuracy" else ("τ", "coverage", "accuracy"):
            table.add_column(col, justify="right")
        for row in selective[::4] + ([selective[-1]] if (len(selective) - 1) % 4 else []):
            cells = [f"{row['tau']:.2f}", _fmt("accuracy", row["coverage"]), _fmt("accuracy", row.get("accuracy"))]
            if primary != "accuracy":
                cells.append(_fmt(primary, row.get(primary)))
            table.add_row(*cells)
        con.print(table)


def _small_sample_notes(scores: dict[str, Any]) -> list[str]:
    """Say why a CI spans the whole scale instead of printing [0.00, 100.00] without a word: it
    rests on few items (FinMME's P_H on the multi-answer items only)."""
    notes = []
    ci = scores.get("ci", {})
    for name in scores.get("headline", []):
        interval = ci.get(name) or {}
        if interval.get("low") is None:
            continue
        items = scores.get("n_multi_answer") if name == "p_h" else scores.get("n")
        whole_scale = interval["low"] <= 0 and interval["high"] >= 1
        if items is None or not (whole_scale or (name == "p_h" and items < SMALL_N)):
            continue
        what = "multi-answer item" if name == "p_h" else "scored question"
        notes.append(f"the CI of {name} {_fmt_ci(name, interval)} rests on {plural(int(items), what)}: at this "
                     "size it says little")
    return notes


def print_comparison(result: dict[str, Any], console: Any = None) -> None:
    """Rich tables of a `compare_runs` result."""
    from rich.table import Table

    con = _console(console)
    headline = result.get("headline", [])
    # run names are never cut: at 80 columns two variants must not both read "think_bu…"
    width = max(len(f"{r} (baseline)") for r in result["runs"])
    scores = Table(title=f"{result.get('label')} — {result['n_shared']} shared questions (values × 100)")
    scores.add_column("run", no_wrap=True, min_width=width)
    for name in headline:
        scores.add_column(name, justify="right")
    for run in result["runs"]:
        label = f"{run} (baseline)" if run == result["baseline"] else run
        scores.add_row(label, *[_fmt(m, result["scores"][run].get(m)) for m in headline])
    con.print(scores)

    primary = result.get("primary", "accuracy")
    shown = [primary] + (["accuracy"] if primary != "accuracy" else [])
    table = Table(title=f"vs {result['baseline']}: paired bootstrap (×{result['bootstrap']['n_resamples']}), "
                        "exact McNemar, Holm")
    table.add_column("run", no_wrap=True, min_width=max(len(c["run"]) for c in result["comparisons"]))
    for m in shown:
        table.add_column(f"Δ {m} [CI]", justify="right", overflow="fold")
    for col in ("only baseline right", "only run right", "McNemar p", "Holm p"):
        table.add_column(col, justify="right", overflow="fold")
    for c in result["comparisons"]:
        cells = [c["run"]]
        for m in shown:
            d = c["delta"][m]
            cells.append(f"{_fmt(m, d['value'])} {_fmt_ci(m, d.get('ci'))}".strip())
        cells += [str(c["mcnemar"]["baseline_only"]), str(c["mcnemar"]["run_only"]),
                  f"{c['mcnemar']['p']:.3g}", f"{c['p_holm']:.3g}"]
        table.add_row(*cells)
    con.print(table)
    distributions = result.get("distributions")
    if distributions and distributions.get("runs"):
        shift = Table(title=f"option distributions vs {distributions['reference']} ({distributions['items']})")
        shift.add_column("run", no_wrap=True, min_width=max(len(r) for r in distributions["runs"]))
        for col in ("n", "mean KL (nats)", "top-1 agreement ×100", "gold prob shift ×100"):
            shift.add_column(col, justify="right")
        for run, d in distributions["runs"].items():
            shift.add_row(run, str(d["n"]), _fmt("kl", d["kl_mean"]), _fmt("accuracy", d["agreement"]),
                          _fmt("accuracy", d["gold_shift_mean"]))
        con.print(shift)
    _print_robustness(con, result)
    for note in result.get("notes", []):
        con.print(f"note: {note}")


DISAGREEMENTS_SHOWN = 10  # rows of the console table (the JSON lists them all, up to MAX_DISAGREEMENTS)


def _print_robustness(con: Any, result: dict[str, Any]) -> None:
    """The studies side by side, and the items where two protocols' answers differ."""
    from rich.table import Table

    from finbench.report.studies import compare_rows

    if result.get("studies"):
        header, rows = compare_rows(result["studies"])
        table = Table(title="robustness studies")
        table.add_column("run", no_wrap=True, min_width=max(len(row[0]) for row in rows))  # names are never cut
        for column in header[1:]:
            table.add_column(column, justify="right", overflow="fold")
        for row in rows:
            table.add_row(*row)
        con.print(table)
    for run, found in (result.get("disagreements") or {}).items():
        base = found["runs"][0]
        right = ", ".join(f"{who}: {n}" for who, n in found["right"].items())
        table = Table(title=f"{base} vs {run}: {found['n_disagree']} of {found['n_shared']} answers differ "
                            f"(right — {right})")
        for column in ("id", base, run, "gold", "right", f"{found['official'] or run} output"):
            table.add_column(column, overflow="fold")
        for item in found["items"][:DISAGREEMENTS_SHOWN]:
            table.add_row(item["id"], item["answers"][base], item["answers"][run], item["gold"], item["right"],
                          item["raw_output"][:60])
        if found["n_disagree"] > DISAGREEMENTS_SHOWN:
            table.caption = f"first {DISAGREEMENTS_SHOWN}; all of them are in the comparison JSON"
        con.print(table)
