"""Quantization: the FP8 kernels against dequantized fp32 matmuls, every on-the-fly format and every
pre-quantized tiny checkpoint loaded (or refused in one line) on the CPU, the truth of the label
(what the modules really hold), and library warnings kept out of the console.

References: FP8 products are checked against the same numbers dequantized and multiplied in fp32
(and block dequantization against a loop over blocks); a dequantized FP8 checkpoint against
transformers' own Fp8Dequantize; quantized models against the unquantized one they came from.
CUDA-only paths (FP8 W8A8, the cuBLAS blockwise kernel) are skipped without a capable GPU."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from finbench.cli import app
from finbench.config.specs import LoadSpec
from finbench.models import load_model
from finbench.models.fp8 import (FP8, Fp8BlockLinear, Fp8Linear, block_matmul, dequantize_blocks, quantize_blocks,
                                 quantize_groups, quantize_rows)
from finbench.models.quant import inspect_quantization, untouched_refusal

CUDA_FP8 = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.fixture(scope="session")
def tiny_quant(tmp_path_factory):
    """make_tiny_quantized(qwen2.5-vl, FORMAT), each built once, on first use."""
    from finbench.offline.tiny_quant import make_tiny_quantized

    root, built = tmp_path_factory.mktemp("quant-models"), {}

    def folder(fmt: str):
        if fmt not in built:
            built[fmt] = make_tiny_quantized("qwen2.5-vl", root / fmt, fmt)
        return built[fmt]

    return folder


def _prefill(model, ids=((5, 17, 3, 99, 42, 7),)):
    ids = torch.tensor(ids, device=model.device)
    hidden, _ = model.prefill({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return hidden.float()


# ---- kernels ------------------------------------------------------------------------------------------
def test_block_dequantization_equals_a_loop_over_blocks_and_rejects_ragged_shapes():
    torch.manual_seed(0)
    w = torch.randn(256, 384) * 3
    q, scale_inv = quantize_blocks(w)
    assert q.dtype == FP8 and scale_inv.shape == (2, 3) and scale_inv.dtype == torch.float32
    want = torch.empty(256, 384)
    for i in range(2):
        for j in range(3):
            block = q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].float()
            want[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = block * scale_inv[i, j]
            # each block's largest magnitude lands on the FP8 maximum (448)
            assert block.abs().max() == 448
    assert torch.equal(dequantize_blocks(q, scale_inv), want)
    assert (want - w).abs().max() <= 0.07 * w.abs().max()  # e4m3: 3 mantissa bits
    with pytest.raises(ValueError, match="does not split"):
        quantize_blocks(torch.randn(200, 128))


def test_block_fp8_matmul_equals_the_dequantized_matmul_in_fp32():
    torch.manual_seed(1)
    x, w = torch.randn(37, 512), torch.randn(384, 512)
    w_fp8, w_scale_inv = quantize_blocks(w)
    x_fp8, x_scale = quantize_groups(x)
    x_deq = (x_fp8.float().reshape(37, 4, 128) * x_scale[:, :, None]).reshape(37, 512)
    want = x_deq @ dequantize_blocks(w_fp8, w_scale_inv).t()
    got = block_matmul(x_fp8, x_scale, w_fp8, w_scale_inv, (128, 128), torch.float32, "kblocks")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    # the layer around it: bf16 out, bias, any leading shape; close to the unquantized product
    layer = Fp8BlockLinear(w_fp8, w_scale_inv, (128, 128), torch.ones(384), "kblocks")
    out = layer(x.reshape(37, 1, 512)).reshape(37, 384)
    torch.testing.assert_close(out, (want + 1).to(torch.bfloat16).float(), rtol=1e-2, atol=0.2)
    assert (out - (x @ w.t() + 1)).norm() / (x @ w.t()).norm() < 0.05


def test_rowwise_fp8_linear_equals_the_dequantized_matmul_in_fp32():
    torch.manual_seed(2)
    linear = torch.nn.Linear(256, 128)
    x = torch.randn(3, 5, 256)
    layer = Fp8Linear.from_linear(linear)
    assert layer.weight.dtype == FP8 and layer.weight_scale.shape == (1, 128)
    w_fp8, w_scale = quantize_rows(linear.weight.detach())
    x_fp8, x_scale = quantize_rows(x.reshape(15, 256))
    want = (x_fp8.float() * x_scale) @ (w_fp8.float() * w_scale).t() + linear.bias.detach().to(torch.bfloat16).float()
    got = layer(x).reshape(15, 128)
    torch.testing.assert_close(got, want.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
    reference = linear(x).reshape(15, 128).detach()
    assert (got - reference).norm() / reference.norm() < 0.05


@pytest.mark.skipif(not HOPPER, reason="the cuBLAS blockwise FP8 kernel needs a Hopper GPU (capability 9.0)")
def test_blockwise_cublas_kernel_equals_the_k_slice_sum_on_hopper():
    from finbench.models.fp8 import block_kernel

    torch.manual_seed(3)
    x, w = torch.randn(256, 512, device="cuda"), torch.randn(768, 512, device="cuda")
    w_fp8, w_scale_inv = quantize_blocks(w)
    x_fp8, x_scale = quantize_groups(x)
    slices = block_matmul(x_fp8, x_scale, w_fp8, w_scale_inv, (128, 128), torch.float32, "kblocks")
    assert block_kernel("cuda") in ("blockwise", "kblocks")
    if block_kernel("cuda") == "blockwise":
        one_call = block_matmul(x_fp8, x_scale, w_fp8, w_scale_inv, (128, 128), torch.float32, "blockwise")
        torch.testing.assert_close(one_call, slices, rtol=2e-2, atol=2e-2 * float(slices.abs().max()))


@pytest.mark.skipif(not CUDA_FP8, reason="FP8 W8A8 needs a CUDA GPU of capability >= 8.9")
def test_fp8_w8a8_on_the_gpu_is_close_to_bf16(tiny_quant):
    bf16 = load_model(str(tiny_quant("bf16")), LoadSpec(device="cuda"))
    fp8 = load_model(str(tiny_quant("bf16")), LoadSpec(device="cuda", quant="fp8"))
    report = fp8.fingerprint()["quantization"]
    assert fp8.fingerprint()["quant"] == "fp8" and report["parts"]["language_model"]["types"] == {"Fp8Linear(fp8)": 14}
    a, b = _prefill(bf16), _prefill(fp8)
    assert (a - b).norm() / a.norm() < 0.1


# ---- on-the-fly formats on the CPU ---------------------------------------------------------------------
@pytest.mark.parametrize("quant, kind, bits", [("8bit", "bitsandbytes.Linear8bitLt", "8"),
                                               ("4bit", "bitsandbytes.Linear4bit(nf4)", "4"),
                                               ("int8wo", "torchao.Int8Tensor", "8"),
                                               ("int4wo", "torchao.IntxUnpackedToInt8Tensor", "4")])
def test_each_format_quantizes_the_language_model_only_and_says_so(tiny_quant, quant, kind, bits):
    pytest.importorskip("bitsandbytes" if quant.endswith("bit") else "torchao")
    folder = str(tiny_quant("bf16"))
    reference = load_model(folder, LoadSpec(dtype="float32", device="cpu"))
    model = load_model(folder, LoadSpec(dtype="float32", device="cpu", quant=quant))
    fingerprint = model.fingerprint()
    assert fingerprint["quant"] == quant
    parts = fingerprint["quantization"]["parts"]
    assert parts["language_model"] == {"layers": 14, "quantized": 14, "types": {kind: 14}, "bits": {bits: 14}}
    assert parts["vision"]["quantized"] == 0 and parts["lm_head"]["quantized"] == 0  # bitsandbytes quantized the
    assert fingerprint["quantization"]["language_model_quantized_share"] == 1.0      # tower before the skip fix
    assert model.memory_footprint() < reference.memory_footprint()
    a, b = _prefill(reference), _prefill(model)
    assert 0 < (a - b).norm() / a.norm() < (0.05 if bits == "8" else 0.3)
    assert "quantization" not in reference.fingerprint()  # unquantized keys are unchanged


def test_quant_vision_quantizes_the_vision_tower_too(tiny_quant):
    pytest.importorskip("torchao")
    model = load_model(str(tiny_quant("bf16")),
                       LoadSpec(dtype="float32", device="cpu", quant="int8wo", quant_vision=True))
    parts = model.fingerprint()["quantization"]["parts"]
    assert parts["vision"] == {"layers": 12, "quantized": 12, "types": {"torchao.Int8Tensor": 12}, "bits": {"8": 12}}
    assert parts["lm_head"]["quantized"] == 0


def test_a_quantization_that_leaves_fused_experts_alone_is_refused(tmp_path):
    """bitsandbytes quantizes nn.Linear only: on Qwen3-VL-MoE the fused 3-D experts stay bf16."""
    pytest.importorskip("bitsandbytes")
    from finbench.offline.tiny import make_tiny, tiny_family_available
    from transformers import AutoModelForImageTextToText

    from finbench.models.quant import QuantPlan, load_kwargs

    if not tiny_family_available("qwen3-vl-moe"):
        pytest.skip("this transformers has no Qwen3-VL-MoE")
    folder = make_tiny("qwen3-vl-moe", tmp_path / "moe", hidden_size=128)
    cpu = torch.device("cpu")
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32, **load_kwargs("8bit", cpu))
    report = inspect_quantization(model)
    lm = report["parts"]["language_model"]
    assert lm["quantized"] > 0 and lm["unquantized_tensors"] == {"down_proj": 2, "gate_up_proj": 2}
    assert report["language_model_quantized_share"] < 0.5
    assert "only" in untouched_refusal(report, "8bit") and "gate_up_proj ×2" in untouched_refusal(report, "8bit")
    with pytest.raises(ValueError, match="would not be true"):
        QuantPlan("8bit", None, {}).finish(model, cpu)


def test_fp8_and_missing_packages_are_refused_before_any_weights_load(tiny_quant, tmp_path, monkeypatch):
    folder = str(tiny_quant("bf16"))
    if not CUDA_FP8:
        with pytest.raises(ValueError, match=r"--quant fp8: FP8 matmuls need a CUDA GPU of compute capability >= 8.9"):
            load_model(folder, LoadSpec(device="cpu", quant="fp8"))
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(ValueError, match=r"--quant int8wo needs torchao: pip install 'finbench\[quant\]'"):
        load_model(folder, LoadSpec(device="cpu", quant="int8wo"))


# ---- pre-quantized checkpoints -------------------------------------------------------------------------
def test_fp8_block_folder_is_in_the_released_layout(tiny_quant):
    from safetensors import safe_open

    folder = tiny_quant("fp8-block128")
    config = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert {k: config[k] for k in ("quant_method", "fmt", "activation_scheme", "weight_block_size")} == \
        {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    assert "lm_head" in config["modules_to_not_convert"]
    assert any(m.startswith("visual.") for m in config["modules_to_not_convert"])
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        q = handle.get_tensor("model.layers.0.mlp.down_proj.weight")
        scale_inv = handle.get_tensor("model.layers.0.mlp.down_proj.weight_scale_inv")
        assert handle.get_tensor("lm_head.weight").dtype == torch.bfloat16
        assert "lm_head.weight_scale_inv" not in handle.keys()
    assert q.dtype == FP8 and q.shape == (256, 512) and scale_inv.shape == (2, 4) and scale_inv.dtype == torch.float32


def test_a_cached_hub_id_reads_its_unquantized_layers_from_its_snapshot(tiny_quant, tmp_path, monkeypatch):
    """A released FP8 checkpoint named by hub id: the layers stored without a scale are read from
    the local cache's snapshot, as from a folder (an empty list would convert them too)."""
    import shutil

    from huggingface_hub import constants

    from finbench.models.quant_checkpoint import unquantized_layers

    folder = tiny_quant("fp8-block128")
    repo = tmp_path / "hub" / "models--someone--tiny-fp8"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    shutil.copytree(folder, repo / "snapshots" / ("0" * 40))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    from_folder = unquantized_layers(str(folder))
    assert from_folder and "lm_head" in from_folder
    assert unquantized_layers("someone/tiny-fp8") == from_folder


