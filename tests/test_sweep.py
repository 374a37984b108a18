"""`finbench sweep` and the distribution statistics of `finbench compare`.

References: KL, agreement, gold shift and the flip matrix are recomputed by plain Python loops
over the stored distributions; a sweep rerun without its model must reproduce the first run's
comparison from the cache alone."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from finbench.app.sweep import flip_matrix, plan_variants
from finbench.cli import app
from finbench.config.specs import RunConfig
from finbench.scoring.stats import distribution_comparison


def _brute_force(ref: pd.DataFrame, var: pd.DataFrame, floor: float = 1e-12) -> dict:
    """KL(ref ‖ var), top-1 agreement, gold shift: one question at a time, from the definitions."""
    other = {row["id"]: row for _, row in var.iterrows()}
    kls, agree, shifts, by_domain = [], [], [], {}
    for _, a in ref.iterrows():
        b = other.get(a["id"])
        if b is None or a["kind"] != "single" or a["error"] or b["error"]:
            continue
        p, q = list(a["option_probs"]), list(b["option_probs"])
        if not p or len(p) != len(q):
            continue
        p = [x / sum(p) for x in p]
        q = [x / sum(q) for x in q]
        kl = sum(x * (math.log(max(x, floor)) - math.log(max(y, floor))) for x, y in zip(p, q) if x > 0)
        same = max(range(len(p)), key=p.__getitem__) == max(range(len(q)), key=q.__getitem__)
        kls.append(kl)
        agree.append(same)
        g = "ABCDEFGHIJKLMN".find(a["gold"]) if len(a["gold"]) == 1 else -1
        if 0 <= g < len(p):
            shifts.append(q[g] - p[g])
        by_domain.setdefault(a["domain"], []).append(kl)
    return {"n": len(kls), "kl_mean": sum(kls) / len(kls), "agreement": sum(agree) / len(agree),
            "gold_shift_mean": sum(shifts) / len(shifts),
            "by_domain": {d: sum(v) / len(v) for d, v in by_domain.items()}}


def _random_runs(seed: int = 0, n: int = 60) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    rows_a, rows_b = [], []
    for i in range(n):
        kind = ["single", "single", "multi", "numerical"][i % 4]
        k = int(rng.integers(2, 6)) if kind != "numerical" else 0
        gold = "ABCDE"[int(rng.integers(0, k))] if kind == "single" else ("AB" if kind == "multi" else "3.5")
        p = rng.dirichlet(np.ones(k)).tolist() if k else []
        q = rng.dirichlet(np.ones(k) * 0.5).tolist() if k else []
        base = {"id": f"q{i}", "kind": kind, "gold": gold, "domain": ["x", "y", "z"][i % 3], "answer": "A",
                "benchmark": "finmme"}
        rows_a.append({**base, "option_probs": p, "error": ""})
        rows_b.append({**base, "option_probs": q, "error": "model error: boom" if i == 5 else ""})
    a, b = pd.DataFrame(rows_a), pd.DataFrame(rows_b)
    b.loc[b["id"] == "q8", "option_probs"] = pd.Series([[0.5, 0.5, 0.0, 0.0, 0.0, 0.0]], index=b.index[b["id"] == "q8"])
    return a, b.iloc[::-1].reset_index(drop=True)  # another order: alignment must be by id


def test_kl_agreement_and_gold_shift_equal_a_brute_force_loop():
    ref, var = _random_runs()
    got = distribution_comparison([ref, var], ["ref", "var"])["runs"]["var"]
    want = _brute_force(ref, var)
    assert got["n"] == want["n"] > 20
    for key in ("kl_mean", "agreement", "gold_shift_mean"):
        assert math.isclose(got[key], want[key], rel_tol=1e-9, abs_tol=1e-12), key
    for domain, kl in want["by_domain"].items():
        assert math.isclose(got["by_group"][domain]["kl"], kl, rel_tol=1e-9)
    # identical runs: KL 0, full agreement, no shift
    same = distribution_comparison([ref, ref], ["a", "b"])["runs"]["b"]
    assert same["kl_mean"] == pytest.approx(0.0, abs=1e-12) and same["agreement"] == 1.0
    assert same["gold_shift_mean"] == pytest.approx(0.0, abs=1e-12)


def test_flip_matrix_counts_right_in_one_run_and_wrong_in_the_other():
    rng = np.random.default_rng(1)
    runs = [pd.DataFrame({"id": [f"q{i}" for i in range(40)], "correct": rng.integers(0, 2, 40).astype(float)})
            for _ in range(3)]
    runs[2] = runs[2].iloc[5:]  # fewer questions: only shared ids count
    got = flip_matrix(runs, ["a", "b", "c"])
    shared = [f"q{i}" for i in range(5, 40)]
    right = [dict(zip(r["id"], r["correct"])) for r in runs]
    for i in range(3):
        for j in range(3):
            assert got["counts"][i][j] == sum(right[i][q] > 0.5 and right[j][q] <= 0.5 for q in shared)
    assert got["n"] == 35


def test_plan_variants_names_and_bad_axes():
    base = RunConfig.flat(model="m")
    names = [n for n, _ in plan_variants(base, {"quant": ["none", "8bit"], "think_budget": [0, 256]})]
    assert names == ["quant-none_think_budget-0", "quant-none_think_budget-256",
                     "quant-8bit_think_budget-0", "quant-8bit_think_budget-256"]
    configs = dict(plan_variants(base, {"model": ["/a/inst", "/b/think"]}))
    assert configs["model-think"].model == "/b/think"
    for axes, message in (({"quant": ["none"]}, "at least two variants"), ({"quant": ["8bit", "8bit"]}, "repeated"),
                          ({"speed": ["x", "y"]}, "unknown sweep axis")):
        with pytest.raises(ValueError, match=message):
            plan_variants(base, axes)


def test_sweep_cli_refuses_bad_configuration(tmp_path, tiny_qwen_dir, synthetic_parquet):
    runner = CliRunner()
    common = ["--data", str(synthetic_parquet), "--limit", "2", "--device", "cpu", "--no-progress"]
    for args, message in ((["--model", str(tiny_qwen_dir), "--quant", "none"], "at least two variants"),
                          (["--quant", "none,8bit"], "give --model"),
                          (["--model", str(tiny_qwen_dir), "--think-budget", "0,x"], "comma-separated"),
                          (["--model", str(tiny_qwen_dir), "--think-budget", "0,-3"], "--think-budget -3"),
                          (["--model", str(tiny_qwen_dir), "--dtype", "float32,bogus"], "--dtype bogus"),
                          (["--model", str(tiny_qwen_dir), "--quant", "none,3bit"], "--quant 3bit"),
                          (["--model", str(tmp_path / "nowhere"), "--quant", "none,8bit"], "cannot load model"),
                          # what only the model's family refuses, for a later variant: before variant 0 runs
                          (["--model", str(tiny_qwen_dir), "--think-budget", "0,8"],
                           "variant think_budget-8: --think-budget 8: qwen2.5-vl has no thinking block"),
                          (["--model", str(tiny_qwen_dir), "--quant", "none,8bit", "--batch-size", "many"],
                           "--batch-size many: expected a positive integer or 'auto'")):
        done = runner.invoke(app, ["sweep", *args, *common, "--out", str(tmp_path / "s")])
        assert done.exit_code == 2, done.output
        assert message in " ".join(done.output.split()), done.output
        assert not (tmp_path / "s").exists()  # refused before any variant ran


def test_sweep_takes_batch_size_auto_and_no_progress_means_no_bars(tmp_path, tiny_qwen_dir, synthetic_parquet):
    out = tmp_path / "s"
    done = CliRunner().invoke(app, ["sweep", "--model", str(tiny_qwen_dir), "--dtype", "float32,bfloat16", "--data",
                                    str(synthetic_parquet), "--limit", "2", "--device", "cpu", "--bootstrap", "0",
                                    "--batch-size", "auto", "--no-progress", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "Loading weights" not in done.output and "it/s" not in done.output  # no loading bars either
    for variant in ("dtype-float32", "dtype-bfloat16"):
        results = json.loads((out / variant / "results.json").read_text())
        assert results["config"]["batch_size"] == "auto"
        assert results["config"]["sized"] == ["token_budget", "workers"]  # given ones are not sized
        assert results["throughput"]["final_max_batch"] == 64  # auto starts at 64 (nothing ran out of memory)


@pytest.mark.slow
def test_sweep_none_to_8bit_then_from_the_cache_with_the_model_deleted(tmp_path, tiny_qwen_dir, synthetic_parquet):
    pytest.importorskip("bitsandbytes")
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen_dir, model)
    out = tmp_path / "sweep"
    args = ["sweep", "--model", str(model), "--quant", "none,8bit", "--data", str(synthetic_parquet), "--limit", "16",
            "--device", "cpu", "--out", str(out), "--bootstrap", "200", "--no-progress"]
    runner = CliRunner()
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    first = json.loads((out / "sweep.json").read_text())
    assert [v["name"] for v in first["variants"]] == ["quant-none", "quant-8bit"]
    assert all(v["samples_per_s"] and v["model_memory_gib"] for v in first["variants"])
    assert first["variants"][1]["model_memory_gib"] < first["variants"][0]["model_memory_gib"]  # int8 weights
    for name in ("report.html", "report.md", "quant-none/samples.parquet", "quant-8bit/report.html"):
        assert (out / name).exists(), name
    fingerprints = [json.loads((out / v / "results.json").read_text())["fingerprint"]["quant"]
                    for v in ("quant-none", "quant-8bit")]
    assert fingerprints == ["none", "8bit"]

    # the distribution statistics equal a brute-force loop over the stored distributions
    ref, var = (pd.read_parquet(out / v / "samples.parquet") for v in ("quant-none", "quant-8bit"))
    want, got = _brute_force(ref, var), first["distributions"]["runs"]["quant-8bit"]
    assert got["n"] == want["n"] > 0
    assert math.isclose(got["kl_mean"], want["kl_mean"], rel_tol=1e-9, abs_tol=1e-15)
    assert math.isclose(got["agreement"], want["agreement"])

    # model folder deleted: the rerun is served from the cache and reproduces the comparison
    shutil.rmtree(model)
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    again = json.loads((out / "sweep.json").read_text())
    assert again["comparison"] == first["comparison"] and again["distributions"] == first["distributions"]
    assert again["flip_matrix"] == first["flip_matrix"]
    assert all(v["all_from_cache"] for v in again["variants"])
    assert [v["samples_per_s"] for v in again["variants"]] == [v["samples_per_s"] for v in first["variants"]]
    # … and `finbench compare` on the run folders alone gives the same statistics
    done = runner.invoke(app, ["compare", str(out / "quant-none"), str(out / "quant-8bit"), "--out",
                               str(tmp_path / "compare.json"), "--bootstrap", "200"])
    assert done.exit_code == 0, done.output
    compared = json.loads((tmp_path / "compare.json").read_text())
    assert compared["distributions"] == first["distributions"]
    assert compared["comparisons"][0]["mcnemar"] == first["comparison"]["comparisons"][0]["mcnemar"]
    # broken: with the model gone, a question that is not cached cannot be answered
    done = runner.invoke(app, [*args[:7], "--limit", "20", *args[9:]])
    assert done.exit_code == 2 and "missing" in done.output, done.output


def _mcnemar_by_hand(b: int, c: int) -> float:
    """Two-sided exact McNemar: twice the smaller binomial tail of Binomial(b + c, 1/2), capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@pytest.mark.slow
