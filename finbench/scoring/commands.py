"""`finbench score` and `finbench compare` on cached run folders (CPU only, no model needed), and
`finbench score --data --predictions`: answer strings scored against a benchmark's gold.

A run folder holds `samples.parquet` (see finbench/report/schema.py); scores are recomputed from
it, printed as rich tables (report/console.py) and written as JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from rich.markup import escape

from finbench.report.console import as_console, print_comparison, print_scores
from finbench.scoring import compare_runs, score_samples
from finbench.scoring.api import _jsonable
from finbench.scoring.stats import distribution_comparison
from finbench.types import DEFAULT_BENCHMARK, RESULTS_FILE, Question

SAMPLES_FILE = "samples.parquet"


# ---- IO ---------------------------------------------------------------------------------------------
def load_samples(run_dir: Path) -> pd.DataFrame:
    """The run's samples table; a clear error when the folder is not a run folder."""
    path = Path(run_dir) / SAMPLES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a finbench run folder")
    return pd.read_parquet(path)


def detect_benchmark(df: pd.DataFrame, run_dir: Path | None = None) -> str:
    """Benchmark name from the samples' `benchmark` column, else results.json, else the default one."""
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
    return DEFAULT_BENCHMARK


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
    as_console(console).print(f"wrote {path}")
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
    """Compare runs against the first (baseline); print tables, and write the JSON to `out` when
    given (nothing is written into a run folder unasked)."""
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
    from finbench.scoring.sampling import load_per_question_means

    benchmark = benchmarks.pop()
    means = [load_per_question_means(d, df, benchmark) for d, df in zip(run_dirs, dfs)]
    result = compare_runs(dfs, names, benchmark=benchmark, n_bootstrap=n_bootstrap, seed=seed, means=means)
    result["notes"] = list(result.get("notes", [])) + coverage_notes(dfs, names) + (
        ["runs use different protocols: " + ", ".join(f"{d}: {p}" for d, p in protocols.items())] if mixed else [])
    result["run_dirs"] = [str(d) for d in run_dirs]
    result["distributions"] = _jsonable(distribution_comparison(dfs, names))
    result.update(robustness_comparison(run_dirs, dfs, names, protocols, result["benchmark"]))
    result["agreement"] = answer_agreement(dfs, names)
    print_comparison(result, console)
    for name, agreed in result["agreement"].items():
        largest = agreed["max_prob_diff"]
        as_console(console).print(
            f"{escape(name)} vs {escape(names[0])}: same answer on {agreed['agree']} of {agreed['n']} shared answered "
            f"items; largest option-probability difference {'–' if largest is None else f'{largest:.3g}'}"
            + (f" ({escape(agreed['max_prob_diff_id'])})" if largest is not None else ""))
    if out is not None:
        as_console(console).print(f"wrote {write_json(Path(out), result)}", markup=False, soft_wrap=True)
    return result


def answer_agreement(dfs: Sequence[pd.DataFrame], names: Sequence[str]) -> dict[str, Any]:
    """Each run against the first (e.g. an in-process run and a served run of one checkpoint): on
    the items both answered without an error, how many answers are the same, and the largest
    absolute difference of an option probability where both read the same options (None: no
    probabilities to compare, e.g. generated answers)."""
    base = dfs[0].set_index("id")[["answer", "error", "option_probs"]]
    out: dict[str, Any] = {}
    for name, df in zip(names[1:], dfs[1:]):
        both = base.merge(df.set_index("id")[["answer", "error", "option_probs"]], left_index=True, right_index=True,
                          suffixes=("", "_run"))
        both = both[(both["error"] == "") & (both["error_run"] == "")]
        gaps = pd.Series([float(abs(pd.Series(list(a), dtype=float) - pd.Series(list(b), dtype=float)).max())
                          if a is not None and b is not None and len(a) == len(b) > 0 else math.nan
                          for a, b in zip(both["option_probs"], both["option_probs_run"])], index=both.index,
                         dtype=float)
        out[name] = {"n": int(len(both)), "agree": int((both["answer"] == both["answer_run"]).sum()),
                     "agreement": float((both["answer"] == both["answer_run"]).mean()) if len(both) else None,
                     "max_prob_diff": None if gaps.isna().all() else float(gaps.max()),
                     "max_prob_diff_id": None if gaps.isna().all() else str(gaps.idxmax())}
    return out


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
    from finbench.benchmarks import get_benchmark

    protocol = [protocols.get(str(d), "") for d in run_dirs]
    # the run whose raw output is shown: the first of the pair whose answers were generated (a protocol the
    # benchmark does not read from the logits)
    generated = [bool(p) and p not in get_benchmark(benchmark).constrained_protocols for p in protocol]
    pairs = {name: answer_disagreements([dfs[0], df], [names[0], name], benchmark,
                                        official=next((n for n, g in ((names[0], generated[0]), (name, generated[k]))
                                                       if g), None))
             for k, (name, df) in enumerate(zip(names, dfs)) if k and protocol[k] != protocol[0]}
    if pairs:
        out["disagreements"] = pairs
    return out


