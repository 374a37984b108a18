"""A run's outputs: the samples table, its scores, results.json, report.html (the progress: runner/progress.py).
The files of a run (samples.parquet, results.json, config.yaml, report.html, report.md, variants.parquet) are written into
a staging folder inside the run folder, then renamed into place together: a kill or a full disk
while writing never leaves a truncated output, nor the previous run's report beside new results."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from finbench.benchmarks import BENCHMARKS
from finbench.benchmarks.base import cluster_key
from finbench.config.files import CONFIG_FILE, dump, run_document
from finbench.core.encodable import encodable_frame, text_frame, write_text
from finbench.core.types import Prediction, Question
from finbench.report import html  # by module: a test stands in for its writer
from finbench.report.schema import SAMPLES_SCHEMA_VERSION
from finbench.report.thumbnails import THUMBNAILS_FILE, write_thumbnails
from finbench.runner.decoding import answer_confidence
from finbench.runner.keys import model_identity
from finbench.scoring.tables import per_question_correct, score_samples

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark

log = logging.getLogger("finbench")


def samples_table(questions: Sequence[Question], predictions: dict[int, Prediction], keys: Sequence[str]) -> Any:
    """One row per question; `cluster` is what the question's error bars cluster on (its
    benchmark's `cluster_field`, benchmarks/base.py `cluster_key`)."""
    import pandas as pd

    fields = {name: BENCHMARKS[name].cluster_field if name in BENCHMARKS else "id" for name in {q.benchmark for q in questions}}
    rows = []
    for index, question in enumerate(questions):
        p = predictions[index]
        rows.append({
            "id": question.id, "benchmark": question.benchmark, "kind": question.kind, "gold": question.gold,
            "question": question.text, "options": list(question.options), "prompt": p.prompt,
            "answer": p.answer, "raw_output": p.generated_text, "n_options": len(question.options),
            "option_probs": [math.exp(lp) for lp in p.option_logprobs], "letters": bool(p.option_logprobs),
            "confidence": _confidence(question, p),
            "reasoning_text": p.reasoning_text, "reasoning_tokens": p.reasoning_tokens, "budget_cut": p.budget_cut,
            "tolerance": math.nan if question.tolerance is None else question.tolerance,
            "error": p.error or "", "seconds": p.seconds, "n_generated_tokens": p.n_generated_tokens,
            "prompt_tokens": p.prompt_tokens, "image_tokens": p.image_tokens, "generated_tokens": p.generated_tokens,
            "sample_key": keys[index], "cluster": cluster_key(fields[question.benchmark], question),
            **dict(question.meta),
        })
    table = text_frame(rows)  # a reply UTF-8 cannot encode is kept as it is (finbench/core/encodable.py)
    for column in ("prompt_tokens", "image_tokens", "generated_tokens"):  # integers, null where not counted
        if column in table:
            table[column] = table[column].astype("Int64")
    return table


def _confidence(question: Question, p: Prediction) -> float:
    """The prediction's confidence; recomputed from the stored distributions for cache rows
    written before confidences existed; NaN for errors and for answers without probabilities."""
    if p.error:
        return math.nan
    if p.confidence is not None and not math.isnan(p.confidence):
        return p.confidence
    return answer_confidence(question.kind, p.option_logprobs, p.step_logprobs)


def score(samples: Any, benchmark: Benchmark, n_bootstrap: int, seed: int) -> dict[str, Any]:
    """results.json's scores under `benchmark`'s rule (its `Benchmark`); `samples` gains the recomputed per-question `correct` column."""
    scores = score_samples(samples, benchmark=benchmark, n_bootstrap=n_bootstrap, seed=seed)
    samples["correct"] = per_question_correct(samples, benchmark=benchmark)
    return scores


def error_summary(samples: Any) -> dict[str, Any]:
    errors = samples.loc[samples["error"] != "", ["id", "error"]]
    return {"count": int(len(errors)),
            "by_message": {k: int(v) for k, v in errors["error"].str.split(":").str[0].value_counts().items()},
            "samples": errors.head(50).to_dict("records")}


