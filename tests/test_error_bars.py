"""Issue 30, items 1–2: clustered error bars in results.json, the cluster bootstrap, and paired
differences with their minimum detectable effect in compare, sweep and leaderboard."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import t as student_t

from finbench.benchmarks import BENCHMARKS, get_benchmark, load_matching
from finbench.benchmarks.base import cluster_key
from finbench.core.types import Prediction, Question
from finbench.runner.outputs import samples_table, score
from finbench.scoring.clustered import MDE_FACTOR, clustered_se
from finbench.scoring.tables import compare_runs, per_question_correct, score_samples


def _statsmodels_se(y: np.ndarray, groups: np.ndarray) -> float:
    import statsmodels.api as sm

    codes = pd.factorize(pd.Series(groups))[0]
    fit = sm.OLS(y.astype(float), np.ones((len(y), 1))).fit(cov_type="cluster", cov_kwds={"groups": codes})
    return float(fit.bse[0])


def _demo_questions(name: str, folder) -> list[Question]:
    spec = BENCHMARKS[name]
    data, _ = spec.demo.write(folder / name, None)
    return [q for q in load_matching(spec, str(data), None, [], [], []) if not q.error]


def _samples(questions: list[Question], right: np.ndarray) -> pd.DataFrame:
    """A samples table whose answers are the gold where `right`, else a wrong one."""
    predictions = {i: Prediction(id=q.id, answer=q.gold if r else ("Z" if q.options else "wrong 0"),
                                 generated_text=q.gold if r else "wrong 0")
                   for i, (q, r) in enumerate(zip(questions, right))}
    return samples_table(questions, predictions, [f"k{i}" for i in range(len(questions))])


@pytest.fixture(scope="module")
def famma_questions(tmp_path_factory):
    return _demo_questions("famma", tmp_path_factory.mktemp("famma"))


def test_cluster_key_reads_meta_images_and_falls_back_to_the_question():
    q = Question(id="q1", benchmark="x", kind="single", text="t", images=(b"abc",), meta={"main": "M7"})
    same_image = Question(id="q2", benchmark="x", kind="single", text="u", images=(b"abc",))
    assert cluster_key("main", q) == "M7"
    assert cluster_key("image", q) == cluster_key("image", same_image) != cluster_key("image", q.__class__(
        id="q3", benchmark="x", kind="single", text="t", images=(b"abd",)))
    assert cluster_key("main", same_image) == "id:q2" and cluster_key("id", q) == "id:q1"
    assert cluster_key("image", Question(id="q4", benchmark="x", kind="open", text="")) == "id:q4"


def test_famma_clustered_se_equals_statsmodels_on_grouped_sub_questions(famma_questions):
    rng = np.random.default_rng(3)
    samples = _samples(famma_questions, rng.random(len(famma_questions)) < 0.5)
    assert samples["cluster"].nunique() < len(samples)  # sub-questions share their main question
    scores = score_samples(samples, benchmark=get_benchmark("famma"), n_bootstrap=200, seed=1)
    clustered = scores["clustered"]
    assert clustered["by"] == "main_question_id"
    correct = per_question_correct(samples, benchmark=get_benchmark("famma"))
    scored = ~np.isnan(correct)
    assert clustered["n_clusters"] == samples.loc[scored, "cluster"].nunique()
    expected = _statsmodels_se(correct[scored], samples.loc[scored, "cluster"].to_numpy())
    assert 0 < expected and clustered["metrics"]["accuracy"]["se"] == pytest.approx(expected, abs=1e-9)
    se_iid = np.std(correct[scored], ddof=1) / math.sqrt(scored.sum())
    entry = clustered["metrics"]["accuracy"]
    assert entry["se_iid"] == pytest.approx(se_iid, abs=1e-12)
    assert entry["design_effect"] == pytest.approx(entry["se"] ** 2 / se_iid ** 2)
    g = clustered["metrics"]["accuracy"]["n_clusters"]
    assert entry["ci"]["low"] == pytest.approx(max(0.0, scores["accuracy"] - student_t.ppf(0.975, g - 1) * entry["se"]))
    assert scores["bootstrap"]["unit"] == "cluster"


def test_cluster_bootstrap_only_with_a_cluster_column_and_old_numbers_stay(famma_questions):
    samples = _samples(famma_questions, np.arange(len(famma_questions)) % 3 == 0)
    with_clusters = score_samples(samples, benchmark=get_benchmark("famma"), n_bootstrap=300, seed=0)
    without = score_samples(samples.drop(columns=["cluster"]), benchmark=get_benchmark("famma"), n_bootstrap=300, seed=0)
    assert without["bootstrap"]["unit"] == "question" and with_clusters["bootstrap"]["unit"] == "cluster"
    assert without["accuracy"] == with_clusters["accuracy"]
    # the SE still clusters on the meta column the samples carry
    assert without["clustered"]["by"] == "main_question_id"
    assert without["clustered"]["metrics"] == with_clusters["clustered"]["metrics"]
    # every question its own cluster: the question bootstrap, numbers as before
    own = samples.assign(cluster=["id:" + i for i in samples["id"]])
    kept = score_samples(own, benchmark=get_benchmark("famma"), n_bootstrap=300, seed=0)
    assert kept["bootstrap"]["unit"] == "question" and kept["ci"] == without["ci"]


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_writes_a_cluster_column_and_scores_clustered(name, tmp_path):
    questions = _demo_questions(name, tmp_path)
    samples = _samples(questions, np.arange(len(questions)) % 2 == 0)
    expected = [cluster_key(BENCHMARKS[name].cluster_field, q) for q in questions]
    assert samples["cluster"].tolist() == expected
    scores = json.loads(json.dumps(score(samples, BENCHMARKS[name], n_bootstrap=20, seed=0)))
    clustered = scores["clustered"]
    assert clustered["by"] == BENCHMARKS[name].cluster_field
    assert clustered["n_clusters"] >= 1 and "accuracy" in clustered["metrics"]
    assert scores["bootstrap"]["unit"] in ("cluster", "question")


def test_compare_reports_the_paired_difference_and_mde(famma_questions):
    n = len(famma_questions)
    a = _samples(famma_questions, np.arange(n) % 2 == 0)
    b = _samples(famma_questions, np.arange(n) % 3 == 0)
    result = compare_runs([a, b], ["ref", "var"], benchmark=get_benchmark("famma"), n_bootstrap=0)
    c = result["comparisons"][0]
    ca, cb = per_question_correct(a, benchmark=get_benchmark("famma")), per_question_correct(b, benchmark=get_benchmark("famma"))
    scored = ~np.isnan(ca) & ~np.isnan(cb)
    diff = cb[scored] - ca[scored]
    groups = a.loc[scored, "cluster"].to_numpy()
    assert c["diff"] == pytest.approx(diff.mean())
    se = _statsmodels_se(diff, groups)
    assert c["se_diff"] == pytest.approx(se, abs=1e-9)
    g = len(set(groups))
    assert c["mde"] == pytest.approx((student_t.ppf(0.975, g - 1) + student_t.ppf(0.8, g - 1)) * se)
    assert MDE_FACTOR == pytest.approx(2.8015852)  # the many-cluster limit
    assert c["ci_diff"]["high"] - c["ci_diff"]["low"] == pytest.approx(2 * student_t.ppf(0.975, g - 1) * se)
    assert c["cluster_by"] == "main_question_id" and c["n"] == int(scored.sum())
    ids = torch.from_numpy(pd.factorize(pd.Series(groups))[0])
    assert c["se_diff"] == pytest.approx(float(clustered_se(torch.from_numpy(diff), ids)))


def test_power_line_in_console_and_reports(famma_questions, tmp_path):
    from finbench.report.console import as_console, print_comparison
    from finbench.report.format import power_line

    n = len(famma_questions)
    a, b = _samples(famma_questions, np.arange(n) % 2 == 0), _samples(famma_questions, np.arange(n) % 3 == 0)
    result = compare_runs([a, b], ["ref", "var"], benchmark=get_benchmark("famma"), n_bootstrap=0)
    c = result["comparisons"][0]
    line = power_line(c)
    ci = c["ci_diff"]
    significant = ci["low"] > 0 or ci["high"] < 0
    assert ("significant at α = 0.05 (two-sided)" in line) == significant
    assert c["significant"] == significant and c["verdict"] in line  # the API holds the printed verdict
    assert (f"this set detects ≥ {100 * c['mde']:.1f} points with 80 % power" in line) == (not significant)
    console = as_console(None)
    with console.capture() as captured:
        print_comparison(result, console)
    printed = " ".join(captured.get().split())
    assert " ".join(line.split()) in printed
    # one interval per difference: the Δ accuracy cell holds the power line's interval, not a bootstrap
    assert c["delta"]["accuracy"]["ci"]["method"] == "clustered t(G-1)"
    assert f"[{100 * ci['low']:.2f}, {100 * ci['high']:.2f}]" in printed


def _write_run(folder, samples, name):
    """The two files the leaderboard reads of a run folder."""
    folder.mkdir(parents=True)
    scores = score(samples, BENCHMARKS["famma"], n_bootstrap=0, seed=0)
    results = {"benchmark": "famma", "protocol": "constrained", "scores": scores, "notes": [],
               "config": {"model": name, "quant": "none", "thinking": False}, "fingerprint": {},
               "n_questions": len(samples), "throughput": {}, "errors": {"count": 0}}
    (folder / "results.json").write_text(json.dumps(results))
    samples.to_parquet(folder / "samples.parquet")


def test_leaderboard_rows_carry_mde_and_its_reports_the_line(famma_questions, tmp_path):
    from finbench.app import leaderboard

    n = len(famma_questions)
    _write_run(tmp_path / "ref", _samples(famma_questions, np.arange(n) % 2 == 0), "ref")
    _write_run(tmp_path / "var", _samples(famma_questions, np.arange(n) % 3 == 0), "var")
    board = leaderboard.build([tmp_path / "ref", tmp_path / "var"], reference=tmp_path / "ref")
    row = next(r for r in board["rows"] if r.get("comparison"))
    assert set(row["comparison"]) >= {"diff", "se_diff", "ci_diff", "mde"} and row["comparison"]["mde"] > 0
    markdown = tmp_path / "board.md"
    leaderboard.write(board, markdown)
    from finbench.report.format import power_line

    assert power_line(row["comparison"]) in markdown.read_text()


def test_one_interval_per_difference_and_the_bootstrap_only_as_a_check(famma_questions):
    """A mean metric's difference carries the clustered interval (the power line's), its paired
    bootstrap kept as a check that only the reports print; the markdown report shows both, named."""
    from finbench.report.format import power_line

    n = len(famma_questions)
    a, b = _samples(famma_questions, np.arange(n) % 2 == 0), _samples(famma_questions, np.arange(n) % 3 == 0)
    result = compare_runs([a, b], ["ref", "var"], benchmark=get_benchmark("famma"), n_bootstrap=300, seed=0)
    c = result["comparisons"][0]
    accuracy = c["delta"]["accuracy"]
    assert accuracy["value"] == pytest.approx(c["diff"])
    assert (accuracy["ci"]["low"], accuracy["ci"]["high"]) == (c["ci_diff"]["low"], c["ci_diff"]["high"])
    check = accuracy["bootstrap_check"]
    assert check["low"] is not None and (check["low"], check["high"]) != (c["ci_diff"]["low"], c["ci_diff"]["high"])
    assert "check: paired bootstrap" not in power_line(c)
    assert f"check: paired bootstrap [{100 * check['low']:+.2f}, {100 * check['high']:+.2f}]" in power_line(c, check=True)
