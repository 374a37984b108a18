"""The batch planner on FinMME-like length distributions: padding stays within 5 %, every
question is planned once, budgets hold; `padding_ratio` against a brute-force count."""

from __future__ import annotations

import numpy as np
import pytest

from finbench.runner.batching import Item, padding_ratio, plan_batches


def finmme_like(n: int = 11_099, seed: int = 0) -> list[Item]:
    """~1,000 image tokens with a wide spread (charts of many sizes, a long tail of big ones)
    plus ~300 text tokens; three decoder kinds in FinMME's proportions."""
    rng = np.random.default_rng(seed)
    image = np.clip(rng.lognormal(np.log(950), 0.35, n), 64, 6000).round().astype(int)
    text = np.clip(rng.normal(300, 90, n), 40, 1200).round().astype(int)
    kinds = rng.choice(["single", "multi", "numerical"], n, p=[0.6, 0.25, 0.15])
    return [Item(i, str(k), int(a + b)) for i, (k, a, b) in enumerate(zip(kinds, image, text))]


def brute_force_ratio(items, batches):
    lengths = np.array([item.n_tokens for item in items])
    rows = [np.array(batch) for batch in batches]
    return sum(len(r) * lengths[r].max() for r in rows) / sum(lengths[r].sum() for r in rows)


@pytest.mark.parametrize("max_batch,budget", [(8, 16384), (64, 16384), (64, 1 << 17), (128, 1 << 18)])
@pytest.mark.parametrize("seed", [0, 1])
def test_padding_within_five_percent_on_finmme_like_lengths(max_batch, budget, seed):
    items = finmme_like(seed=seed)
    batches = plan_batches(items, max_batch, budget)
    ratio = padding_ratio(items, batches)
    assert ratio == pytest.approx(brute_force_ratio(items, batches), rel=1e-12)
    assert 1.0 <= ratio <= 1.05
    planned = sorted(i for batch in batches for i in batch)
    assert planned == list(range(len(items)))  # every question once
    kind = {item.index: item.kind for item in items}
    length = {item.index: item.n_tokens for item in items}
    for batch in batches:
        assert len({kind[i] for i in batch}) == 1 and len(batch) <= max_batch
        assert len(batch) == 1 or len(batch) * max(length[i] for i in batch) <= budget


def test_unsorted_plan_pads_more_than_the_planner():
    """The reference point: the same batch sizes in question order pad far more."""
    items = finmme_like(n=2000)
    batches = plan_batches(items, 8, 1 << 20)
    naive = [list(range(start, min(start + 8, len(items)))) for start in range(0, len(items), 8)]
    assert padding_ratio(items, naive) > 1.3 > padding_ratio(items, batches)


def test_padding_ratio_edge_cases():
    items = [Item(0, "single", 10), Item(1, "single", 30)]
    assert padding_ratio(items, []) == 1.0
    assert padding_ratio(items, [[0, 1]]) == pytest.approx(60 / 40)
    assert padding_ratio(items, [[0], [1]]) == 1.0
    with pytest.raises(KeyError):
        padding_ratio(items, [[2]])  # an index that was never an item
