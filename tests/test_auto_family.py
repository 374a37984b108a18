"""The generic family (models/auto.py) on tiny offline builds of eight architectures it is tested on:
every FinMME item answered through `finbench run` under both protocols, constrained probabilities
against a plain transformers forward (a full-vocabulary softmax restricted to the option letters),
batch 1 against batch 8, thinking on Gemma 4 and GLM-4.6V, what it refuses, and `models list`."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from helpers import assert_refused_in_one_line, cli, finmme_request, sharpened_tiny_dir

from finbench.offline.tiny import tiny_family_available

ARCHITECTURES = [a for a in ("gemma4", "glm46v", "internvl", "minicpmv4_6", "llama4", "mistral3", "smolvlm",
                             "llava_onevision") if tiny_family_available(a)]
N_ITEMS = 40


@pytest.fixture(scope="session")
def finmme40(tmp_path_factory):
    from finbench.offline.finmme_synthetic import write_parquet

    return write_parquet(tmp_path_factory.mktemp("data40") / "finmme40.parquet", n_items=N_ITEMS, seed=1)


@pytest.fixture(scope="module", params=ARCHITECTURES)
def arch_dir(request, tmp_path_factory):
    return request.param, sharpened_tiny_dir(tmp_path_factory, request.param)


def _run(model, data, out, *args):
    done = cli("run", "--model", str(model), "--data", str(data), "--out", str(out), "--device", "cpu",
               "--dtype", "float32", "--bootstrap", "0", "--no-progress", *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), pd.read_parquet(out / "samples.parquet")


def _assert_same_probabilities(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Option probabilities (choice items) and answer confidences (every item) within 1e-5."""
    for x, y in zip(a["option_probs"], b["option_probs"]):
        assert len(x) == len(y) and all(abs(p - q) <= 1e-5 for p, q in zip(x, y))
    assert all(abs(p - q) <= 1e-5 for p, q in zip(a["confidence"], b["confidence"]))


def _invoke(*args):
    """The CLI in this process as typer's runner answers (exit_code, output): start-up refusals."""
    from typer.testing import CliRunner

    from finbench.cli import app

    return CliRunner().invoke(app, list(args))


def _reference_option_probs(model, question) -> list[float]:
    """A plain forward of the adapter's prompt through the transformers module: the whole
    vocabulary's softmax at the last position, each option's two spellings added, renormalised
    over the item's options (what the constrained decoder must give)."""
    request = finmme_request(question)
    inputs = model.processor(text=[model.prompt_text(request)], images=[list(request.images)] or None,
                             return_tensors="pt")
    inputs = {k: v.to(model.dtype) if v.is_floating_point() else v for k, v in inputs.items() if torch.is_tensor(v)}
    with torch.no_grad():
        probs = model.model(**inputs).logits[0, -1].double().softmax(-1)
    letters = [chr(ord("A") + i) for i in range(len(question.options))]
    per_option = torch.stack([probs[model.single_token_ids([c])[0]] + probs[model.single_token_ids([" " + c])[0]]
                              for c in letters])
    return (per_option / per_option.sum()).tolist()


@pytest.mark.slow
def test_every_item_answered_and_constrained_probabilities_equal_a_plain_forward(arch_dir, finmme40, tmp_path):
    """All 40 items under constrained and official with no error; batch 8 (the CPU default) equals
    batch 1; the first single-choice items' option probabilities equal the plain forward's."""
    from finbench.benchmarks import finmme
    from finbench.models import load_model

    arch, model_dir = arch_dir
    results, constrained = _run(model_dir, finmme40, tmp_path / "constrained")
    assert results["fingerprint"]["family"] == "auto" or arch == "internvl"
    assert len(constrained) == N_ITEMS and (constrained["error"] == "").all(), constrained["error"].tolist()
    _, official = _run(model_dir, finmme40, tmp_path / "official", "--protocol", "official", "--max-new-tokens", "6")
    assert len(official) == N_ITEMS and (official["error"] == "").all(), official["error"].tolist()
    assert (official["n_generated_tokens"] <= 6).all() and (official["n_generated_tokens"] > 0).all()
    _, one_by_one = _run(model_dir, finmme40, tmp_path / "b1", "--batch-size", "1", "--limit", "12")
    batched = constrained.set_index("id").loc[one_by_one["id"]]
    assert list(batched["answer"]) == list(one_by_one["answer"])
    _assert_same_probabilities(batched, one_by_one)

    model = load_model(str(model_dir), dtype="float32", device="cpu", family="auto")
    questions = {q.id: q for q in finmme.load_questions(finmme40)}
    singles = constrained[constrained["kind"] == "single"].head(3)
    assert len(singles) == 3
    for qid, probs in zip(singles["id"], singles["option_probs"]):
        want = _reference_option_probs(model, questions[qid])
        assert max(abs(x - y) for x, y in zip(probs, want)) <= 1e-5, (qid, probs, want)


