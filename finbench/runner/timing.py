"""Where a run's time goes: the runner's stages (`StageTimer`), the model's own parts (`ModelParts`:
the vision tower and the language model, timed by the adapter itself), and the
token and FLOP counts behind samples/s, image tokens/s and TFLOP/s (`Throughput`). Bookkeeping
never fails a batch: a count that raises is dropped (and counted), never the answers.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import time
from collections import defaultdict
from typing import Any, Iterator

import torch

from finbench.models.contract import ModelAdapter
from finbench.models.part_timing import PartClock

log = logging.getLogger("finbench")


class StageTimer:
    """Wall time per stage. With `synchronize` (`--profile`) on CUDA it synchronises at stage
    boundaries so that asynchronous kernels are charged to the stage that launched them; without,
    nothing waits for the device (a sync per stage kept the GPU idle while the host caught up), so
    on CUDA a stage's seconds are the host's: kernels run on and are charged where the host next
    waits for a result. On the CPU both are the same."""

    def __init__(self, device: torch.device, synchronize: bool = True) -> None:
        self.cuda = device.type == "cuda"
        self.sync = self.cuda and synchronize
        self.synchronized = synchronize or not self.cuda  # stage seconds are device-exact
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.sync:
            torch.cuda.synchronize()
        started = time.perf_counter()
        try:
            yield
        finally:
            if self.sync:
                torch.cuda.synchronize()
            self.seconds[name] += time.perf_counter() - started


class ModelParts:
    """`with ModelParts(adapter) as parts: …` → `parts.seconds` {part: wall seconds}. The adapter
    times its own parts (`timed_parts(clock)`: hooks it registers on its modules and removes after);
    on CUDA each part is synchronised, so only with `synchronize` (`--profile`): without it a CUDA
    run times no parts. The language model's time includes every decode step."""

    def __init__(self, adapter: ModelAdapter, synchronize: bool = True) -> None:
        self.adapter = adapter
        self.enabled = synchronize or adapter.device.type != "cuda"
        cuda = torch.cuda.is_available()
        self.clock = PartClock(torch.cuda.synchronize if cuda else (lambda: None),
                               torch.cuda.is_current_stream_capturing if cuda else (lambda: False))
        self._timing: contextlib.ExitStack | None = None

    @property
    def seconds(self) -> dict[str, float]:
        return self.clock.seconds

    def __enter__(self) -> "ModelParts":
        self._timing = contextlib.ExitStack()
        if self.enabled:
            try:
                self._timing.enter_context(self.adapter.timed_parts(self.clock))
            except Exception as err:  # noqa: BLE001 — timing never fails a run
                log.warning("the model's parts are not timed (%s: %s)", type(err).__name__, err)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._timing is not None:
            self._timing.close()


class Throughput:
    """Token and FLOP counts of every prefill a run makes, and the run's throughput figures."""

    def __init__(self, timer: StageTimer) -> None:
        self.timer = timer
        self.image_tokens = 0
        self.prompt_tokens = 0
        self.padded_tokens = 0  # rows × padded length of every prefill: padding_ratio = padded / prompt
        self.flops: float | None = 0.0  # None once a family says it has no count
        self.reasoning_tokens = 0
        self.oom_retries = 0
        self.accounting_errors = 0  # batches whose token/FLOP count raised (answers kept)

    def account(self, model: ModelAdapter, inputs: Any) -> None:
        if "attention_mask" not in inputs:  # tokens counted by a server (a served model), not here
            return
        try:
            image_tokens = model.count_image_tokens(inputs)
            prompt_tokens = int(inputs["attention_mask"].sum())
            padded_tokens = int(inputs["attention_mask"].numel())
            flops = model.prefill_flops(inputs)
        except Exception as err:  # noqa: BLE001
            if not self.accounting_errors:
                log.warning("throughput accounting failed (%s: %s); answers are kept, counts are incomplete",
                            type(err).__name__, err)
            self.accounting_errors += 1
            return
        self.image_tokens += image_tokens
        self.prompt_tokens += prompt_tokens
        self.padded_tokens += padded_tokens
        self.flops = None if flops is None or self.flops is None else self.flops + float(flops)

    def summary(self, model: ModelAdapter | None, n_samples: int, seconds: float, max_batch: int,
                device: torch.device | None = None) -> dict[str, Any]:
        """The run's throughput; `model` None: a replay, which ran nothing on `device`."""
        device = model.device if model is not None else device
        forward = self.timer.seconds.get("forward")
        stats: dict[str, Any] = {
            "samples": n_samples,
            "seconds": seconds,
            "samples_per_s": n_samples / seconds if seconds > 0 else None,
            "image_tokens": self.image_tokens,
            "image_tokens_per_s": self.image_tokens / seconds if seconds > 0 else None,
            "prompt_tokens": self.prompt_tokens,
            "padding_ratio": self.padded_tokens / self.prompt_tokens if self.prompt_tokens else None,
            "reasoning_tokens": self.reasoning_tokens,
            "stages_s": dict(self.timer.seconds),
            "device": str(device),
            "oom_retries": self.oom_retries,
            "accounting_errors": self.accounting_errors,
            "final_max_batch": max_batch,
            # analytic prefill FLOPs over the time spent in prefill forwards (the "forward" stage,
            # device-exact only when synchronised: --profile on CUDA); None for a family without a count
            "prefill_flops": self.flops,
            "prefill_tflops_per_s": self.flops / forward / 1e12
            if forward and self.flops and self.timer.synchronized else None,
            "stages_synchronized": self.timer.synchronized,
        }
        with contextlib.suppress(Exception):  # bookkeeping never fails a run
            if model is not None:
                stats["model_memory_gib"] = model.memory_footprint() / 2**30
        if device.type == "cuda":
            stats["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        else:
            stats["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        return stats
