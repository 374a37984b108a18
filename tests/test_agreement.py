"""Judge agreement (scoring/agreement.py) against reference implementations no one here wrote:
statsmodels' Cohen's kappa and the `krippendorff` package's alpha, on generated ratings."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from finbench.scoring.agreement import cohen_kappa, judge_agreement, krippendorff_interval


@pytest.mark.parametrize("seed", range(5))
def test_kappa_equals_statsmodels(seed):
    from statsmodels.stats.inter_rater import cohens_kappa

    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 5)), int(rng.integers(20, 300))
    a = rng.integers(0, k, n)
    b = np.where(rng.random(n) < 0.6, a, rng.integers(0, k, n))  # agreeing more than chance
    table = np.zeros((k, k))
    np.add.at(table, (a, b), 1)
    expected = float(cohens_kappa(table).kappa)
    assert float(cohen_kappa(torch.from_numpy(a), torch.from_numpy(b))[0]) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_alpha_equals_the_krippendorff_package(seed):
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 200))
    a = rng.integers(0, 6, n).astype(float)  # MME-Finance's 0–5 judge scores
    b = np.clip(a + rng.integers(-1, 2, n), 0, 5)
    expected = krippendorff.alpha(reliability_data=np.stack([a, b]), level_of_measurement="interval")
    assert float(krippendorff_interval(torch.from_numpy(a), torch.from_numpy(b))[0]) == pytest.approx(expected,
                                                                                                    abs=1e-12)


def _frame(judge, rule=None, ids=None):
    ids = ids or [f"q{i}" for i in range(len(judge))]
    out = pd.DataFrame({"id": ids, "judge_score": judge, "cluster": [i[:2] for i in ids]})
    if rule is not None:
        out["rule_score"] = rule
    return out


def test_two_judges_and_the_rules_on_a_constructed_run(tmp_path):
    from statsmodels.stats.inter_rater import cohens_kappa

    rng = np.random.default_rng(1)
    a = (rng.random(60) < 0.5).astype(float)
    b = np.where(rng.random(60) < 0.8, a, 1 - a)
    rule = np.where(rng.random(60) < 0.7, a, 1 - a)
    b[:3] = np.nan  # judged by one judge only: left out, counted
    found = judge_agreement([_frame(a, rule), _frame(b)], ["judge-a", "judge-b"], n_bootstrap=500, seed=0)
    keep = ~np.isnan(b)
    table = np.zeros((2, 2))
    np.add.at(table, (a[keep].astype(int), b[keep].astype(int)), 1)
    judges = found["judges"]
    assert found["n_judged_by_both"] == 57 and judges["statistic"] == "cohen_kappa"
    assert judges["value"] == pytest.approx(float(cohens_kappa(table).kappa), abs=1e-12)
    assert judges["ci"]["low"] < judges["value"] < judges["ci"]["high"]
    rules = found["rule_vs_judge"]["judge-a"]
    table = np.zeros((2, 2))
    np.add.at(table, (rule.astype(int), a.astype(int)), 1)
    assert rules["value"] == pytest.approx(float(cohens_kappa(table).kappa), abs=1e-12)
    # scores on the 0–5 scale: alpha, not kappa
    scores = judge_agreement([_frame(rng.integers(0, 6, 40).astype(float)), _frame(rng.integers(0, 6, 40).astype(float))],
                             ["a", "b"], n_bootstrap=0)
    assert scores["judges"]["statistic"] == "krippendorff_alpha_interval" and scores["judges"]["ci"]["low"] is None


def test_the_command_prints_the_agreement_and_writes_it_only_with_out(tmp_path):
    """As `compare`: printed; written only to --out, never into a run folder unasked (issue 41)."""
    from helpers import cli

    rng = np.random.default_rng(2)
    a = (rng.random(30) < 0.5).astype(float)
    for name, scores in (("a", a), ("b", np.where(rng.random(30) < 0.9, a, 1 - a))):
        (tmp_path / name).mkdir()
        _frame(scores, a).to_parquet(tmp_path / name / "samples.parquet")
    before = {d: sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("a", "b")}
    printed = cli("judge-agreement", str(tmp_path / "a"), str(tmp_path / "b"), "--bootstrap", "200")
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert "Cohen's kappa" in printed.stdout and "wrote" not in printed.stdout
    assert {d: sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("a", "b")} == before  # nothing written
    target = tmp_path / "out" / "agreement.json"
    done = cli("judge-agreement", str(tmp_path / "a"), str(tmp_path / "b"), "--bootstrap", "200", "--out", str(target))
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(target.read_text())
    assert "Cohen's kappa" in done.stdout and f"{written['judges']['value']:.3f}" in done.stdout
    assert "wrote" in done.stdout and "agreement.json" in done.stdout
    assert {d: sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("a", "b")} == before
    assert set(written["rule_vs_judge"]) == {"a", "b"}
    (tmp_path / "c").mkdir()
    pd.DataFrame({"id": ["q1"], "answer": ["x"]}).to_parquet(tmp_path / "c" / "samples.parquet")
    refused = cli("judge-agreement", str(tmp_path / "a"), str(tmp_path / "c"))
    assert refused.returncode != 0 and "no judge_score column" in refused.stdout + refused.stderr
