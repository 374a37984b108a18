"""Packed vision attention (models/vision_attention.py) against independent references: a
brute-force softmax(QKᵀ)V per block, the stock transformers towers (one SDPA call per window or
image), and the tiny model's answers end to end. Call counts are counted on
`torch.nn.functional.scaled_dot_product_attention`, which both paths go through."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from finbench.models import vision_attention as va

TOL = 1e-5


def _brute_force(query, key, value, cu_seqlens, scale):
    """softmax(q·kᵀ·scale)·v, one block at a time, written out."""
    out = torch.empty_like(query)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        q, k, v = (t[start:end].transpose(0, 1) for t in (query, key, value))  # [H, L, D]
        weights = torch.softmax(q @ k.transpose(1, 2) * scale, dim=-1)
        out[start:end] = (weights @ v).transpose(0, 1)
    return out


@pytest.mark.parametrize("lengths", [
    [64] * 6,  # equal windows: a plain reshape
    [64, 64, 12, 48, 3, 64, 16],  # Qwen2.5-VL edge windows: one masked call
    [900, 40, 7, 1, 64, 300],  # padding would be > PAD_LIMIT: length buckets
    [5],
])
def test_packed_attention_equals_per_block_softmax(lengths):
    torch.manual_seed(len(lengths))
    cu = torch.tensor([0] + lengths).cumsum(0)
    q, k, v = (torch.randn(int(cu[-1]), 3, 8, dtype=torch.float64) for _ in range(3))
    scale = 0.7
    expected = _brute_force(q, k, v, cu, scale)
    for max_seqlen in (None, max(lengths)):
        got = va.packed_attention(q, k, v, cu, scale, max_seqlen)
        assert torch.allclose(got, expected, atol=1e-12, rtol=0)
    # default scale is 1/sqrt(D), as in SDPA
    assert torch.allclose(va.packed_attention(q, k, v, cu), _brute_force(q, k, v, cu, 8 ** -0.5), atol=1e-12)


def test_packed_attention_keeps_blocks_apart():
    """A token must not see another block: changing block 1's keys leaves block 0 untouched."""
    torch.manual_seed(0)
    cu = torch.tensor([0, 10, 14, 30])
    q, k, v = (torch.randn(30, 2, 4) for _ in range(3))
    base = va.packed_attention(q, k, v, cu)
    k2, v2 = k.clone(), v.clone()
    k2[10:14] += 5
    v2[10:14] -= 3
    moved = va.packed_attention(q, k2, v2, cu)
    assert torch.equal(base[:10], moved[:10]) and torch.equal(base[14:], moved[14:])
    assert not torch.allclose(base[10:14], moved[10:14])


