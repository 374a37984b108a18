"""What one run carries from step to step (runner/engine.py): its questions and requests, their
cache keys and predictions, and the plan of what is left to compute."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from finbench.benchmarks.base import Benchmark
from finbench.config.specs import RunConfig
from finbench.core.requests import Request
from finbench.core.types import Prediction, Question
from finbench.runner.replay import Replay


@dataclass
class RunState:
    """One run between its steps. Start-up fills the run's settings and its questions, requests and
    keys; the cache lookup the predictions found there and the plan (`todo`, `followers`,
    `batches`); compute the rest of the predictions and the compute figures."""

    config: RunConfig
    world: Any  # runner/distributed.py World
    benchmark: Benchmark
    started: float
    notes: list[str]  # warnings that go into results.json
    run_log: Any  # runner/runlog.py RunLog
    model: Any = None  # the model adapter; None in a replay
    replay: Replay | None = None  # served from the cache alone (runner/replay.py)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    judge: Any = None
    vocab: Any = None  # runner/decoding.py AnswerVocabulary: only where choices or numbers are read
    think_budget: int | None = None
    study: Any = None  # runner/studies.py Studies: the run's questions, then its variants'
    questions: list[Question] = field(default_factory=list)
    requests: list[Request | None] = field(default_factory=list)
    out_dir: Path = Path(".")
    cache_file: Path = Path(".")
    cache: Any = None  # runner/cache.py PredictionCache (this rank's shard)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    prompt_version: str = ""
    keys: list[str] = field(default_factory=list)
    predictions: dict[int, Prediction] = field(default_factory=dict)
    cached: dict[str, Any] = field(default_factory=dict)
    finish: Callable[..., Prediction] | None = None  # (question, request, prediction) → its answer read
    loop: Any = None  # runner/loop.py BatchLoop; None in a replay
    timer: Any = None  # runner/timing.py StageTimer
    n_cached: int = 0
    todo: list[int] = field(default_factory=list)
    followers: dict[int, list[int]] = field(default_factory=dict)
    items: list[Any] = field(default_factory=list)  # this rank's share of the planned items
    batches: list[list[int]] = field(default_factory=list)
    saved: int = 0  # answers in the cache: found there, then committed
    compute_seconds: float = 0.0
    first_batch_wait: float | None = None
    part_seconds: dict[str, float] = field(default_factory=dict)

    def with_followers(self, batch: dict[int, Prediction]) -> dict[int, Prediction]:
        """`batch` plus the predictions of the questions that share a leader's request, each with its
        own answer read from the shared generation."""
        out = dict(batch)
        for leader, prediction in batch.items():
            for index in self.followers.get(leader, ()):
                out[index] = self.finish(self.questions[index], self.requests[index], prediction)
        return out