def test_quantization_sweep_over_five_formats(tmp_path_factory, synthetic_parquet):
    """none,8bit,4bit,int8wo,int4wo on a kernel-friendly tiny model: every variant without errors and
    labelled as it ran; flips both ways, McNemar, KL and per-domain sensitivity in sweep.json equal
    brute-force loops over the stored samples."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("torchao")
    from helpers import sharpened_tiny_dir

    model = sharpened_tiny_dir(tmp_path_factory, "qwen2.5-vl", hidden_size=256, vision_hidden_size=128)
    out = tmp_path_factory.mktemp("qsweep") / "sweep"
    quants = ["none", "8bit", "4bit", "int8wo", "int4wo"]
    done = CliRunner().invoke(app, ["sweep", "--model", str(model), "--quant", ",".join(quants), "--data",
                                    str(synthetic_parquet), "--limit", "12", "--device", "cpu", "--out", str(out),
                                    "--bootstrap", "100", "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "MatMul8bitLt" not in done.output
    summary = json.loads((out / "sweep.json").read_text())
    names = [f"quant-{q}" for q in quants]
    assert [v["name"] for v in summary["variants"]] == names
    assert [v["quant_label"] for v in summary["variants"]] == quants
    samples = {}
    for name, quant in zip(names, quants):
        results = json.loads((out / name / "results.json").read_text())
        assert results["errors"]["count"] == 0 and results["fingerprint"]["quant"] == quant
        samples[name] = pd.read_parquet(out / name / "samples.parquet")
    assert all(v["model_memory_gib"] < summary["variants"][0]["model_memory_gib"] for v in summary["variants"][1:])
    reference = samples[names[0]].set_index("id")["correct"] > 0.5
    for row in summary["study"]:
        variant = samples[row["name"]].set_index("id")["correct"].reindex(reference.index) > 0.5
        lost, gained = int((reference & ~variant).sum()), int((~reference & variant).sum())
        assert (row["right_to_wrong"], row["wrong_to_right"]) == (lost, gained)
        assert math.isclose(row["mcnemar_p"], _mcnemar_by_hand(lost, gained), rel_tol=1e-9)
        want = _brute_force(samples[names[0]], samples[row["name"]])
        assert math.isclose(row["kl_mean"], want["kl_mean"], rel_tol=1e-9, abs_tol=1e-15)
        assert math.isclose(row["agreement"], want["agreement"])
        assert row["ece"] is not None and row["memory_ratio"] < 1
    assert any(row["kl_mean"] > 0 for row in summary["study"])  # quantization moved the distributions
    assert summary["study"][0]["p_holm"] >= summary["study"][0]["mcnemar_p"]
    # per-domain sensitivity: a loop over domains and questions
    frames = {n: df.set_index("id") for n, df in samples.items()}
    for entry in summary["domain_sensitivity"]["domains"]:
        ids = [i for i, d in frames[names[0]]["domain"].items() if d == entry["domain"]]
        assert entry["n"] == len(ids)
        for name in names:
            accuracy = sum(frames[name].loc[i, "correct"] > 0.5 for i in ids) / len(ids)
            assert math.isclose(entry["accuracy"][name], accuracy)
    worst = [e["worst_delta"] for e in summary["domain_sensitivity"]["domains"]]
    assert worst == sorted(worst)  # most sensitive first
    for name in ("report.html", "report.md"):
        assert "Quantization study" in (out / name).read_text()
