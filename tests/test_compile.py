"""`--compile-vision` (models/compile.py) and the decode-step attention kernels (models/base.py).

Every family end to end through the CLI, once eagerly and once with its vision blocks compiled:
the same answers and option probabilities (fp32, ≤ 1e-5), a fingerprint that says what was
compiled (so the two runs never share cache rows), only vision blocks compiled. Then the broken
inputs: no compiler on the machine, a model with no repeated vision blocks. Then the decode-step
kernel choice: cuDNN's SDPA left out on CUDA, every decode path inside that choice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import SHARPEN, cli, finmme_request, sharpened_tiny_dir
from typer.testing import CliRunner

from finbench.cli import app
from finbench.models.compile import compile_unavailable
from finbench.offline.tiny import tiny_family_available

HF_FAMILIES = [f for f in ("qwen2.5-vl", "qwen3-vl", "internvl", "qwen3.5") if tiny_family_available(f)]
FAMILIES = HF_FAMILIES + ["deepseek-vl2"]
VISION_BLOCK = {"qwen2.5-vl": "Qwen2_5_VLVisionBlock", "qwen3-vl": "Qwen3VLVisionBlock",
                "internvl": "InternVLVisionLayer", "qwen3.5": "Qwen3_5VisionBlock", "deepseek-vl2": "_VisionBlock"}
NO_COMPILER = compile_unavailable(torch.device("cpu"))
needs_compiler = pytest.mark.skipif(NO_COMPILER is not None, reason=f"torch.compile cannot run here: {NO_COMPILER}")
RUN = ["--dtype", "float32", "--device", "cpu", "--batch-size", "8", "--limit", "24", "--bootstrap", "0",
       "--no-progress"]


def _model_dir(family: str, tmp_path_factory) -> Path:
    """A tiny model whose answers depend on the image (matrices ×4, as `sharpened_tiny_dir`; the
    native DeepSeek-VL2 checkpoint is sharpened in its safetensors file)."""
    if family != "deepseek-vl2":
        return sharpened_tiny_dir(tmp_path_factory, family)
    from safetensors.torch import load_file, save_file

    from finbench.offline.tiny import make_tiny

    path = make_tiny(family, tmp_path_factory.mktemp("models") / "tiny-deepseek-vl2", weights_dtype="float32")
    for weights in path.glob("*.safetensors"):
        tensors = load_file(weights)
        save_file({k: v * SHARPEN if v.ndim >= 2 else v for k, v in tensors.items()}, weights, metadata={"format": "pt"})
    return path


_EAGER: dict[str, tuple] = {}  # family → its eager run, shared by the vision and the LM comparisons


def _eager_and(family: str, flag: str, tmp_path_factory, synthetic_parquet) -> dict[str, tuple]:
    """{"eager": ..., "compiled": ...}: (samples, results) of the family's tiny model run through the
    CLI eagerly (once per module, whichever comparison asks first) and with `flag`."""
    model = _model_dir(family, tmp_path_factory)
    root = tmp_path_factory.mktemp(f"compile-{family}{flag.replace('--compile', '')}")
    runs = {}
    for name, extra in (("eager", []), ("compiled", [flag])):
        if name == "eager" and family in _EAGER:
            runs[name] = _EAGER[family]
            continue
        done = CliRunner().invoke(app, ["run", "--model", str(model), "--data", str(synthetic_parquet), *RUN,
                                        "--out", str(root / name), *extra])
        assert done.exit_code == 0, f"{family} {name}: {done.output[-3000:]}"
        runs[name] = (pd.read_parquet(root / name / "samples.parquet"),
                      json.loads((root / name / "results.json").read_text()))
    _EAGER[family] = runs["eager"]
    return runs


@pytest.fixture(scope="module", params=FAMILIES)
def eager_and_compiled(request, tmp_path_factory, synthetic_parquet):
    return request.param, _eager_and(request.param, "--compile-vision", tmp_path_factory, synthetic_parquet)


@needs_compiler
@pytest.mark.slow
def test_compiled_vision_gives_the_eager_answers(eager_and_compiled):
    family, runs = eager_and_compiled
    (eager, _), (compiled, _) = runs["eager"], runs["compiled"]
    assert len(eager) == 24 and not eager["error"].fillna("").any() and not compiled["error"].fillna("").any()
    assert set(eager["kind"]) == {"single", "multi", "numerical"}  # prefill, set and number decoding
    assert (eager["answer"] == compiled["answer"]).all(), family
    assert eager["answer"].nunique() > 1, f"{family}: a model that answers everything alike proves nothing"
    # fp32 summation order through ×4-sharpened weights; measured ≤ 2.1e-7 on the HF families and
    # 8.4e-6 on DeepSeek-VL2 (2 CPU cores), so the bound leaves room for another CPU's vector width
    difference = (eager["confidence"] - compiled["confidence"]).abs().max()
    assert difference <= 2e-5, f"{family}: confidence differs by {difference:.2e}"
    single = eager["kind"] == "single"
    for a, b in zip(eager.loc[single, "option_probs"], compiled.loc[single, "option_probs"]):
        assert max(abs(x - y) for x, y in zip(a, b)) <= 2e-5


@needs_compiler
@pytest.mark.slow
def test_the_fingerprint_says_what_was_compiled(eager_and_compiled):
    family, runs = eager_and_compiled
    (eager, eager_results), (compiled, compiled_results) = runs["eager"], runs["compiled"]
    assert "compiled" not in eager_results["fingerprint"]  # eager runs keep their cache keys
    assert compiled_results["fingerprint"]["compiled"] == [VISION_BLOCK[family]]
    assert not set(eager["sample_key"]) & set(compiled["sample_key"])


@needs_compiler
def test_only_the_vision_blocks_are_compiled(tiny_qwen_dir):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    compiled = model.compile_vision()
    depth = model.model.config.vision_config.depth
    assert compiled == {"Qwen2_5_VLVisionBlock": depth}
    assert model.compile_vision() is compiled  # idempotent
    marked = [type(m).__name__ for m in model.model.modules() if getattr(m, "_compiled_call_impl", None) is not None]
    assert marked == ["Qwen2_5_VLVisionBlock"] * depth  # decoder layers stay eager (their caches recompile)


def test_a_model_without_repeated_vision_blocks_runs_uncompiled_with_a_note(tiny_qwen_dir, synthetic_parquet,
                                                                           tmp_path, monkeypatch):
    from finbench.app.api import evaluate
    from finbench.models import compile as compile_module
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    monkeypatch.setattr(compile_module, "repeated_block_classes", lambda model: set())  # nothing declared
    result = evaluate(model, "finmme", data=str(synthetic_parquet), out=tmp_path / "run", limit=4, bootstrap=0,
                      compile_vision=True)
    assert any("--compile-vision" in note and "uncompiled" in note for note in result.results["notes"])
    assert "compiled" not in result.results["fingerprint"]
    assert len(result.samples) == 4 and not result.samples["error"].fillna("").any()


@needs_compiler  # the same run with the compiler hidden
def test_no_compiler_fails_at_start_up_in_one_line(tiny_qwen_dir, synthetic_parquet, tmp_path):
    import sys

    bare = tmp_path / "bin"  # a PATH with python and nothing else: no g++ / clang++
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    done = cli("run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), *RUN,
               "--out", str(tmp_path / "run"), "--compile-vision", env={"PATH": str(bare)})  # read when it runs
    assert done.returncode != 0
    assert "--compile-vision: no C++ compiler" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "samples.parquet").exists()


def test_compile_unavailable_names_the_missing_tool(monkeypatch):
    import importlib.util

    from finbench.models import compile as compile_module

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "C++ compiler" in compile_module.compile_unavailable(torch.device("cpu"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "triton" else real(name))
    assert "Triton" in compile_module.compile_unavailable(torch.device("cuda"))


# ---- decode-step attention kernels ------------------------------------------------------------
def test_decode_attention_leaves_out_cudnn_on_cuda_only():
    from finbench.models.base import decode_attention

    flags = (torch.backends.cuda.cudnn_sdp_enabled, torch.backends.cuda.flash_sdp_enabled,
             torch.backends.cuda.mem_efficient_sdp_enabled, torch.backends.cuda.math_sdp_enabled)
    before = [f() for f in flags]
    with decode_attention(torch.device("cpu")):
        assert [f() for f in flags] == before
    with decode_attention(torch.device("cuda", 0)):
        assert [f() for f in flags] == [False, True, True, True]
    assert [f() for f in flags] == before


def test_every_decode_path_runs_inside_the_decode_kernels(tiny_model, questions, monkeypatch):
    """Constrained decode steps, free generation and thinking (the adapter's `generate_ids`) all
    take `decode_attention`; the constrained prefill does not (it keeps cuDNN on CUDA)."""
    import contextlib

    from finbench.models import base, generation
    from finbench.runner.decoding import AnswerVocabulary, decode_numerical

    entered: list[str] = []

    def recording(device):
        entered.append(device.type)
        return contextlib.nullcontext()

    monkeypatch.setattr(base, "decode_attention", recording)
    monkeypatch.setattr(generation, "decode_attention", recording)  # free generation (models/generation.py)
    numerical = [q for q in questions if q.kind == "numerical"][:2]
    inputs = tiny_model.to_device(tiny_model.prepare([finmme_request(q)
                                                      for q in numerical]))
    tiny_model.prefill(inputs)
    assert entered == []
    predictions = decode_numerical(tiny_model, inputs, 4, AnswerVocabulary.for_model(tiny_model))
    steps = max(p.n_generated_tokens for p in predictions)
    assert len(entered) == steps - 1 > 0  # one per decode step after the prefill
    entered.clear()
    tiny_model.generate(inputs, max_new_tokens=3)
    assert entered == ["cpu"]
    entered.clear()
    tiny_model.generate_ids(inputs, 3, tiny_model.stop_token_ids())
    assert entered == ["cpu"]


# ---- --compile-lm ----------------------------------------------------------------------------
LM_FAMILIES = [f for f in ("qwen2.5-vl", "qwen3-vl") if tiny_family_available(f)]


@pytest.fixture(scope="module", params=LM_FAMILIES)
def eager_and_lm_compiled(request, tmp_path_factory, synthetic_parquet):
    return request.param, _eager_and(request.param, "--compile-lm", tmp_path_factory, synthetic_parquet)


@needs_compiler
@pytest.mark.slow
def test_a_compiled_language_model_gives_the_eager_answers(eager_and_lm_compiled):
    family, runs = eager_and_lm_compiled
    (eager, eager_results), (compiled, compiled_results) = runs["eager"], runs["compiled"]
    assert not eager["error"].fillna("").any() and not compiled["error"].fillna("").any()
    assert set(eager["kind"]) == {"single", "multi", "numerical"}  # prefill and decode steps both compiled
    assert (eager["answer"] == compiled["answer"]).all() and eager["answer"].nunique() > 1, family
    assert (eager["confidence"] - compiled["confidence"]).abs().max() <= 2e-5
    names = compiled_results["fingerprint"]["compiled"]
    assert any(n.endswith("RMSNorm") for n in names) and any(n.endswith("MLP") for n in names)
    assert any(n.endswith("RotaryEmbedding") for n in names) and "compiled" not in eager_results["fingerprint"]
    assert not set(eager["sample_key"]) & set(compiled["sample_key"])


@needs_compiler
def test_only_the_language_model_s_norms_mlps_and_rotary_are_compiled(tiny_qwen_dir):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    layers = model.model.config.text_config.num_hidden_layers
    compiled = model.compile_language_model()
    assert compiled == {"Qwen2_5_VLRMSNorm": 2 * layers + 1, "Qwen2MLP": layers, "Qwen2_5_VLRotaryEmbedding": 1,
                        "apply_rotary_pos_emb": layers}  # the rotary application, called by each attention
    assert model.compile_language_model() is compiled  # idempotent
    marked = {type(m).__name__ for m in model.model.modules() if getattr(m, "_compiled_call_impl", None) is not None}
    assert marked == set(compiled) - {"apply_rotary_pos_emb"}  # attention, decoder layers and caches stay eager
    vision = model.model.model.visual
    assert all(getattr(m, "_compiled_call_impl", None) is None for m in vision.modules())  # the tower's norms too
    assert model.fingerprint()["compiled"] == sorted(compiled)
    assert model.compile_vision()  # both: the fingerprint lists both
    assert set(model.fingerprint()["compiled"]) == set(compiled) | {"Qwen2_5_VLVisionBlock"}


def test_compile_lm_without_a_compiler_fails_at_start_up_in_one_line(tiny_model, monkeypatch):
    from finbench.models import compile as compile_module
    from finbench.runner.startup import compile_parts
    from finbench.config.specs import RunConfig

    monkeypatch.setattr(compile_module, "compile_unavailable", lambda device: "no C++ compiler (test)")
    config = RunConfig.flat(model="m", compile_lm=True)
    with pytest.raises(ValueError, match=r"^--compile-lm: no C\+\+ compiler \(test\)$"):
        compile_parts(tiny_model, config, [])
    notes: list[str] = []
    compile_parts(tiny_model, config.replaced(compile_lm=False), notes)  # nothing asked: nothing checked
    assert notes == [] and tiny_model.compiled_language_model == {}


@needs_compiler
def test_the_compiled_rotary_runs_only_inside_the_language_model_that_asked_for_it(tiny_qwen_dir, monkeypatch):
    """`--compile-lm`'s rotary application is a function of the modeling file, shared by every model
    of the family in the process: the file is left as it is (no library module patched), the
    compiled function runs only in the compiled language model's attention modules, and gives the
    eager prefill on the CPU."""
    import sys

    from finbench.models import compile as compile_module
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    compiled_model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    eager_model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    ids = compiled_model.tokenizer(["a short prompt", "a longer prompt with a few more words"], padding=True,
                                   return_tensors="pt")
    inputs = {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"]}
    want, _ = eager_model.prefill(dict(inputs))
    lm = compiled_model.model.model.language_model
    modeling = sys.modules[type(lm.layers[0].self_attn).__module__]
    library = modeling.apply_rotary_pos_emb
    assert compile_module.compile_rotary(lm) == {"apply_rotary_pos_emb": len(lm.layers)}
    assert modeling.apply_rotary_pos_emb is library  # the modeling file is untouched
    got, _ = compiled_model.prefill(dict(inputs))  # the real compiled rotary
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)

    used: list[str] = []  # which rotary each model's attention calls: a counting stand-in for the compiler
    monkeypatch.setattr(compile_module.torch, "compile",
                        lambda function, **kw: lambda *a, **k: used.append("compiled") or function(*a, **k))
    counted = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    counted_lm = counted.model.model.language_model
    compile_module.compile_rotary(counted_lm)
    counted.prefill(dict(inputs))
    assert used == ["compiled"] * len(lm.layers)
    used.clear()
    assert torch.equal(eager_model.prefill(dict(inputs))[0], want) and used == []  # another model: eager
    compile_module.set_rotary(counted_lm, False)  # gpu_check's interleaved default runs
    counted.prefill(dict(inputs))
    assert used == []
    compile_module.set_rotary(counted_lm, True)
    counted.prefill(dict(inputs))
    assert used == ["compiled"] * len(lm.layers)