def test_transformers_entry_point_rejects_what_it_cannot_serve():
    q = torch.randn(1, 2, 6, 4)
    with pytest.raises(ValueError, match="packed vision towers only"):
        va.transformers_attention(None, q, q, q, attention_mask=torch.ones(1, 1, 6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="packed vision towers only"):
        va.transformers_attention(None, q.expand(2, -1, -1, -1), q, q)
    out, _ = va.transformers_attention(None, q, q, q, scaling=0.5)  # no cu_seqlens: one block
    assert torch.allclose(out[0], _brute_force(*(t[0].transpose(0, 1) for t in (q, q, q)),
                                               torch.tensor([0, 6]), 0.5), atol=1e-6)


# ---- real towers ------------------------------------------------------------------------------
class _Holder(torch.nn.Module):
    """The part of a *ForConditionalGeneration that `install` looks at: config.vision_config + modules."""

    def __init__(self, tower):
        super().__init__()
        self.config = type("Config", (), {"vision_config": tower.config})()
        self.visual = tower


def _qwen25_tower(**overrides):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    from finbench.offline.shapes import full_size_config

    config = full_size_config("qwen2.5-vl-7b").vision_config  # published geometry: patch 14, window 112
    for name, value in overrides.items():
        setattr(config, name, value)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen2_5_VisionTransformerPretrainedModel._from_config(config).eval(), 3 * 2 * 14 * 14


def _qwen3_tower():
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    config = Qwen3VLVisionConfig(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                                 spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=48,
                                 num_position_embeddings=64, deepstack_visual_indexes=[0])
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3VLVisionModel._from_config(config).eval(), 3 * 2 * 16 * 16


def _counting_sdpa(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    return calls


def _windows(grid, merge=2, window_merged=4):
    """Qwen2.5-VL windows of an image, counted from the rule: 4×4 merged tokens (112 px) per window."""
    t, h, w = grid
    return t * math.ceil(h // merge / window_merged) * math.ceil(w // merge / window_merged)


def _stock_vs_packed(tower, width, grids, monkeypatch):
    holder = _Holder(tower)
    grid = torch.tensor(grids)
    torch.manual_seed(1)
    pixels = torch.randn(int(grid.prod(-1).sum()), width)
    calls = _counting_sdpa(monkeypatch)
    convolutions = []
    tower.patch_embed.proj.register_forward_hook(lambda *args: convolutions.append(1))
    with torch.no_grad():
        assert va.install(holder, "sdpa", va.STOCK) == "sdpa"
        stock = tower(pixels, grid_thw=grid)
        stock_calls = len(calls)
        assert convolutions == [1]  # the stock patch embedding is the Conv3d
        assert va.install(holder, "sdpa", va.PACKED) == "sdpa+vision-packed"
        packed = tower(pixels, grid_thw=grid)
        packed_calls = len(calls) - stock_calls
        assert convolutions == [1]  # packed: the same weights as one GEMM, the Conv3d never runs
        va.install(holder, "sdpa", va.STOCK)
        assert torch.equal(tower(pixels, grid_thw=grid).pooler_output, stock.pooler_output)  # stock restored
        assert convolutions == [1, 1]
    return stock, packed, stock_calls, packed_calls


@pytest.mark.parametrize("depth,hidden,heads", [(2, 32, 2), (2, 1280, 16)], ids=["tiny", "7b-shaped"])
def test_qwen25_tower_packed_equals_stock(depth, hidden, heads, monkeypatch):
    """Windowed + full layers on images of different sizes, edge windows included; the 7B-shaped
    tower has the published width, heads and window geometry at depth 2."""
    tower, width = _qwen25_tower(depth=depth, hidden_size=hidden, num_heads=heads, intermediate_size=2 * hidden,
                                 out_hidden_size=64, fullatt_block_indexes=[depth - 1])
    grids = [[1, 16, 22], [1, 10, 14], [1, 6, 8]]  # 224×308, 140×196, 84×112 px
    stock, packed, stock_calls, packed_calls = _stock_vs_packed(tower, width, grids, monkeypatch)
    assert torch.allclose(packed.pooler_output, stock.pooler_output, atol=TOL, rtol=0)
    assert torch.allclose(packed.last_hidden_state, stock.last_hidden_state, atol=TOL, rtol=0)
    windows = sum(_windows(g) for g in grids)
    assert windows == 6 + 4 + 1  # 8×11, 5×7, 3×4 merged tokens
    assert stock_calls == windows * (depth - 1) + len(grids)  # per window, then per image
    assert packed_calls == depth  # one per layer


def test_qwen3_tower_packed_equals_stock(monkeypatch):
    tower, width = _qwen3_tower()
    grids = [[1, 8, 12], [1, 6, 6], [1, 4, 10]]
    stock, packed, stock_calls, packed_calls = _stock_vs_packed(tower, width, grids, monkeypatch)
    assert torch.allclose(packed.pooler_output, stock.pooler_output, atol=TOL, rtol=0)
    for a, b in zip(packed.deepstack_features, stock.deepstack_features):
        assert torch.allclose(a, b, atol=TOL, rtol=0)
    assert stock_calls == 2 * len(grids) and packed_calls == 2


@pytest.mark.parametrize("bias", [False, True], ids=["qwen2.5-vl", "qwen3-vl"])
def test_patchify_gemm_equals_the_conv3d(bias):
    """Published patch geometry (3×2×14×14 → 1280, no bias; Qwen3-VL: 16 px, with bias)."""
    patch = 16 if bias else 14
    conv = torch.nn.Conv3d(3, 1280, kernel_size=(2, patch, patch), stride=(2, patch, patch), bias=bias)
    pixels = torch.randn(300, 3 * 2 * patch * patch)
    with torch.no_grad():
        expected = conv(pixels.view(-1, 3, 2, patch, patch)).view(-1, 1280)
        assert torch.allclose(va.patchify_linear(pixels, conv), expected, atol=1e-5, rtol=0)
    assert not va._is_patchify(torch.nn.Conv3d(3, 8, kernel_size=3, stride=1))  # a real convolution stays


def test_install_leaves_flash_and_text_attention_alone():
    tower, _ = _qwen25_tower(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, out_hidden_size=32,
                             fullatt_block_indexes=[0])
    holder = _Holder(tower)
    assert va.install(holder, "flash_attention_2") == "flash_attention_2"  # already one call per layer
    assert tower.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError, match="vision attention 'fast'"):
        va.install(holder, "sdpa", "fast")


# ---- end to end -------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_model_answers_identical_end_to_end(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path,
                                                 monkeypatch):
    """The same questions through the runner with the stock tower and the packed one: identical
    answers, option probabilities within 1e-5, different fingerprints (so caches never mix)."""
    from finbench.models.qwen2_5_vl import Qwen25VL
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import RunConfig

    stock_model = Qwen25VL.load(str(tiny_qwen_dir), dtype="float32", device="cpu", vision_attention="stock")
    assert tiny_model.fingerprint()["attn_implementation"] == "sdpa+vision-packed"
    assert stock_model.fingerprint()["attn_implementation"] == "sdpa"
    calls = _counting_sdpa(monkeypatch)
    runs = {}
    for name, model in (("stock", stock_model), ("packed", tiny_model)):
        before = len(calls)
        config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), out=str(tmp_path / name),
                           limit=12, batch_size=4, dtype="float32", device="cpu", bootstrap=0)
        result = run_benchmark(config, model, show_progress=False)
        runs[name] = (result.samples, len(calls) - before)
        # padded / real prompt tokens of the prefills: left padding to each batch's longest row
        assert 1.0 <= result.results["throughput"]["padding_ratio"] < 2.0
    (stock, stock_calls), (packed, packed_calls) = runs["stock"], runs["packed"]
    assert list(stock["answer"]) == list(packed["answer"]) and (stock["error"] == "").all()
    for a, b in zip(stock["option_probs"], packed["option_probs"]):
        assert len(a) == len(b) and all(abs(x - y) <= TOL for x, y in zip(a, b))
    assert packed_calls < stock_calls