@pytest.mark.slow
@pytest.mark.parametrize("arch", [a for a in ("gemma4", "glm46v") if a in ARCHITECTURES])
def test_thinking_reasons_within_the_budget_then_answers(arch, tmp_path_factory, finmme40, tmp_path):
    model_dir = sharpened_tiny_dir(tmp_path_factory, arch)
    results, samples = _run(model_dir, finmme40, tmp_path / "think", "--think-budget", "6", "--limit", "8")
    assert (samples["error"] == "").all() and len(samples) == 8
    assert results["thinking"]["budget"] == 6
    assert (samples["reasoning_tokens"] <= 6).all() and (samples["reasoning_tokens"] > 0).any()
    opener = {"gemma4": "<|channel>thought\n", "glm46v": "<think>\n"}[arch]
    switched = {"gemma4": "<|think|>", "glm46v": "<|assistant|><think>\n"}[arch]
    assert all(p.endswith(opener) or opener in p for p in samples["prompt"]) and all(switched in p for p in
                                                                                    samples["prompt"])
    single = samples[samples["kind"] == "single"]
    assert all(len(a) == 1 for a in single["answer"])  # the constrained read after the closed block


@pytest.mark.slow
def test_thinking_vs_instruct_sweep_on_gemma4(tmp_path_factory, finmme40, tmp_path):
    model_dir = sharpened_tiny_dir(tmp_path_factory, "gemma4")
    out = tmp_path / "sweep"
    done = cli("sweep", "--model", str(model_dir), "--think-budget", "0,6", "--data", str(finmme40), "--limit", "8",
               "--device", "cpu", "--out", str(out), "--bootstrap", "50", "--no-progress")
    assert done.returncode == 0, done.stdout[-3000:]
    summary = json.loads((out / "sweep.json").read_text())
    assert [v["name"] for v in summary["variants"]] == ["think_budget-0", "think_budget-6"]
    instruct, thinking = (pd.read_parquet(out / v / "samples.parquet") for v in ("think_budget-0", "think_budget-6"))
    assert (instruct["reasoning_tokens"] == 0).all() and (thinking["reasoning_tokens"] > 0).any()
    assert "<|think|>" not in instruct["prompt"].iloc[0] and "<|think|>" in thinking["prompt"].iloc[0]
    assert (instruct["error"] == "").all() and (thinking["error"] == "").all()


