"""Repeated sampling (`--samples K`): every generated request asked K times, as more requests of
the same run.

Sample 0 is the run's own request (seed `--seed`); sample j = 1…K−1 is the same request with seed
seed + j in its sampling settings, so each sample is a field-for-field request of its own: its own
cache key, and its own batch kind (samples of one seed batch together). runner/studies.py puts the
samples after the run's questions like the other variants; scoring/sampling.py scores them.

Which requests are sampled: free generation (`Generate`: official protocols, open answers) and
sessions — they carry `--gen-kwargs` sampling settings (runner/requests.py `for_run`) — and a
thinking block's reasoning before a constrained answer (sampled with the same settings, only with
--samples > 1: a run without it reasons greedily as always). A constrained letter or number read
from the logits without thinking is deterministic: it is asked once (one note).

How the seed reaches the sampling: the batch loop (runner/loop.py) seeds torch's generator once
with --seed, and the run's own samples draw from it exactly as without --samples. Every other seed
draws from a stream of its own (`SeedStreams`), started at that seed and kept between its batches,
so adding samples does not move a single random number of sample 0: its answers are those of a
run without --samples on the same batches.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any, Iterator, Mapping, Sequence

import torch

from finbench.requests import Choose, Generate, Number, Request, Session
from finbench.types import Question, RunConfig


def sampled_settings(config: RunConfig) -> dict[str, Any]:
    """The run's sampling settings (`--gen-kwargs` without the budget), {} when decoding is greedy."""
    generation = {k: v for k, v in config.decode.gen_kwargs if k != "max_new_tokens"}
    return generation if float(generation.get("temperature") or 0) > 0 else {}


def with_seed(sampling: Sequence[tuple[str, Any]], seed: int) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted({**dict(sampling), "seed": seed}.items()))


def repeatable(request: Request | None) -> bool:
    """Whether a request's answer is sampled, so worth asking again: generated text, or a thinking
    block before a constrained answer."""
    if isinstance(request, (Generate, Session)):
        return True
    return isinstance(request, (Choose, Number)) and request.think_budget is not None


def sample_variants(questions: Sequence[Question], requests: Sequence[Request | None], config: RunConfig,
                    notes: list[str]) -> list[tuple[int, int, Question, Request]]:
    """(base index, sample j, question, request of seed + j) for j = 1…K−1 of every sampled
    request. Raises ValueError (a start-up line) when the run's generation is greedy: its K
    samples would be K copies."""
    k = config.samples
    if k <= 1:
        return []
    shown = [i for i, r in enumerate(requests) if repeatable(r)]
    constrained = sum(1 for r in requests if r is not None and not repeatable(r))
    if shown and not sampled_settings(config):
        raise ValueError(f"--samples {k}: decoding is greedy (no --gen-kwargs temperature), so all {k} samples "
                         "would be identical; pass a sampling temperature, e.g. --gen-kwargs temperature=0.7 (top_p, "
                         "top_k as wanted)")
    if constrained:
        notes.append(f"repeated sampling (--samples {k}): {constrained} constrained answer(s) read from the logits "
                     "(a letter, a set, a number, no thinking) are deterministic, so they are asked once and are "
                     "not in the sampling numbers")
    if not shown:
        notes.append(f"repeated sampling (--samples {k}): this run has no generated request to sample")
        return []
    out = []
    for j in range(1, k):
        for i in shown:
            out.append((i, j, questions[i], replace(requests[i], sampling=with_seed(requests[i].sampling,
                                                                                   config.output.seed + j))))
    return out


def thinking_sampling(config: RunConfig) -> tuple[tuple[str, Any], ...]:
    """The sampling settings of the run's own thinking requests (sample 0): none unless --samples > 1
    asks for samples (greedy reasoning, as always); then the --gen-kwargs settings with --seed."""
    settings = sampled_settings(config)
    return with_seed(settings.items(), config.output.seed) if config.samples > 1 and settings else ()


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


def seed_of(sampling: Sequence[tuple[str, Any]]) -> int | None:
    return dict(sampling).get("seed")


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


def sample_frames(samples: Any, variants: Any, bases: Sequence[int], sample_of: Sequence[int],
                  k: int) -> list[Any]:
    """The K tables of the sampled questions, each in the same question order: sample 0 the
    run's own rows (samples.parquet), sample j its variants rows. `bases[v]`, `sample_of[v]`: the
    base question and the sample of variants row v (non-sampling rows have sample 0)."""
    order = sorted({bases[v] for v in range(len(bases)) if sample_of[v] > 0})
    frames = [samples.iloc[order].reset_index(drop=True)]
    for j in range(1, k):
        rows: Mapping[int, int] = {bases[v]: v for v in range(len(bases)) if sample_of[v] == j}
        frames.append(variants.iloc[[rows[i] for i in order]].reset_index(drop=True))
    return frames
