"""Wall time of a model's own parts (the vision tower, the language model), measured by forward
hooks the adapter registers on its own modules — PyTorch's public module API; nothing is wrapped
or replaced — and removed when the run ends (`PartClock.hooks`). The runner owns the clock
(runner/timing.py) and reads `seconds`; the adapter names the parts (`timed_parts`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Sequence

import torch


class PartClock:
    """Seconds per part name. `synchronize` is called at each part's start and end (on CUDA, so
    that a part is charged its kernels, not only their launches). While `capturing()` (a CUDA
    graph capture of a decode step, where a sync is illegal) a part runs untimed."""

    def __init__(self, synchronize: Callable[[], None] = lambda: None,
                 capturing: Callable[[], bool] = lambda: False) -> None:
        self.synchronize, self.capturing = synchronize, capturing
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def region(self, name: str) -> Iterator[None]:
        """Time a block of the adapter's own code as part `name`."""
        self.seconds.setdefault(name, 0.0)
        if self.capturing():
            yield
            return
        self.synchronize()
        started = time.perf_counter()
        try:
            yield
        finally:
            self.synchronize()
            self.seconds[name] += time.perf_counter() - started

    @contextlib.contextmanager
    def hooks(self, parts: Sequence[tuple[str, torch.nn.Module]]) -> Iterator["PartClock"]:
        """Each module's forward calls timed as its part while the block runs; every hook removed
        after. A module called inside itself (recursion) counts its outermost call only."""
        handles = []
        for name, module in parts:
            self.seconds.setdefault(name, 0.0)
            depth: list[float | None] = []

            def start(_module: Any, _args: Any, _depth: list[float | None] = depth) -> None:
                if self.capturing():
                    _depth.append(None)
                    return
                if not _depth:
                    self.synchronize()
                _depth.append(time.perf_counter())

            def stop(_module: Any, _args: Any, _output: Any, _depth: list[float | None] = depth,
                     _name: str = name) -> None:
                started = _depth.pop()
                if started is None:  # called inside a graph capture: untimed
                    return
                if not _depth:
                    self.synchronize()
                    self.seconds[_name] += time.perf_counter() - started

            handles += [module.register_forward_pre_hook(start), module.register_forward_hook(stop, always_call=True)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()
