"""Finished run folders as scoring reads them, with nothing printed: a run's samples table and
its benchmark (`load_samples`, `run_benchmark_of`), `score_run` and `compare_run_dirs` (what
`finbench score RUN_DIR` and `finbench compare` compute and write; cli/score_commands.py prints
them); answers given in a file are scored by scoring/predictions.py.

A run folder holds `samples.parquet` (see finbench/report/schema.py); scores are recomputed from
it. A run whose samples and results.json name no benchmark is one clear error, never scored by a
default benchmark's rule.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd

from finbench.benchmarks import get_benchmark
from finbench.benchmarks.metrics import OFFICIAL
from finbench.core.encodable import write_text
from finbench.core.types import RESULTS_FILE
from finbench.scoring.robustness import answer_disagreements
from finbench.scoring.stats import distribution_comparison
from finbench.scoring.tables import _jsonable, compare_runs, score_samples
from finbench.studies import headlines, question_means

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark

SAMPLES_FILE = "samples.parquet"


# ---- IO ---------------------------------------------------------------------------------------------
def load_samples(run_dir: Path) -> pd.DataFrame:
    """The run's samples table; a clear error when the folder is not a run folder."""
    path = Path(run_dir) / SAMPLES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a finbench run folder")
    return pd.read_parquet(path)


def run_benchmark_of(df: pd.DataFrame, run_dir: Path | None = None) -> Benchmark:
    """The run's `Benchmark`: the one its samples' `benchmark` column names, else its results.json's;
    a run that names none is one ValueError line (never a default benchmark)."""
    name = ""
    if "benchmark" in df.columns:
        names = df["benchmark"].dropna().astype(str)
        names = names[names != ""]
        name = names.iloc[0].lower() if len(names) else ""
    if not name and run_dir is not None and (Path(run_dir) / RESULTS_FILE).is_file():
        try:
            name = str(json.loads((Path(run_dir) / RESULTS_FILE).read_text())["benchmark"]).lower()
        except (KeyError, ValueError):
            name = ""
    if not name:
        raise ValueError(f"{run_dir or 'the samples table'}: names no benchmark (no `benchmark` column in "
                         "samples.parquet, none in results.json)")
    return get_benchmark(name)


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Strict JSON (scores contain no NaN: missing values are null)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


# ---- what score and compare compute ---------------------------------------------------------------
def score_run(run_dir: Path, variant: str = OFFICIAL.name, n_bootstrap: int = 1000, seed: int = 0
              ) -> tuple[dict[str, Any], Path]:
    """Score RUN_DIR/samples.parquet and write RUN_DIR/scores_<variant>.json: (scores, the file)."""
    run_dir = Path(run_dir)
    df = load_samples(run_dir)
    scores = score_samples(df, benchmark=run_benchmark_of(df, run_dir), variant=variant,
                           n_bootstrap=n_bootstrap, seed=seed)
    scores["run_dir"] = str(run_dir)
    return scores, write_json(run_dir / f"scores_{variant}.json", scores)


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
    """Say when a comparison narrows to the questions a run shares with the baseline (never
    silently): each run is compared with the first on the questions both have."""
    ids = [set(df["id"].astype(str)) for df in dfs]
    notes = []
    for name, own in zip(names[1:], ids[1:]):
        shared = own & ids[0]
        for who, theirs in ((names[0], ids[0]), (name, own)):
            if len(theirs) > len(shared):
                notes.append(f"{who}: {len(theirs) - len(shared)} of its {len(theirs)} questions are not in both "
                             f"{names[0]} and {name} and are left out of their comparison (compared on "
                             f"{len(shared)} shared questions)")
    return notes


def compare_run_dirs(run_dirs: Sequence[Path], n_bootstrap: int = 1000, seed: int = 0,
                     allow_mixed_protocols: bool = False) -> dict[str, Any]:
    """Runs compared against the first (baseline), JSON-ready: `compare_runs` on their samples, with
    the notes on what the comparison leaves out, the option distributions, the studies side by side,
    the items two protocols answer differently and the answer agreement of each run with the first."""
    run_dirs = [Path(d) for d in run_dirs]
    if len(run_dirs) < 2:
        raise ValueError("compare needs at least two run folders")
    dfs = [load_samples(d) for d in run_dirs]
    found = {b.name: b for b in (run_benchmark_of(df, d) for df, d in zip(dfs, run_dirs))}
    if len(found) != 1:
        raise ValueError(f"runs are on different benchmarks: {sorted(found)}")
    protocols = run_protocols(run_dirs)
    mixed = len(set(protocols.values())) > 1
    if mixed and not allow_mixed_protocols:
        raise ValueError("runs use different protocols (" + ", ".join(f"{d}: {p}" for d, p in protocols.items())
                         + "); their answers are not comparable item by item — pass --allow-mixed-protocols "
                           "to compare them anyway")
    names = [d.name or str(d) for d in run_dirs]
    if len(set(names)) != len(names):
        names = [str(d) for d in run_dirs]

    benchmark = found.popitem()[1]
    means = [question_means(d, df, benchmark) for d, df in zip(run_dirs, dfs)]
    result = compare_runs(dfs, names, benchmark=benchmark, n_bootstrap=n_bootstrap, seed=seed, means=means)
    result["notes"] = list(result.get("notes", [])) + coverage_notes(dfs, names) + (
        ["runs use different protocols: " + ", ".join(f"{d}: {p}" for d, p in protocols.items())] if mixed else [])
    result["run_dirs"] = [str(d) for d in run_dirs]
    result["distributions"] = _jsonable(distribution_comparison(dfs, names))
    result.update(robustness_comparison(run_dirs, dfs, names, protocols, benchmark))
    result["agreement"] = answer_agreement(dfs, names)
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
                          protocols: dict[str, str], benchmark: Benchmark) -> dict[str, Any]:
    """`studies`: each run's robustness studies side by side (from its results.json); and, for each
    run made with another protocol than the baseline (constrained vs official), `disagreements`:
    the shared items whose answers differ, with the official raw output and which run is right."""
    out: dict[str, Any] = {}
    summaries = {}
    for name, run_dir in zip(names, run_dirs):
        try:
            summaries[name] = headlines(json.loads((Path(run_dir) / RESULTS_FILE).read_text()))
        except (OSError, ValueError):
            continue
    if any(summaries.values()):
        out["studies"] = summaries
    protocol = [protocols.get(str(d), "") for d in run_dirs]
    # the run whose raw output is shown: the first of the pair whose answers were generated (a protocol the
    # benchmark does not read from the logits)
    generated = [bool(p) and p not in benchmark.constrained_protocols for p in protocol]
    pairs = {name: answer_disagreements([dfs[0], df], [names[0], name], benchmark,
                                        official=next((n for n, g in ((names[0], generated[0]), (name, generated[k]))
                                                       if g), None))
             for k, (name, df) in enumerate(zip(names, dfs)) if k and protocol[k] != protocol[0]}
    if pairs:
        out["disagreements"] = pairs
    return out