@pytest.mark.slow
def test_bench_vision_prints_counted_calls():
    """scripts/bench_vision.py on 2 small charts: its counts follow the window rule."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_vision.py"
    done = subprocess.run([sys.executable, str(script), "--charts", "2", "--width", "280", "--height", "224",
                           "--compile"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # Qwen2.5-VL: 280×224 → 20×16 patches → 10×8 merged → 3×2 windows of 4×4 per chart
    assert "[qwen2.5-vl] windowed layers: calls per layer: 1 (stock: 12)" in out
    assert "[qwen2.5-vl] full-attention layers: calls per layer: 1 (stock: 2)" in out
    assert "[qwen3-vl] full-attention layers: calls per layer: 1 (stock: 2)" in out
    diffs = re.findall(r"max \|stock - packed\| = (\S+)", out)
    assert len(diffs) == 2 and all(float(d) <= TOL for d in diffs)
    assert len(re.findall(r"ratio stock/packed \d+\.\d\dx", out)) == 2
    compiled = re.findall(r"packed\+compiled \((\w+) x2\).*ratio packed/compiled \d+\.\d\dx.* = (\S+)$", out, re.M)
    from finbench.models.compile import compile_unavailable

    if compile_unavailable(torch.device("cpu")) is None:  # else the script fails its --compile variant
        assert [block for block, _ in compiled] == ["Qwen2_5_VLVisionBlock", "Qwen3VLVisionBlock"]
    assert all(float(diff) <= TOL for _, diff in compiled)


def test_pixels_cast_in_the_worker_give_identical_hidden_states(tiny_qwen_dir):
    """A bf16 model gets bf16 pixel_values from `prepare` (half the bytes to pin and copy); its
    prefill equals the one from the processor's fp32 pixels, which the tower casts on arrival."""
    from PIL import Image

    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.core.types import ModelRequest

    model = load_model(str(tiny_qwen_dir), LoadSpec(dtype="bfloat16", device="cpu"))
    request = ModelRequest(messages=({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "A?"}]},),
                           images=(Image.new("RGB", (120, 90), (200, 30, 60)),))
    prepared = model.prepare([request])
    assert prepared["pixel_values"].dtype == torch.bfloat16
    fp32 = dict(prepared, pixel_values=model.processor(text=[model.prompt_text(request)], images=list(request.images),
                                                       return_tensors="pt", padding=True)["pixel_values"])
    assert fp32["pixel_values"].dtype == torch.float32
    assert torch.equal(model.prefill(dict(prepared))[0], model.prefill(fp32)[0])


def test_equal_blocks_take_one_batched_sdpa_and_unequal_ones_the_varlen_kernel(monkeypatch):
    """The kernel choice as on CUDA in bf16 (varlen usable): same-size images go to the reshaped
    SDPA (faster there, bench_vision_h200.txt), windows of mixed lengths to the varlen kernel."""
    varlen_calls = []

    def fake_varlen(query, key, value, cu_seqlens, scale, max_seqlen):
        varlen_calls.append(cu_seqlens.tolist())
        return None  # "kernel unavailable": the padded path answers, as it would after a failure

    monkeypatch.setattr(va, "_varlen_usable", lambda query: True)
    monkeypatch.setattr(va, "_varlen", fake_varlen)
    q, k, v = (torch.randn(12, 2, 8) for _ in range(3))
    calls: Counter[str] = Counter()
    va.packed_attention(q, k, v, torch.tensor([0, 4, 8, 12]), calls=calls)
    assert varlen_calls == [] and calls == {"padded": 1}
    va.packed_attention(q, k, v, torch.tensor([0, 5, 8, 12]), calls=calls)
    assert varlen_calls == [[0, 5, 8, 12]] and calls == {"padded": 2}
