"""Data parallel runs: `torchrun --nproc_per_node N -m finbench run …` or `accelerate launch -m finbench run …`.

Every rank loads the questions and the model (on its own GPU), reads the cache (all ranks before
any computes, so they agree on what is uncached), takes its share of the uncached
questions — balanced by token cost, longest first onto the least-loaded rank — and commits its
answers to the shared SQLite cache as it goes (WAL; SQLite serialises the writers). At the end
rank 0 gathers every rank's predictions (errors included, which the cache does not keep), scores
and writes the run folder; the other ranks write nothing. A killed rank loses only its batch in
flight, and a rerun with any world size reuses every committed answer, since the cache is keyed by
content, not by rank.

No gradients are synchronised, so the process group is only used to gather Python objects: gloo,
on CPU and GPU alike.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Sequence

import torch

from finbench.runner.batching import Item


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def world_from_env() -> World:
    """The launcher's world (torchrun and accelerate set RANK, WORLD_SIZE, LOCAL_RANK)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


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
