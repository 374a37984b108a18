"""`--quant fp8`'s matmul on whichever torch runs the tests — the current one and the H200 machine's
2.11 (scripts/gpu-constraints.txt; `bash scripts/test_device_pins.sh` runs this file under those
pins), whose CPU `_scaled_mm` takes per-tensor scales only. Reference: the fp8 values decoded by
hand (float64), their products summed, then scaled — the definition of a W8A8 row-wise matmul."""

from __future__ import annotations

import pytest
import torch

from finbench.models import fp8
from finbench.models.fp8 import FP8, FP8_MAX, Fp8BlockLinear, Fp8Linear, quantize_blocks, rowwise_scales_run


def _reference(x: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
    """W8A8 by hand: per-row scales amax/448 of the activations and of the weight's rows, values
    rounded to e4m3, the products summed in float64, then both scales and the bias (bf16) applied."""


    def rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # scales in fp32, as the format defines them
        scale = t.float().abs().amax(-1, keepdim=True) / FP8_MAX
        return (t.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8).double(), scale.double()

    xq, xs = rows(x.reshape(-1, x.shape[-1]))
    wq, ws = rows(linear.weight.detach())
    out = (xq @ wq.t()) * xs * ws.t() + linear.bias.detach().to(torch.bfloat16).double()
    return out.reshape(*x.shape[:-1], -1)


def test_the_fp8_linear_layer_equals_w8a8_by_hand_on_this_torch():
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40, dtype=torch.bfloat16)
    x = torch.randn(3, 7, 96, dtype=torch.bfloat16)
    out = Fp8Linear.from_linear(linear)(x)
    want = _reference(x, linear)
    assert out.dtype == torch.bfloat16 and out.shape == (3, 7, 40)
    # one bf16 rounding of the result apart (and the fp32 sum's own rounding): never more
    assert torch.allclose(out.double(), want, rtol=2 ** -7, atol=1e-3 * float(want.abs().max()))
    # and fp8 is not bf16: the same layer unquantized differs by more than that rounding
    assert not torch.allclose(linear(x).double(), want, rtol=2 ** -9, atol=0)


def test_the_per_tensor_path_gives_the_row_wise_kernel_s_values(monkeypatch):
    """Where row-wise scales run (torch ≥ 2.12 on the CPU, any FP8 GPU), the per-tensor path that
    torch 2.11's CPU takes gives the same bf16 values; on 2.11 the probe says row-wise cannot run."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(64, 48, dtype=torch.bfloat16)
    layer = Fp8Linear.from_linear(linear)
    x = torch.randn(2, 9, 64, dtype=torch.bfloat16)
    major_minor = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if not rowwise_scales_run("cpu"):
        assert major_minor <= (2, 11)  # the probe answers for the torch that lacks them, not for a bug of ours
        want = _reference(x, linear)
        assert torch.allclose(layer(x).double(), want, rtol=2 ** -7, atol=1e-3 * float(want.abs().max()))
        return
    rowwise = layer(x)
    monkeypatch.setattr(fp8, "rowwise_scales_run", lambda device_type: False)
    per_tensor = layer(x)
    assert torch.allclose(per_tensor.float(), rowwise.float(), rtol=2 ** -8, atol=0)
    assert (per_tensor != rowwise).float().mean() < 0.05  # bf16 ties of a differently ordered fp32 product


@pytest.mark.parametrize("rowwise", [True, False])
def test_the_block_fp8_layer_sums_its_k_slices_on_either_path(rowwise, monkeypatch):
    """`Fp8BlockLinear` (pre-quantized checkpoints) through its K-slice kernel: the checkpoint's
    blocks dequantized by hand and multiplied in float64, within fp8 activation rounding."""
    if rowwise and not rowwise_scales_run("cpu"):
        pytest.skip("this torch has no row-wise _scaled_mm on the CPU (2.11): the other case covers it")
    monkeypatch.setattr(fp8, "rowwise_scales_run", lambda device_type: rowwise)
    torch.manual_seed(2)
    weight = torch.randn(256, 256)
    q, scale_inv = quantize_blocks(weight)
    layer = Fp8BlockLinear(q, scale_inv, (128, 128), None, "kblocks")
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    dequantized = (q.double().reshape(2, 128, 2, 128) * scale_inv.double()[:, None, :, None]).reshape(256, 256)
    want = x.double() @ dequantized.t()
    assert torch.allclose(layer(x).double(), want, rtol=0.07, atol=0.07 * float(want.abs().max()))
