"""Clustered error bars (scoring/clustered.py) against statsmodels and constructed cases."""

import math

import numpy as np
import pytest
import statsmodels.api as sm
import torch
from scipy.stats import t as student_t

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
    # the interval: statsmodels' cluster-robust OLS with t(G − 1) (use_t); the mde: t quantiles, G − 1 df
    low, high = statsmodels_cluster_ci(d, groups)
    assert (out["ci_diff"]["low"], out["ci_diff"]["high"]) == pytest.approx((low, high), abs=1e-9)
    assert out["mde"] == pytest.approx((student_t.ppf(0.975, 49) + student_t.ppf(0.8, 49)) * se, abs=1e-9)
    assert out["n"] == 200 and out["significant"] == (low > 0 or high < 0)


@pytest.mark.parametrize("n_clusters", [10, 15, 50, 400])
def test_the_mde_has_80_percent_two_sided_power_by_statsmodels(n_clusters):
    """The docs' claim "the smallest true difference detected with 80 % power at α = 0.05,
    two-sided", checked against a power function no one here wrote: statsmodels' exact
    (noncentral t, both tails) power of a t test on G − 1 degrees of freedom at the mde."""
    from statsmodels.stats.power import TTestPower

    rng = np.random.default_rng(n_clusters)
    groups = np.repeat(np.arange(n_clusters), 3)
    ref = (rng.random(len(groups)) < 0.6).astype(float)
    var = np.where(rng.random(len(groups)) < 0.15, 1 - ref, ref)
    out = clustered.paired_difference(torch.tensor(var), torch.tensor(ref), torch.tensor(groups))
    noncentrality = out["mde"] / out["se_diff"]  # the t statistic a true difference of one mde gives
    power = TTestPower().power(effect_size=noncentrality / math.sqrt(n_clusters), nobs=n_clusters, alpha=0.05,
                               alternative="two-sided")
    assert power == pytest.approx(0.80, abs=0.002)


def statsmodels_cluster_ci(y: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    fit = sm.OLS(y, np.ones(len(y))).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    low, high = fit.conf_int(0.05)[0]
    return float(low), float(high)


@pytest.mark.parametrize("n_clusters", [5, 10, 15, 50])
def test_clustered_intervals_use_t_with_g_minus_1_degrees_of_freedom(n_clusters):
    """A mean of a continuous metric (no clipping): its interval is statsmodels' use_t interval."""
    rng = np.random.default_rng(n_clusters)
    groups = np.repeat(np.arange(n_clusters), 3)
    y = rng.normal(0, 1, n_clusters)[groups] + rng.normal(0, 1, len(groups))
    out = clustered.clustered_summary({"score": torch.tensor(y)}, torch.tensor(groups), by="image")
    ci = out["metrics"]["score"]["ci"]
    assert (ci["low"], ci["high"]) == pytest.approx(statsmodels_cluster_ci(y, groups), abs=1e-9)


def test_a_proportion_interval_never_leaves_0_1():
    """Few clusters and a mean near 0: the normal interval would go below 0; ours is clipped."""
    groups = np.repeat(np.arange(10), 3)
    y = np.zeros(30)
    y[[0, 1, 2]] = 1.0  # one cluster all right, nine all wrong: mean 0.1, SE ≈ 0.1
    out = clustered.clustered_summary({"accuracy": torch.tensor(y)}, torch.tensor(groups), by="image")
    ci = out["metrics"]["accuracy"]["ci"]
    low, high = statsmodels_cluster_ci(y, groups)
    assert low < 0 and ci["low"] == 0.0 and ci["high"] == pytest.approx(high, abs=1e-12)
    up = clustered.clustered_summary({"accuracy": torch.tensor(1 - y)}, torch.tensor(groups), by="image")
    assert up["metrics"]["accuracy"]["ci"]["high"] == 1.0


def test_verdict_comes_from_the_interval_not_the_mde():
    """The audit's reproducer: a difference whose interval excludes 0 is significant, even when it
    is smaller than the mde (a design quantity)."""
    from finbench.report.format import power_line

    c = {"run": "b", "baseline": "a", "diff": -0.045, "se_diff": 0.02, "ci_diff": {"low": -0.084, "high": -0.006},
         "mde": 0.056, "cluster_by": "image", "n_clusters": 40}
    line = power_line(c)
    assert "significant at α = 0.05 (two-sided)" in line and "not significant" not in line
    assert "cannot tell" not in line
    across = power_line({**c, "ci_diff": {"low": -0.084, "high": 0.004}})
    assert "not significant; this set detects ≥ 5.6 points with 80 % power" in across


def test_no_power_from_a_zero_se_or_few_clusters():
    """SE 0 (identical runs) or fewer than 10 clusters: no '≥ 0.0', the set cannot estimate its power."""
    from finbench.report.format import power_line

    same = torch.tensor([1.0, 0.0, 1.0, 1.0] * 5)
    out = clustered.paired_difference(same, same, torch.arange(20))
    assert out["se_diff"] == 0 and out["mde"] is None
    line = power_line({"run": "b", "baseline": "a", **out, "cluster_by": "id", "n_clusters": 20})
    assert "≥ 0.0" not in line and "cannot estimate its power" in line
    rng = np.random.default_rng(0)
    few = clustered.paired_difference(torch.tensor(rng.random(24)), torch.tensor(rng.random(24)),
                                      torch.tensor(np.repeat(np.arange(6), 4)))
    assert few["se_diff"] > 0 and few["mde"] is None


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
