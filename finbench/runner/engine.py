"""One run: questions → requests → cached or computed predictions → samples, scores and reports.

It knows neither the benchmark nor the model family: a `Benchmark` (benchmarks/base.py) turns
each question into one request (finbench/core/requests.py), a model adapter (models/contract.py)
answers it. `run_benchmark` is these steps in order, each a function that takes the records the
steps before it returned and returns its own, frozen (runner/run_state.py: `Started`, `Planned`,
`Computed`, `Judged`, `Scored`). Order of work:
1. start-up (runner/startup.py): check every option (once), take the run folder's lock (a second
   writer is refused in one line naming the first: runner/lock.py), size what was left to the device
   (runner/defaults.py: batch size, token budget, threads; named in `config.sized`), read the
   data (a bad record becomes that sample's error, unusable data one line), refuse what the
   model's family does not declare (once, from config.json read once), load the model and the
   judge on the rank's device, then make the run folder, run.log and the cache — a run refused at
   start-up writes nothing; build each question's request once, with the run's settings, and its cache
   key from the request (runner/keys.py); the robustness studies add their variants after the
   run's questions (runner/studies.py: each registered study's, finbench/studies/), each a request of its own;
2. take what the cache has (a replay — runner/replay.py, the model gone — stops here in one line
   if anything is missing, and computes nothing); identical requests (FAMMA's grouped official
   call) are computed once; plan batches of one request kind, longest first, within the token budget; prompts
   longer than the context become errors; with several ranks (torchrun, accelerate) each takes
   a token-balanced share (runner/distributed.py) and rank 0 gathers the answers;
3. preprocess batches in worker threads (runner/compute.py), one or more ahead of the model, the
   first cut into one piece per thread (runner/preprocess.py); on CUDA the next batch is copied to
   the device on a side stream while the model works on the current one (runner/copy_ahead.py);
4. decode each batch by its request type (runner/loop.py: letters, sets, numbers, free text,
   sessions turn by turn, each turn checked against the context, a thinking step first where
   asked), halving and retrying on CUDA out-of-memory, and commit it to the cache (a cache that
   stops taking writes — a full disk, its folder deleted — stops the run: `Stopped`, one line);
   progress is a bar on a terminal, plain lines in a pipe, and those lines in run.log (runner/progress.py);
5. judge open answers (the benchmark's rules; a `--judge` model's requests through the same batch
   loop, its replies cached too; a call failing after its retries scores its question 0), score,
   write samples.parquet (the run's questions only), variants.parquet (the studies' variants),
   results.json (runner/results.py, with each sample's tokens and seconds totalled: runner/cost.py),
   thumbnails.parquet (the report's thumbnails of the first questions' images), report.html and
   report.md together (runner/outputs.py; a rerun served entirely from the cache keeps the
   throughput of the run that computed them).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import torch

from finbench.benchmarks import data_source, get_benchmark, load_matching
from finbench.benchmarks.base import Benchmark
from finbench.config.specs import RunConfig
from finbench.core.types import Prediction, Question
from finbench.models.contract import ModelAdapter
from finbench.runner import distributed, startup, studies
from finbench.runner.batching import plan_batches, too_long
from finbench.runner.cache import CacheWriteError, PredictionCache
from finbench.runner.compute import compute, gather_ranks
from finbench.runner.decoding import AnswerVocabulary
from finbench.runner.distributed import World
from finbench.runner.defaults import size_to_device
from finbench.runner.judge_step import Judged, judge_run
from finbench.runner.keys import model_arguments, sample_key
from finbench.runner.lock import folder_lock
from finbench.runner.loop import AUTO_BATCH_START, BatchLoop, first_rows, read_answer
from finbench.runner.outputs import OutputsError, samples_table, score, write_outputs
from finbench.runner.replay import Replay
from finbench.runner.results import results_json
from finbench.runner.run_requests import (build_requests, constrained, read_by, setting_notes, shared_requests,
                                          unreadable)
from finbench.runner.run_state import Computed, Loaded, Planned, RunFolder, Scored, Started
from finbench.runner.runlog import RunLog
from finbench.runner.stops import Interrupted, Stopped, stopped
from finbench.runner.timing import StageTimer

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("finbench")
__all__ = ["AUTO_BATCH_START", "Interrupted", "RunResult", "Stopped", "run_benchmark"]


@dataclass
class RunResult:
    """A finished run: `results` is results.json, `samples` the samples.parquet frame;
    `results, samples = finbench.evaluate(...)` unpacks them."""

    out_dir: Path
    results: dict[str, Any]
    samples: pd.DataFrame | None  # None on a rank other than 0 (its share is in `results`)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.results, self.samples))


def run_benchmark(config: RunConfig, model: ModelAdapter | None = None, *, show_progress: bool = True,
                  console: Any = None, command: str | None = None, validated: bool = False,
                  replay: Replay | None = None, loaded_with: RunConfig | None = None) -> RunResult:
    """Run (or resume) one evaluation and write its outputs into `config.output.out`. `command` is
    recorded in results.json (default: this process's finbench command line). `validated`: the
    caller has run `startup.validate(config)` already (a multi-benchmark run or a sweep checks
    every config before the first runs). `loaded_with`: the config runner/startup.py `load_for_run`
    loaded `model` with (its loading options may then be named again). `replay`: served from the
    cache alone, without the model (runner/replay.py): nothing is loaded or computed, and a
    question not in the cache refuses the run in one line."""
    if not validated:
        startup.validate(config)
    with folder_lock(Path(config.output.out)) as took_over:  # one writer per run folder (runner/lock.py)
        run = _start(config, model, replay, loaded_with, took_over)  # 1. start-up: nothing written before its checks
        planned = _look_up_and_plan(run)  # 2. the cache first, then a plan for the rest
        computed = (compute(run, planned, show_progress and run.world.main, console) if run.replay is None
                    else Computed.nothing(planned))  # 3-4. preprocess ahead, decode, commit
        computed, rank_share = gather_ranks(run, planned, computed)  # several ranks: rank 0 takes every rank's answers
        if rank_share is not None:
            return RunResult(run.folder.out_dir, rank_share, None)
        judged = _judge(run, computed)  # 5. judge open answers (rules, a --judge model)
        scored = _score(run, planned, computed, judged)  # 5. score the run's samples and the studies' variants
        return _write(run, planned, computed, judged, scored, command)  # 5. samples, results and reports


def _start(config: RunConfig, model: ModelAdapter | None, replay: Replay | None, loaded_with: RunConfig | None,
           took_over: str) -> Started:
    """Start-up: every check, the model and judge loaded, the requests built with their cache keys,
    then the run folder, run.log and the cache."""
    if config.data is not None and Path(config.data).expanduser().exists():
        # results.json records where the data is from anywhere (another working folder)
        config = dataclasses.replace(config, data=str(Path(config.data).expanduser().resolve()))
    world = distributed.world_from_env()
    device = model.device if model is not None else distributed.rank_device(config.load.device, world)
    config = size_to_device(config, device)  # batch size, token budget and threads left None: sized to the device
    distributed.start(world)
    benchmark, started, run_log = get_benchmark(config.benchmark), time.time(), RunLog()
    notes = [took_over] if took_over else []  # warnings for results.json, each step's in order
    if took_over:
        log.warning("%s", took_over)
    source = data_source(benchmark, config.data, config.option)  # with --spec, --image-root where it reads them
    questions = load_matching(benchmark, source, config.limit, config.domains, config.question_types, notes)
    questions = startup.mark_duplicate_ids(questions, notes)
    loaded = (_load_models(config, world, model, loaded_with, notes) if replay is None
              else _replayed(config, world, replay))
    study = _requests(benchmark, questions, config, loaded, notes)
    vocab = (AnswerVocabulary.for_model(loaded.model) if loaded.model is not None and constrained(study.requests)
             else None)  # the checkpoint's letters and digits, before any write
    folder = _open_run_folder(config, world, run_log, loaded, replay, notes)
    prompt_version = benchmark.prompt_version_for(config.protocol)
    keys = [sample_key(folder.fingerprint, prompt_version, r, q) if r is not None else ""
            for q, r in zip(study.questions, study.requests)]
    return Started(config, world, benchmark, started, tuple(notes), replay, loaded, study, vocab, folder,
                   prompt_version, keys, StageTimer(loaded.device, synchronize=config.batching.profile),
                   partial(read_answer, benchmark, config.protocol))


def _load_models(config: RunConfig, world: World, model: ModelAdapter | None, loaded_with: RunConfig | None,
                 notes: list[str]) -> Loaded:
    """The model (given, or loaded on the rank's device) checked for the run's options, its
    thinking budget, compiled parts, and the judge."""
    model = (startup.given_model(config, model, loaded_with) if model is not None
             else startup.load_for_run(config, world))
    think_budget = startup.think_budget_for(config, model)
    startup.compile_parts(model, config, notes)
    return Loaded(model, model.device, think_budget, startup.load_judge_for_run(config, world, model))


def _replayed(config: RunConfig, world: World, replay: Replay) -> Loaded:
    """A replay's: no model (nothing runs, on the CPU), the thinking budget as recorded, the judge."""
    return Loaded(None, torch.device("cpu"), replay.think_budget(config), startup.load_judge_for_run(config, world))


def _requests(benchmark: Benchmark, questions: list[Question], config: RunConfig, loaded: Loaded,
              notes: list[str]) -> studies.Studies:
    """Each question's request, built once with the run's settings, then the robustness studies'
    variants after the run's questions (runner/studies.py), each a request of its own."""
    max_images = loaded.model.capabilities.max_images if loaded.model is not None else None
    requests, request_errors = build_requests(benchmark, questions, config, loaded.think_budget, max_images)
    notes.extend(setting_notes(config, requests))  # a generation setting resolved or unused: one line each
    if loaded.model is not None:
        unreadable(loaded.model, requests, notes)  # e.g. a served model's sets and numbers: refused in one line
    return studies.expand(benchmark, questions, requests, request_errors, config, loaded.think_budget, notes)


def _open_run_folder(config: RunConfig, world: World, run_log: RunLog, loaded: Loaded, replay: Replay | None,
                     notes: list[str]) -> RunFolder:
    """The run folder, run.log and the cache (this rank's shard over several nodes), and the
    model's fingerprint (with the cache file's digest) the keys are computed from."""
    out_dir = Path(config.output.out)
    startup.make_run_folder(out_dir)
    run_log.open(out_dir / ("run.log" if world.main else f"run.rank{world.rank}.log"))
    cache_file = Path(config.output.cache) if config.output.cache else out_dir / "cache.sqlite"
    cache = PredictionCache(distributed.shard_path(cache_file, world))
    notes.extend(cache.notes)
    recorded = replay.fingerprint if replay is not None else None  # the weights are gone: as recorded
    fingerprint = {**(recorded or loaded.model.fingerprint(file_digest=cache.file_digest)),
                   "arguments": model_arguments(config)}
    return RunFolder(out_dir, cache_file, cache, fingerprint)


def _look_up_and_plan(run: Started) -> Planned:
    """The cache's answers (asked by every rank), then the rest planned: identical requests once,
    prompts longer than the context as errors, this rank's share in batches of one kind within
    the token budget. A replay with anything left to compute is refused in one line."""
    config, questions, keys, cache = run.config, run.questions, run.keys, run.folder.cache
    predictions = {i: Prediction(id=questions[i].id, answer="", error=e) for i, e in run.study.errors.items()}
    cached = distributed.cached_everywhere(cache, sorted({k for k in keys if k}), run.folder.cache_file, run.world)
    log.info("%d questions, %d cached, model %s", len(questions), sum(k in cached for k in keys), config.model)
    for index, (question, key) in enumerate(zip(questions, keys)):
        if question.error:
            predictions[index] = Prediction(id=question.id, answer="", error=question.error)
        elif key in cached:
            predictions[index] = run.finish(question, run.requests[index], cached[key])
    n_cached = sum(1 for i in predictions if keys[i] in cached)
    todo = [i for i in range(len(questions)) if i not in predictions]
    leaders, followers = shared_requests(todo, keys)
    if run.replay is not None:
        if leaders:
            cache.close()
            raise run.replay.missing(len(todo))
        return Planned(predictions, cached, n_cached, todo, followers, None, [], [])
    loop = BatchLoop(run.loaded.model, run.benchmark, questions, run.requests, config, run.vocab, run.timer)
    with run.timer.stage("plan"):
        items = loop.items(leaders)
        for item, error in too_long(items, run.loaded.model):
            predictions.update(run.with_followers(followers, {item.index: Prediction(
                id=questions[item.index].id, answer="", error=error)}))
        mine = distributed.shard([item for item in items if item.index not in predictions], run.world)
        batches = plan_batches(mine, first_rows(config.batching), config.batching.token_budget)
    return Planned(predictions, cached, n_cached, todo, followers, loop, mine, batches)


def _judge(run: Started, computed: Computed) -> Judged:
    """Open answers judged (the benchmark's rules; a --judge model's requests through the same
    batch loop, cached too); then the cache is closed."""
    config, study, cache = run.config, run.study, run.folder.cache
    try:
        with run.timer.stage("judge"):
            judged = judge_run(run.benchmark, study.judged_questions(), computed.predictions, run.loaded.judge, cache,
                               config.judging, config.batching, protocol=config.protocol,
                               unsafe_sandbox=config.unsafe_sandbox, judging=study.judging())
        cache.check_present()  # the run folder removed since the last batch: say so, write nothing
    except CacheWriteError as err:
        raise stopped(err, computed.saved, len(run.questions)) from None
    finally:
        cache.close()
    return judged


def _score(run: Started, planned: Planned, computed: Computed, judged: Judged) -> Scored:
    """The run's own questions scored (samples.parquet), then the studies' variants and numbers."""
    config, study = run.config, run.study
    samples = samples_table(run.questions[:study.n_base], computed.predictions, run.keys)
    readings = run.folder.fingerprint.get("read_by")  # a served model's reading per kind
    samples["read_by"] = read_by(study.requests[:study.n_base], readings)
    for column, values in judged.columns.items():
        samples[column] = values[:study.n_base]
    scores = score(samples, run.benchmark, config.output.bootstrap, config.output.seed)
    studied, variants = study.finish(run.benchmark, computed.predictions, run.keys, judged.columns, samples,
                                     planned.cached, planned.todo, readings)
    return Scored(samples, scores, studied, variants)


def _write(run: Started, planned: Planned, computed: Computed, judged: Judged, scored: Scored,
           command: str | None) -> RunResult:
    """samples.parquet, variants.parquet, results.json and the reports written together."""
    results = results_json(run, planned, computed, judged, scored, command)
    out_dir, n_base = run.folder.out_dir, run.study.n_base
    try:
        write_outputs(out_dir, scored.samples, results, scored.variants, run.questions[:n_base])  # with the thumbnails
    except OutputsError as err:
        raise Stopped(f"stopped: {err}; every answer is in the cache {run.folder.cache.path}: free space and rerun the "
                      "same command (nothing is computed again)") from None
    log.info("done: %s", {k: scored.scores.get(k) for k in scored.scores.get("headline", [])})
    distributed.finish(run.world)
    return RunResult(out_dir, results, scored.samples)