def test_fp8_checkpoint_on_cpu_is_refused_unless_allowed_and_then_labelled(tiny_quant):
    from safetensors import safe_open

    folder = str(tiny_quant("fp8-block128"))
    if CUDA_FP8:
        pytest.skip("a GPU with FP8 runs the checkpoint in FP8")
    with pytest.raises(ValueError, match="fp8-block128 and FP8 matmuls need a CUDA GPU.*--allow-dequantized"):
        load_model(folder, LoadSpec(dtype="float32", device="cpu"))
    model = load_model(folder, LoadSpec(dtype="float32", device="cpu", allow_dequantized=True))
    fingerprint = model.fingerprint()
    assert fingerprint["quant"] == "prequantized:fp8-block128+dequantized-float32"
    assert fingerprint["quantization"]["format"]["dequantized"] is True
    assert fingerprint["quantization"]["parts"]["language_model"]["quantized"] == 0  # the truth: nothing is fp8
    # transformers' Fp8Dequantize (the independent reference) gives what dequantize_blocks gives
    with safe_open(str(tiny_quant("fp8-block128") / "model.safetensors"), "pt") as handle:
        q = handle.get_tensor("model.layers.1.self_attn.q_proj.weight")
        scale_inv = handle.get_tensor("model.layers.1.self_attn.q_proj.weight_scale_inv")
    loaded = model.model.model.language_model.layers[1].self_attn.q_proj.weight
    torch.testing.assert_close(loaded.float(), dequantize_blocks(q, scale_inv), rtol=0, atol=1e-6)


