"""`finbench score` and `finbench compare` on cached run folders (CPU only, no model needed).

A run folder holds `samples.parquet` (see finbench/report/schema.py); scores are recomputed from
it, printed as rich tables (report/console.py) and written as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from finbench.report.console import as_console, print_comparison, print_scores
from finbench.scoring import compare_runs, score_samples
from finbench.scoring.api import _jsonable
from finbench.scoring.stats import distribution_comparison
from finbench.types import DEFAULT_BENCHMARK, RESULTS_FILE

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
    as_console(console).print(f"wrote {path}")
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
