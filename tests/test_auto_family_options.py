"""The generic family's options (models/auto.py): thinking on Gemma 4 and GLM-4.6V, a thinking vs
instruct sweep and a quantization sweep on Gemma 4, what it refuses at start-up (thinking without a
template switch, an architecture the installed transformers lacks, a mismatched --family), the same
answers as qwen2.5-vl on its checkpoint, and `finbench models list`."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from auto_helpers import ARCHITECTURES, assert_same_probabilities, invoke, run, write_finmme40
from helpers import assert_refused_in_one_line, cli, sharpened_tiny_dir


@pytest.fixture(scope="module")
def finmme40(tmp_path_factory):
    return write_finmme40(tmp_path_factory.mktemp("data40"))


@pytest.mark.slow
@pytest.mark.parametrize("arch", [a for a in ("gemma4", "glm46v") if a in ARCHITECTURES])
def test_thinking_reasons_within_the_budget_then_answers(arch, tmp_path_factory, finmme40, tmp_path):
    model_dir = sharpened_tiny_dir(tmp_path_factory, arch)
    results, samples = run(model_dir, finmme40, tmp_path / "think", "--think-budget", "6", "--limit", "8")
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
    done = invoke("run", "--model", str(model_dir), "--data", str(finmme40), "--out", str(out), "--think-budget", "8",
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
    done = invoke("run", "--model", str(model_dir), "--data", str(finmme40), "--out", str(out), "--device", "cpu",
                   "--no-progress")
    assert_refused_in_one_line(done, f"model_type 'gemma4' needs transformers >= {INTRODUCED['gemma4']} "
                                     f"(installed {transformers.__version__})", out)


def test_family_option_names_a_family_and_refuses_a_mismatch(tiny_qwen_dir, finmme40, tmp_path):
    out = tmp_path / "out"
    done = invoke("run", "--model", str(tiny_qwen_dir), "--family", "internvl", "--data", str(finmme40),
                   "--out", str(out), "--device", "cpu", "--no-progress")
    assert_refused_in_one_line(done, "--family internvl: its adapter is for model_type internvl", out)
    done = invoke("run", "--model", str(tiny_qwen_dir), "--family", "nope", "--data", str(finmme40),
                   "--out", str(out), "--device", "cpu", "--no-progress")
    assert_refused_in_one_line(done, "--family nope: expected one of", out)


def test_auto_equals_the_specific_family_on_qwen25_vl(tiny_qwen_dir, finmme40, tmp_path):
    """The same checkpoint through --family auto and through qwen2.5-vl: the same answers and
    option probabilities (the generic path is the model's own generation code, not a copy)."""
    generic, auto = run(tiny_qwen_dir, finmme40, tmp_path / "auto", "--family", "auto", "--limit", "8")
    specific, own = run(tiny_qwen_dir, finmme40, tmp_path / "own", "--limit", "8")
    assert generic["fingerprint"]["family"] == "auto" and specific["fingerprint"]["family"] == "qwen2.5-vl"
    assert list(auto["answer"]) == list(own["answer"])
    assert_same_probabilities(auto, own)


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


@pytest.mark.slow
@pytest.mark.parametrize("arch", [a for a in ("gemma4", "glm46v") if a in ARCHITECTURES])
def test_decoding_loop_equals_transformers_generate_and_survives_dropping_rows(arch, tmp_path_factory, finmme40,
                                                                              monkeypatch):
    """The generic family's decode steps (Gemma 4's sliding cache, GLM-4.6V's 4-row M-RoPE
    positions) on a batch with images: the greedy loop
    equals transformers' own `generate`, and dropping finished rows mid-way (the thinking loop's
    compaction) changes no token."""
    import torch
    from helpers import finmme_request

    from finbench.benchmarks import finmme
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.models.base import DecodeState
    from finbench.models.compaction import greedy_ids

    model = load_model(str(sharpened_tiny_dir(tmp_path_factory, arch)), LoadSpec(dtype="float32", device="cpu"))
    requests = [finmme_request(q, protocol="official") for q in finmme.load_questions(finmme40)[:4]]
    inputs = model.to_device(model.prepare(requests))
    free = greedy_ids(model, inputs, 8, [-1], every=0)
    # a token one row emits early and no other row ever does: that row stops there, the others run on
    stop = next((int(token) for row in range(free.shape[0]) for token in free[row, 1:5]
                 if int(token) not in set(torch.cat([free[:row], free[row + 1:]]).flatten().tolist())), None)
    if stop is None:
        pytest.skip("no row emits a token of its own early")
    widths, select = [], DecodeState.select
    monkeypatch.setattr(DecodeState, "select", lambda self, rows: widths.append(len(rows)) or select(self, rows))
    compacted = greedy_ids(model, inputs, 8, [stop], every=2)
    assert widths and widths[0] < len(requests)
    assert torch.equal(compacted, greedy_ids(model, inputs, 8, [stop], every=0))
    with torch.no_grad():
        reference = model.model.generate(**model.model_inputs(inputs), max_new_tokens=8, do_sample=False,
                                         eos_token_id=[stop], pad_token_id=model.pad_token_id)
    reference = reference[:, inputs["input_ids"].shape[1]:]
    assert torch.equal(compacted, reference[:, :compacted.shape[1]])
