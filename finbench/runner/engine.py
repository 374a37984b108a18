"""One run: questions → requests → cached or computed predictions → samples, scores and reports.

It knows neither the benchmark nor the model family: a `Benchmark` (benchmarks/base.py) turns
each question into one request (finbench/core/requests.py), a model adapter (models/contract.py)
answers it. `run_benchmark` is these steps in order, each a function over one `RunState`
(runner/run_state.py). Order of work:
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
from typing import Any, Iterator

from finbench.benchmarks import get_benchmark, load_matching
from finbench.config.specs import RunConfig
from finbench.core.types import Prediction
from finbench.models.contract import ModelAdapter
from finbench.runner import distributed, startup, studies
from finbench.runner.batching import plan_batches, too_long
from finbench.runner.cache import CacheWriteError, PredictionCache
from finbench.runner.compute import compute, gather_ranks
from finbench.runner.decoding import AnswerVocabulary
from finbench.runner.defaults import size_to_device
from finbench.runner.judge_step import Judged, judge_run
from finbench.runner.keys import model_arguments, sample_key
from finbench.runner.lock import folder_lock
from finbench.runner.loop import AUTO_BATCH_START, BatchLoop, first_rows, read_answer
from finbench.runner.outputs import OutputsError, samples_table, score, write_outputs
from finbench.runner.replay import Replay
from finbench.runner.results import results_json
from finbench.runner.run_requests import build_requests, constrained, read_by, shared_requests, unreadable
from finbench.runner.run_state import RunState
from finbench.runner.runlog import RunLog
from finbench.runner.stops import Interrupted, Stopped, stopped
from finbench.runner.timing import StageTimer

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
        _look_up_and_plan(run)  # 2. the cache first, then a plan for the rest
        if run.replay is None:
            compute(run, show_progress and run.world.main, console)  # 3-4. preprocess ahead, decode, commit
        rank_share = gather_ranks(run)  # several ranks: rank 0 takes every rank's answers
        if rank_share is not None:
            return RunResult(run.out_dir, rank_share, None)
        judged = _judge(run)  # 5. judge open answers (rules, a --judge model)
        return _score_and_write(run, judged, command)  # 5. score, write samples, results and reports


def _start(config: RunConfig, model: ModelAdapter | None, replay: Replay | None, loaded_with: RunConfig | None,
           took_over: str) -> RunState:
    """Start-up: every check, the model and judge loaded, the requests built with their cache keys,
    then the run folder, run.log and the cache."""
    if config.data is not None and Path(config.data).expanduser().exists():
        # results.json records where the data is from anywhere (another working folder)
        config = dataclasses.replace(config, data=str(Path(config.data).expanduser().resolve()))
    world = distributed.world_from_env()
    device = model.device if model is not None else distributed.rank_device(config.load.device, world)
    config = size_to_device(config, device)  # batch size, token budget and threads left None: sized to the device
    distributed.start(world)
    run = RunState(config, world, get_benchmark(config.benchmark), time.time(), [took_over] if took_over else [],
                   RunLog(), replay=replay)
    if took_over:
        log.warning("%s", took_over)
    questions = load_matching(run.benchmark, config.data, config.limit, config.domains, config.question_types,
                              run.notes)
    questions = startup.mark_duplicate_ids(questions, run.notes)
    if replay is None:
        _load_models(run, model, loaded_with)
    else:
        run.think_budget = replay.think_budget(config)
        run.judge = startup.load_judge_for_run(config, world)
    max_images = run.model.capabilities.max_images if run.model is not None else None
    requests, request_errors = build_requests(run.benchmark, questions, config, run.think_budget, max_images)
    if run.model is not None:
        unreadable(run.model, requests, run.notes)  # e.g. a served model's sets and numbers: refused in one line
    # the robustness studies' variants after the run's questions (runner/studies.py)
    run.study = studies.expand(run.benchmark, questions, requests, request_errors, config, run.think_budget, run.notes)
    run.questions, run.requests = run.study.questions, run.study.requests  # the run's, then its variants'
    run.predictions = {i: Prediction(id=run.questions[i].id, answer="", error=e) for i, e in run.study.errors.items()}
    if run.model is not None and constrained(run.requests):  # the checkpoint's letters and digits, before any write
        run.vocab = AnswerVocabulary.for_model(run.model)
    _open_run_folder(run)
    run.prompt_version = run.benchmark.prompt_version_for(config.protocol)
    run.keys = [sample_key(run.fingerprint, run.prompt_version, r, q) if r is not None else ""
                for q, r in zip(run.questions, run.requests)]
    run.timer = StageTimer(run.device, synchronize=config.batching.profile)
    run.finish = partial(read_answer, run.benchmark, config.protocol)
    return run


def _load_models(run: RunState, model: ModelAdapter | None, loaded_with: RunConfig | None) -> None:
    """The model (given, or loaded on the rank's device) checked for the run's options, its
    thinking budget, compiled parts, and the judge."""
    config = run.config
    run.model = (startup.given_model(config, model, loaded_with) if model is not None
                 else startup.load_for_run(config, run.world))
    run.device = run.model.device
    run.think_budget = startup.think_budget_for(config, run.model)
    startup.compile_parts(run.model, config, run.notes)
    run.judge = startup.load_judge_for_run(config, run.world, run.model)


def _open_run_folder(run: RunState) -> None:
    """The run folder, run.log and the cache (this rank's shard over several nodes), and the
    model's fingerprint (with the cache file's digest) the keys are computed from."""
    config, world = run.config, run.world
    run.out_dir = Path(config.output.out)
    startup.make_run_folder(run.out_dir)
    run.run_log.open(run.out_dir / ("run.log" if world.main else f"run.rank{world.rank}.log"))
    run.cache_file = Path(config.output.cache) if config.output.cache else run.out_dir / "cache.sqlite"
    run.cache = PredictionCache(distributed.shard_path(run.cache_file, world))
    run.notes.extend(run.cache.notes)
    recorded = run.replay.fingerprint if run.replay is not None else None  # the weights are gone: as recorded
    run.fingerprint = {**(recorded or run.model.fingerprint(file_digest=run.cache.file_digest)),
                       "arguments": model_arguments(config)}


def _look_up_and_plan(run: RunState) -> None:
    """The cache's answers (asked by every rank), then the rest planned: identical requests once,
    prompts longer than the context as errors, this rank's share in batches of one kind within
    the token budget. A replay with anything left to compute is refused in one line."""
    config, questions, keys = run.config, run.questions, run.keys
    run.cached = distributed.cached_everywhere(run.cache, sorted({k for k in keys if k}), run.cache_file, run.world)
    log.info("%d questions, %d cached, model %s", len(questions), sum(k in run.cached for k in keys), config.model)
    for index, (question, key) in enumerate(zip(questions, keys)):
        if question.error:
            run.predictions[index] = Prediction(id=question.id, answer="", error=question.error)
        elif key in run.cached:
            run.predictions[index] = run.finish(question, run.requests[index], run.cached[key])
    run.n_cached = run.saved = sum(1 for i in run.predictions if keys[i] in run.cached)
    run.todo = [i for i in range(len(questions)) if i not in run.predictions]
    leaders, run.followers = shared_requests(run.todo, keys)
    if run.replay is not None:
        if leaders:
            run.cache.close()
            raise run.replay.missing(len(run.todo))
        return
    run.loop = BatchLoop(run.model, run.benchmark, questions, run.requests, config, run.vocab, run.timer)
    with run.timer.stage("plan"):
        items = run.loop.items(leaders)
        for item, error in too_long(items, run.model):
            run.predictions.update(run.with_followers({item.index: Prediction(
                id=questions[item.index].id, answer="", error=error)}))
        run.items = distributed.shard([item for item in items if item.index not in run.predictions], run.world)
        run.batches = plan_batches(run.items, first_rows(config.batching), config.batching.token_budget)


def _judge(run: RunState) -> Judged:
    """Open answers judged (the benchmark's rules; a --judge model's requests through the same
    batch loop, cached too); then the cache is closed."""
    config, study = run.config, run.study
    try:
        with run.timer.stage("judge"):
            judged = judge_run(run.benchmark, study.judged_questions(), run.predictions, run.judge, run.cache,
                               config.judging, config.batching, protocol=config.protocol,
                               unsafe_sandbox=config.unsafe_sandbox, judging=study.judging())
        run.notes.extend(judged.notes)
        run.cache.check_present()  # the run folder removed since the last batch: say so, write nothing
    except CacheWriteError as err:
        raise stopped(err, run.saved, len(run.questions)) from None
    finally:
        run.cache.close()
    return judged


def _score_and_write(run: RunState, judged: Judged, command: str | None) -> RunResult:
    """Scores, then samples.parquet, variants.parquet, results.json and the reports written together."""
    config, study = run.config, run.study
    samples = samples_table(run.questions[:study.n_base], run.predictions, run.keys)
    samples["read_by"] = read_by(run.requests[:study.n_base], run.fingerprint.get("read_by"))
    for column, values in judged.columns.items():
        samples[column] = values[:study.n_base]
    scores = score(samples, run.benchmark, config.output.bootstrap, config.output.seed)
    studied, variants = study.finish(run.benchmark, run.predictions, run.keys, judged.columns, samples, run.cached, run.todo)
    results = results_json(run, judged, scores, samples, variants, studied, command)
    try:
        write_outputs(run.out_dir, samples, results, variants, run.questions[:study.n_base])  # with the thumbnails
    except OutputsError as err:
        raise Stopped(f"stopped: {err}; every answer is in the cache {run.cache.path}: free space and rerun the same "
                      "command (nothing is computed again)") from None
    log.info("done: %s", {k: scores.get(k) for k in scores.get("headline", [])})
    distributed.finish(run.world)
    return RunResult(run.out_dir, results, samples)