# ---- answers from a file -----------------------------------------------------------------------
def read_predictions(predictions: Path) -> dict[str, str]:
    """id → answer of a JSONL file of {"id": ..., "answer": ...} lines; a line that is not such an
    object, or an id given twice, is one error naming the line."""
    answers: dict[str, str] = {}
    lines: dict[str, int] = {}
    for n, line in enumerate(Path(predictions).read_text().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise KeyError(f"a JSON {type(record).__name__}, not an object")
                qid = str(record["id"])
                answer = "" if record.get("answer") is None else str(record["answer"])
            except (json.JSONDecodeError, KeyError, RecursionError) as err:
                raise ValueError(f"{predictions}:{n}: expected {{\"id\": ..., \"answer\": ...}} ({err})") from None
            if qid in answers:  # which one would count? never the last one silently
                raise ValueError(f"{predictions}:{n}: id {qid!r} was already given on line {lines[qid]}; "
                                 "give one prediction per id")
            answers[qid], lines[qid] = answer, n
    return answers


def answers_frame(questions: Sequence[Question], answers: Mapping[str, str]) -> pd.DataFrame:
    """The samples table (report/schema.py's columns that scoring reads) of `questions` answered
    by `answers`; a question without an answer has the error 'no prediction'."""
    return pd.DataFrame([{
        "id": q.id, "benchmark": q.benchmark, "kind": q.kind, "gold": q.gold, "answer": answers.get(q.id, ""),
        "n_options": len(q.options), "tolerance": math.nan if q.tolerance is None else q.tolerance,
        "error": q.error or ("" if q.id in answers else "no prediction"), **dict(q.meta)} for q in questions])


def score_predictions(benchmark_name: str, data: str, predictions: Path, variant: str = "official",
                      n_bootstrap: int = 0, seed: int = 0, console: Any = None, protocol: str | None = None,
                      samples_out: Path | None = None, unsafe_sandbox: bool = False) -> dict[str, Any]:
    """Score answer strings as an official extractor produced them against the benchmark's gold;
    questions left unanswered are scored as wrong, and a note (on `console` too) says how many.
    `protocol`: the protocol that produced the answers (where a benchmark's rule depends on it);
    `samples_out`: one JSON line per question saying what the rule read and whether it counted;
    `unsafe_sandbox`: programs run without a kernel jail where none can be built (else refused)."""
    from finbench.benchmarks import check_protocol, get_benchmark
    from finbench.sandbox import refuse_without_jail
    from finbench.scoring.api import with_rule_verdicts, write_samples_out

    benchmark = get_benchmark(benchmark_name)
    check_protocol(benchmark, protocol)
    refuse_without_jail(protocol in benchmark.program_protocols, unsafe_sandbox, f"--protocol {protocol}")
    questions = benchmark.load(data)
    answers = read_predictions(predictions)
    unknown = set(answers) - {q.id for q in questions}
    if unknown:
        raise ValueError(f"{len(unknown)} prediction ids are not in the data, e.g. {sorted(unknown)[:3]}")
    samples = with_rule_verdicts(answers_frame(questions, answers), questions, benchmark.name, protocol or "",
                                 unsafe_sandbox)
    scores = score_samples(samples, benchmark=benchmark.name, variant=variant, n_bootstrap=n_bootstrap, seed=seed)
    if samples_out is not None:
        write_samples_out(samples_out, samples, benchmark.name, variant)
    unanswered = sum(q.id not in answers for q in questions)
    if unanswered:
        note = (f"{unanswered} of {len(questions)} questions have no prediction in {Path(predictions).name}: they are "
                "scored as wrong (error 'no prediction')")
        scores["notes"] = list(scores.get("notes", [])) + [note]
        if console is not None:
            console.print(f"[yellow]note:[/] {escape(note)}")
    return scores
