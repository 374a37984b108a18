"""The run's compute steps (runner/engine.py, steps 3-4): its planned batches preprocessed ahead,
decoded and committed to the cache batch by batch; then, with several ranks, every rank's answers
gathered on rank 0."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Mapping, Sequence

import torch

from finbench.core.types import Prediction
from finbench.models.contract import ModelUnavailable
from finbench.runner import distributed
from finbench.runner.cache import CacheWriteError
from finbench.runner.loop import BatchInterrupted
from finbench.runner.preprocess import prefetch
from finbench.runner.pixel_hint import pixel_hint
from finbench.runner.progress import progress
from finbench.runner.run_state import Computed, Planned, Started
from finbench.runner.stops import Interrupted, stopped
from finbench.runner.timing import ModelParts

log = logging.getLogger("finbench")


def compute(run: Started, planned: Planned, show_progress: bool, console: Any) -> Computed:
    """Every planned batch of this rank: preprocessed in worker threads ahead of the model, decoded,
    committed to the cache, its followers answered with it. Ctrl-C keeps what was committed and
    raises `Interrupted`; a cache that stops taking writes, or a served model that goes, `Stopped`."""
    config, loop, cache, device = run.config, planned.loop, run.folder.cache, run.loaded.device
    started = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    parts = ModelParts(run.loaded.model, synchronize=config.batching.profile)
    predictions, saved, first_batch_wait = dict(planned.predictions), planned.n_cached, None
    mine = {item.index for item in planned.items}
    try:
        n_followers = sum(len(planned.followers.get(i, ())) for i in mine)  # answered with their leader
        model = run.loaded.model
        hint = pixel_hint(model, device, run.questions, planned.items) if model is not None else None
        with progress(show_progress, len(planned.items) + n_followers, console, hint) as advance, parts:
            for prepared in prefetch(planned.batches, loop.prepare, workers=config.batching.workers,
                                     depth=config.batching.workers + 1, ahead=loop.copy_ahead, join=loop.join):
                if first_batch_wait is None:  # the pipeline fill: nothing for the model to do yet
                    first_batch_wait = time.perf_counter() - started
                run.timer.seconds["preprocess"] += prepared.seconds
                batch = _commit(run, planned.followers, loop.run(prepared))
                saved += sum(1 for p in batch.values() if not p.error)
                predictions.update(batch)
                advance(len(batch))
    except KeyboardInterrupt as stop:
        if isinstance(stop, BatchInterrupted):  # the rows of the interrupted batch that had finished
            finished = {i: p for i, p in stop.predictions.items() if not p.error}
            cache.put_many([(run.keys[i], p) for i, p in finished.items()])
            saved += len(run.with_followers(planned.followers, finished))
        cache.close()
        log.warning("interrupted after %d of %d answers were saved", saved, len(run.questions))
        raise Interrupted(saved, len(run.questions)) from None
    except (CacheWriteError, ModelUnavailable) as err:  # the cache stops taking writes; a served model's server goes
        cache.close()
        log.error("%s", err)
        raise stopped(err, saved, len(run.questions)) from None
    return Computed(predictions, saved, time.perf_counter() - started, first_batch_wait, dict(parts.seconds))


def _commit(run: Started, followers: Mapping[int, Sequence[int]],
            batch: dict[int, Prediction]) -> dict[int, Prediction]:
    """A decoded batch's answers committed to the cache, then its followers': the batch's predictions."""
    with run.timer.stage("cache_write"):
        run.folder.cache.put_many([(run.keys[i], p) for i, p in batch.items() if not p.error])
    return run.with_followers(followers, batch)


def gather_ranks(run: Started, planned: Planned, computed: Computed) -> tuple[Computed, dict[str, Any] | None]:
    """With several ranks, rank 0 takes every rank's answers (errors too: the cache keeps none) and
    merges their caches; another rank is done. (What rank 0 goes on with, None there; on another
    rank, what it computed, for its RunResult.)"""
    world = run.world
    if world.size == 1:
        return computed, None
    mine = {item.index for item in planned.items}
    own = {i: p for i, p in computed.predictions.items()
           if i in mine or any(i in planned.followers.get(j, ()) for j in mine)}
    shares = distributed.gather({"predictions": own, "seconds": computed.compute_seconds, "answers": len(own)}, world)
    if not world.main:
        run.folder.cache.close()
        distributed.finish(world)
        return computed, {"rank": world.rank, "computed": len(own)}
    predictions = dict(computed.predictions)
    for share in shares[1:]:
        predictions.update(share["predictions"])
    distributed.merge(run.folder.cache_file, [(run.keys[i], p) for i, p in predictions.items()
                                              if run.keys[i] and not p.error], world)
    note = f"data parallel over {world.size} ranks: {[share['answers'] for share in shares]} samples each"
    return dataclasses.replace(computed, predictions=predictions, compute_seconds=max(s["seconds"] for s in shares),
                               notes=(*computed.notes, note)), None