def test_fp8_layers_are_served_by_the_block_kernel_not_the_hub_kernel():
    """transformers' FP8Linear (what a capable GPU loads) is swapped for Fp8BlockLinear with the
    loaded tensors; its output equals the dequantized matmul."""
    from transformers.integrations.finegrained_fp8 import FP8Linear

    from finbench.models.quant_checkpoint import serve_fp8_blocks

    torch.manual_seed(4)
    holder = torch.nn.Module()
    holder.proj = FP8Linear(256, 384, block_size=(128, 128))
    holder.head = torch.nn.Linear(256, 8)
    w = torch.randn(384, 256)
    q, scale_inv = quantize_blocks(w)
    holder.proj.weight.data, holder.proj.weight_scale_inv.data = q, scale_inv
    assert serve_fp8_blocks(holder, (128, 128), torch.device("cpu")) == "kblocks"
    assert isinstance(holder.proj, Fp8BlockLinear) and type(holder.head) is torch.nn.Linear
    assert holder.proj.weight.data_ptr() == q.data_ptr()  # the loaded tensors, not a copy
    x = torch.randn(4, 256)
    x_fp8, x_scale = quantize_groups(x)
    x_deq = (x_fp8.float().reshape(4, 2, 128) * x_scale[:, :, None]).reshape(4, 256)
    want = (x_deq @ dequantize_blocks(q, scale_inv).t()).to(torch.bfloat16).float()
    torch.testing.assert_close(holder.proj(x), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("fmt, label, kind", [
    ("bnb-8bit", "prequantized:bnb-8bit", "bitsandbytes.Linear8bitLt"),
    ("bnb-4bit", "prequantized:bnb-4bit-nf4", "bitsandbytes.Linear4bit(nf4)"),
    ("torchao-int8wo", "prequantized:torchao:Int8WeightOnlyConfig", "torchao.Int8Tensor"),
    ("compressed-tensors-w8a16", "prequantized:compressed-tensors:pack-quantized:w8a16-int", "compressed-tensors(int8)"),
])
def test_prequantized_folders_load_in_their_own_format(tiny_quant, fmt, label, kind):
    pytest.importorskip({"bnb": "bitsandbytes", "tor": "torchao", "com": "compressed_tensors"}[fmt[:3]])
    model = load_model(str(tiny_quant(fmt)), LoadSpec(dtype="float32", device="cpu"))
    fingerprint = model.fingerprint()
    assert fingerprint["quant"] == label
    lm = fingerprint["quantization"]["parts"]["language_model"]
    assert lm["quantized"] == lm["layers"] == 14 and lm["types"] == {kind: 14}
    assert fingerprint["quantization"]["parts"]["vision"]["quantized"] == 0
    hidden = _prefill(model)
    assert torch.isfinite(hidden).all()
    # the checkpoint's weights are the bf16 source's, quantized: outputs stay close to it
    bf16 = load_model(str(tiny_quant("bf16")), LoadSpec(dtype="float32", device="cpu"))
    reference = _prefill(bf16)
    assert (hidden - reference).norm() / reference.norm() < 0.3
    with pytest.raises(ValueError, match=f"--quant int8wo: .* is already quantized \\({label.split(':', 1)[1]}"):
        load_model(str(tiny_quant(fmt)), LoadSpec(device="cpu", quant="int8wo"))


@pytest.mark.parametrize("fmt, needs", [("awq-4bit", "gptqmodel"), ("gptq-4bit", "gptqmodel and optimum")])
def test_awq_and_gptq_without_their_package_are_one_line_naming_it(tiny_quant, fmt, needs):
    import importlib.util

    if importlib.util.find_spec("gptqmodel") is not None:
        pytest.skip("gptqmodel is installed")
    folder = tiny_quant(fmt)
    config = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert config["bits"] == 4 and config["group_size"] == 128
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        qweight = handle.get_tensor("model.layers.0.mlp.gate_proj.qweight")  # gate: 256 in, 512 out
        assert qweight.dtype == torch.int32
        assert qweight.shape == ((256, 512 // 8) if fmt.startswith("awq") else (256 // 8, 512))
    with pytest.raises(ValueError, match=f"loading it needs {needs}: pip install"):
        load_model(str(folder), LoadSpec(device="cpu"))


# ---- the command line ------------------------------------------------------------------------------------
def test_cli_fp8_on_cpu_and_fp8_checkpoint_are_one_line_exit_2(tmp_path, tiny_quant, synthetic_parquet):
    if CUDA_FP8:
        pytest.skip("FP8 runs on this GPU")
    runner = CliRunner()
    base = ["run", "--data", str(synthetic_parquet), "--limit", "3", "--device", "cpu", "--no-progress"]
    for model, extra, message in ((tiny_quant("bf16"), ["--quant", "fp8"], "--quant fp8: FP8 matmuls need"),
                                  (tiny_quant("fp8-block128"), [], "--allow-dequantized"),
                                  (tiny_quant("bf16"), ["--quant-vision"], "--quant-vision applies with --quant")):
        done = runner.invoke(app, [*base, "--model", str(model), *extra, "--out", str(tmp_path / "r")])
        assert done.exit_code == 2, done.output
        lines = [line for line in done.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and message in done.output, done.output
        assert not (tmp_path / "r").exists()
    done = runner.invoke(app, [*base, "--model", str(tiny_quant("fp8-block128")), "--allow-dequantized", "--dtype",
                               "float32", "--out", str(tmp_path / "deq"), "--bootstrap", "0"])
    assert done.exit_code == 0, done.output
    results = json.loads((tmp_path / "deq" / "results.json").read_text())
    assert results["fingerprint"]["quant"] == "prequantized:fp8-block128+dequantized-float32"
    assert results["errors"]["count"] == 0


def test_bitsandbytes_warnings_stay_in_run_log(tmp_path, tiny_quant, synthetic_parquet):
    pytest.importorskip("bitsandbytes")
    import subprocess
    import sys

    out = tmp_path / "run8"
    command = [sys.executable, "-m", "finbench.cli", "run", "--model", str(tiny_quant("bf16")), "--quant", "8bit",
               "--data", str(synthetic_parquet), "--limit", "4", "--device", "cpu", "--dtype", "float32",
               "--out", str(out), "--no-progress", "--bootstrap", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert "MatMul8bitLt" not in console and "Enum subclass" not in console, console
    log = (out / "run.log").read_text()
    assert log.count("MatMul8bitLt") >= 14  # every 8-bit layer warns once per batch
    assert json.loads((out / "results.json").read_text())["fingerprint"]["quant"] == "8bit"


def test_make_tiny_quant_cli(tmp_path):
    runner = CliRunner()
    done = runner.invoke(app, ["models", "make-tiny", "qwen2.5-vl", str(tmp_path / "f"), "--quant", "fp8-block128"])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "f" / "config.json").read_text())["quantization_config"]["quant_method"] == "fp8"
    marker = json.loads((tmp_path / "f" / "finbench_tiny.json").read_text())
    assert marker["quant"]["format"] == "fp8-block128" and marker["hidden_size"] == 256
    done = runner.invoke(app, ["models", "make-tiny", "qwen2.5-vl", str(tmp_path / "g"), "--quant", "3bit"])
    assert done.exit_code == 2 and "tiny builds exist for" in done.output
    assert not (tmp_path / "g").exists()


def test_kernel_friendly_widths_are_multiples_of_128(tiny_quant):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_quant("bf16"), dtype=torch.float32)
    widths = {(n, m.in_features, m.out_features) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
              and n != "lm_head"}
    assert widths and all(i % 128 == 0 and o % 128 == 0 for _, i, o in widths), sorted(widths)
    assert math.gcd(*[i for _, i, _ in widths]) == 128


@pytest.mark.slow
def test_sweep_over_bf16_and_prequantized_checkpoints(tmp_path, tiny_quant, synthetic_parquet):
    """`--models BF16,BNB,COMPRESSED,FP8` is one comparison; each variant is labelled by what it ran
    as, the FP8 one (on a CPU) as dequantized."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("compressed_tensors")
    if CUDA_FP8:
        pytest.skip("on this GPU the FP8 checkpoint runs in FP8")
    formats = ["bf16", "bnb-8bit", "compressed-tensors-w8a16", "fp8-block128"]
    models = ",".join(str(tiny_quant(f)) for f in formats)
    out = tmp_path / "sweep"
    args = ["sweep", "--models", models, "--data", str(synthetic_parquet), "--limit", "6", "--device", "cpu",
            "--out", str(out), "--bootstrap", "50", "--no-progress"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "--allow-dequantized" in refused.output and not out.exists()
    done = CliRunner().invoke(app, [*args, "--allow-dequantized"])
    assert done.exit_code == 0, done.output
    summary = json.loads((out / "sweep.json").read_text())
    assert [v["quant_label"] for v in summary["variants"]] == [
        "none", "prequantized:bnb-8bit", "prequantized:compressed-tensors:pack-quantized:w8a16-int",
        "prequantized:fp8-block128+dequantized-float32"]
    assert [r["quantized"].split(":")[0] for r in summary["study"]] == ["language model 14/14 linears"] * 2 + [
        "language model 0/14 linears"]
    assert summary["study"][-1]["quantized"].endswith("(dequantized)")
    assert all(r["kl_mean"] is not None for r in summary["study"])


def test_cublas_block_kernel_only_where_the_k_blocks_need_no_padding():
    from finbench.models.fp8 import layer_kernel

    assert layer_kernel("blockwise", 3584) == "blockwise" and layer_kernel("blockwise", 18944) == "blockwise"
    assert layer_kernel("blockwise", 256) == "kblocks" and layer_kernel("kblocks", 3584) == "kblocks"


@pytest.mark.skipif(not CUDA_FP8, reason="FP8 block checkpoints run in FP8 on CUDA capability >= 8.9 only")
def test_fp8_checkpoint_runs_in_fp8_on_a_capable_gpu(tiny_quant):
    model = load_model(str(tiny_quant("fp8-block128")), LoadSpec(device="cuda"))
    fingerprint = model.fingerprint()
    assert fingerprint["quant"] == "prequantized:fp8-block128"
    assert fingerprint["quantization"]["parts"]["language_model"]["types"] == {"Fp8BlockLinear(fp8)": 14}
    assert fingerprint["quantization"]["format"]["kernel"] in ("blockwise", "kblocks", "blockwise+kblocks")
    bf16 = load_model(str(tiny_quant("bf16")), LoadSpec(device="cuda"))
    a, b = _prefill(bf16), _prefill(model)
    assert (a - b).norm() / a.norm() < 0.1


def test_layers_a_kernel_cannot_take_stay_unquantized_and_are_counted():
    """int4 needs whole groups of 128 inputs: a 64-input layer stays high precision, and says so."""
    pytest.importorskip("torchao")
    from finbench.models.quant import fits, quantize_loaded

    model = torch.nn.Module()
    model.language_model = torch.nn.Module()
    model.language_model.wide = torch.nn.Linear(256, 128)
    model.language_model.narrow = torch.nn.Linear(64, 128)
    assert fits(model.language_model.wide, "int4wo") and not fits(model.language_model.narrow, "int4wo")
    assert not fits(torch.nn.Linear(24, 128), "fp8") and fits(torch.nn.Linear(24, 128), "int8wo")
    quantize_loaded(model, "int4wo", torch.device("cpu"))
    report = inspect_quantization(torch.nn.ModuleDict({"model": model}))
    lm = report["parts"]["language_model"]
    assert (lm["layers"], lm["quantized"]) == (2, 1)
    assert report["language_model_quantized_share"] == pytest.approx(256 / (256 + 64))


@pytest.mark.parametrize("config, label", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block128"),
    ({"quant_method": "fp8", "weight_block_size": [64, 128]}, "fp8-block64x128"),
    ({"quant_method": "fp8", "weight_block_size": None}, "fp8-tensor"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq-4bit-g128"),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1}, "gptq-8bit-g-1"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "bnb-4bit-nf4"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {
        "weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8, "type": "float"}}}},
     "compressed-tensors:float-quantized:w8a8-float"),
    ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int4WeightOnlyConfig"}}}, "torchao:Int4WeightOnlyConfig"),
    ({"quant_method": "HQQ"}, "hqq"),
])
def test_checkpoint_labels_and_broken_configs(tmp_path, config, label):
    from finbench.models.quant_checkpoint import declared_quantization

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "quantization_config": config}))
    assert declared_quantization(str(tmp_path)).label == label
    for broken in ('{"quantization_config": []}', '{"quantization_config": {}}', "{not json", '{"model_type": "x"}'):
        (tmp_path / "config.json").write_text(broken)
        assert declared_quantization(str(tmp_path)) is None
    assert declared_quantization(str(tmp_path / "missing")) is None


def test_families_that_load_unquantized_checkpoints_only_refuse_prequantized_ones():
    from finbench.models.contract import refusal
    from finbench.models.families import FAMILIES
    from finbench.models.contract import PREQUANTIZED

    for family in FAMILIES:
        for model_type in family.model_types:
            capabilities = family.capabilities_for(model_type)
            said = refusal(capabilities, family.family, prequantized="fp8-block128")
            assert (said is None) == (PREQUANTIZED in capabilities.quantization), (family.family, model_type)
            if said:
                assert said == f"this checkpoint is quantized (fp8-block128); {family.family} loads unquantized " \
                               "checkpoints only"
    refused = {f.family for f in FAMILIES for t in f.model_types if refusal(f.capabilities_for(t), f.family,
                                                                            prequantized="x")}
    assert {"qwen3-vl-moe", "deepseek-vl2", "qwen3.5"} <= refused  # qwen3.5: its MoE checkpoints
