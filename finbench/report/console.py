"""What a finished run prints on the console: a compact summary, never a wall of tables.

In order: the headline table (with CIs), the parts a rule scores apart (FinMTM's dialogue and
agent, or one line saying why a part is unscored), the breakdown whose groups differ most (every
breakdown with `--verbose-tables`), the best prior baseline beside the model's accuracy and a line
per robustness study (report/studies.py), the errors, the throughput, where the files went, and a last
line that repeats model · benchmark · protocol · headline score [CI] · n · errors, so the end of
the scroll-back says what was run and what came out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from finbench.report.format import headline_score, plural, score_text
from finbench.report.studies import baseline_line, study_lines

MAX_ERROR_KINDS = 3  # error messages named on the errors line; results.json has them all


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
    return counts + (f" · {rate:.2f} samples/s" if rate else "")


def files_line(out_dir: Path) -> str:
    """Where the files went: 'wrote OUT/results.json, samples.parquet, … (in OUT)'."""
    names = [n for n in ("results.json", "samples.parquet", "report.html", "report.md", "run.log")
             if (Path(out_dir) / n).exists()]
    return f"wrote {Path(out_dir) / names[0]}, {', '.join(names[1:])}" if names else f"wrote nothing in {out_dir}"


def print_run(results: dict[str, Any], out_dir: Path, console: Any, verbose_tables: bool = False) -> None:
    """The summary of one finished run, on `console` (its last line last)."""
    from finbench.scoring.commands import print_scores

    print_scores(results["scores"], console=console, verbose=verbose_tables, protocol=results["protocol"])
    for line in [baseline_line(results), *study_lines(results)]:  # beside the headline: what a prior gets
        if line:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in (errors_line(results), throughput_line(results), files_line(out_dir)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # the terminal wraps, never mid-path
