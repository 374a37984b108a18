"""The next batch's host-to-device copy, made on a CUDA side stream while the model's stream
works on the current batch (`prefetch`'s `ahead`), and the model's stream made to wait for it."""

from __future__ import annotations

from typing import Any, Callable

import torch

from finbench.models.inputs import ModelInputs
from finbench.runner.preprocess import PreparedBatch


class CopyAhead:
    """One run's side stream of copies (made on first use) for a model on `device` whose inputs
    `to_device` moves."""

    def __init__(self, device: torch.device, to_device: Callable[[ModelInputs], ModelInputs]) -> None:
        self.device, self.to_device = device, to_device
        self._stream: Any = None

    def enqueue(self, prepared: PreparedBatch, max_batch: int) -> None:
        """A CUDA model: enqueue the copy of `prepared` now; `on_device` makes the model's stream
        wait for it. Nothing elsewhere, or for a batch that will be re-cut (over `max_batch`)."""
        if self.device.type != "cuda" or prepared.inputs is None or len(prepared.indices) > max_batch:
            return
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self._stream):
            moved = self.to_device(prepared.inputs)
            copied = torch.cuda.Event()
            copied.record(self._stream)
        prepared.on_device = (moved, copied)

    def on_device(self, prepared: PreparedBatch) -> ModelInputs:
        """The batch's inputs on the model's device: copied ahead (waited for on the model's stream,
        and marked as used there so that the allocator keeps them until it is done), or now."""
        if prepared.on_device is None:
            return self.to_device(prepared.inputs)
        moved, copied = prepared.on_device
        prepared.on_device = None
        current = torch.cuda.current_stream(self.device)
        current.wait_event(copied)
        moved.record_stream(current)
        return moved
