"""Column contract of `samples.parquet`: one row per question of a run.

The runner writes these columns; the scorers and `finbench score/compare` read them. Grouping
columns a benchmark declares (e.g. FinMME's `domain`, `question_type`, `asset_class`) are added
as plain string columns beside them.
"""

SAMPLE_COLUMNS = {
    "id": "str — question id, unique within the run",
    "benchmark": "str — benchmark name (finmme, famma, finmtm)",
    "kind": "str — single | multi | numerical | open",
    "gold": "str — canonical gold: ascending letters ('B', 'ACD'), a number string, or text",
    "answer": "str — the answer as the judge reads it: letters ('AC') or a raw extracted "
    "token ('A,C', '8.81%'); '' when there is none",
    "raw_output": "str — generated text (official protocol / thinking), '' otherwise",
    "n_options": "int — number of options (0 for numerical/open)",
    "option_probs": "list<float> — probabilities over the options at the first answer step",
    "tolerance": "float — absolute tolerance of numerical items, NaN when absent",
    "correct": "float — per-question official correctness (0/1); errors count as 0",
    "error": "str — per-sample error message, '' when none",
    "seconds": "float — wall time share of this sample",
    "n_generated_tokens": "int — tokens generated for this sample",
    "sample_key": "str — cache key",
}
