"""Sampled decoding: the next token drawn as transformers draws it, and one random stream per
seed — what the repeated-sampling study (finbench/studies/sampling.py) asks of the runner. A
request's sampling settings (`--gen-kwargs`, with its seed) are the run's settings
(finbench/config/run_settings.py `sampled_settings`, `with_seed`, `seed_of`).

How the seed reaches the sampling: the batch loop (runner/loop.py) seeds torch's generator once
with --seed, and the run's own samples draw from it exactly as without --samples. Every other seed
draws from a stream of its own (`SeedStreams`), started at that seed and kept between its batches,
so adding samples does not move a single random number of sample 0: its answers are those of a
run without --samples on the same batches.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import torch


def next_tokens(logits: torch.Tensor, sampling: Mapping[str, Any]) -> torch.Tensor:
    """One token id per row [B] drawn from `logits` [B, V] as transformers' sampling does: divided by
    the temperature, cut to the top_k most likely, then to the smallest set whose probability
    reaches top_p (the most likely token always kept)."""
    logits = logits.to(torch.float32) / float(sampling["temperature"])
    top_k = int(sampling.get("top_k") or 0)
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    top_p = float(sampling.get("top_p") if sampling.get("top_p") is not None else 1.0)
    if top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = ordered.softmax(-1)
        ordered = ordered.masked_fill(probs.cumsum(-1) - probs > top_p, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)
    return torch.multinomial(logits.softmax(-1), 1)[:, 0]


class SeedStreams:
    """torch's random state per sampling seed. The run's own seed uses the global generator as it
    is (seeded once by the batch loop, exactly as before --samples existed); another seed swaps in
    its own stream for the duration of a batch, started at `torch.manual_seed(seed)` and saved
    after each of its batches, then restores the global state."""

    def __init__(self, run_seed: int) -> None:
        self.run_seed = run_seed
        self._states: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}

    @contextlib.contextmanager
    def use(self, seed: int | None) -> Iterator[None]:
        if seed is None or seed == self.run_seed:
            yield
            return
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            saved = self._states.get(seed)
            if saved is None:
                torch.manual_seed(seed)
            else:
                torch.set_rng_state(saved[0])
                for device, state in zip(devices, saved[1]):
                    torch.cuda.set_rng_state(state, device)
            try:
                yield
            finally:
                self._states[seed] = (torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in devices])
