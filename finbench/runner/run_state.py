"""The records one run's steps return (runner/engine.py), each frozen: a step takes the records of
the steps before it and returns its own, never rebinding an earlier one's fields.

- `Started` (start-up): the run's settings, questions, requests and cache keys, with the models
  it loaded (`Loaded`) and its run folder and cache (`RunFolder`);
- `Planned`: what the cache had, and the plan of what is left to compute;
- `Computed`: every answer, with the compute figures (runner/compute.py);
- `Judged` (runner/judge_step.py): the judging columns and summary;
- `Scored`: the samples and variants tables, the scores and the studies' numbers.

Some fields are objects that keep working after their step (the cache, the batch loop, the stage
timer): the records fix which objects a run uses, not the objects' own state."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch

from finbench.benchmarks.base import Benchmark
from finbench.config.specs import RunConfig
from finbench.core.requests import Request
from finbench.core.types import Prediction, Question
from finbench.models.contract import ModelAdapter
from finbench.runner.batching import Item
from finbench.runner.cache import PredictionCache
from finbench.runner.decoding import AnswerVocabulary
from finbench.runner.distributed import World
from finbench.runner.loop import BatchLoop
from finbench.runner.replay import Replay
from finbench.runner.studies import Studies
from finbench.runner.timing import StageTimer

if TYPE_CHECKING:
    import pandas as pd

# (question, request, the prediction of its request) → the prediction with the question's answer read
Finish = Callable[[Question, Request, Prediction], Prediction]


@dataclass(frozen=True)
class Loaded:
    """The models start-up loaded: the model adapter (None in a replay, whose device is the CPU),
    its thinking budget for constrained requests, and the --judge adapter (None without one, off rank 0)."""

    model: ModelAdapter | None
    device: torch.device
    think_budget: int | None
    judge: ModelAdapter | None


@dataclass(frozen=True)
class RunFolder:
    """The run folder, its cache file and this rank's cache (its own shard over several nodes), and
    the model's fingerprint the cache keys are computed from."""

    out_dir: Path
    cache_file: Path
    cache: PredictionCache
    fingerprint: dict[str, Any]


@dataclass(frozen=True)
class Started:
    """A run after start-up: its settings, its questions and requests (the run's, then its studies'
    variants: `study`), their cache keys, the models and the run folder."""

    config: RunConfig
    world: World
    benchmark: Benchmark
    started: float  # time.time() at start-up
    notes: tuple[str, ...]  # start-up's warnings for results.json
    replay: Replay | None  # served from the cache alone (runner/replay.py)
    loaded: Loaded
    study: Studies  # runner/studies.py: the run's questions, then its variants'
    vocab: AnswerVocabulary | None  # only where choices or numbers are read
    folder: RunFolder
    prompt_version: str
    keys: list[str]  # each question's cache key; "" where it has no request
    timer: StageTimer
    finish: Finish

    @property
    def questions(self) -> list[Question]:
        return self.study.questions

    @property
    def requests(self) -> list[Request | None]:
        return self.study.requests

    def with_followers(self, followers: Mapping[int, Sequence[int]],
                       batch: dict[int, Prediction]) -> dict[int, Prediction]:
        """`batch` plus the predictions of the questions that share a leader's request, each with its
        own answer read from the shared generation."""
        out = dict(batch)
        for leader, prediction in batch.items():
            for index in followers.get(leader, ()):
                out[index] = self.finish(self.questions[index], self.requests[index], prediction)
        return out


@dataclass(frozen=True)
class Planned:
    """The cache's answers and the plan for the rest: `predictions` so far (errors, cached answers,
    prompts longer than the context), the questions left (`todo`), the leader → followers of
    identical requests, and this rank's share of the items in batches (none in a replay)."""

    predictions: dict[int, Prediction]
    cached: dict[str, Prediction]  # cache key → the answer found there (on any rank)
    n_cached: int  # questions answered from the cache
    todo: list[int]
    followers: dict[int, list[int]]
    loop: BatchLoop | None  # None in a replay
    items: list[Item]  # this rank's share of the planned items
    batches: list[list[int]]


@dataclass(frozen=True)
class Computed:
    """Every answer of the run (rank 0's after gathering), how many are in the cache (found there,
    then committed), and the compute figures for results.json."""

    predictions: dict[int, Prediction]
    saved: int
    compute_seconds: float
    first_batch_wait: float | None  # the pipeline fill, before the first batch
    part_seconds: dict[str, float]  # seconds per model part (runner/timing.py ModelParts)
    notes: tuple[str, ...] = ()  # for results.json, after start-up's

    @classmethod
    def nothing(cls, planned: Planned) -> "Computed":
        """A replay's: the cache's answers, nothing computed."""
        return cls(planned.predictions, planned.n_cached, 0.0, None, {})


@dataclass(frozen=True)
class Scored:
    """The run's samples table (its own questions), the scores, the studies' numbers for
    results.json and their variants table (None without a study)."""

    samples: pd.DataFrame
    scores: dict[str, Any]
    studied: dict[str, Any]
    variants: pd.DataFrame | None
