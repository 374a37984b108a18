"""CUDA-graph buckets of static decode steps (models/static_decode.py), on the CPU: one bucket per
(rows, KV capacity, position shape), its persistent buffers reused by later batches, whose state is
copied in; a graph stored on a bucket is replayed by the next batch of that shape. A graph replays
the captured kernels on the bucket's tensors, so the stand-in `Replay` below does exactly that in
eager PyTorch; the reference is the same steps without graphs (no buckets)."""

from __future__ import annotations

import torch

from finbench.models import static_decode
from finbench.models.static_decode import GraphState, StaticDecoder, StaticKV, bucket_capacity, one_query_attention

HEADS, KV_HEADS, DIM = 4, 2, 8


def forward(ids: torch.Tensor, kv: StaticKV, position: torch.Tensor) -> torch.Tensor:
    """A one-layer stand-in for the model's step: keys, values and query from the ids and positions,
    written into the buffer through `update`, then one-query attention over it."""
    base = torch.sin(ids.float()[:, :, None, None] * 0.37 + position.float()[:, :, None, None] * 0.11
                     + torch.arange(DIM) * 0.05)  # [B, 1, 1, D]
    key = base.expand(-1, KV_HEADS, 1, DIM).contiguous() * torch.arange(1, KV_HEADS + 1)[None, :, None, None]
    keys, values = kv.update(key, key.flip(-1), 0)
    query = base.expand(-1, HEADS, 1, DIM).contiguous()
    return one_query_attention(query, keys, values, kv.key_mask).reshape(ids.shape[0], -1)


def cache(rows: int, length: int, seed: int) -> tuple[StaticKV, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, : length // 3] = 0  # left padding in one row
    keys = torch.randn(rows, KV_HEADS, length, DIM, generator=generator)
    values = torch.randn(rows, KV_HEADS, length, DIM, generator=generator)
    layer = type("Layer", (), {"keys": keys, "values": values})
    kv = StaticKV.from_cache(type("Cache", (), {"layers": [layer]}), mask)
    return kv, mask.sum(-1, keepdim=True)


class Replay:
    """What a captured graph does on replay: the step's kernels on the bucket's own tensors."""

    def __init__(self, bucket: static_decode.Bucket) -> None:
        self.bucket = bucket

    def replay(self) -> None:
        b = self.bucket
        b.output.copy_(forward(b.ids, b.kv, b.position))
        b.kv.slot.add_(1)
        b.position.add_(1)


def steps(decoder: StaticDecoder, tokens: list[list[int]]) -> list[torch.Tensor]:
    return [decoder.step(torch.tensor(t)) for t in tokens]


def test_bucket_capacity_rounds_up_to_whole_buckets():
    assert [bucket_capacity(n, 128) for n in (1, 128, 129, 1408 + 32)] == [128, 128, 256, 1536]


def test_a_later_batch_of_the_same_shape_reuses_the_bucket_and_replays_its_graph():
    tokens = [[3, 5, 7], [2, 2, 9], [4, 1, 1]]
    graphs = GraphState(enabled=True)
    first_kv, first_position = cache(3, 20, seed=0)
    first = StaticDecoder(forward, first_kv, first_position, graphs)
    assert first.kv.capacity == bucket_capacity(20 + static_decode.ROOM) and len(graphs.buckets) == 1
    first_eager = steps(StaticDecoder(forward, *cache(3, 20, seed=0), GraphState(enabled=False)), tokens)
    assert all(torch.equal(a, b) for a, b in zip(steps(first, tokens), first_eager))  # exact in its bucket
    bucket = first.bucket
    bucket.graph, bucket.output = Replay(bucket), torch.zeros_like(first_eager[0])  # as if captured

    second_kv, second_position = cache(3, 23, seed=1)  # another batch, the same bucket (3 rows, 128 slots)
    second = StaticDecoder(forward, second_kv, second_position, graphs)
    assert second.bucket is bucket and second.kv is bucket.kv and graphs.reuses == 1 and len(graphs.buckets) == 1
    assert second.kv.length == 23 and int(second.kv.slot) == 23 and not bool(second.kv.key_mask[:, 23:].any())
    replayed = steps(second, tokens)
    want = steps(StaticDecoder(forward, *cache(3, 23, seed=1), GraphState(enabled=False)), tokens)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(replayed, want))


def test_other_shapes_get_their_own_buckets_and_the_least_recently_used_goes_first(monkeypatch):
    monkeypatch.setattr(static_decode, "MAX_BUCKETS", 2)
    graphs = GraphState(enabled=True)
    StaticDecoder(forward, *cache(3, 20, seed=0), graphs)
    StaticDecoder(forward, *cache(2, 20, seed=0), graphs)  # fewer rows (a compacted batch)
    StaticDecoder(forward, *cache(3, 22, seed=0), graphs)  # (3, 128) again: now the most recent
    StaticDecoder(forward, *cache(3, 200, seed=0), graphs)  # a longer prompt: (3, 256); (2, 128) goes
    assert [key[:2] for key in graphs.buckets] == [(3, 128), (3, 256)]


def test_compacting_a_bucketed_decoder_moves_the_kept_rows_into_a_narrower_bucket():
    graphs = GraphState(enabled=True)
    decoder = StaticDecoder(forward, *cache(3, 20, seed=2), graphs)
    reference = StaticDecoder(forward, *cache(3, 20, seed=2), GraphState(enabled=False))
    steps(decoder, [[1, 2, 3]]), steps(reference, [[1, 2, 3]])
    for d in (decoder, reference):
        d.select(torch.tensor([0, 2]))
    assert decoder.kv.key_mask.shape == (2, 128) and decoder.bucket.kv is decoder.kv
    assert all(torch.equal(a, b) for a, b in zip(steps(decoder, [[4, 6], [5, 5]]), steps(reference, [[4, 6], [5, 5]])))


def test_the_profile_timer_never_synchronises_inside_a_graph_capture(monkeypatch):
    """`--profile` times the language model's forward with device syncs; a decode step captured into
    a CUDA graph runs that forward inside the capture, where a sync is illegal: the part then runs
    untimed (simulated here: CUDA reported present, the stream capturing)."""
    from finbench.runner.timing import ModelParts

    module = torch.nn.Linear(1, 1)

    class Adapter:
        device = torch.device("cpu")

        def timed_parts(self, clock):
            return clock.hooks([("lm", module)])

    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(1))
    capturing = [True]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    x = torch.ones(1, 1)
    with ModelParts(Adapter(), synchronize=True) as parts:
        module(x)
        assert synced == [] and parts.seconds["lm"] == 0.0
        capturing[0] = False
        module(x)
        assert synced == [1, 1] and parts.seconds["lm"] > 0
