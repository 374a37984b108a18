"""One run: questions → requests → cached or computed predictions → samples, scores and reports.

It knows neither the benchmark nor the model family: a `Benchmark` (benchmarks/base.py) turns
each question into one request (finbench/requests.py), a model adapter (models/contract.py)
answers it. Order of work:
1. start-up (runner/startup.py): check every option (once), take the run folder's lock (a second
   writer is refused in one line naming the first: runner/lock.py), size what was left to the device
   (runner/defaults.py: batch size, token budget, threads; named in `config.sized`), read the
   data (a bad record becomes that sample's error, unusable data one line), refuse what the
   model's family does not declare (once, from config.json read once), load the model and the
   judge on the rank's device, then make the run folder, run.log and the cache — a run refused at
   start-up writes nothing; build each question's request once, with the run's settings, and its cache
   key from the request (runner/keys.py); the robustness studies add their variants after the
   run's questions (runner/studies.py: each registered study's, finbench/studies/), each a request of its own;
2. take what the cache has; identical requests (FAMMA's grouped official call) are computed
   once; plan batches of one request kind, longest first, within the token budget; prompts
   longer than the context become errors; with several ranks (torchrun, accelerate) each takes
   a token-balanced share (runner/distributed.py) and rank 0 gathers the answers;
3. preprocess batches in worker threads, one or more ahead of the model, the first cut into one
   piece per thread (runner/preprocess.py); on CUDA the next batch is copied to the device on a
   side stream while the model works on the current one (runner/loop.py);
4. decode each batch by its request type (runner/loop.py: letters, sets, numbers, free text,
   sessions turn by turn, each turn checked against the context, a thinking step first where
   asked), halving and retrying on CUDA out-of-memory, and commit it to the cache (a cache that
   stops taking writes — a full disk, its folder deleted — stops the run: `Stopped`, one line);
   progress is a bar on a terminal, plain lines in a pipe, and those lines in run.log (runner/progress.py);
5. judge open answers (the benchmark's rules; a `--judge` model's requests through the same batch
   loop, its replies cached too; a call failing after its retries scores its question 0), score,
   write samples.parquet (the run's questions only), variants.parquet (the studies' variants),
   results.json (with each sample's tokens and seconds totalled: runner/cost.py), report.html and
   report.md together (runner/outputs.py; a rerun served entirely from the cache keeps the
   throughput of the run that computed them).
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from finbench.benchmarks import get_benchmark, load_matching
from finbench.models.contract import ModelAdapter, ModelUnavailable
from finbench.runner import distributed, startup, studies
from finbench.runner.batching import plan_batches, too_long
from finbench.runner.cache import CacheWriteError, PredictionCache
from finbench.runner.cost import cost_summary
from finbench.runner.decoding import AnswerVocabulary
from finbench.runner.defaults import size_to_device
from finbench.runner.judge import judge_run
from finbench.runner.keys import model_arguments, sample_key
from finbench.runner.lock import folder_lock
from finbench.runner.loop import AUTO_BATCH_START, BatchInterrupted, BatchLoop, first_rows
from finbench.runner.outputs import (OutputsError, error_summary, previous_throughput, samples_table,
                                    score, write_outputs)
from finbench.runner.preprocess import prefetch
from finbench.runner.progress import progress
from finbench.runner.provenance import RESULTS_SCHEMA_VERSION, cache_file_digest, provenance
from finbench.runner.requests import build_requests, decoding_summary, shared_requests, unreadable
from finbench.runner.runlog import RunLog
from finbench.runner.timing import ModelParts, StageTimer
from finbench.types import Prediction, RunConfig

log = logging.getLogger("finbench")
__all__ = ["AUTO_BATCH_START", "Interrupted", "RunResult", "Stopped", "run_benchmark"]


@dataclass
class RunResult:
    """A finished run: `results` is results.json, `samples` the samples.parquet frame;
    `results, samples = finbench.evaluate(...)` unpacks them."""

    out_dir: Path
    results: dict[str, Any]
    samples: Any  # pandas.DataFrame

    def __iter__(self) -> Iterator[Any]:
        return iter((self.results, self.samples))


class Stopped(Exception):
    """A run that cannot go on (its cache stops taking writes, its outputs cannot be written): one
    line saying why and what is kept."""


class Interrupted(Stopped):
    """Ctrl-C (or SIGTERM) during a run: what was committed to the cache is kept; the message says
    how much."""

    def __init__(self, saved: int, total: int) -> None:
        super().__init__(f"interrupted: {saved} of {total} answers saved; rerun the same command to resume")
        self.saved, self.total = saved, total


def _stopped(err: CacheWriteError | ModelUnavailable, saved: int, total: int) -> Stopped:
    if getattr(err, "kept", True):
        return Stopped(f"stopped: {err}; {saved} of {total} answers saved; rerun the same command to resume")
    return Stopped(f"stopped: {err}; rerun the same command to start again")


def run_benchmark(config: RunConfig, model: ModelAdapter | None = None, *, show_progress: bool = True,
                  console: Any = None, command: str | None = None, validated: bool = False) -> RunResult:
    """Run (or resume) one evaluation and write its outputs into `config.output.out`. `command` is
    recorded in results.json (default: this process's finbench command line). `validated`: the
    caller has run `startup.validate(config)` already (a multi-benchmark run or a sweep checks
    every config before the first runs)."""
    if not validated:
        startup.validate(config)
    with folder_lock(Path(config.output.out)) as took_over:  # one writer per run folder (runner/lock.py)
        return _run(config, model, show_progress, console, command, took_over)


def _run(config: RunConfig, model: ModelAdapter | None, show_progress: bool, console: Any, command: str | None,
         took_over: str) -> RunResult:
    if config.data is not None and Path(config.data).expanduser().exists():
        # results.json records where the data is from anywhere: `finbench report` re-reads the
        # images for its thumbnails, possibly from another working folder
        config = dataclasses.replace(config, data=str(Path(config.data).expanduser().resolve()))
    world = distributed.world_from_env()
    # batch size, token budget and threads left None: sized to the device the model runs on
    config = size_to_device(config, model.device if model is not None else distributed.rank_device(config.load.device, world))
    distributed.start(world)
    show_progress = show_progress and world.main
    started = time.time()
    run_log = RunLog()
    benchmark = get_benchmark(config.benchmark)
    notes: list[str] = [took_over] if took_over else []  # warnings that go into results.json
    if took_over:
        log.warning("%s", took_over)

    # 1. start-up: nothing is written until every check has passed
    questions = load_matching(benchmark, config.data, config.limit, config.domains, config.question_types, notes)
    questions = startup.mark_duplicate_ids(questions, notes)
    model = startup.given_model(config, model) if model is not None else startup.load_for_run(config, world)
    think_budget = startup.think_budget_for(config, model)
    vocab = AnswerVocabulary.for_model(model) if config.protocol == "constrained" else None
    startup.compile_parts(model, config, notes)
    judge = startup.load_judge_for_run(config, world, model)
    requests, request_errors = build_requests(benchmark, questions, config, think_budget, model.capabilities.max_images)
    unreadable(model, requests, request_errors, notes)  # e.g. a served model's sets and numbers: before any request
    study = studies.expand(benchmark, questions, requests, request_errors, config, think_budget, notes)  # the variants
    questions, requests, request_errors = study.questions, study.requests, study.errors  # the run's, then its variants'
    out_dir = Path(config.output.out)
    startup.make_run_folder(out_dir)
    run_log.open(out_dir / ("run.log" if world.main else f"run.rank{world.rank}.log"))
    cache_file = config.output.cache or out_dir / "cache.sqlite"
    cache = PredictionCache(distributed.shard_path(cache_file, world))  # over several nodes: this rank's shard
    notes.extend(cache.notes)
    fingerprint = {**model.fingerprint(file_digest=cache.file_digest), "arguments": model_arguments(config)}
    prompt_version = benchmark.prompt_version_for(config.protocol)
    predictions = {i: Prediction(id=questions[i].id, answer="", error=e) for i, e in request_errors.items()}
    keys = [sample_key(fingerprint, prompt_version, r, q) if r is not None else "" for q, r in zip(questions, requests)]

    # 2. the cache first, then a plan for the rest
    cached = distributed.cached_everywhere(cache, sorted({k for k in keys if k}), cache_file, world)  # all ranks
    log.info("%d questions, %d cached, model %s", len(questions), sum(k in cached for k in keys), config.model)
    timer = StageTimer(model.device, synchronize=config.batching.profile)
    loop = BatchLoop(model, benchmark, questions, requests, config, vocab, timer)
    for index, (question, key) in enumerate(zip(questions, keys)):
        if question.error:
            predictions[index] = Prediction(id=question.id, answer="", error=question.error)
        elif key in cached:
            predictions[index] = loop.finish(question, requests[index], cached[key])
    n_cached = sum(1 for i in predictions if keys[i] in cached)
    todo = [i for i in range(len(questions)) if i not in predictions]
    leaders, followers = shared_requests(todo, keys)
    with timer.stage("plan"):
        items = loop.items(leaders)
        for item, error in too_long(items, model):
            predictions.update(_with_followers(loop, {item.index: Prediction(
                id=questions[item.index].id, answer="", error=error)}, followers))
        items = distributed.shard([item for item in items if item.index not in predictions], world)
        batches = plan_batches(items, first_rows(config.batching), config.batching.token_budget)

    # 3-4. preprocess ahead, decode, commit each batch
    compute_started = time.perf_counter()
    first_batch_wait: float | None = None
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    saved = n_cached
    parts = ModelParts(model, synchronize=config.batching.profile)
    mine = {item.index for item in items}
    try:
        n_followers = sum(len(followers.get(i, ())) for i in mine)  # answered with their leader
        with progress(show_progress, len(items) + n_followers, console) as advance, parts:
            for prepared in prefetch(batches, loop.prepare, workers=config.batching.workers, depth=config.batching.workers + 1,
                                     ahead=loop.copy_ahead, join=loop.join):
                if first_batch_wait is None:  # the pipeline fill: nothing for the model to do yet
                    first_batch_wait = time.perf_counter() - compute_started
                timer.seconds["preprocess"] += prepared.seconds
                batch = loop.run(prepared)
                answered = [(keys[i], p) for i, p in batch.items() if not p.error]
                with timer.stage("cache_write"):
                    cache.put_many(answered)
                batch = _with_followers(loop, batch, followers)
                saved += sum(1 for p in batch.values() if not p.error)
                predictions.update(batch)
                advance(len(batch))
    except KeyboardInterrupt as stop:
        if isinstance(stop, BatchInterrupted):  # the rows of the interrupted batch that had finished
            finished = {i: p for i, p in stop.predictions.items() if not p.error}
            cache.put_many([(keys[i], p) for i, p in finished.items()])
            saved += len(_with_followers(loop, finished, followers))
        cache.close()
        log.warning("interrupted after %d of %d answers were saved", saved, len(questions))
        raise Interrupted(saved, len(questions)) from None
    except (CacheWriteError, ModelUnavailable) as err:  # the cache stops taking writes; a served model's server goes
        cache.close()
        log.error("%s", err)
        raise _stopped(err, saved, len(questions)) from None
    compute_seconds = time.perf_counter() - compute_started
    if world.size > 1:  # rank 0 takes every rank's answers (errors too: the cache keeps none) and writes
        computed = {i: p for i, p in predictions.items() if i in mine or any(i in followers.get(j, ()) for j in mine)}
        shares = distributed.gather({"predictions": computed, "seconds": compute_seconds, "samples": len(computed)},
                                    world)
        if not world.main:
            cache.close()
            distributed.finish(world)
            return RunResult(out_dir, {"rank": world.rank, "computed": len(computed)}, None)
        for share in shares[1:]:
            predictions.update(share["predictions"])
        distributed.merge(cache_file, [(keys[i], p) for i, p in predictions.items() if keys[i] and not p.error], world)
        compute_seconds = max(share["seconds"] for share in shares)
        notes.append(f"data parallel over {world.size} ranks: {[share['samples'] for share in shares]} samples each")

    # 5. judge, score, write
    try:
        with timer.stage("judge"):
            judged = judge_run(benchmark, study.judged_questions(), predictions, judge, cache, config.judging.judge or "",
                               config.judging.judge_max_new_tokens, config, config.protocol, study.judging())
        notes.extend(judged.notes)
        cache.check_present()  # the run folder removed since the last batch: say so, write nothing
    except CacheWriteError as err:
        raise _stopped(err, saved, len(questions)) from None
    finally:
        cache.close()
    samples = samples_table(questions[:study.n_base], predictions, keys)
    for column, values in judged.columns.items():
        samples[column] = values[:study.n_base]
    scores = score(samples, benchmark, config.output.bootstrap, config.output.seed)
    studied, variants = study.finish(benchmark, predictions, keys, judged.columns, samples, cached, todo)
    throughput = {**loop.throughput.summary(model, len(todo), compute_seconds, loop.max_batch),
                  "model_parts_s": dict(parts.seconds), "first_batch_wait_s": first_batch_wait}
    # (no todo and nothing cached: every question was an error; a judge that ran now: not all from cache)
    if not todo and n_cached and not (judged.summary or {}).get("n_computed"):
        throughput = previous_throughput(out_dir, fingerprint, config) or {**throughput, "all_from_cache": True}
    results = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "benchmark": benchmark.name,
        "config": studies.flat_config(config),  # each study's option a field of its own
        "fingerprint": fingerprint,
        "protocol": config.protocol,
        "prompt_version": prompt_version,
        "decoding": decoding_summary(config, requests, think_budget),
        "thinking": None if think_budget is None else {"budget": think_budget, "opener": _opener(model)},
        "n_questions": study.n_base,
        **study.counts(keys, cached, todo),
        "scores": scores,
        "judge": judged.summary,
        "throughput": throughput,
        "cost": cost_summary(samples, judged.cost, variants),  # runner/cost.py: tokens and seconds per kind
        "notes": notes,
        "errors": error_summary(samples),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "platform": platform.platform()},
        "provenance": provenance(config, started, model.device, cache_file_digest(config), command),  # .started: ISO 8601
        "seconds": time.time() - started,
        **studied,  # majority_baseline; each active study's block, variants
    }
    try:
        write_outputs(out_dir, samples, results, variants)
    except OutputsError as err:
        raise Stopped(f"stopped: {err}; every answer is in the cache {cache.path}: free space and rerun the same "
                      "command (nothing is computed again)") from None
    log.info("done: %s", {k: scores.get(k) for k in scores.get("headline", [])})
    distributed.finish(world)
    return RunResult(out_dir, results, samples)


def _with_followers(loop: BatchLoop, batch: dict[int, Prediction], followers: dict[int, list[int]]) -> dict[int, Prediction]:
    """`batch` plus the predictions of the questions that share a leader's request, each with its
    own answer read from the shared generation."""
    out = dict(batch)
    for leader, prediction in batch.items():
        for index in followers.get(leader, ()):
            out[index] = loop.finish(loop.questions[index], loop.requests[index], prediction)
    return out


def _opener(model: ModelAdapter) -> str:
    """What opens a thinking run's block after the generation prompt: '' when the template does."""
    return "" if model.template_opens_thinking() else model.capabilities.thinking_tags[0] + "\n"
