"""Batch compaction: the rows of a decode batch that are still running, as pure tensor functions.

A thinking batch decodes until its longest reasoning ends; a row that closed its block early would
otherwise keep its slot (its weights' share of every step is free, but its KV reads and its
attention are not). `live_rows` says which rows remain, `select_rows` keeps only those of every
tensor that has the batch in dimension `dim`; models/compaction.py calls them every few steps."""

from __future__ import annotations

from typing import Any

import torch


def live_rows(finished: torch.Tensor) -> torch.Tensor:
    """finished [B] bool → indices [B'] (ascending) of the rows still decoding."""
    return (~finished).nonzero().squeeze(1)


def select_rows(value: Any, rows: torch.Tensor, batch: int, dim: int = 0) -> Any:
    """`value` with only `rows` of its batch dimension `dim` when it is a tensor with `batch` there;
    anything else (None, a scalar, a tensor without that batch dimension) unchanged. Dicts, lists and
    tuples are walked."""
    if torch.is_tensor(value):
        if value.dim() > dim and value.shape[dim] == batch:
            return value.index_select(dim, rows.to(value.device))
        return value
    if isinstance(value, dict):
        return {key: select_rows(item, rows, batch, dim) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(select_rows(item, rows, batch, dim) for item in value)
    return value


def worth_compacting(finished: int, rows: int) -> bool:
    """Whether dropping `finished` of `rows` rows pays for the compaction: at least a quarter of the
    batch. Each compaction copies the KV buffers and, on CUDA, needs a graph for the new width, so
    the batch shrinks geometrically (64 rows reach 1 in at most ~15 compactions)."""
    return finished > 0 and 4 * finished >= rows


def compaction_due(step: int, every: int) -> bool:
    """Whether to compact after decode step `step` (0-based): every `every` steps (0: never). Every
    step would cost a host sync and a copy of the KV buffers per step; every few steps costs a
    finished row at most `every - 1` idle steps."""
    return every > 0 and (step + 1) % every == 0