@pytest.mark.slow
def test_quantization_sweep_on_a_wide_gemma4(tmp_path_factory, finmme40):
    """none, 8bit (bitsandbytes) and int8wo (torchao) on a Gemma 4 wide enough for the kernels:
    each variant labelled as it ran, without errors, smaller than the unquantized one."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("torchao")
    model_dir = sharpened_tiny_dir(tmp_path_factory, "gemma4", hidden_size=256, vision_hidden_size=128)
    out = tmp_path_factory.mktemp("gemma4-quant") / "sweep"
    quants = ["none", "8bit", "int8wo"]
    done = cli("sweep", "--model", str(model_dir), "--quant", ",".join(quants), "--data", str(finmme40), "--limit", "8",
               "--device", "cpu", "--out", str(out), "--bootstrap", "50", "--no-progress")
    assert done.returncode == 0, done.stdout[-3000:]
    summary = json.loads((out / "sweep.json").read_text())
    assert [v["quant_label"] for v in summary["variants"]] == quants
    for quant in quants:
        results = json.loads((out / f"quant-{quant}" / "results.json").read_text())
        assert results["errors"]["count"] == 0 and results["fingerprint"]["quant"] == quant
        assert results["fingerprint"]["family"] == "auto"
    assert all(v["model_memory_gib"] < summary["variants"][0]["model_memory_gib"] for v in summary["variants"][1:])


def test_thinking_refused_in_one_line_where_the_template_has_no_switch(tmp_path_factory, finmme40, tmp_path):
    model_dir = sharpened_tiny_dir(tmp_path_factory, "llava_onevision")
    out = tmp_path / "out"
    done = _invoke("run", "--model", str(model_dir), "--data", str(finmme40), "--out", str(out), "--think-budget", "8",
               "--device", "cpu", "--no-progress")
    assert_refused_in_one_line(done, "--think-budget 8: auto has no thinking block", out)


def test_an_architecture_transformers_lacks_is_refused_with_the_release_it_needs(tmp_path_factory, finmme40,
                                                                                 tmp_path, monkeypatch):
    """As on a machine whose transformers predates Gemma 4: the run names the release, before loading."""
    import transformers
    from transformers.models.auto import configuration_auto

    from finbench.models.auto import INTRODUCED

    model_dir = sharpened_tiny_dir(tmp_path_factory, "gemma4")
    names = {k: v for k, v in configuration_auto.CONFIG_MAPPING_NAMES.items() if k != "gemma4"}
    monkeypatch.setattr(configuration_auto, "CONFIG_MAPPING_NAMES", names)
    out = tmp_path / "out"
    done = _invoke("run", "--model", str(model_dir), "--data", str(finmme40), "--out", str(out), "--device", "cpu",
                   "--no-progress")
    assert_refused_in_one_line(done, f"model_type 'gemma4' needs transformers >= {INTRODUCED['gemma4']} "
                                     f"(installed {transformers.__version__})", out)


def test_family_option_names_a_family_and_refuses_a_mismatch(tiny_qwen_dir, finmme40, tmp_path):
    out = tmp_path / "out"
    done = _invoke("run", "--model", str(tiny_qwen_dir), "--family", "internvl", "--data", str(finmme40),
                   "--out", str(out), "--device", "cpu", "--no-progress")
    assert_refused_in_one_line(done, "--family internvl: its adapter is for model_type internvl", out)
    done = _invoke("run", "--model", str(tiny_qwen_dir), "--family", "nope", "--data", str(finmme40),
                   "--out", str(out), "--device", "cpu", "--no-progress")
    assert_refused_in_one_line(done, "--family nope: expected one of", out)


def test_auto_equals_the_specific_family_on_qwen25_vl(tiny_qwen_dir, finmme40, tmp_path):
    """The same checkpoint through --family auto and through qwen2.5-vl: the same answers and
    option probabilities (the generic path is the model's own generation code, not a copy)."""
    generic, auto = _run(tiny_qwen_dir, finmme40, tmp_path / "auto", "--family", "auto", "--limit", "8")
    specific, own = _run(tiny_qwen_dir, finmme40, tmp_path / "own", "--limit", "8")
    assert generic["fingerprint"]["family"] == "auto" and specific["fingerprint"]["family"] == "qwen2.5-vl"
    assert list(auto["answer"]) == list(own["answer"])
    _assert_same_probabilities(auto, own)


def test_models_list_shows_the_generic_family_and_its_tested_architectures():
    done = cli("models", "list")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert any(line.split("│")[1:2] and line.split("│")[1].strip() == "auto" for line in lines), done.stdout
    for arch in ("gemma4", "glm46v", "minicpmv4_6", "llama4", "mistral3", "smolvlm", "llava_onevision"):
        row = next(line for line in lines if line.strip().startswith(f"auto: {arch}"))
        assert "thinking" in row and "quantization" in row
    gemma = next(line for line in lines if line.strip().startswith("auto: gemma4"))
    assert "thinking yes" in gemma
