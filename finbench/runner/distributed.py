"""Data parallel runs: `torchrun --nproc_per_node N -m finbench run …` or `accelerate launch -m finbench run …`.

Every rank loads the questions and the model (on its own GPU), reads the cache (all ranks before
any computes, so they agree on what is uncached), takes its share of the uncached
questions — balanced by token cost, longest first onto the least-loaded rank — and commits its
answers to the shared SQLite cache as it goes (WAL; SQLite serialises the writers). At the end
rank 0 gathers every rank's predictions (errors included, which the cache does not keep), scores
and writes the run folder; the other ranks write nothing. A killed rank loses only its batch in
flight, and a rerun with any world size reuses every committed answer, since the cache is keyed by
content, not by rank.

Over several nodes (torchrun --nnodes N: WORLD_SIZE > LOCAL_WORLD_SIZE) no SQLite file is shared
over a network filesystem: each rank writes its own cache shard beside the cache path
(`cache.rank<R>.sqlite`, `shard_path`), the ranks exchange what their shards (and the cache
itself, where a node has it) hold before sharding the work (`cached_everywhere`), and rank 0 merges
every answer into the run folder's cache at the end (`merge`). A rerun on any world size reads the
cache and the shards it finds beside it.

No gradients are synchronised, so the process group is only used to gather Python objects: gloo,
on CPU and GPU alike.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

import torch

from finbench.runner.batching import Item
from finbench.runner.cache import PredictionCache


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 0  # ranks on this node (LOCAL_WORLD_SIZE); 0: unknown, taken as all of them

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def nodes(self) -> int:
        return max(1, self.size // self.local_size) if self.local_size else 1


def world_from_env() -> World:
    """The launcher's world (torchrun and accelerate set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")),
                 int(os.environ.get("LOCAL_WORLD_SIZE", "0")))


def shard_path(path: str | Path, world: World) -> Path:
    """The cache file this rank writes: the cache itself on one node, its own shard over several."""
    path = Path(path)
    return path.with_name(f"{path.stem}.rank{world.rank}{path.suffix}") if world.nodes > 1 else path


def cached_everywhere(cache: Any, keys: Sequence[str], path: str | Path, world: World) -> dict[str, Any]:
    """The cached answers of `keys`: this rank's cache, the cache and the shards beside `path` on
    this node, and over several nodes every rank's (exchanged), so all ranks shard one list. Every
    rank waits here for the others: a rank that read after another had committed answers would
    shard a different list of uncached questions, and some would fall between the ranks."""
    found = cache.get_many(keys)
    path = Path(path)
    for other in sorted({path, *path.parent.glob(f"{path.stem}.rank*{path.suffix}")} - {Path(cache.path)}):
        if other.is_file() and len(found) < len(keys):
            found = {**_read(other, [k for k in keys if k not in found]), **found}
    if world.size > 1 and world.nodes > 1:
        import torch.distributed as dist

        everyone: list[Any] = [None] * world.size
        dist.all_gather_object(everyone, found)
        found = {k: v for share in everyone for k, v in share.items()}
    barrier(world)
    return found


def _read(path: Path, keys: Sequence[str]) -> dict[str, Any]:
    other = PredictionCache(path)
    try:
        return other.get_many(keys)
    finally:
        other.close()


def merge(path: str | Path, rows: Sequence[tuple[str, Any]], world: World) -> None:
    """Over several nodes, rank 0 writes every answer of the run into the run folder's cache."""
    if world.nodes > 1 and world.main:
        merged = PredictionCache(path)
        try:
            merged.put_many(rows)
        finally:
            merged.close()


def start(world: World) -> None:
    """Join the launcher's process group (gloo) once per process."""
    import torch.distributed as dist

    if world.size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", rank=world.rank, world_size=world.size, timeout=timedelta(hours=6))


def rank_device(device: str, world: World) -> str:
    """With several ranks on CUDA, `auto`/`cuda` means this rank's own GPU."""
    if world.size > 1 and device in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{world.local_rank % torch.cuda.device_count()}"
    return device


def shard(items: Sequence[Item], world: World) -> list[Item]:
    """This rank's items: longest-processing-time-first onto the least-loaded rank, so every rank
    gets about the same number of tokens (and the same answer on every rank: deterministic)."""
    if world.size <= 1:
        return list(items)
    loads = [(0, rank) for rank in range(world.size)]
    mine = []
    for item in sorted(items, key=lambda i: (-i.n_tokens, i.index)):
        load, rank = heapq.heappop(loads)
        if rank == world.rank:
            mine.append(item)
        heapq.heappush(loads, (load + item.n_tokens, rank))
    return sorted(mine, key=lambda i: i.index)


def barrier(world: World) -> None:
    """Every rank waits here for the others. Used between reading the shared cache and computing:
    a rank that read it after another had committed answers would shard a different list of
    uncached questions, and some would fall between the ranks."""
    if world.size > 1:
        import torch.distributed as dist

        dist.barrier()


def gather(payload: Any, world: World) -> list[Any] | None:
    """Every rank's payload on rank 0 (None elsewhere)."""
    if world.size <= 1:
        return [payload]
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * world.size if world.main else None
    dist.gather_object(payload, gathered, dst=0)
    return gathered


def finish(world: World) -> None:
    import torch.distributed as dist

    if world.size > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
