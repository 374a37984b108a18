"""Statistics: exact McNemar, Holm, bootstrap CIs (exactness, reproducibility, coverage), paired
comparisons, selective prediction, and the score/compare commands."""

from __future__ import annotations

import io
import json
import math
import random

import numpy as np
import pandas as pd
import pytest
import torch

from finbench.kernels.bootstrap import (
    bootstrap_segment_sums,
    make_generator,
    percentile_ci,
    resample_indices,
)
from finbench.scoring import finmme
from finbench.scoring.stats import (
    ScoreTable,
    bootstrap_cis,
    holm,
    mcnemar,
    mcnemar_exact_p,
    paired_bootstrap,
    point_estimates,
    selective_curve,
)
from finbench.scoring.tables import compare_runs, score_samples

LETTERS = "ABCDEFGHIJKLMN"


def ref_finscore(domain, qtype, gold, correct) -> float:
    """eval.py calculate_finscore (pandas group-by definition)."""
    df = pd.DataFrame({"knowledge_domain": domain, "question_type": qtype, "answer": gold,
                       "correct_or_not": np.asarray(correct, dtype=bool)})
    f = df.groupby("knowledge_domain")["correct_or_not"].mean().mean()
    multi = df[(df["question_type"] == "multiple_choice") & (df["answer"].astype(str).str.len() > 1)]
    rate = (~multi["correct_or_not"]).mean() if not multi.empty else 0.0
    return f * (1 - rate)


def run_frame(n: int, seed: int, n_domains: int = 5, skill: float = 0.6) -> pd.DataFrame:
    rng = random.Random(seed)  # the questions: the same for every skill
    answers = random.Random(seed * 1000 + round(skill * 100))
    rows = []
    for i in range(n):
        qtype = rng.choice(["single_choice", "multiple_choice"])
        gold = rng.choice("ABCD") if qtype == "single_choice" else "".join(sorted(rng.sample("ABCD", 2)))
        answer = gold if answers.random() < skill else answers.choice(["A", "B", "AB", "CD", ""])
        rows.append({"id": f"q{i}", "benchmark": "finmme", "question_type": qtype,
                     "kind": "single" if qtype == "single_choice" else "multi", "gold": gold, "answer": answer,
                     "domain": f"d{rng.randrange(n_domains)}", "error": "", "tolerance": math.nan, "n_options": 4,
                     "option_probs": list(np.random.default_rng(i).dirichlet(np.ones(4)))})
    rows[0]["domain"] = "lonely"  # a one-question domain: absent from many resamples
    return pd.DataFrame(rows)


def correct_of(df: pd.DataFrame) -> np.ndarray:
    return np.array([set(a.upper()) & set(LETTERS) == set(g) for a, g in zip(df["answer"], df["gold"])])


# ---- McNemar / Holm -------------------------------------------------------------------------------
def _two_sided_binomial_half(b: int, n: int) -> float:
    """Exact two-sided binomial p at 1/2, summed with integers (independent of scipy)."""
    from fractions import Fraction
    from math import comb

    tail = sum(comb(n, k) for k in range(min(b, n - b) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2 ** n)))


def test_mcnemar_equals_exact_binomial_test():
    for b in range(0, 40, 3):
        for c in range(0, 40, 4):
            expected = _two_sided_binomial_half(b, b + c) if b + c else 1.0
            assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-15)
    for b, c in [(0, 500), (480, 520), (1000, 1100), (5, 3000)]:
        assert mcnemar_exact_p(b, c) == pytest.approx(_two_sided_binomial_half(b, b + c), rel=1e-9, abs=1e-300)


def test_mcnemar_counts():
    a = torch.tensor([1, 1, 0, 0, 1, 0], dtype=torch.float64)
    b = torch.tensor([1, 0, 1, 1, 0, 0], dtype=torch.float64)
    out = mcnemar(a, b)
    assert (out["a_only"], out["b_only"]) == (2, 2) and out["p"] == 1.0


def ref_holm(p):
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([]) == []
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = list(rng.random(rng.integers(1, 8)) ** 3)
        assert holm(p) == pytest.approx(ref_holm(p), abs=1e-15)


# ---- bootstrap CIs ----------------------------------------------------------------------------------
def test_finscore_bootstrap_recomputes_everything_per_resample():
    """Index method: each resample's FinScore equals the pandas definition on the resampled rows."""
    df = run_frame(300, 1)
    table = finmme.build_table(df)
    n_boot, seed = 150, 11
    got = bootstrap_cis(table, n_boot, seed=seed, level=0.9, method="index")["finscore"]
    idx = torch.cat(list(resample_indices(len(df), n_boot, make_generator(seed))))
    correct = correct_of(df)
    ref = [ref_finscore(df["domain"].to_numpy()[r], df["question_type"].to_numpy()[r], df["gold"].to_numpy()[r],
                        correct[r]) for r in idx.numpy()]
    low, high = np.percentile(ref, [5, 95])
    assert got["low"] == pytest.approx(low, abs=1e-9) and got["high"] == pytest.approx(high, abs=1e-9)


