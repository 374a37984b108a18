"""Where a run's model time goes, inside the model: the vision tower, the multimodal position
building (`get_rope_index`) and the language model, next to the runner's own stages.

The three callables are wrapped on the model instance for the run and restored after (on CUDA
each is synchronised, so asynchronous kernels are charged to the part that launched them). A
family without one of these parts simply has no entry; timing never fails a batch.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# (name, attribute path under the adapter's `model.model`, method)
PARTS = (("vision", ("visual",), "forward"), ("rope_index", (), "get_rope_index"),
         ("language_model", ("language_model",), "forward"))


class ModelParts:
    """`with ModelParts(adapter) as parts: …` → `parts.seconds` {part: wall seconds}. The language
    model's time includes the decode steps of multi-answer, numerical and thinking decoding."""

    def __init__(self, adapter: Any) -> None:
        self.base = getattr(getattr(adapter, "model", None), "model", None)
        self.seconds: dict[str, float] = {}
        self._restore: list[tuple[Any, str]] = []

    def __enter__(self) -> "ModelParts":
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        for name, path, method in PARTS if self.base is not None else ():
            owner = self.base
            for attribute in path:
                owner = getattr(owner, attribute, None)
            original = getattr(owner, method, None) if owner is not None else None
            if original is None or method in vars(owner):  # absent, or already wrapped
                continue
            self.seconds[name] = 0.0

            def timed(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                sync()
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    sync()
                    self.seconds[_name] += time.perf_counter() - started

            setattr(owner, method, timed)
            self._restore.append((owner, method))
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, method in self._restore:
            delattr(owner, method)  # the instance attribute goes; the class method shows again
        self._restore.clear()
