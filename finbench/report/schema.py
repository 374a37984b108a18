"""Column contract of `samples.parquet`: one row per question of a run; and results.json's JSON
Schema with the registered benchmarks and protocols (`results_schema`).

The runner writes these columns; the scorers and `finbench score/compare` read them. Grouping
columns a benchmark declares (e.g. FinMME's `domain`, `question_type`, `asset_class`) are added
as plain string columns beside them.
"""

import json
from pathlib import Path
from typing import Any

from finbench.benchmarks import BENCHMARKS
from finbench.studies import all_studies

SAMPLES_SCHEMA_VERSION = "1.0"  # in the parquet file's metadata as `finbench.schema_version`

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
    "letters": "bool — `answer` is option letters read from the letters' logits (a choice request), not text "
    "the benchmark's rule reads",
    "tolerance": "float — absolute tolerance of numerical items, NaN when absent",
    "correct": "float — per-question official correctness (0/1); errors count as 0",
    "error": "str — per-sample error message, '' when none",
    "seconds": "float — this sample's share of its batch's wall seconds, split by tokens processed (prompt + "
    "generated; runner/cost.py); a cached sample keeps the share of the run that computed it",
    "n_generated_tokens": "int — tokens generated for this sample",
    "prompt_tokens": "int — real tokens prefilled for this sample (text and image placeholders, every session "
    "turn's); null when not counted (cached before counts existed)",
    "image_tokens": "int — of those, image placeholder tokens (0 for a question shown no image); null when not "
    "counted",
    "generated_tokens": "int — tokens decoded: reasoning + answer (0 for a single choice read from option scores); "
    "null when not counted",
    "read_by": "str — how the answer was read: 'logits' (finbench's prompt and the model's logits), 'generation', "
    "or a served model's reading of its kind ('token logprobs', 'set decoding over token logprobs', 'number grammar "
    "over token logprobs', 'top logprobs', 'decision endpoint'); '' for a sample that failed before its request",
    "sample_key": "str — cache key",
    "cluster": "str — the cluster the question's error bars group it in (its benchmark's `cluster_field`: the "
    "main question, the image's digest, or 'id:<id>' for a question on its own)",
    "question": "str — the question text (for the report's sample browser)",
    "options": "list<str> — the option texts, in letter order",
    "prompt": "str — the rendered prompt the model saw (chat template applied, image placeholders "
    "unexpanded), or 'sha256:<hex>' with --no-log-prompts; '' for samples that failed before prompting",
    "confidence": "float — probability (0–1) of the decoded answer: single → the chosen option's; multi and "
    "numerical → the product of the chosen steps' (each renormalised over what the grammar allows); NaN "
    "for errors and answers without probabilities (official protocol, open answers)",
    "reasoning_text": "str — the thinking block's content ('' without thinking)",
    "reasoning_tokens": "int — tokens generated in the thinking block (≤ --think-budget)",
    "budget_cut": "bool — the thinking budget ran out before the model closed its block",
}


# variants.parquet (runs with a study, finbench/studies/): the columns of samples.parquet for each
# variant of a question (runner/studies.py), plus these, right after `id`: the variant, its study,
# and every registered study's own columns (each study declares what its column means).
VARIANT_COLUMNS = {
    "variant": "str — the variant's name, e.g. rotation-R, ablation-MODE, sample-J, probe-NAME",
    "study": "str — the study that asked it (its registered name)",
    **{c.name: c.meaning for study in all_studies() for c in study.columns},
    "gold": "str — the gold as asked: the letters of the gold options in this variant's order",
    "correct": "float — this variant's official correctness (0/1)",
}


RESULTS_SCHEMA = Path(__file__).with_name("results.schema.json")


def results_schema() -> dict[str, Any]:
    """results.json's JSON Schema (report/results.schema.json) with the enums of what is registered
    now: `benchmark` (and `config.benchmark`) one of the registered benchmarks' names, `protocol`
    (and `config.protocol`) one of the protocols a registered benchmark accepts — generated from
    the registry, so a benchmark or protocol added there is valid without an edit here."""
    schema = json.loads(RESULTS_SCHEMA.read_text(encoding="utf-8"))
    names = sorted(BENCHMARKS)
    protocols = sorted({p for benchmark in BENCHMARKS.values() for p in benchmark.protocol_names})
    properties, config = schema["properties"], schema["properties"]["config"]["properties"]
    properties["benchmark"] = {**properties["benchmark"], "enum": names}
    properties["protocol"] = {**properties["protocol"], "enum": protocols}
    config["benchmark"], config["protocol"] = {"enum": names}, {"enum": protocols}
    return schema
