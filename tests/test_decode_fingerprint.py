"""The fingerprint names the decode attention that ran: on CUDA decode steps and `generate` run
without cuDNN's SDPA (models/base.py `decode_attention`), so CUDA results are keyed apart from a
run that would use it; on the CPU nothing changes (existing cache keys hold)."""

from __future__ import annotations

import copy

import torch

from finbench.models.generation import DECODE_ATTENTION_CUDA


def test_the_decode_attention_is_in_the_fingerprint_on_cuda_only(tiny_model):
    cpu = tiny_model.fingerprint()
    assert "decode_attention" not in cpu
    on_cuda = copy.copy(tiny_model)
    on_cuda.device = torch.device("cuda")  # what fingerprint() reads; nothing runs
    fingerprint = on_cuda.fingerprint()
    assert fingerprint["decode_attention"] == DECODE_ATTENTION_CUDA == "sdpa:flash,efficient,math"
    assert {k: v for k, v in fingerprint.items() if k not in ("decode_attention", "device_type")} == \
        {k: v for k, v in cpu.items() if k != "device_type"}
