"""Decode steps at the bandwidth floor: a static KV buffer, one-query attention without
`repeat_kv`, and on CUDA the whole step replayed from a CUDA graph.

Why: multi-answer and numerical items take up to 29 and 12 decode steps after their prefill. In the
H200 profile (benchmarks/results/gpu_profile_qwen2.5-vl-7b.txt) a step cost ~2.6 ms of host time
against a few hundred µs on the device: transformers' `DynamicCache` concatenates every layer's
keys and values on each step (a copy of the whole cache), the attention mask is rebuilt as a 4-D
float tensor, and transformers 5.17's SDPA path repeats the KV heads 7× (Qwen2.5-VL-7B: 28 query,
4 KV heads) whenever a mask is present. Memory-bound work (read the weights and the cache once per
step) is the floor; the host should not be.

- `StaticKV`: the prefill's cache copied once into buffers with room for more tokens,
  [B, H_kv, T + room, D] per layer, with a key mask [B, T + room] (the prefill's attention mask,
  then one slot per fed token) and the write slot as a device tensor. transformers' attention
  layers call `update` on it as on their own caches; each step writes one slot in place.
- `one_query_attention`: a query [B, H_q, 1, D] attends over the buffer with the key mask; the
  H_q / H_kv query heads that share a KV head are one [G, D] block of queries (what `repeat_kv`
  spells out with copies), one SDPA call.
- `StaticDecoder.step`: the step eagerly, or on CUDA replayed from a graph captured at the batch's
  second step. With graphs on, a batch decodes in the `Bucket` of its (rows, KV capacity rounded
  up to `KV_BUCKET`, position shape): persistent buffers its state is copied into, so the graph
  captured for the first such batch is replayed by every later one (`GraphState.reuses`). The first capture an adapter makes is checked against the eager step it replaces
  (same slot, same inputs); a capture that fails or differs turns graphs off for that adapter with
  one warning, and the eager static step goes on.
The attention of a step is exact (masked keys get zero weight); the buffer holds the same keys and
values the dynamic cache would (tests/test_static_decode.py: equal to the dynamic-cache step and
to a full recompute, ≤ 1e-5 in fp32).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

NAME = "finbench_one_query"  # the language model's attention during a static decode step
KV_BUCKET = 128  # KV capacities of graph buckets are multiples of this (bucket_capacity)
MAX_BUCKETS = 4  # graph buckets kept per adapter (each holds one batch's KV buffers)
ROOM = 32  # extra slots per batch: a multi-answer set takes at most 29 steps, a number 12 by default
GRAPH_CHECK_TOLERANCE = 1e-3  # relative, the first graph replay against the eager step
log = logging.getLogger("finbench")


def one_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_mask: torch.Tensor,
                        scale: float | None = None) -> torch.Tensor:
    """query [B, H_q, 1, D], key / value [B, H_kv, S, D], key_mask [B, S] (True = attend) →
    [B, H_q, 1, D]. Query head h uses KV head h // (H_q / H_kv), as `repeat_kv` arranges them."""
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, (heads // kv_heads) * q_len, dim)
    out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=key_mask[:, None, None, :], scale=scale)
    return out.reshape(batch, heads, q_len, dim)


def transformers_one_query(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: Any, scaling: float | None = None, dropout: float = 0.0,
                           **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The AttentionInterface signature; `attention_mask` is the key mask as [B, 1, 1, S]
    (`StaticKV.attention_mask`). Returns [B, 1, H_q, D] as transformers' SDPA path does."""
    if query.shape[2] != 1 or attention_mask is None:
        raise ValueError(f"{NAME} serves single-token decode steps over a StaticKV only")
    out = one_query_attention(query, key, value, attention_mask[:, 0, 0, :], scaling)
    return out.transpose(1, 2), None


def register() -> None:
    """Make NAME known to transformers' attention registry (idempotent: the same entry each time)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, transformers_one_query)


@contextlib.contextmanager
def attention_as(config: Any, name: str) -> Iterator[None]:
    """The language model's attention implementation set to `name` for the duration (the model
    thread only runs prefills and decode steps; the vision tower has its own config)."""
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


class StaticKV:
    """Keys and values of every layer in fixed buffers; transformers' attention calls `update`."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], key_mask: torch.Tensor,
                 length: int) -> None:
        self.keys, self.values, self.key_mask = keys, values, key_mask
        self.length = length  # slots written (host copy of `slot`, for growing)
        self.slot = torch.tensor([length], device=key_mask.device)  # where the next token goes

    @classmethod
    def from_cache(cls, cache: Any, attention_mask: torch.Tensor, room: int | None = None) -> "StaticKV":
        """From a transformers cache after the prefill (`cache.layers[i].keys/values` [B, H_kv, T, D])
        and the prefill's attention mask [B, T] (1 = a real token)."""
        room = ROOM if room is None else room
        layers = cache.layers
        batch, _, length, _ = layers[0].keys.shape
        keys, values = [], []
        for layer in layers:
            for source, target in ((layer.keys, keys), (layer.values, values)):
                shape = source.shape
                buffer = source.new_zeros(shape[0], shape[1], length + room, shape[3])
                buffer[:, :, :length] = source
                target.append(buffer)
        key_mask = torch.zeros(batch, length + room, dtype=torch.bool, device=attention_mask.device)
        key_mask[:, :length] = attention_mask.bool()
        return cls(keys, values, key_mask, length)

    @property
    def capacity(self) -> int:
        return self.key_mask.shape[1]

    @property
    def attention_mask(self) -> torch.Tensor:
        """The key mask as the 4-D mask transformers passes through unchanged: [B, 1, 1, S]."""
        return self.key_mask[:, None, None, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx].index_copy_(2, self.slot, key_states)
        self.values[layer_idx].index_copy_(2, self.slot, value_states)
        if layer_idx == 0:  # before layer 0's attention reads the mask
            self.key_mask.index_fill_(1, self.slot, True)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def grown(self, room: int | None = None) -> "StaticKV":
        """A copy with `room` more slots (a decode that outruns the buffer)."""
        room = ROOM if room is None else room

        def wider(t: torch.Tensor, dim: int) -> torch.Tensor:
            shape = list(t.shape)
            shape[dim] = room
            return torch.cat([t, t.new_zeros(shape)], dim=dim)

        return StaticKV([wider(k, 2) for k in self.keys], [wider(v, 2) for v in self.values],
                        wider(self.key_mask, 1), self.length)