def previous_throughput(out_dir: Path, fingerprint: dict[str, Any], config: Any) -> dict[str, Any] | None:
    """The throughput of the run that computed this folder's answers, for a rerun that computed
    nothing: only when this folder's last results are of the same model, benchmark, data and
    protocol (answers served from a shared cache were computed by a run this folder never saw, and
    another run's rate is not theirs). `computed_by` is when that run started."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        previous = json.loads((out_dir / "results.json").read_text())
        current = json.loads(json.dumps(fingerprint, default=str))
        same_run = (previous["benchmark"] == config.benchmark and previous["protocol"] == config.protocol
                    and previous["config"].get("data") == config.data)
        if same_run and model_identity(previous["fingerprint"]) == model_identity(current) \
                and previous["throughput"].get("samples"):
            started = previous["throughput"].get("computed_by") or previous.get("provenance", {}).get("started")
            return {**previous["throughput"], "all_from_cache": True, "computed_by": started}
    return None


def write_samples(samples: Any, path: Path) -> None:
    """samples.parquet with its schema version in the file's metadata; write-then-rename."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pandas(samples, preserve_index=False)
    except UnicodeEncodeError:  # text UTF-8 cannot encode (a lone surrogate in a reply): written escaped
        table = pa.Table.from_pandas(encodable_frame(samples), preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"finbench.schema_version": SAMPLES_SCHEMA_VERSION.encode()})
    temporary = path.with_suffix(".parquet.tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    temporary = path.with_suffix(".json.tmp")
    write_text(temporary, json.dumps(payload, indent=2, default=str, allow_nan=True))
    os.replace(temporary, path)


OUTPUT_FILES = ("samples.parquet", "results.json", CONFIG_FILE, "report.html", "report.md", "variants.parquet",
                "thumbnails.parquet")
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)  # the disk, not the report's rendering
STAGING_PREFIX = ".finbench-staging-"


class OutputsError(OSError):
    """The run's outputs could not be written (e.g. the disk is full): the previous ones are kept."""

    def __str__(self) -> str:
        return str(self.args[0])


def write_outputs(out_dir: Path, samples: Any, results: dict[str, Any], variants: Any = None,
                  questions: Sequence[Question] = ()) -> None:
    """samples.parquet, results.json, config.yaml (the resolved options: `finbench run --config
    OUT/config.yaml` reruns the run, config/files.py), report.html and report.md (and variants.parquet, the robustness
    studies' variants, when the run has some; thumbnails.parquet, the report's thumbnails of the
    first `questions`' images: report/thumbnails.py), replaced together or not at all:
    written into a staging folder, then renamed into place. A report that fails to render loses
    nothing (a note says so, and no older report stays beside the new results); a file that cannot
    be written (a full disk) leaves the previous outputs as they were and raises `OutputsError`
    naming it."""
    for stale in out_dir.glob(f"{STAGING_PREFIX}*"):  # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    staging = out_dir / f"{STAGING_PREFIX}{os.getpid()}"
    writing = "the staging folder"
    try:
        staging.mkdir()
        writing = "samples.parquet"
        write_samples(samples, staging / "samples.parquet")
        if variants is not None:
            writing = "variants.parquet"
            write_samples(variants, staging / "variants.parquet")
        writing = "results.json"
        write_json(staging / "results.json", results)
        writing = CONFIG_FILE
        write_text(staging / CONFIG_FILE, dump(run_document({**results["config"], "out": str(out_dir)})))
        if any(q.images for q in questions):
            writing = THUMBNAILS_FILE
            write_thumbnails(questions, staging / THUMBNAILS_FILE)
        writing = "report.html and report.md"
        try:
            html.write_report(staging)
        except Exception as err:  # noqa: BLE001 — rendering, not the disk: the answers and scores still count
            if isinstance(err, OSError) and err.errno in DISK_ERRORS:
                raise
            log.exception("report.html could not be written")
            results["notes"].append(f"report.html could not be written ({type(err).__name__}: {err}); "
                                    f"rebuild it with `finbench report {out_dir}`")
            writing = "results.json"
            write_json(staging / "results.json", results)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise OutputsError(f"cannot write {out_dir / writing.split(' ')[0]} ({err.strerror or err}): the previous "
                           "outputs in that folder are left as they were") from None
    for name in OUTPUT_FILES:  # renames need no space: after the writes, these cannot fail for a full disk
        if (staging / name).exists():
            os.replace(staging / name, out_dir / name)
        else:
            (out_dir / name).unlink(missing_ok=True)  # never an older report beside the new results
    shutil.rmtree(staging, ignore_errors=True)