def test_bootstrap_reproducible_and_methods_agree():
    table = finmme.build_table(run_frame(800, 2))
    a = bootstrap_cis(table, 2000, seed=3)
    assert a == bootstrap_cis(table, 2000, seed=3)
    assert a != bootstrap_cis(table, 2000, seed=4)
    b = bootstrap_cis(table, 2000, seed=3, method="index")
    for key in a:  # same distribution, different streams
        assert a[key]["low"] == pytest.approx(b[key]["low"], abs=0.02)
        assert a[key]["high"] == pytest.approx(b[key]["high"], abs=0.02)
    # the whole bootstrap distribution of FinScore: multinomial cells vs index matrix
    from scipy.stats import ks_2samp

    def finscores(method):
        sums = bootstrap_segment_sums(table.values, table.segments, table.n_segments, 3000, seed=9, method=method)
        return table.statistic(sums)["finscore"].numpy()

    assert ks_2samp(finscores("multinomial"), finscores("index")).pvalue > 0.01


def simulated_table(n: int, rng: np.random.Generator, p_domain: np.ndarray) -> ScoreTable:
    domain = rng.integers(0, len(p_domain), n)
    multi = rng.random(n) < 0.3
    p = np.where(multi, 0.5 * p_domain[domain], p_domain[domain])
    correct = torch.from_numpy(rng.random(n) < p)
    values = finmme.official_values(correct, torch.from_numpy(multi))
    c = correct.to(torch.float64)
    from functools import partial
    return ScoreTable(ids=np.arange(n).astype(str), correct=c, score=c, values=values,
                      segments=torch.from_numpy(domain), n_segments=len(p_domain) + 1,
                      statistic=partial(finmme.official_statistics, n_domains=len(p_domain)),
                      headline=("finscore",), primary="finscore")


def test_bootstrap_ci_coverage_is_nominal():
    """95% percentile CIs of FinScore and accuracy cover the population value ≈ 95% of the time."""
    rng = np.random.default_rng(0)
    p_domain = np.array([0.3, 0.45, 0.6, 0.7, 0.8])
    true_f = np.mean(0.7 * p_domain + 0.3 * 0.5 * p_domain)
    true_ph = 1 - 0.5 * p_domain.mean()
    truth = {"finscore": true_f * (1 - true_ph), "accuracy": true_f}  # domains equally likely
    hits = {k: 0 for k in truth}
    sims = 200
    for s in range(sims):
        cis = bootstrap_cis(simulated_table(800, rng, p_domain), 500, seed=s)
        for k in truth:
            hits[k] += cis[k]["low"] <= truth[k] <= cis[k]["high"]
    for k in truth:
        assert 0.90 <= hits[k] / sims <= 0.985, (k, hits[k] / sims)


# ---- paired comparisons -----------------------------------------------------------------------------
def test_paired_bootstrap_is_paired_resampling():
    a_df, b_df = run_frame(250, 5, skill=0.5), run_frame(250, 5, skill=0.7)
    a, b = finmme.build_table(a_df), finmme.build_table(b_df)
    got = paired_bootstrap(a, b, 120, seed=2, level=0.9, method="index")["finscore"]
    idx = torch.cat(list(resample_indices(250, 120, make_generator(2))))
    ca, cb = correct_of(a_df), correct_of(b_df)
    cols = [a_df[c].to_numpy() for c in ("domain", "question_type", "gold")]
    diffs = [ref_finscore(*(c[r] for c in cols), cb[r]) - ref_finscore(*(c[r] for c in cols), ca[r])
             for r in idx.numpy()]
    low, high = np.percentile(diffs, [5, 95])
    assert got["low"] == pytest.approx(low, abs=1e-9) and got["high"] == pytest.approx(high, abs=1e-9)
    same = paired_bootstrap(a, a, 200, seed=0)
    assert all(v["low"] == 0 and v["high"] == 0 for v in same.values())


def test_compare_runs_alignment_flips_mcnemar_holm():
    base = run_frame(400, 7, skill=0.5)
    better = run_frame(400, 7, skill=0.5)
    better["answer"] = np.where(np.arange(400) % 5 == 0, better["gold"], better["answer"])
    worse = base.copy()
    worse["answer"] = np.where(np.arange(400) % 7 == 0, "", worse["answer"])
    # shuffle rows, and give each run ids the others lack
    better = better.sample(frac=1, random_state=0).iloc[:-10]
    worse = pd.concat([worse, worse.iloc[:3].assign(id=["x1", "x2", "x3"])])
    out = compare_runs([base, better, worse], ["base", "better", "worse"], n_bootstrap=300, seed=0)
    everywhere = [i for i in base["id"] if i in set(better["id"]) and i in set(worse["id"])]
    assert out["n_shared"] == len(everywhere) and out["baseline"] == "base"

    def correct_by_id(df):
        return dict(zip(df["id"], correct_of(df)))

    cb = correct_by_id(base)
    pvals = []
    for comp, df in zip(out["comparisons"], [better, worse]):
        shared = [i for i in base["id"] if i in set(df["id"])]  # each run against the baseline on what those two share
        assert comp["n"] == len(shared)
        cr = correct_by_id(df)
        gained = [i for i in shared if cr[i] and not cb[i]]
        lost = [i for i in shared if cb[i] and not cr[i]]
        assert comp["flipped"] == {"gained": gained, "lost": lost}
        assert (comp["mcnemar"]["baseline_only"], comp["mcnemar"]["run_only"]) == (len(lost), len(gained))
        p = _two_sided_binomial_half(len(lost), len(lost) + len(gained)) if lost or gained else 1.0
        assert comp["mcnemar"]["p"] == pytest.approx(p, rel=1e-9)
        pvals.append(comp["mcnemar"]["p"])
        sub = df.set_index("id").loc[shared].reset_index()
        base_sub = base.set_index("id").loc[shared].reset_index()
        expected = score_samples(sub)["finscore"] - score_samples(base_sub)["finscore"]
        assert comp["delta"]["finscore"]["value"] == pytest.approx(expected, abs=1e-12)
        ci = comp["delta"]["finscore"]["ci"]
        assert ci["low"] <= ci["high"]
    assert [c["p_holm"] for c in out["comparisons"]] == pytest.approx(ref_holm(pvals))
    assert out["comparisons"][0]["delta"]["accuracy"]["ci"]["low"] > 0  # 'better' is better
    json.dumps(out, allow_nan=False)


