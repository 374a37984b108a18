"""Clustered error bars (scoring/clustered.py) against statsmodels and constructed cases."""

import math

import numpy as np
import pytest
import statsmodels.api as sm
import torch

from finbench.kernels.segments import factorize
from finbench.scoring import clustered


def statsmodels_cluster_se(y: np.ndarray, groups: np.ndarray) -> float:
    return float(sm.OLS(y, np.ones(len(y))).fit(cov_type="cluster", cov_kwds={"groups": groups}).bse[0])


@pytest.mark.parametrize("seed", range(6))
def test_clustered_se_equals_statsmodels_on_random_clusters(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    groups = rng.integers(0, int(rng.integers(2, 60)), n)
    # cluster-level effects make the clustered SE differ from the iid one
    effect = rng.normal(0, 1, groups.max() + 1)[groups]
    y = ((effect + rng.normal(0, 1, n)) > 0).astype(float) if seed % 2 else effect + rng.normal(0, 1, n)
    ids, _ = factorize(groups)
    se = float(clustered.clustered_se(torch.tensor(y), ids))
    assert se == pytest.approx(statsmodels_cluster_se(y, groups), abs=1e-9, rel=1e-9)
    iid = float(clustered.iid_se(torch.tensor(y)))
    assert iid == pytest.approx(float(sm.OLS(y, np.ones(n)).fit().bse[0]), abs=1e-12)


def test_famma_like_grouped_sub_questions_widen_the_interval():
    """FAMMA's sub-questions of one main question are answered alike: the design effect is > 1."""
    rng = np.random.default_rng(7)
    mains = np.repeat(np.arange(40), 3)  # 40 main questions × 3 sub-questions
    y = np.repeat(rng.random(40) < 0.5, 3).astype(float)  # every sub-question as its main question
    ids, labels = factorize(mains)
    summary = clustered.clustered_summary({"accuracy": torch.tensor(y)}, ids, by="main_question_id")
    m = summary["metrics"]["accuracy"]
    assert summary["n_clusters"] == len(labels) == 40
    assert m["se"] == pytest.approx(statsmodels_cluster_se(y, mains), abs=1e-9)
    # perfectly correlated triples: each cluster's residual sum is 3·e_g, so the variance ratio is
    # G/(G-1) · 3·(N-1)/N exactly (N = 120 questions, G = 40 clusters)
    assert m["design_effect"] == pytest.approx(40 / 39 * 3 * 119 / 120, abs=1e-9)
    assert m["ci"]["low"] < y.mean() < m["ci"]["high"]


def test_singletons_equal_the_iid_se_up_to_the_small_sample_correction():
    y = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    se = float(clustered.clustered_se(y, torch.arange(6)))
    # G/(G-1) · Σe²/N² = (N/(N-1)) · Σe²/N² = s²/N with ddof 1
    assert se == pytest.approx(float(clustered.iid_se(y)), abs=1e-12)


def test_nan_rows_are_not_counted_and_each_metric_has_its_own_clusters():
    y = torch.tensor([[1.0, math.nan], [0.0, 1.0], [1.0, 0.0], [math.nan, 1.0], [0.0, 0.0]])
    groups = np.array([0, 0, 1, 2, 2])
    se = clustered.clustered_se(y, torch.tensor(groups))
    for j in range(2):
        keep = ~np.isnan(y[:, j].numpy())
        assert float(se[j]) == pytest.approx(statsmodels_cluster_se(y[keep, j].numpy(), groups[keep]), abs=1e-12)


def test_one_cluster_has_no_se():
    assert math.isnan(float(clustered.clustered_se(torch.tensor([1.0, 0.0, 1.0]), torch.zeros(3, dtype=torch.long))))
    out = clustered.clustered_summary({"accuracy": torch.tensor([1.0, 0.0])}, torch.zeros(2, dtype=torch.long), by="image")
    assert out["metrics"]["accuracy"]["se"] is None and out["metrics"]["accuracy"]["ci"]["low"] is None


def test_paired_difference_and_mde():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(50), 4)
    ref = (rng.random(200) < 0.7).astype(float)
    var = ref.copy()
    flip = rng.random(200) < 0.1
    var[flip] = 1 - var[flip]
    out = clustered.paired_difference(torch.tensor(var), torch.tensor(ref), torch.tensor(groups))
    d = var - ref
    se = statsmodels_cluster_se(d, groups)
    assert out["diff"] == pytest.approx(d.mean(), abs=1e-12)
    assert out["se_diff"] == pytest.approx(se, abs=1e-9)
    assert out["mde"] == pytest.approx((1.959963984540054 + 0.8416212335729143) * se, abs=1e-9)
    assert out["ci_diff"]["low"] == pytest.approx(d.mean() - 1.959963984540054 * se, abs=1e-9)
    assert out["n"] == 200


def test_cluster_resample_weights_draw_whole_clusters():
    ids = torch.tensor([0, 0, 0, 1, 2, 2])
    w = clustered.cluster_resample_weights(ids, 3, 500, torch.Generator().manual_seed(0))
    assert w.shape == (500, 6)
    assert torch.equal(w[:, 0], w[:, 1]) and torch.equal(w[:, 1], w[:, 2]) and torch.equal(w[:, 4], w[:, 5])
    per_cluster = w[:, [0, 3, 4]]
    assert torch.all(per_cluster.sum(1) == 3)  # G clusters drawn per resample
    assert 0.8 < float(per_cluster.mean()) < 1.2


def test_repeated_sampling_known_values():
    answers = torch.tensor([[1, 1, 2], [3, 4, 5], [7, 7, 7], [2, 3, 3]])
    correct = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    out = clustered.repeated_sampling(answers, correct)
    assert out["k"] == 3 and out["n"] == 4
    assert out["mean"] == pytest.approx(correct.mean().item())
    assert out["maj_at_k"] == pytest.approx((1 + 0 + 0 + 0) / 4)  # q2: a 3-way tie goes to sample 0
    assert out["pass_at_k"] == pytest.approx(3 / 4)
    assert out["agreement"] == pytest.approx((2 / 3 + 1 / 3 + 1 + 2 / 3) / 4)
    assert out["se"] == pytest.approx(float(np.std(correct.mean(1).numpy(), ddof=1) / 2))
