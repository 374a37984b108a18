"""Repeated sampling (--samples K): every generated request asked K times with seeds seed…seed+K−1,
sample 0 unchanged in samples.parquet, the others in variants.parquet, results.json's `sampling`.
The numbers are checked against loops over the run's own files, not against the scoring path."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import torch

import finbench
from finbench.benchmarks import get_benchmark
from finbench.scoring.tables import per_question_correct

LIMIT = 4
TOKENS = "6"  # generated tokens per answer: the tiny model's text is noise, only its randomness matters
SAMPLED = "temperature=0.9,top_k=50"


def _cli(model_dir, data, out, *extra):
    """`finbench run …` in this process (typer's runner, as tests/test_robustness.py does)."""
    from typer.testing import CliRunner

    from finbench.cli import app

    return CliRunner().invoke(app, ["run", "--model", str(model_dir), "--data", str(data), "--out", str(out),
                                    "--limit", str(LIMIT), "--device", "cpu", "--dtype", "float32", "--bootstrap", "0",
                                    "--batch-size", "2", "--no-progress", *extra], env={"COLUMNS": "300"})


def _official(model_dir, data, out, *extra):
    return _cli(model_dir, data, out, "--protocol", "official", "--max-new-tokens", TOKENS, "--gen-kwargs", SAMPLED,
                *extra)


@pytest.fixture(scope="module")
def sampled(tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    """A `--samples 3` official run through the CLI, run twice (the rerun from the cache), and the
    same run with K = 1 in a folder of its own (its own cache)."""
    root = tmp_path_factory.mktemp("sampling")
    first = _official(tiny_qwen_dir, synthetic_parquet, root / "k3", "--samples", "3")
    assert first.exit_code == 0, first.output[-3000:]
    results = json.loads((root / "k3" / "results.json").read_text())
    again = _official(tiny_qwen_dir, synthetic_parquet, root / "k3", "--samples", "3")
    assert again.exit_code == 0, again.output[-3000:]
    once = _official(tiny_qwen_dir, synthetic_parquet, root / "k1")
    assert once.exit_code == 0, once.output[-3000:]
    return root, first, results, json.loads((root / "k3" / "results.json").read_text())


def test_the_sampling_block_holds_its_numbers_and_agrees_with_the_files(sampled):
    root, first, results, _ = sampled
    block = results["sampling"]
    assert set(block) == {"k", "n", "mean", "se", "se_iid", "ci", "maj_at_k", "pass_at_k", "agreement", "n_unparsed",
                          "n_no_parsed", "n_unscored", "by"}
    assert block["n_unscored"] == 0
    assert block["k"] == 3 and block["n"] == LIMIT
    assert 0 <= block["mean"] <= block["pass_at_k"] <= 1
    assert block["agreement"] is None or 1 / 3 <= block["agreement"] <= 1  # the tiny model's answers rarely parse
    assert 0 <= block["maj_at_k"] <= block["pass_at_k"]
    assert block["by"] and all(sum(g["n"] for g in groups.values()) == LIMIT for groups in block["by"].values())
    # the same numbers by hand from samples.parquet and variants.parquet
    samples = pd.read_parquet(root / "k3" / "samples.parquet")
    variants = pd.read_parquet(root / "k3" / "variants.parquet")
    rows = variants[variants["study"] == "sampling"]
    assert len(rows) == 2 * LIMIT and sorted(Counter(rows["sample"]).items()) == [(1, LIMIT), (2, LIMIT)]
    assert set(rows["variant"]) == {"sample-1", "sample-2"} and rows["sample_key"].is_unique
    assert not set(rows["sample_key"]) & set(samples["sample_key"])
    per_sample = [samples] + [rows[rows["sample"] == j].set_index("id").loc[samples["id"]].reset_index()
                              for j in (1, 2)]
    correct = torch.tensor([per_question_correct(f, get_benchmark("finmme")) for f in per_sample], dtype=torch.float64).T  # [N, K]
    answers = [[f["answer"].iloc[i] for f in per_sample] for i in range(LIMIT)]
    assert block["mean"] == pytest.approx(float(correct.mean()))
    assert block["pass_at_k"] == pytest.approx(float(correct.max(1).values.mean()))
    assert block["se_iid"] == pytest.approx(float(correct.mean(1).std() / LIMIT ** 0.5))
    # votes and agreement over the parsed answers only (an empty answer is no answer)
    parsed = [[x for x in a if str(x).strip()] for a in answers]
    assert block["n_unparsed"] == sum(3 - len(p) for p in parsed)
    modal = [max(range(3), key=lambda j: (a.count(a[j]) if str(a[j]).strip() else 0, -j)) for a in answers]
    assert block["maj_at_k"] == pytest.approx(sum(float(correct[i, modal[i]]) for i in range(LIMIT)) / LIMIT)
    shares = [max(Counter(p).values()) / len(p) for p in parsed if p]
    assert block["agreement"] == (pytest.approx(sum(shares) / len(shares)) if shares else None)
    texts = [{f["raw_output"].iloc[i] for f in per_sample} for i in range(LIMIT)]
    assert any(len(t) > 1 for t in texts)  # the samples differ: the seeds reach the sampling
    # results.json, the console line and the reports
    jsonschema.validate(results, json.loads((Path(finbench.__file__).parent / "report" / "results.schema.json")
                                            .read_text()))
    assert results["variants"]["n"] == 2 * LIMIT
    assert "repeated sampling (K 3, 4 questions" in first.output
    assert 'id="sampling"' in (root / "k3" / "report.html").read_text()
    assert "## Repeated sampling (K = 3)" in (root / "k3" / "report.md").read_text()


def test_sample_0_is_the_run_without_samples_and_a_rerun_computes_nothing(sampled):
    root, _, results, rerun = sampled
    k3 = pd.read_parquet(root / "k3" / "samples.parquet")
    k1 = pd.read_parquet(root / "k1" / "samples.parquet")
    for column in ("id", "sample_key", "raw_output", "answer", "correct"):
        assert list(k3[column]) == list(k1[column]), column
    k1_results = json.loads((root / "k1" / "results.json").read_text())
    assert k1_results["scores"]["accuracy"] == results["scores"]["accuracy"]
    assert "sampling" not in k1_results and not (root / "k1" / "variants.parquet").exists()
    assert results["n_computed"] == LIMIT and results["variants"]["n_computed"] == 2 * LIMIT
    assert rerun["n_computed"] == 0 and rerun["variants"]["n_computed"] == 0
    assert rerun["variants"]["n_cached"] == 2 * LIMIT and rerun["sampling"] == results["sampling"]


def test_greedy_samples_and_no_samples_are_refused_in_one_line(tiny_qwen_dir, synthetic_parquet, tmp_path):
    greedy = _cli(tiny_qwen_dir, synthetic_parquet, tmp_path / "greedy", "--protocol", "official",
                  "--max-new-tokens", TOKENS, "--samples", "3")
    assert greedy.exit_code != 0 and "all 3 samples would be identical" in greedy.output
    assert "--gen-kwargs temperature=0.7" in greedy.output and not (tmp_path / "greedy").exists()
    none = _cli(tiny_qwen_dir, synthetic_parquet, tmp_path / "none", "--samples", "0")
    assert none.exit_code != 0 and "--samples 0" in none.output and not (tmp_path / "none").exists()


def test_constrained_letters_are_asked_once_with_a_note(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    from finbench.runner.engine import run_benchmark
    from finbench.app.api import make_config

    config = make_config(model=str(tiny_qwen_dir), benchmark="finmme", data=str(synthetic_parquet), limit=LIMIT,
                       out=str(tmp_path / "run"), dtype="float32", device="cpu", bootstrap=0, samples=3)
    results, _ = run_benchmark(config, tiny_model, show_progress=False)
    assert any("deterministic" in note and "asked once" in note for note in results["notes"])
    assert results["sampling"]["n"] == 0 and "variants" in results and results["variants"]["n"] == 0


def test_the_summary_scores_each_sample_by_the_rule_and_compares_extracted_answers(sampled):
    """Hand-built answers on the run's own questions: the numbers follow from the table above."""
    from finbench.scoring.sampling_scores import sampling_summary

    root, _, _, _ = sampled
    base = pd.read_parquet(root / "k3" / "samples.parquet")
    wrong = {"single": "Z", "multi": "Z", "numerical": "-987654"}
    # question i: samples right (1) or wrong (0); a wrong answer is one and the same text
    pattern = [(1, 1, 1), (0, 1, 0), (0, 0, 0), (1, 0, 1)][:LIMIT]
    frames = []
    for j in range(3):
        frame = base.copy()
        frame["answer"] = [row.gold if pattern[i][j] else wrong[row.kind] for i, row in enumerate(base.itertuples())]
        frames.append(frame.drop(columns=["correct"]))
    found = sampling_summary(frames, get_benchmark("finmme"), 3)
    assert found["n"] == LIMIT and found["k"] == 3
    assert found["mean"] == pytest.approx(sum(map(sum, pattern)) / (3 * LIMIT))  # 6 of 12
    assert found["pass_at_k"] == pytest.approx(3 / 4)  # every question but the third has a right sample
    assert found["maj_at_k"] == pytest.approx(2 / 4)  # the first and the last are right by majority
    assert found["agreement"] == pytest.approx((1 + 2 / 3 + 1 + 2 / 3) / 4)
    means = torch.tensor([sum(p) / 3 for p in pattern], dtype=torch.float64)
    assert found["se_iid"] == pytest.approx(float(means.std() / 2))
    assert sum(g["n"] for g in found["by"]["kind"].values()) == LIMIT
    # unparsed samples are no votes: every answer empty → no agreement, no shared "answer"
    empty = [f.assign(answer="") for f in frames]
    none = sampling_summary(empty, get_benchmark("finmme"), 3)
    assert none["agreement"] is None and none["n_unparsed"] == 3 * LIMIT and none["n_no_parsed"] == LIMIT
    # one question answered twice alike and once unparsed: agreement 1 over its 2 parsed samples, not 2/3
    one = [f.copy() for f in frames]
    one[2].loc[0, "answer"] = ""
    found = sampling_summary(one, get_benchmark("finmme"), 3)
    assert found["n_unparsed"] == 1 and found["agreement"] == pytest.approx((1 + 2 / 3 + 1 + 2 / 3) / 4)


def test_the_sampling_se_is_clustered_like_statsmodels_on_per_question_means():
    """20 images × 5 questions, K = 4: the SE of the per-question means is statsmodels'
    cluster-robust SE on the images, not the iid one (which it keeps as se_iid)."""
    import numpy as np
    import statsmodels.api as sm

    from finbench.scoring.clustered import repeated_sampling

    rng = np.random.default_rng(5)
    images = np.repeat(np.arange(20), 5)
    p = rng.random(20)[images]  # questions on one image are alike
    correct = (rng.random((100, 4)) < p[:, None]).astype(float)
    answers = torch.from_numpy((correct * 2).astype(np.int64))
    found = repeated_sampling(answers, torch.from_numpy(correct), cluster_ids=torch.from_numpy(images))
    means = correct.mean(1)
    fit = sm.OLS(means, np.ones(100)).fit(cov_type="cluster", cov_kwds={"groups": images}, use_t=True)
    assert found["se"] == pytest.approx(float(fit.bse[0]), abs=1e-12)
    assert found["se_iid"] == pytest.approx(float(sm.OLS(means, np.ones(100)).fit().bse[0]), abs=1e-12)
    assert (found["ci"]["low"], found["ci"]["high"]) == pytest.approx(tuple(fit.conf_int(0.05)[0]), abs=1e-12)
    assert found["se"] > 1.3 * found["se_iid"]


def test_thinking_samples_its_reasoning_only_when_asked(tmp_path_factory, synthetic_parquet, tmp_path):
    """--samples with a thinking budget samples the block (a seed per sample); without --samples the
    thinking requests and their keys are the greedy ones."""
    from helpers import sharpened_tiny_dir

    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.runner.engine import run_benchmark
    from finbench.app.api import make_config

    thinker = load_model(str(sharpened_tiny_dir(tmp_path_factory, "qwen3-vl", thinking=True)),
                         LoadSpec(dtype="float32", device="cpu"))
    base = dict(model=thinker.source, benchmark="finmme", data=str(synthetic_parquet), limit=LIMIT, batch_size=2,
                dtype="float32", device="cpu", bootstrap=0, think_budget=6, gen_kwargs=(("temperature", 1.0),))
    greedy = run_benchmark(make_config(**base, out=str(tmp_path / "greedy")), thinker, show_progress=False)
    sampled = run_benchmark(make_config(**base, out=str(tmp_path / "sampled"), samples=2), thinker, show_progress=False)
    plain = run_benchmark(make_config(**{**base, "gen_kwargs": ()}, out=str(tmp_path / "plain")), thinker,
                          show_progress=False)
    assert list(greedy.samples["sample_key"]) == list(plain.samples["sample_key"])  # no --samples: greedy as always
    assert list(greedy.samples["reasoning_text"]) == list(plain.samples["reasoning_text"])
    assert not set(sampled.samples["sample_key"]) & set(greedy.samples["sample_key"])
    variants = pd.read_parquet(tmp_path / "sampled" / "variants.parquet")
    assert len(variants) == LIMIT and set(variants["sample"]) == {1}
    assert sampled.results["sampling"]["n"] == LIMIT and sampled.results["sampling"]["k"] == 2
    reasoning = list(sampled.samples["reasoning_text"]) + list(variants["reasoning_text"])
    assert len(set(reasoning)) > len(set(greedy.samples["reasoning_text"]))  # the blocks are drawn, not argmaxed
    assert not any("deterministic" in note for note in sampled.results["notes"])


def test_a_mixed_run_samples_its_open_answers_only(tiny_model, tiny_qwen_dir, tmp_path):
    """FAMMA's constrained protocol: choice items read from the logits (asked once, one note), open
    questions generated (sampled K times); a question without gold is sampled but not scored."""
    from finbench.offline import famma_synthetic
    from finbench.runner.engine import run_benchmark
    from finbench.app.api import make_config

    path = famma_synthetic.write_parquet(tmp_path / "release_basic.parquet", famma_synthetic.records(None))
    config = make_config(model=str(tiny_qwen_dir), benchmark="famma", data=str(path), limit=6, out=str(tmp_path / "run"),
                       dtype="float32", device="cpu", bootstrap=0, max_new_tokens=4, samples=3,
                       gen_kwargs=(("temperature", 0.9),))
    results, samples = run_benchmark(config, tiny_model, show_progress=False)
    variants = pd.read_parquet(tmp_path / "run" / "variants.parquet")
    opened = samples[samples["id"].isin(set(variants["id"]))]
    constrained = samples[~samples["id"].isin(set(variants["id"])) & (samples["error"] == "")]
    assert len(opened) and len(constrained) and set(constrained["kind"]) <= {"single", "multi", "numerical"}
    assert "open" in set(opened["kind"]) or set(opened["kind"]) - {"single", "multi", "numerical"}
    assert len(variants) == 2 * len(opened) and set(variants["study"]) == {"sampling"}
    assert any(f"{len(constrained)} constrained answer(s)" in note and "deterministic" in note
               for note in results["notes"])
    block = results["sampling"]
    unscored = int((opened["gold"] == "").sum())
    assert block["n"] + block["n_unscored"] == len(opened) and block["n_unscored"] == unscored


def test_compare_of_sampled_runs_uses_the_per_question_means(sampled, tmp_path):
    """`finbench compare` of a --samples run: the clustered difference is of the mean score over
    the K samples per question (sample 0 alone would keep the within-question noise)."""
    import numpy as np

    from finbench.cli.score_commands import compare_command
    from finbench.scoring.sampling_scores import per_question_means

    root, _, _, _ = sampled
    samples = pd.read_parquet(root / "k3" / "samples.parquet")
    variants = pd.read_parquet(root / "k3" / "variants.parquet")
    per_sample = [samples] + [variants[variants["sample"] == j].set_index("id").loc[samples["id"]].reset_index()
                              for j in (1, 2)]
    by_hand = np.mean([per_question_correct(f, get_benchmark("finmme")) for f in per_sample], axis=0)
    means = per_question_means(samples, variants, get_benchmark("finmme"))
    assert means.reindex(samples["id"]).to_numpy() == pytest.approx(by_hand)
    result = compare_command([root / "k1", root / "k3"], tmp_path / "c.json", n_bootstrap=0)
    c = result["comparisons"][0]
    assert c["diff"] == pytest.approx(float((by_hand - per_question_correct(samples, get_benchmark("finmme"))).mean()))
    assert c["per_question"].startswith("mean score over the K samples")
    from finbench.report.format import power_line

    assert "Δ score (per-question means over the K samples)" in power_line(c)


def test_the_printed_delta_of_sampled_runs_is_the_per_question_mean_difference(sampled, tmp_path):
    """The accuracy Δ `finbench compare` prints for a --samples run is the difference of the
    per-question means over the K samples (restated here from samples.parquet + variants.parquet),
    with the power line's interval, and its column says so — not sample 0's difference. Samples 1
    of the copy are set to the gold, so the two differences part."""
    import io
    import re
    import shutil

    import numpy as np
    from rich.console import Console

    from finbench.cli.score_commands import compare_command

    root = sampled[0]
    shutil.copytree(root / "k3", tmp_path / "k3")
    variants = pd.read_parquet(tmp_path / "k3" / "variants.parquet")
    first = (variants["study"] == "sampling") & (variants["sample"] == 1)
    variants.loc[first, "answer"] = variants.loc[first, "gold"]
    variants.to_parquet(tmp_path / "k3" / "variants.parquet")
    samples = pd.read_parquet(tmp_path / "k3" / "samples.parquet")
    per_sample = [samples] + [variants[(variants["study"] == "sampling") & (variants["sample"] == j)]
                              .set_index("id").loc[samples["id"]].reset_index() for j in (1, 2)]
    means = np.mean([per_question_correct(f, get_benchmark("finmme")) for f in per_sample], axis=0)
    reference = pd.read_parquet(root / "k1" / "samples.parquet").set_index("id").loc[samples["id"]].reset_index()
    expected = float((means - per_question_correct(reference, get_benchmark("finmme"))).mean())
    sample_0 = float((per_question_correct(samples, get_benchmark("finmme")) - per_question_correct(reference, get_benchmark("finmme"))).mean())
    assert abs(expected - sample_0) > 0.05  # the two differences part, so the test can tell them apart

    shown = io.StringIO()
    result = compare_command([root / "k1", tmp_path / "k3"], None, n_bootstrap=50,
                             console=Console(file=shown, width=300, color_system=None))
    c = result["comparisons"][0]
    assert c["delta"]["accuracy"]["value"] == pytest.approx(expected) == pytest.approx(c["diff"])
    assert c["delta"]["accuracy"]["ci"] == ({**c["ci_diff"], "level": 0.95, "method": "clustered t(G-1)"}
                                           if c["ci_diff"]["low"] is not None else None)
    lines = shown.getvalue().splitlines()
    header = next(i for i, line in enumerate(lines) if "Δ accuracy [CI] (per-question means over the K samples)" in line)
    row = next(line for line in lines[header:] if re.search(r"[│┃|] k3 ", line))
    cells = [cell.strip() for cell in re.split(r"[│┃|]", row) if cell.strip()]
    assert float(cells[2].split()[0]) == pytest.approx(100 * expected, abs=0.006)
