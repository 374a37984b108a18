"""The two contracts at work: requests carry every setting that changes an answer (so the cache
key does), one loader serves every path, and what a family does not declare is refused at
start-up, before any weights load, writing nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import run_cli
from test_famma import MOCK
from test_finmtm import write_fixtures

from finbench.config.specs import RunConfig
from finbench.core.types import OPEN
from finbench.offline import famma_synthetic
from finbench.runner.engine import run_benchmark


def _run(tiny_model, tiny_qwen_dir, benchmark, data, out, **overrides):
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark=benchmark, data=str(data), out=str(out), dtype="float32",
                       device="cpu", bootstrap=0, **overrides)
    return run_benchmark(config, tiny_model, show_progress=False)


@pytest.fixture(scope="module")
def famma_data(tmp_path_factory):
    return famma_synthetic.write_parquet(tmp_path_factory.mktemp("famma") / "release_basic.parquet",
                                         famma_synthetic.records(MOCK if MOCK.exists() else None))


@pytest.fixture(scope="module")
def finmtm_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("finmtm")
    write_fixtures(folder)
    return folder


@pytest.mark.parametrize("benchmark", ["famma", "finmtm"])
def test_another_generation_budget_recomputes_the_generated_answers_and_only_those(
        benchmark, famma_data, finmtm_data, tiny_model, tiny_qwen_dir, tmp_path):
    """Under --protocol constrained, FAMMA's open questions and FinMTM's sessions are generated
    with the run's budget: a rerun with another --max-new-tokens recomputes exactly those (the
    letter-logit answers come from the cache), and a rerun with the same budget recomputes nothing."""
    data = famma_data if benchmark == "famma" else finmtm_data
    first = _run(tiny_model, tiny_qwen_dir, benchmark, data, tmp_path / "run", max_new_tokens=2)
    samples = first.samples
    usable = samples["error"] == ""
    generated = int((usable & ((samples["kind"] == OPEN))).sum())
    chosen = int((usable & (samples["kind"] != OPEN)).sum())
    assert generated >= 2 and chosen >= 2
    assert (samples.loc[usable & (samples["kind"] == OPEN), "n_generated_tokens"] <= 2 * 3).all()
    again = _run(tiny_model, tiny_qwen_dir, benchmark, data, tmp_path / "run", max_new_tokens=5)
    assert (again.results["n_computed"], again.results["n_cached"]) == (generated, chosen)
    same = _run(tiny_model, tiny_qwen_dir, benchmark, data, tmp_path / "run", max_new_tokens=5)
    assert same.results["n_computed"] == 0
    kinds = again.results["decoding"]["requests"]
    assert any(kind.startswith(("generate/5/", "session/5/")) for kind in kinds), kinds


def test_identical_requests_are_computed_once(famma_data, tiny_model, tiny_qwen_dir, tmp_path):
    """FAMMA's official protocol asks all the sub-questions of a main question in one call: they
    make one request, so one generation, and each reads its own answer from it."""
    result = _run(tiny_model, tiny_qwen_dir, "famma", famma_data, tmp_path / "run", protocol="official",
                  max_new_tokens=3)
    samples = result.samples[result.samples["error"] == ""]
    groups = samples.groupby(["language", "main_question_id"])["sample_key"].nunique()
    assert (groups == 1).all() and (samples.groupby(["language", "main_question_id"]).size() > 1).any()
    assert len(set(samples["sample_key"])) < len(samples)
    assert samples.groupby("sample_key")["raw_output"].nunique().eq(1).all()


def test_every_loading_path_goes_through_one_loader_with_device_map_and_the_rank_device(
        tiny_qwen_dir, synthetic_parquet, tmp_path, monkeypatch):
    """A two-benchmark run (one model, loaded once) loads with --device-map and, under a
    launcher, on the rank's own GPU: the stubbed loader records the call and stops the run."""
    import torch

    import finbench
    import finbench.models
    from finbench.runner import distributed

    calls = []

    class Stop(Exception):
        pass

    def recording_loader(source, spec, **resolved):
        calls.append((source, spec, resolved))
        raise Stop

    monkeypatch.setattr(finbench.models, "load_model", recording_loader)
    monkeypatch.setattr(distributed, "world_from_env", lambda: distributed.World(rank=1, size=2, local_rank=1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    famma = famma_synthetic.write_parquet(tmp_path / "famma.parquet", famma_synthetic.records(None))
    with pytest.raises(Stop):
        finbench.evaluate(str(tiny_qwen_dir), "finmme,famma", data={"finmme": str(synthetic_parquet), "famma": str(famma)},
                          out=tmp_path / "multi", device_map="auto", revision="main", dtype="float32")
    assert len(calls) == 1
    source, spec, resolved = calls[0]
    assert source == str(tiny_qwen_dir)
    assert resolved["device"] == "cuda:1" and spec.device_map == "auto" and spec.revision == "main"  # the rank's GPU
    assert spec.dtype == "float32" and not (tmp_path / "multi").exists()


def test_a_multi_benchmark_run_with_a_loading_option_runs_every_benchmark(
        tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    """The model is loaded once with --chat-template; each benchmark's run is then given that
    model with the same option, which is not refused. A model loaded elsewhere still is."""
    import finbench
    from finbench.runner.startup import given_model

    template = tmp_path / "template.jinja"
    source = tiny_qwen_dir / "chat_template.jinja"
    template.write_text(source.read_text() if source.exists()
                        else json.loads((tiny_qwen_dir / "chat_template.json").read_text())["chat_template"])
    famma = famma_synthetic.write_parquet(tmp_path / "famma.parquet", famma_synthetic.records(None))
    result = finbench.evaluate(str(tiny_qwen_dir), "finmme,famma", data={"finmme": str(synthetic_parquet),
                               "famma": str(famma)}, out=tmp_path / "multi", chat_template=str(template), limit=2,
                               bootstrap=0, max_new_tokens=2, show_progress=False)
    assert set(result.runs) == {"finmme", "famma"}
    assert all(len(run.samples) == 2 and (run.samples["error"] == "").all() for run in result.runs.values())
    with pytest.raises(ValueError, match="chat_template: these apply when finbench loads the model"):
        given_model(RunConfig.flat(model=str(tiny_qwen_dir), chat_template=str(template)), tiny_model)


def test_an_option_the_family_does_not_declare_is_refused_before_the_weights_load(
        tiny_qwen_dir, synthetic_parquet, tmp_path, monkeypatch):
    from finbench.models.qwen2_5_vl import Qwen25VL

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(Qwen25VL, "load", classmethod(no_weights))
    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), out=str(tmp_path / "run"), think_budget=4)
    with pytest.raises(ValueError, match=r"^--think-budget 4: qwen2\.5-vl has no thinking block$"):
        run_benchmark(config, show_progress=False)
    assert not (tmp_path / "run").exists()


def test_the_cli_refuses_it_in_one_line_exit_2_writing_nothing(tiny_qwen_dir, synthetic_parquet, tmp_path):
    out = tmp_path / "run"
    done = run_cli("run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--out", str(out),
                   "--think-budget", "4", "--no-progress")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["error: --think-budget 4: qwen2.5-vl has no thinking block"], done.stderr
    assert not out.exists()


def test_a_configuration_error_found_after_loading_writes_nothing(tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                                   tmp_path):
    """The loaded checkpoint's own checks (here: the vocabulary) come before the run folder."""
    class NoLetters:
        def __init__(self, model):
            self._model = model

        def single_token_ids(self, texts):
            raise ValueError("'A' is 2 tokens; constrained decoding needs it to be a single token")

        def __getattr__(self, name):
            return getattr(self._model, name)

    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), out=str(tmp_path / "run"), limit=2)
    with pytest.raises(ValueError, match="single token"):
        run_benchmark(config, NoLetters(tiny_model), show_progress=False)
    assert not (tmp_path / "run").exists()


