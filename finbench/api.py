"""The Python API where its users import it: `from finbench.api import make_config, evaluate, …`
(and `finbench.evaluate`, `finbench.score`, `finbench.compare`). The functions live in
finbench/app/api.py, with the rest of what the commands compute; finbench's own modules import them
from there."""

from finbench.app.api import (
    SUMMARY_FILE,
    SUMMARY_PARTS,
    SUMMARY_SCALE,
    SUMMARY_SCALE_NOTE,
    MultiRunResult,
    benchmark_names,
    compare,
    data_sources,
    evaluate,
    make_config,
    other_run,
    refuse_other_results,
    run_summary,
    score,
    summary_file,
)

__all__ = ["SUMMARY_FILE", "SUMMARY_PARTS", "SUMMARY_SCALE", "SUMMARY_SCALE_NOTE", "MultiRunResult", "benchmark_names",
           "compare", "data_sources", "evaluate", "make_config", "other_run", "refuse_other_results", "run_summary",
           "score", "summary_file"]
