"""`--quant fp8`'s activation quantization: once per distinct input (q/k/v share it, gate/up share
it), and the fused (compiled) quantization equal to the eager reference. References: the same
layers without sharing (every layer quantizes its own input) and the eager `quantize_rows`."""

from __future__ import annotations

import gc

import pytest
import torch

from finbench.models.compile import compile_unavailable
from finbench.models.fp8 import Fp8Linear, SharedActivation, quantize_rows, share_activations
from finbench.models.quant import quantize_loaded


class Attention(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (torch.nn.Linear(width, w) for w in (width, 32, 32))
        self.o_proj = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        mixed = q * (k.sum(-1, keepdim=True) + v.mean(-1, keepdim=True))  # another tensor for o_proj
        return self.o_proj(mixed)


class Mlp(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = torch.nn.Linear(width, 96), torch.nn.Linear(width, 96)
        self.down_proj = torch.nn.Linear(96, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Tiny(torch.nn.Module):
    """Module names as in a transformers VLM, so `quantize_loaded` finds the language model."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.language_model = torch.nn.ModuleList([torch.nn.ModuleDict({"self_attn": Attention(width),
                                                                        "mlp": Mlp(width)}) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.language_model:
            x = x + layer["self_attn"](x)
            x = x + layer["mlp"](x)
        return x


def _quantized(seed: int = 0) -> Tiny:
    torch.manual_seed(seed)
    model = Tiny()
    quantize_loaded(model, "fp8", torch.device("cpu"))
    return model


def test_shared_activations_give_the_unshared_outputs_bit_for_bit_and_quantize_each_input_once():
    shared = _quantized()
    unshared = _quantized()
    for module in unshared.modules():  # the reference: every layer quantizes its own input
        if isinstance(module, Fp8Linear):
            module.activation = None
    attention = shared.language_model[0]["self_attn"]
    mlp = shared.language_model[0]["mlp"]
    assert attention.q_proj.activation is attention.k_proj.activation is attention.v_proj.activation
    assert mlp.gate_proj.activation is mlp.up_proj.activation and mlp.down_proj.activation is None
    x = torch.randn(3, 5, 64)
    assert torch.equal(shared(x), unshared(x))
    # one forward: q/k/v's input once, o_proj's own input once, gate/up's input once per layer
    assert attention.q_proj.activation.calls == 2 and mlp.gate_proj.activation.calls == 1
    shared(x)
    assert attention.q_proj.activation.calls == 4 and mlp.gate_proj.activation.calls == 2


def test_shared_activations_run_under_inference_mode_as_every_run_does():
    # a run's forward is under torch.inference_mode: its tensors keep no version counter (reading
    # one raised "Inference tensors do not track version counter" and failed every fp8 sample)
    shared, unshared = _quantized(), _quantized()
    for module in unshared.modules():
        if isinstance(module, Fp8Linear):
            module.activation = None
    with torch.inference_mode():
        x = torch.randn(3, 5, 64)
        assert torch.equal(shared(x), unshared(x))
    attention, mlp = shared.language_model[0]["self_attn"], shared.language_model[0]["mlp"]
    assert attention.q_proj.activation.calls == 2 and mlp.gate_proj.activation.calls == 1


def test_a_shared_quantization_counts_calls_and_never_reuses_a_changed_or_freed_input():
    calls = []

    def counting(rows):
        calls.append(rows.shape)
        return quantize_rows(rows)

    shared = SharedActivation(3, counting)
    x = torch.randn(4, 16)
    first = shared(x, x)
    assert shared(x, x)[0] is first[0] and shared(x, x)[1] is first[1]
    assert len(calls) == 1 and shared.calls == 1
    y = torch.randn(4, 16)
    assert torch.equal(shared(y, y)[0], quantize_rows(y)[0]) and len(calls) == 2
    y.mul_(2)  # in place: a new input for the next user, though the same tensor object
    assert torch.equal(shared(y, y)[1], quantize_rows(y)[1]) and len(calls) == 3
    del y
    gc.collect()
    assert shared._value is None  # the freed input's quantized copy went with it


@pytest.mark.skipif(compile_unavailable(torch.device("cpu")) is not None, reason="no C++ compiler for torch.compile")
def test_the_compiled_quantization_gives_the_eager_fp8_values_and_scales():
    compiled = torch.compile(quantize_rows, dynamic=True, fullgraph=True)  # what CUDA runs (fused_quantize_rows)
    torch.manual_seed(1)
    for rows in (torch.randn(7, 48) * 30, torch.randn(33, 48).to(torch.bfloat16), torch.zeros(2, 48)):
        want_q, want_s = quantize_rows(rows)
        got_q, got_s = compiled(rows)
        assert got_q.dtype == want_q.dtype and torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))
        assert torch.equal(got_s, want_s)


@pytest.mark.skipif(compile_unavailable(torch.device("cpu")) is not None, reason="no C++ compiler for torch.compile")
def test_a_compiled_mlp_keeps_the_shared_quantization_and_the_outputs():
    """`--compile-lm` compiles the MLP modules in place: with fp8 layers inside, gate/up still share
    one quantization per input and the outputs stay the eager ones bit for bit."""
    model = _quantized()
    x = torch.randn(2, 3, 64)
    want = model(x)
    mlp = model.language_model[0]["mlp"]
    for layer in model.language_model:
        layer["mlp"].compile(dynamic=True)
    before = mlp.gate_proj.activation.calls
    assert torch.equal(model(x), want) and torch.equal(model(x), want)
    assert mlp.gate_proj.activation.calls == before + 2  # one quantization per forward for gate and up