def test_a_family_s_image_limit_makes_a_per_sample_error(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path):
    class NoImages:
        def __init__(self, model):
            self._model = model
            self.capabilities = dataclasses.replace(model.capabilities, max_images=0)

        def __getattr__(self, name):
            return getattr(self._model, name)

    result = _run(NoImages(tiny_model), tiny_qwen_dir, "finmme", synthetic_parquet, tmp_path / "run", limit=3)
    assert (result.samples["error"] == "too many images: 1; this model takes at most 0").all()


def test_the_demo_answers_are_those_of_before_the_redesign(finmme_demo):
    """`finbench demo` (tiny random Qwen2.5-VL, 72 synthetic FinMME items) gives the answers and
    option probabilities main gave before requests became data (fixture recorded then)."""
    reference = json.loads((Path(__file__).parent / "fixtures" / "demo-answers.json").read_text())  # main @ 95ded3b
    out, done = finmme_demo
    assert done.returncode == 0, done.stderr[-2000:]
    samples = pd.read_parquet(out / "samples.parquet").set_index("id")
    assert sorted(samples.index) == sorted(r["id"] for r in reference)
    for row in reference:
        assert samples.loc[row["id"], "answer"] == row["answer"], row["id"]
        probs = list(samples.loc[row["id"], "option_probs"])
        assert len(probs) == len(row["probs"]) and max([abs(a - b) for a, b in zip(probs, row["probs"])] + [0]) <= 1e-4
