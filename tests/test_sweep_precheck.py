"""A quantization sweep knows before its first variant runs which formats would leave the model
mostly unquantized (models/quant_share.py, from the module tree on the meta device), and refuses
them all in one message; a variant that still fails at its load keeps the finished ones.

Reference: the share a real quantization of the tiny model leaves, as the loaded model's
inspection measures it (models/quant.py `inspect_quantization`), not the planning code."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import finbench.app.sweep as sweep_module
from finbench.app.sweep import run_sweep
from finbench.cli import app
from finbench.config.specs import RunConfig
from finbench.models.quant import MIN_QUANTIZED_SHARE, inspect_quantization, quantize_loaded
from finbench.models.quant_share import planned_shares


def _no_model(*args, **kwargs):
    raise AssertionError("a model was loaded: the sweep should have been refused before its first variant")


def test_the_demo_model_with_int4wo_is_refused_before_any_variant(tmp_path, tiny_qwen_dir, synthetic_parquet,
                                                                   monkeypatch):
    monkeypatch.setattr(sweep_module, "_load_or_recorded", _no_model)
    base = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=2, device="cpu", bootstrap=0)
    out = tmp_path / "sweep"
    with pytest.raises(ValueError) as refused:
        run_sweep(base, {"quant": ["none", "int8wo", "int4wo"]}, out)
    message = str(refused.value)
    assert "quant-int4wo (--quant int4wo: would quantize 22%" in message
    assert "quant-int8wo" not in message  # int8wo quantizes every linear layer of the language model
    assert "finbench models make-tiny qwen2.5-vl DIR --quant bf16" in message
    assert not out.exists()  # nothing ran, nothing was written


def test_the_cli_refuses_the_sweep_in_one_line(tmp_path, tiny_qwen_dir, synthetic_parquet, monkeypatch):
    monkeypatch.setattr(sweep_module, "_load_or_recorded", _no_model)
    done = CliRunner().invoke(app, ["sweep", "--model", str(tiny_qwen_dir), "--quant", "none,8bit,int4wo",
                                    "--data", str(synthetic_parquet), "--limit", "2", "--device", "cpu",
                                    "--no-progress", "--out", str(tmp_path / "s")])
    assert done.exit_code == 2, done.output
    text = " ".join(done.output.split())
    assert text.startswith("error: 1 variant(s) would run mostly unquantized") and "quant-int4wo" in text
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("quant", ["int8wo", "int4wo"])
def test_planned_shares_equal_what_a_real_quantization_leaves(tiny_qwen_dir, quant):
    pytest.importorskip("torchao")
    from transformers import AutoModelForImageTextToText

    planned = planned_shares(str(tiny_qwen_dir), [quant])[quant]
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen_dir, dtype=torch.float32)
    quantize_loaded(model, quant, torch.device("cpu"))
    measured = inspect_quantization(model)["language_model_quantized_share"]
    assert planned == measured
    assert (planned < MIN_QUANTIZED_SHARE) == (quant == "int4wo")  # the tiny model's widths are below 128


def test_a_variant_failing_at_its_load_keeps_the_finished_ones(tmp_path, tiny_qwen_dir, synthetic_parquet,
                                                               monkeypatch):
    load = sweep_module._load_or_recorded

    def refuse_float16(config, run_dir, checkpoint=None):
        if config.load.dtype == "float16":
            raise ValueError("float16: refused at its load (what only the loaded weights tell)")
        return load(config, run_dir, checkpoint)

    monkeypatch.setattr(sweep_module, "_load_or_recorded", refuse_float16)
    out = tmp_path / "s"
    done = CliRunner().invoke(app, ["sweep", "--model", str(tiny_qwen_dir), "--dtype", "float32,float16,bfloat16",
                                    "--data", str(synthetic_parquet), "--limit", "2", "--device", "cpu",
                                    "--bootstrap", "0", "--no-progress", "--out", str(out)])
    assert done.exit_code == 1, done.output
    summary = json.loads((out / "sweep.json").read_text())
    assert [v["name"] for v in summary["variants"]] == ["dtype-float32", "dtype-bfloat16"]
    assert summary["failed"] == [{"variant": "dtype-float16",
                                  "error": "float16: refused at its load (what only the loaded weights tell)"}]
    assert "variant dtype-float16 did not run" in " ".join(done.output.split())
    assert (out / "report.html").is_file() and not (out / "dtype-float16").exists()


def test_a_sweep_whose_data_cannot_be_read_is_refused_before_any_variant_loads(tmp_path, tiny_qwen_dir, monkeypatch):
    """No --data: the benchmark's hub set, not in the local cache offline — one line before any model
    loads (it used to be an error after the first variant's model had loaded)."""
    monkeypatch.setattr(sweep_module, "_load_or_recorded", _no_model)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "no-datasets"))
    out = tmp_path / "sweep"
    done = CliRunner().invoke(app, ["sweep", "--model", str(tiny_qwen_dir), "--dtype", "float32,bfloat16", "--device",
                                    "cpu", "--out", str(out), "--no-progress"])
    assert done.exit_code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot load this hub data set" in " ".join(done.stderr.split()), done.stderr
    assert not out.exists()
