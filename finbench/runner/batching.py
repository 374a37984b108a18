"""Length-bucketed batches: questions of one decoding kind, sorted by total tokens (text + image),
cut so that a batch respects both a row cap and a padded-token budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from finbench.models.contract import ModelAdapter


@dataclass(frozen=True)
class Item:
    index: int  # position in the run's question list
    kind: str  # decoder: single | multi | numerical | open | official
    n_tokens: int  # estimated prompt length including image tokens


def plan_batches(items: Sequence[Item], max_batch: int, token_budget: int) -> list[list[int]]:
    """Batches of question indices. Within a kind, longest first: similar lengths share a batch,
    so left padding wastes little, and the largest batch runs first, so an out-of-memory shows
    up at once instead of at the end. A batch of n rows padded to its longest row costs
    n × longest tokens, which must stay within `token_budget` (a single row always fits)."""
    batches: list[list[int]] = []
    for kind in sorted({item.kind for item in items}):
        ordered = sorted((i for i in items if i.kind == kind), key=lambda i: (-i.n_tokens, i.index))
        current: list[int] = []
        longest = 0
        for item in ordered:
            longest_if_added = max(longest, item.n_tokens)
            if current and (len(current) >= max_batch or longest_if_added * (len(current) + 1) > token_budget):
                batches.append(current)
                current, longest_if_added = [], item.n_tokens
            current.append(item.index)
            longest = longest_if_added
        if current:
            batches.append(current)
    return batches


def padding_ratio(items: Sequence[Item], batches: Sequence[Sequence[int]]) -> float:
    """Padded tokens / real tokens of a plan: each batch costs its rows × its longest row (left
    padding to the longest). 1.0 = no padding; an empty plan is 1.0."""
    length = {item.index: item.n_tokens for item in items}
    real = sum(length[i] for batch in batches for i in batch)
    padded = sum(len(batch) * max(length[i] for i in batch) for batch in batches if batch)
    return padded / real if real else 1.0


def too_long(items: Sequence[Item], model: "ModelAdapter") -> list[tuple[Item, str]]:
    """Prompts (text + image tokens) longer than the model's context, with their error: run, they
    would be truncated or fail deep inside the model."""
    context = model.max_context() if items else None
    if not context:
        return []
    return [(item, f"prompt of {item.n_tokens} tokens exceeds the model's context of {context}")
            for item in items if item.n_tokens > context]
