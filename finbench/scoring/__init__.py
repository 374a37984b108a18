"""Scoring: benchmark rules written with the tensor kernels, and their statistics.

Public API (used by the runner and by `finbench score` / `finbench compare`):

- `score_samples(df, benchmark, variant, n_bootstrap, seed, group_columns, device)` → JSON-ready
  dict: headline numbers, their bootstrap CIs, breakdowns over metadata columns, calibration.
- `compare_runs(dfs, names, benchmark, n_bootstrap, seed)` → paired comparison of runs against the
  first one (exact McNemar, Holm, paired bootstrap CIs of the differences, flipped questions).
- `per_question_correct(df, benchmark)` → recomputed official 0/1 correctness per row.

`benchmark` is the `Benchmark` (finbench.benchmarks `get_benchmark`), whose `Scorer` scores and
declares its metrics (benchmarks/metrics.py); None: the one the table names in its `benchmark` column.
A name, or a table that names no benchmark, is an error: no benchmark's rule is a default.

Correctness is always recomputed from answer / gold / tolerance (FinMME, FinMTM, FAMMA choice items)
so a stale `correct` column can never leak into a score. The code lives in `scoring/tables.py` (the
dispatch and statistics), `finmme.py` / `famma.py` / `finmtm.py` (each benchmark's rule, ending in
its `SCORER`, which the benchmark's contract names: finbench/benchmarks/base.py) and `stats.py`;
this package only hands the names on, each imported when first asked for (`__getattr__`).
"""

from typing import Any

__all__ = ["CI_LEVEL", "Scorer", "breakdowns", "build_table", "calibration_summary", "compare_runs", "famma",
           "finmme", "finmtm", "option_prob_matrix", "per_question_correct", "score_samples"]


def __getattr__(name: str) -> Any:
    """The public names, imported when one is first asked for: the rules and the statistics import
    torch and pandas, and the registry (finbench/benchmarks), which reads only `benchmarks.scorer`,
    must not (benchmarks/scorer.py)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import finbench.scoring.famma
    import finbench.scoring.finmme
    import finbench.scoring.finmtm
    from finbench.scoring.tables import (CI_LEVEL, breakdowns, build_table, calibration_summary, compare_runs,
                                      per_question_correct, score_samples)
    from finbench.benchmarks.scorer import Scorer
    from finbench.scoring.stats import option_prob_matrix

    names = {"CI_LEVEL": CI_LEVEL, "Scorer": Scorer, "breakdowns": breakdowns, "build_table": build_table,
             "calibration_summary": calibration_summary, "compare_runs": compare_runs,
             "option_prob_matrix": option_prob_matrix, "per_question_correct": per_question_correct,
             "score_samples": score_samples}
    globals().update(names)  # asked once: the next look-up finds the name itself
    return names.get(name, globals().get(name))