def test_compare_runs_rejects_duplicates():
    df = run_frame(20, 0)
    with pytest.raises(ValueError):
        compare_runs([df, pd.concat([df, df.iloc[:1]])], ["a", "b"], n_bootstrap=10)
    with pytest.raises(ValueError):
        compare_runs([df, df], ["a", "a"])


# ---- selective prediction ---------------------------------------------------------------------------
def test_selective_curve_matches_subset_definition():
    df = run_frame(500, 9)
    table = finmme.build_table(df)
    conf = torch.tensor([max(p) for p in df["option_probs"]], dtype=torch.float64)
    conf[::10] = math.nan  # no confidence → answered only at τ = 0
    taus = [0.0, 0.3, 0.45, 0.6, 1.01]
    curve = selective_curve(table, conf, taus)
    correct = correct_of(df)
    for tau, row in zip(taus[:-1], curve):
        keep = (tau <= 0) | (np.nan_to_num(conf.numpy(), nan=-1.0) > tau)
        assert row["n_answered"] == keep.sum() and row["coverage"] == pytest.approx(keep.mean())
        assert row["accuracy"] == pytest.approx(correct[keep].mean(), abs=1e-12)
        expected = ref_finscore(df["domain"][keep], df["question_type"][keep], df["gold"][keep], correct[keep])
        assert row["finscore"] == pytest.approx(expected, abs=1e-12)
    assert curve[0]["coverage"] == 1.0
    assert curve[-1]["coverage"] == 0.0 and curve[-1]["accuracy"] is None  # nothing answered: no score


def test_score_samples_has_selective_and_point_estimates_consistent():
    df = run_frame(300, 4)
    out = score_samples(df)
    assert out["selective"][0]["finscore"] == pytest.approx(out["finscore"])
    assert point_estimates(finmme.build_table(df))["finscore"] == pytest.approx(out["finscore"])
    assert percentile_ci(torch.tensor([1.0, 2.0, 3.0]), 0.5) == (1.5, 2.5)


# ---- commands -------------------------------------------------------------------------------------------
def test_score_and_compare_commands_write_json(tmp_path):
    from rich.console import Console

    from finbench.cli.score_commands import compare_command, score_command

    a, b = tmp_path / "run_a", tmp_path / "run_b"
    a.mkdir()
    b.mkdir()
    df_a, df_b = run_frame(120, 3, skill=0.4), run_frame(120, 3, skill=0.8)
    df_a.to_parquet(a / "samples.parquet", index=False)
    df_b.to_parquet(b / "samples.parquet", index=False)
    console = Console(file=io.StringIO(), width=120)

    result = score_command(a, "official", 50, 0, console=console)
    written = json.loads((a / "scores_official.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["variant"] == "official" and written["benchmark"] == "finmme"
    assert written["finscore"] == pytest.approx(
        ref_finscore(df_a["domain"], df_a["question_type"], df_a["gold"], correct_of(df_a)), abs=1e-9)
    assert set(written["ci"]) == {"finscore", "domain_accuracy", "p_h", "accuracy"}
    assert "calibration" in written and "by domain" in console.file.getvalue()

    paper = score_command(a, "paper", 0, 0, console=console)
    assert json.loads((a / "scores_paper.json").read_text())["variant"] == "paper" and "ci" not in paper
    assert "paper" in paper["label"]

    out = tmp_path / "cmp" / "compare.json"
    cmp = compare_command([a, b], out, 50, 0, console=console)
    written = json.loads(out.read_text())
    assert written["runs"] == ["run_a", "run_b"] and written["n_shared"] == 120
    assert written["comparisons"][0]["delta"]["finscore"]["value"] == pytest.approx(
        cmp["scores"]["run_b"]["finscore"] - cmp["scores"]["run_a"]["finscore"])
    with pytest.raises(FileNotFoundError):
        score_command(tmp_path / "missing", "official", 0, 0, console=console)