StepFunction = Callable[[torch.Tensor, StaticKV, torch.Tensor], torch.Tensor]


def bucket_capacity(slots: int, step: int = KV_BUCKET) -> int:
    """KV slots of the bucket that holds `slots`: rounded up to a multiple of `step`, so batches whose
    prompts differ by a few tokens share buffers and one captured graph."""
    return -(-slots // step) * step


class Bucket:
    """The persistent tensors one captured graph reads and writes, for one (rows, KV capacity,
    position shape): the KV buffers, the fed ids, the positions; and the graph and its output once
    captured. A new batch of that shape copies its state in and replays the same graph."""

    def __init__(self, kv: StaticKV, ids: torch.Tensor, position: torch.Tensor) -> None:
        self.kv, self.ids, self.position = kv, ids, position
        self.graph: Any = None
        self.output: torch.Tensor | None = None


class GraphState:
    """Per adapter: whether CUDA graphs are (still) used, whether the first capture was checked,
    the memory pool and side stream every capture shares, and the buckets (at most `MAX_BUCKETS`,
    the least recently used dropped first: each holds a batch's KV buffers)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.checked = False
        self.pool: Any = None
        self.stream: Any = None
        self.captures = 0
        self.reuses = 0  # batches that replayed a graph captured for an earlier batch
        self.failure: str | None = None
        self.buckets: dict[tuple[int, ...], Bucket] = {}

    def bucket(self, kv: StaticKV, position: torch.Tensor) -> Bucket:
        """The bucket for `kv`'s rows and (bucketed) capacity, created on first use, with `kv`'s keys,
        values, key mask and write slot and `position` copied in (slots past `kv`'s capacity masked)."""
        rows, capacity = kv.key_mask.shape[0], bucket_capacity(kv.capacity)
        key = (rows, capacity, *position.shape)
        bucket = self.buckets.pop(key, None)
        if bucket is None:
            def empty(t: torch.Tensor) -> torch.Tensor:
                return t.new_zeros(*t.shape[:2], capacity, t.shape[3])

            buffers = StaticKV([empty(k) for k in kv.keys], [empty(v) for v in kv.values],
                               kv.key_mask.new_zeros(rows, capacity), kv.length)
            bucket = Bucket(buffers, torch.zeros(rows, 1, dtype=torch.long, device=kv.key_mask.device),
                            torch.empty_like(position))
            while len(self.buckets) >= MAX_BUCKETS:
                self.buckets.pop(next(iter(self.buckets)))
        elif bucket.graph is not None:
            self.reuses += 1
        self.buckets[key] = bucket  # most recently used last
        width = kv.capacity
        for target, source in zip(bucket.kv.keys + bucket.kv.values, kv.keys + kv.values):
            target[:, :, :width].copy_(source)
        bucket.kv.key_mask.zero_()
        bucket.kv.key_mask[:, :width].copy_(kv.key_mask)
        bucket.kv.length = kv.length
        bucket.kv.slot.fill_(kv.length)
        bucket.position.copy_(position)
        return bucket

    def disable(self, reason: str) -> None:
        self.enabled, self.failure = False, reason
        log.warning("CUDA graphs off for decode steps (%s); decode steps run eagerly", reason)


class StaticDecoder:
    """One batch's decode steps over a `StaticKV`. `forward(ids [B, 1], kv, position)` runs the
    model for one token per row and returns the last hidden state [B, H]; `position` is the
    position of the fed token, in whatever shape the family's rotary embedding takes, and is
    advanced by one after each step (in place, so a captured graph advances it too)."""

    def __init__(self, forward: StepFunction, kv: StaticKV, position: torch.Tensor, graphs: GraphState) -> None:
        self.forward, self.graphs = forward, graphs
        self.graph: Any = None
        self.output: torch.Tensor | None = None
        self.steps = 0
        self._adopt(kv, position)

    def _adopt(self, kv: StaticKV, position: torch.Tensor) -> None:
        """Decode over `kv` from `position`: with graphs on, in the bucket of its shape (its graph,
        if one was captured for an earlier batch, is replayed from the next step); else as given."""
        if self.graphs.enabled:
            bucket = self.graphs.bucket(kv, position)
            self.kv, self.ids, self.position = bucket.kv, bucket.ids, bucket.position
            self.graph, self.output, self.bucket = bucket.graph, bucket.output, bucket
        else:
            self.kv, self.position, self.bucket = kv, position.clone(), None
            self.ids = torch.zeros(kv.key_mask.shape[0], 1, dtype=torch.long, device=kv.key_mask.device)
            self.graph, self.output = None, None

    def _eager(self) -> torch.Tensor:
        hidden = self.forward(self.ids, self.kv, self.position)
        self.kv.slot.add_(1)
        self.position.add_(1)
        return hidden

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` of the batch (finished rows dropped, models/compaction.py): the buffers,
        the key mask and the positions narrowed; a graph captured for the wider batch is dropped (the
        next step captures one for this width)."""
        rows = rows.to(self.kv.key_mask.device)
        kv = StaticKV([k.index_select(0, rows) for k in self.kv.keys], [v.index_select(0, rows) for v in self.kv.values],
                      self.kv.key_mask.index_select(0, rows), self.kv.length)
        # positions are [..., B, 1] ([B, 1], or [3, B, 1] for M-RoPE): the batch is next to last
        self._adopt(kv, self.position.index_select(self.position.dim() - 2, rows))

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        if self.kv.length >= self.kv.capacity:  # outran the buffer: a wider one (another bucket, graph)
            self._adopt(self.kv.grown(), self.position)
        self.ids.copy_(token_ids.reshape(-1, 1))
        if self.graph is None and self.steps >= 1 and self.graphs.enabled and self.ids.is_cuda:
            hidden = self._capture()
        elif self.graph is not None:
            self.graph.replay()
            hidden = self.output.clone()  # the next replay overwrites the graph's output
        else:
            hidden = self._eager()
        self.kv.length += 1
        self.steps += 1
        return hidden

    def _capture(self) -> torch.Tensor:
        """Capture the step (not yet run for this token) and replay it. The adapter's first capture
        runs the step eagerly first, rewinds (the same keys and values go to the same slot again)
        and compares."""
        expected = None
        if not self.graphs.checked:
            expected = self._eager()
            self.kv.slot.sub_(1)
            self.position.sub_(1)
        try:
            if self.graphs.pool is None:
                self.graphs.pool = torch.cuda.graph_pool_handle()
                self.graphs.stream = torch.cuda.Stream(device=self.ids.device)
            graph = torch.cuda.CUDAGraph()
            # The capture API directly, not `torch.cuda.graph(...)`: that context synchronises and
            # empties the allocator's cache on every entry. Thread-local error mode: the worker
            # threads' pinned-memory allocations are legal meanwhile (PyTorch #175425), while any
            # forbidden call from this thread still fails the capture.
            stream = self.graphs.stream
            stream.wait_stream(torch.cuda.current_stream(self.ids.device))
            with torch.cuda.stream(stream):
                graph.capture_begin(pool=self.graphs.pool, capture_error_mode="thread_local")
                try:
                    output = self._eager()
                finally:
                    graph.capture_end()
            torch.cuda.current_stream(self.ids.device).wait_stream(stream)
            graph.replay()
        except Exception as err:  # noqa: BLE001 — a capture the step cannot take: eager from here on
            self.graphs.disable(f"capture failed: {type(err).__name__}: {err}")
            if expected is not None:
                self.kv.slot.add_(1)
                self.position.add_(1)
                return expected
            return self._eager()
        self.graphs.captures += 1
        if expected is not None:
            self.graphs.checked = True
            difference = float((output - expected).abs().max())
            scale = float(expected.abs().max()) or 1.0
            if difference > GRAPH_CHECK_TOLERANCE * scale:
                self.graphs.disable(f"the replayed step differs from the eager one by {difference:.3g}")
                return expected
        self.graph, self.output = graph, output
        if self.bucket is not None:  # the next batch of this shape replays it
            self.bucket.graph, self.bucket.output = graph, output
        return output.clone()
