"""The run's compute steps (runner/engine.py, steps 3-4): its planned batches preprocessed ahead,
decoded and committed to the cache batch by batch; then, with several ranks, every rank's answers
gathered on rank 0."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from finbench.models.contract import ModelUnavailable
from finbench.runner import distributed
from finbench.runner.cache import CacheWriteError
from finbench.runner.loop import BatchInterrupted
from finbench.runner.preprocess import prefetch
from finbench.runner.pixel_hint import pixel_hint
from finbench.runner.progress import progress
from finbench.runner.run_state import RunState
from finbench.runner.stops import Interrupted, stopped
from finbench.runner.timing import ModelParts

log = logging.getLogger("finbench")


def compute(run: RunState, show_progress: bool, console: Any) -> None:
    """Every planned batch of this rank: preprocessed in worker threads ahead of the model, decoded,
    committed to the cache, its followers answered with it. Ctrl-C keeps what was committed and
    raises `Interrupted`; a cache that stops taking writes, or a served model that goes, `Stopped`."""
    config, loop = run.config, run.loop
    started = time.perf_counter()
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    parts = ModelParts(run.model, synchronize=config.batching.profile)
    mine = {item.index for item in run.items}
    try:
        n_followers = sum(len(run.followers.get(i, ())) for i in mine)  # answered with their leader
        hint = pixel_hint(run.model, run.device, run.questions, run.items) if run.model is not None else None
        with progress(show_progress, len(run.items) + n_followers, console, hint) as advance, parts:
            for prepared in prefetch(run.batches, loop.prepare, workers=config.batching.workers, depth=config.batching.workers + 1,
                                     ahead=loop.copy_ahead, join=loop.join):
                if run.first_batch_wait is None:  # the pipeline fill: nothing for the model to do yet
                    run.first_batch_wait = time.perf_counter() - started
                run.timer.seconds["preprocess"] += prepared.seconds
                advance(len(_commit(run, loop.run(prepared))))
    except KeyboardInterrupt as stop:
        if isinstance(stop, BatchInterrupted):  # the rows of the interrupted batch that had finished
            finished = {i: p for i, p in stop.predictions.items() if not p.error}
            run.cache.put_many([(run.keys[i], p) for i, p in finished.items()])
            run.saved += len(run.with_followers(finished))
        run.cache.close()
        log.warning("interrupted after %d of %d answers were saved", run.saved, len(run.questions))
        raise Interrupted(run.saved, len(run.questions)) from None
    except (CacheWriteError, ModelUnavailable) as err:  # the cache stops taking writes; a served model's server goes
        run.cache.close()
        log.error("%s", err)
        raise stopped(err, run.saved, len(run.questions)) from None
    run.compute_seconds = time.perf_counter() - started
    run.part_seconds = dict(parts.seconds)


def _commit(run: RunState, batch: dict[int, Any]) -> dict[int, Any]:
    """A decoded batch's answers committed to the cache, then its followers': the batch's predictions."""
    with run.timer.stage("cache_write"):
        run.cache.put_many([(run.keys[i], p) for i, p in batch.items() if not p.error])
    batch = run.with_followers(batch)
    run.saved += sum(1 for p in batch.values() if not p.error)
    run.predictions.update(batch)
    return batch


def gather_ranks(run: RunState) -> dict[str, Any] | None:
    """With several ranks, rank 0 takes every rank's answers (errors too: the cache keeps none) and
    merges their caches; another rank is done: what it computed is returned (for its RunResult)."""
    world = run.world
    if world.size == 1:
        return None
    mine = {item.index for item in run.items}
    computed = {i: p for i, p in run.predictions.items()
                if i in mine or any(i in run.followers.get(j, ()) for j in mine)}
    shares = distributed.gather({"predictions": computed, "seconds": run.compute_seconds, "answers": len(computed)},
                                world)
    if not world.main:
        run.cache.close()
        distributed.finish(world)
        return {"rank": world.rank, "computed": len(computed)}
    for share in shares[1:]:
        run.predictions.update(share["predictions"])
    distributed.merge(run.cache_file, [(run.keys[i], p) for i, p in run.predictions.items()
                                       if run.keys[i] and not p.error], world)
    run.compute_seconds = max(share["seconds"] for share in shares)
    run.notes.append(f"data parallel over {world.size} ranks: {[share['answers'] for share in shares]} samples each")
    return None
