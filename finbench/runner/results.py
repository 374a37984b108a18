"""results.json of one run: what ran (config, fingerprint, protocol, prompt and decoding), its
scores, judge, throughput and cost, the notes and errors, and where and when it ran."""

from __future__ import annotations

import platform
import time
from typing import Any

import torch

from finbench.benchmarks.base import questions_digest
from finbench.runner.cost import cost_summary
from finbench.runner.judge_step import Judged
from finbench.runner.loop import first_rows
from finbench.runner.outputs import error_summary, previous_throughput
from finbench.runner.provenance import RESULTS_SCHEMA_VERSION, cache_file_digest, provenance
from finbench.runner.run_requests import decoding_summary
from finbench.runner.run_state import Computed, Planned, Scored, Started
from finbench.runner.timing import Throughput
from finbench.studies import flat_config


def results_json(run: Started, planned: Planned, computed: Computed, judged: Judged, scored: Scored,
                 command: str | None) -> dict[str, Any]:
    """results.json's content for the finished `run`."""
    config, think_budget, samples = run.config, run.loaded.think_budget, scored.samples
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "benchmark": run.benchmark.name,
        "config": flat_config(config),  # each study's option a field of its own (finbench/studies)
        "fingerprint": run.folder.fingerprint,
        "protocol": config.protocol,
        "prompt_version": run.prompt_version,
        "decoding": decoding_summary(config, run.requests, think_budget),
        "thinking": None if think_budget is None else {"budget": think_budget, "opener": _opener(run)},
        "n_questions": run.study.n_base,
        **run.study.counts(run.keys, planned.cached, planned.todo),
        "scores": scored.scores,
        "judge": judged.summary,
        "throughput": throughput(run, planned, computed, judged),
        "cost": cost_summary(samples, judged.cost, scored.variants),  # runner/cost.py: tokens and seconds per kind
        "notes": [*run.notes, *computed.notes, *judged.notes],  # start-up's, the ranks', the judge's
        "errors": error_summary(samples),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "platform": platform.platform()},
        "provenance": _provenance(run, command),
        "seconds": time.time() - run.started,
        **scored.studied,  # majority_baseline; with studies: circular, image_ablation, variants
    }


def _provenance(run: Started, command: str | None) -> dict[str, Any]:
    """Where the result came from (ISO 8601 start, the data files' digests), with the content digest
    of the questions evaluated (rows and image bytes: benchmarks/base.py `questions_digest`)."""
    found = provenance(run.config, run.started, run.loaded.device, cache_file_digest(run.config), command)
    found["data"]["content"] = questions_digest(run.study.questions[:run.study.n_base])
    return found


def throughput(run: Started, planned: Planned, computed: Computed, judged: Judged) -> dict[str, Any]:
    """The run's speed and memory; a rerun served entirely from the cache keeps the throughput of
    the run that computed its answers."""
    loop, todo = planned.loop, planned.todo
    if loop is not None:
        measured = loop.throughput.summary(run.loaded.model, len(todo), computed.compute_seconds, loop.max_batch)
    else:  # a replay: nothing ran, nothing was counted
        counted = Throughput(run.timer)
        counted.flops = None
        measured = counted.summary(None, 0, 0.0, first_rows(run.config.batching), run.loaded.device)
    measured = {**measured, "model_parts_s": computed.part_seconds, "first_batch_wait_s": computed.first_batch_wait}
    # (no todo and nothing cached: every question was an error; a judge that ran now: not all from cache)
    if not todo and planned.n_cached and not (judged.summary or {}).get("n_computed"):
        return (previous_throughput(run.folder.out_dir, run.folder.fingerprint, run.config)
                or {**measured, "all_from_cache": True})
    return measured


def _opener(run: Started) -> str:
    """What opens a thinking run's block after the generation prompt: '' when the template does."""
    if run.replay is not None:
        return (run.replay.thinking or {}).get("opener", "")
    model = run.loaded.model
    return "" if model.template_opens_thinking() else model.capabilities.thinking_tags[0] + "\n"
