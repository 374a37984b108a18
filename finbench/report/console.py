"""What a finished run prints on the console: a compact summary, never a wall of tables.

In order: the headline table (with CIs), the parts a rule scores apart (its `Scorer.parts`: FinMTM's dialogue
and agent; or one line saying why a part is unscored), the breakdown whose groups of 10 or more questions differ most (every
breakdown with `--verbose-tables`), the best prior baseline beside the model's accuracy, the label balance of the choice
items (report/balance.py: constant answer, macro-recall, lowest label recall), a line per robustness study (report/studies.py), the clustered SE against the iid one and the cost
(report/run_sections.py), the errors, the throughput, where the files went, and a last
line that repeats model · benchmark · protocol · headline score [CI] · n · errors, so the end of
the scroll-back says what was run and what came out. The tables of `finbench score` and
`finbench compare` (`print_scores`, `print_comparison`) are drawn here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from finbench.benchmarks.metrics import ACCURACY, SCORE
from finbench.report.balance import balance_line
from finbench.report.fit import fit_words
from finbench.report.format import (bootstrap_label, headline_score, metric_of, part_cells, plural, power_line,
                                     sampled_label, score_text, scored_by, scored_parts)
from finbench.report.run_sections import clustered_line, cost_line
from finbench.report.studies import baseline_line, compare_rows, study_lines

MAX_ERROR_KINDS = 3  # error messages named on the errors line; results.json has them all
RAW_METRICS = {"kl"}  # shown as they are; every other value printed is on 0–1 (a headline metric) and shown ×100


def model_name(results: dict[str, Any]) -> str:
    """The model as a user names it: a hub id as given, a local folder by its name."""
    source = str(results.get("config", {}).get("model", ""))
    path = Path(source)
    return path.name if source.startswith((".", "/", "~")) or path.exists() else source


def last_line(results: dict[str, Any]) -> str:
    """model · benchmark · protocol · headline score [CI] · n · errors."""
    headline = headline_score(results["scores"])
    n = headline["n"] if headline["n"] is not None else results["n_questions"]
    return " · ".join([model_name(results), results["benchmark"], results["protocol"], score_text(headline),
                       f"n {n}", plural(results["errors"]["count"], "error")])


def errors_line(results: dict[str, Any]) -> str:
    """One line for every per-sample error of the run (the headline counts those it scores)."""
    count, total = results["errors"]["count"], results["n_questions"]
    if not count:
        return f"errors: none in {plural(total, 'sample')}"
    kinds = sorted(results["errors"]["by_message"].items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{message}: {n}" for message, n in kinds[:MAX_ERROR_KINDS])
    more = f", … ({len(kinds)} kinds)" if len(kinds) > MAX_ERROR_KINDS else ""
    return (f"errors: {count} of {plural(total, 'sample')} ({named}{more}); each is stored, shown in report.html "
            "and scored as wrong")


def throughput_line(results: dict[str, Any]) -> str:
    t = results.get("throughput", {})
    counts = (f"{plural(results['n_questions'], 'question')} ({results['n_cached']} from cache, "
              f"{results['n_computed']} computed)")
    if not results["n_cached"] and not results["n_computed"]:
        return counts + " · nothing computed: every question is an error"
    if t.get("all_from_cache"):
        rate = t.get("samples_per_s")
        when = f", run started {t['computed_by']}" if t.get("computed_by") else ""
        return counts + (f" · all from cache; computed earlier in this folder at {rate:.2f} samples/s{when}"
                         if rate else " · all from cache")
    rate = t.get("samples_per_s")
    judge = results.get("judge") or {}
    judged = (f" · the judge: {judge['n_computed']} of {plural(judge['n_calls'], 'call')} computed now"
              if judge.get("n_computed") else "")
    return counts + (f" · {rate:.2f} samples/s" if rate else "") + judged


def files_line(out_dir: Path) -> str:
    """Where the files went: 'wrote OUT/results.json, samples.parquet, … (in OUT)'."""
    names = [n for n in ("results.json", "samples.parquet", "report.html", "report.md", "config.yaml", "run.log")
             if (Path(out_dir) / n).exists()]
    return f"wrote {Path(out_dir) / names[0]}, {', '.join(names[1:])}" if names else f"wrote nothing in {out_dir}"


def print_run(results: dict[str, Any], out_dir: Path, console: Any, verbose_tables: bool = False) -> None:
    """The summary of one finished run, on `console` (its last line last)."""
    print_scores(results["scores"], console=console, verbose=verbose_tables, protocol=results["protocol"])
    for line in [baseline_line(results), balance_line(results), *study_lines(results), clustered_line(results),
                 cost_line(results)]:
        if line:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in (errors_line(results), throughput_line(results), files_line(out_dir)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # the terminal wraps, never mid-path


# ---- tables of `finbench score` and `finbench compare` ----------------------------------------------
def as_console(console: Any = None) -> Any:
    if console is not None:
        return console
    from rich.console import Console

    return Console()


def print_table(con: Any, table: Any) -> None:
    """`table`, with a title or caption wider than the table printed as a line of its own (above or
    below, left-aligned, wrapped between words at the console's width) instead of wrapped into
    centred fragments of the table's width; its cells wrapped between words (report/fit.py)."""
    from rich.measure import Measurement

    fit_words(con, table)
    width = min(Measurement.get(con, con.options, table).maximum, con.width)
    title = table.title if isinstance(table.title, str) and len(table.title) > width else None
    caption = table.caption if isinstance(table.caption, str) and len(table.caption) > width else None
    if title is not None:
        table.title = None
        con.print(title, style="table.title", markup=False, highlight=False)
    if caption is not None:
        table.caption = None
    con.print(table)
    if caption is not None:
        con.print(caption, style="table.caption", markup=False, highlight=False)


def _fmt(name: str, value: float | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if name in RAW_METRICS else f"{value * 100:.{digits}f}"


def _fmt_ci(name: str, ci: dict[str, Any] | None) -> str:
    if not ci or ci.get("low") is None:
        return ""
    return f"[{_fmt(name, ci['low'])}, {_fmt(name, ci['high'])}]"


SMALL_N = 30  # below this many items a headline CI is shown with a word of caution


def print_scores(scores: dict[str, Any], console: Any = None, max_groups: int = 30, verbose: bool = True,
                 protocol: str | None = None) -> None:
    """Rich tables of a `score_samples` result: the headline (×100, with CIs), the parts a rule
    scores apart (its `Scorer.parts`), breakdowns (n, accuracy, 95% Wilson CI), calibration.
    `verbose=False` shows only the breakdown with the largest spread; `protocol` names how the
    answers were produced (the scoring rule is another thing: `variant`)."""
    con = as_console(console)
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
                con.print(f"by {column}: one group, {label} (n {g['n']}, accuracy {_fmt(ACCURACY.key, g[ACCURACY.key])} "
                          f"{_fmt_ci(ACCURACY.key, g.get('ci'))})", markup=False, soft_wrap=True)
    elif breakdowns:
        column = widest_breakdown(breakdowns)
        rest = len(breakdowns) - 1
        why, extremes = spread_text(breakdowns[column])
        _print_breakdown(con, column, groups=breakdowns[column], max_groups=max_groups,
                         title=f"by {column} (×100) — {why}"
                               + (f"; {plural(rest, 'other breakdown')}: --verbose-tables or report.html" if rest else ""))
        if extremes:
            con.print(extremes, markup=False, highlight=False, soft_wrap=True)
    if verbose:
        _print_calibration(con, scores)
    for note in scores.get("notes", []) + _small_sample_notes(scores):
        con.print(f"note: {note}", markup=False)


SPREAD_MIN_N = 10  # a group's items for it to count in "the largest spread": below, its 95% interval spans ±30 points


def widest_breakdown(breakdowns: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The breakdown whose groups of at least SPREAD_MIN_N questions differ most in accuracy
    (max − min); where none has two such groups, the first; ties go to the first."""
    return max(breakdowns, key=lambda column: _spread(breakdowns[column]))


def _large(groups: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The groups large enough to say something, by accuracy (lowest first)."""
    return sorted(((label, g) for label, g in groups.items() if g.get("n", 0) >= SPREAD_MIN_N
                   and g.get(ACCURACY.key) is not None), key=lambda kv: kv[1][ACCURACY.key])


def _spread(groups: dict[str, dict[str, Any]]) -> float:
    """max − min accuracy of the groups of at least SPREAD_MIN_N questions; -1 for fewer than two."""
    large = _large(groups)
    return large[-1][1][ACCURACY.key] - large[0][1][ACCURACY.key] if len(large) > 1 else -1.0


def spread_text(groups: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """(why this breakdown is shown, with the rule; the line naming its two extreme groups of at
    least SPREAD_MIN_N questions with their intervals, '' where it names none)."""
    large = _large(groups)
    if len(large) < 2:
        return f"no two groups of ≥ {SPREAD_MIN_N} questions: no spread named", ""
    if _spread(groups) <= 0:
        return f"no breakdown's groups of {SPREAD_MIN_N} or more questions differ", ""
    (low, g_low), (high, g_high) = large[0], large[-1]
    return (f"the largest spread (groups ≥ {SPREAD_MIN_N} questions)",
            f"largest spread: {high} {_fmt(ACCURACY.key, g_high[ACCURACY.key])} "
            f"{_fmt_ci(ACCURACY.key, g_high.get('ci'))} vs {low} {_fmt(ACCURACY.key, g_low[ACCURACY.key])} "
            f"{_fmt_ci(ACCURACY.key, g_low.get('ci'))} (accuracy ×100, 95% Wilson intervals)")


def _print_headline(con: Any, scores: dict[str, Any], protocol: str | None) -> None:
    from rich.table import Table

    n = int(scores.get("n") or 0)
    how = (f"protocol {protocol}, " if protocol else "") + f"scored by {scored_by(scores)}"
    title = f"{scores.get('label', scores.get('benchmark'))}"
    if n == 0:
        con.print(f"{title}: no item of this run is scored by this rule ({how})", markup=False, soft_wrap=True)
        return
    ci = scores.get("ci", {})
    errors = int(scores.get("n_errors") or 0)
    caption = (f"{how}; {plural(n, 'scored question')}"
               + (f", {errors} of them with an error (scored as wrong)" if errors else "") + "; values × 100")
    head = Table(title=title)
    head.add_column("metric")
    head.add_column("value", justify="right")
    if ci:
        head.add_column(bootstrap_label(scores), justify="right")
    for name in scores.get("headline", []):
        higher_is_better = metric_of(scores.get("benchmark"), name).higher_is_better
        label = name if higher_is_better else f"{name} (penalty: lower is better)"
        row = [label, _fmt(name, scores.get(name))]
        if ci:
            row.append(_fmt_ci(name, ci.get(name)))
        head.add_row(*row)
    print_table(con, head)
    con.print(caption, markup=False, highlight=False, soft_wrap=True)  # under the table, never squeezed into its width


def _print_parts(con: Any, scores: dict[str, Any]) -> None:
    """The parts the benchmark's rule scores apart (its `Scorer.parts`: FinMTM's dialogue and
    agent): a table each with n and CIs, or one line saying why the part is unscored."""
    from rich.table import Table

    for part, found in scored_parts(scores):
        if not found.get("n_scored"):
            con.print(f"{part.name}: {found.get('unscored') or 'nothing scored'}", markup=False, soft_wrap=True)
            continue
        caption = f"{found['n_scored']} of {found['n']} scored"
        if found.get("n_errors"):
            caption += f" ({found['n_errors']} with an error, scored 0)"
        if found.get("unscored"):
            caption += f"; {found['unscored']}"
        table = Table(title=part.title, caption=caption)
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_column("95% CI (bootstrap)" if found.get("ci") else "CI", justify="right")
        for cells in part_cells(part, found):
            table.add_row(*cells)
        print_table(con, table)
        if found.get("by_level"):
            con.print("by level: " + " · ".join(f"{level} {g[SCORE.key]:.2f} (n {g['n']})"
                                                 for level, g in found["by_level"].items()), markup=False)


def _print_breakdown(con: Any, column: str, groups: dict[str, dict[str, Any]], max_groups: int,
                     title: str | None = None) -> None:
    from rich.table import Table

    has_score = any(SCORE.key in g for g in groups.values())
    table = Table(title=title or f"by {column} (×100)")
    table.add_column(column)
    table.add_column("n", justify="right")
    table.add_column(ACCURACY.label, justify="right")
    table.add_column("95% CI (Wilson)", justify="right")
    if has_score:
        table.add_column(SCORE.label, justify="right")
    ordered = sorted(groups.items(), key=lambda kv: -kv[1]["n"])
    for label, g in ordered[:max_groups]:
        row = [label, str(g["n"]), _fmt(ACCURACY.key, g[ACCURACY.key]), _fmt_ci(ACCURACY.key, g.get("ci"))]
        if has_score:
            row.append(_fmt(SCORE.key, g.get(SCORE.key)))
        table.add_row(*row)
    if len(ordered) > max_groups:
        table.add_row(f"… {len(ordered) - max_groups} more", "", "", "")
    print_table(con, table)


def _print_calibration(con: Any, scores: dict[str, Any]) -> None:
    from rich.table import Table

    calib = scores.get("calibration")
    if calib:
        con.print(f"calibration ({calib['items']}, n = {calib['n']}): ECE {_fmt(ACCURACY.key, calib['ece'])} "
                  f"· Brier {calib['brier']:.4f} · mean confidence {_fmt(ACCURACY.key, calib['mean_confidence'])} "
                  f"· accuracy {_fmt(ACCURACY.key, calib[ACCURACY.key])}  (×100)", markup=False)
    selective = scores.get("selective")
    if selective:
        primary = scores.get("primary", ACCURACY.key)
        table = Table(title="selective prediction (answer only when confidence > τ; ×100)",
                      caption=scores.get("selective_items"))
        for col in ("τ", "coverage", ACCURACY.key, primary) if primary != ACCURACY.key else ("τ", "coverage", ACCURACY.key):
            table.add_column(col, justify="right")
        for row in selective[::4] + ([selective[-1]] if (len(selective) - 1) % 4 else []):
            cells = [f"{row['tau']:.2f}", _fmt(ACCURACY.key, row["coverage"]), _fmt(ACCURACY.key, row.get(ACCURACY.key))]
            if primary != ACCURACY.key:
                cells.append(_fmt(primary, row.get(primary)))
            table.add_row(*cells)
        print_table(con, table)


def _small_sample_notes(scores: dict[str, Any]) -> list[str]:
    """Say why a CI spans the whole scale instead of printing [0.00, 100.00] without a word: it
    rests on few items (FinMME's P_H on the multi-answer items only)."""
    notes = []
    ci = scores.get("ci", {})
    for name in scores.get("headline", []):
        interval = ci.get(name) or {}
        if interval.get("low") is None:
            continue
        metric = metric_of(scores.get("benchmark"), name)
        count, what = metric.n_key, metric.n_label
        if scores.get(count) is None:  # a scorer that does not count that subset: all it scored
            count, what = "n", "scored question"
        items = scores.get(count)
        whole_scale = interval["low"] <= 0 and interval["high"] >= 1
        if items is None or not (whole_scale or (count != "n" and items < SMALL_N)):
            continue
        notes.append(f"the CI of {name} {_fmt_ci(name, interval)} rests on {plural(int(items), what)}: at this "
                     "size it says little")
    return notes


def _scores_table(result: dict[str, Any], headline: list[str]) -> Any:
    """Every run's headline numbers on the questions all runs share; where a run shares fewer with
    the baseline than all do, each pair instead, on the questions that pair shares (its `n`)."""
    from rich.table import Table

    baseline, comparisons = result["baseline"], result["comparisons"]
    same = all(c.get("n", result["n_shared"]) == result["n_shared"] for c in comparisons)
    rows = [(f"{run} (baseline)" if run == baseline else run, result["scores"][run]) for run in result["runs"]] \
        if same else [(f"{run} (baseline)" if run == baseline else f"{run} ({c['n']} shared with the baseline)",
                       c["scores"][run]) for c in comparisons for run in (baseline, c["run"])]
    title = f"{result['n_shared']} shared questions" if same else "each run with the baseline on the questions both scored"
    table = Table(title=f"{result.get('label')} — {title} (values × 100)")
    table.add_column("run", no_wrap=True, min_width=max(len(label) for label, _ in rows))  # names are never cut
    for name in headline:
        table.add_column(name, justify="right")
    for label, found in rows:
        table.add_row(label, *[_fmt(m, found.get(m)) for m in headline])
    return table


def print_comparison(result: dict[str, Any], console: Any = None) -> None:
    """Rich tables of a `compare_runs` result."""
    from rich.table import Table

    con = as_console(console)
    headline = result.get("headline", [])
    # run names are never cut: at 80 columns two variants must not both read "think_bu…"
    print_table(con, _scores_table(result, headline))

    primary = result.get("primary", ACCURACY.key)
    shown = [primary] + ([ACCURACY.key] if primary != ACCURACY.key and ACCURACY.key in headline else [])
    table = Table(title=f"vs {result['baseline']}: Δ with its 95% CI (clustered t for mean scores, else paired "
                        f"bootstrap ×{result['bootstrap']['n_resamples']}), exact McNemar, Holm")
    table.add_column("run", no_wrap=True, min_width=max(len(c["run"]) for c in result["comparisons"]))
    table.add_column("n shared", justify="right")
    for m in shown:
        table.add_column(f"Δ {m} [CI]{sampled_label(result['comparisons'], m)}", justify="right", overflow="fold")
    for col in ("only baseline right", "only run right", "McNemar p", "Holm p"):
        table.add_column(col, justify="right", overflow="fold")
    for c in result["comparisons"]:
        cells = [c["run"], str(c.get("n", result["n_shared"]))]
        for m in shown:
            d = c["delta"][m]
            cells.append(f"{_fmt(m, d['value'])} {_fmt_ci(m, d.get('ci'))}".strip())
        cells += [str(c["mcnemar"]["baseline_only"]), str(c["mcnemar"]["run_only"]),
                  f"{c['mcnemar']['p']:.3g}", f"{c['p_holm']:.3g}"]
        table.add_row(*cells)
    print_table(con, table)
    for c in result["comparisons"]:
        if line := power_line(c):
            con.print(line, markup=False)
    distributions = result.get("distributions") or {}
    compared = {run: d for run, d in (distributions.get("runs") or {}).items() if d.get("n")}  # none: no table
    if compared:
        shift = Table(title=f"option distributions vs {distributions['reference']} ({distributions['items']})")
        shift.add_column("run", no_wrap=True, min_width=max(len(r) for r in compared))
        for col in ("n", "mean KL (nats)", "top-1 agreement ×100", "gold prob shift ×100"):
            shift.add_column(col, justify="right")
        for run, d in compared.items():
            shift.add_row(run, str(d["n"]), _fmt("kl", d["kl_mean"]), _fmt(ACCURACY.key, d["agreement"]),
                          _fmt(ACCURACY.key, d["gold_shift_mean"]))
        print_table(con, shift)
    _print_robustness(con, result)
    for note in result.get("notes", []):
        con.print(f"note: {note}")


DISAGREEMENTS_SHOWN = 10  # rows of the console table (the JSON lists them all, up to MAX_DISAGREEMENTS)


def _print_robustness(con: Any, result: dict[str, Any]) -> None:
    """The studies side by side, and the items where two protocols' answers differ."""
    from rich.table import Table

    header, rows = compare_rows(result["studies"]) if result.get("studies") else (["run"], [])
    shown = [0] + [i for i in range(1, len(header)) if any(row[i] != "–" for row in rows)]  # no column of dashes
    header, rows = [header[i] for i in shown], [[row[i] for i in shown] for row in rows]
    if len(header) > 1:
        table = Table(title="robustness studies")
        table.add_column("run", no_wrap=True, min_width=max(len(row[0]) for row in rows))  # names are never cut
        for column in header[1:]:
            table.add_column(column, justify="right", overflow="fold")
        for row in rows:
            table.add_row(*row)
        print_table(con, table)
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
            kept = result.get("written_to")  # the comparison JSON, where one is written (compare --out)
            table.caption = (f"first {DISAGREEMENTS_SHOWN}; all of them are in {kept}" if kept else
                             f"first {DISAGREEMENTS_SHOWN} of {found['n_disagree']}; --out FILE writes them all")
        print_table(con, table)
