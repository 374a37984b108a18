"""Scoring: benchmark rules written with the tensor kernels, and their statistics.

- `score_samples(df, benchmark, variant, n_bootstrap, seed, group_columns, device)` → JSON-ready
  dict: headline numbers, their bootstrap CIs, breakdowns over metadata columns, calibration.
- `compare_runs(dfs, names, benchmark, n_bootstrap, seed)` → paired comparison of runs against the
  first one (exact McNemar, Holm, paired bootstrap CIs of the differences, flipped questions).
- `per_question_correct(df, benchmark)` → recomputed official 0/1 correctness per row.

`benchmark` is the `Benchmark` (finbench.benchmarks `get_benchmark`), whose `Scorer` scores and
declares its metrics (benchmarks/metrics.py); None: the one the table names in its `benchmark` column.
A name, or a table that names no benchmark, is an error: no benchmark's rule is a default.

Correctness is always recomputed from answer / gold / tolerance (FinMME, FinMTM, FAMMA choice items)
so a stale `correct` column can never leak into a score. These three live in `scoring/tables.py`
(the dispatch and statistics), each benchmark's rule in its own file ending in its `SCORER`
(finmme.py, famma.py, finmtm.py, …; the benchmark's contract names it: finbench/benchmarks/base.py),
the statistics in `stats.py` and `clustered.py`. finbench's own modules import from those files;
the three names are here only as the Python API's `finbench.scoring.score_samples`, … (docs/usage.md).
"""

from finbench.scoring.tables import compare_runs, per_question_correct, score_samples

__all__ = ["compare_runs", "per_question_correct", "score_samples"]
