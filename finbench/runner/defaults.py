"""The batch size, token budget and preprocessing threads of a run that gives none (`None` in
RunConfig): on the CPU the long-standing defaults, on CUDA what the GPU check measured, sized to
the GPU's memory and the machine's cores. Sized once, at start-up, where the device is known
(`size_to_device`: `finbench run`, `sweep`, `demo` and `finbench.evaluate` alike), and named in
the config's `sized` (results.json `config.sized`). One function for the runs and
scripts/gpu_check.py, so the figure the README quotes is the run a user gets."""

from __future__ import annotations

import os
from typing import Any

import torch

from finbench.config.specs import RunConfig
from finbench.core.sources import is_served
from finbench.core.types import AUTO  # noqa: F401  (AUTO: --batch-size auto, named here too)

# What the H200 check ran (benchmarks/results/gpu_check_h200.json): batch auto (64, halved on
# out-of-memory), 98,304 tokens per batch on ~140 GiB and 8 preprocessing threads on 16 CPU cores.
CPU_DEFAULTS = {"batch_size": 8, "token_budget": 16384, "workers": 2}
TOKENS_PER_GIB = 768  # token budget per GiB of GPU memory: 98,304 on 128 GiB and more
MEASURED_TOKEN_BUDGET = 98_304  # the largest budget measured; larger GPUs are not extrapolated to
MAX_WORKERS = 8  # the largest worker count measured
SERVED_BATCH = 64  # a served model's rows per batch (models/served.py sends them `--in-flight` at a time)
SIZED = ("batch_size", "token_budget", "workers")  # the settings a run may leave to the device


def sized_defaults(device_type: str, gpu_memory_bytes: int | None = None, cpu_count: int | None = None) -> dict[str, Any]:
    """`finbench run`'s --batch-size, --token-budget and --workers when not given, for a device of
    `device_type` with `gpu_memory_bytes` and a machine of `cpu_count` cores. On the CPU exactly
    the long-standing defaults (8 rows, 16,384 tokens, 2 threads). On CUDA what the GPU check
    measures (scripts/gpu_check.py calls this function): batch auto, a token budget of 768 per GiB
    of GPU memory in steps of 8,192 (16,384 to 98,304), one preprocessing thread per two cores
    (2 to 8): a 24 GB GPU gets 16,384 tokens, an 80 GB one 57,344, an H200 98,304."""
    if device_type != "cuda" or not gpu_memory_bytes:
        return dict(CPU_DEFAULTS)
    budget = int(gpu_memory_bytes / 2**30 * TOKENS_PER_GIB) // 8192 * 8192
    return {"batch_size": None, "token_budget": max(CPU_DEFAULTS["token_budget"], min(MEASURED_TOKEN_BUDGET, budget)),
            "workers": max(2, min(MAX_WORKERS, (cpu_count or 2) // 2))}


def run_defaults(device: str) -> dict[str, Any]:
    """`sized_defaults` for `--device` (auto: CUDA when there is one) on this machine; the CPU ones
    for a device that is not there (start-up then reports it in one line)."""
    try:
        resolved = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                "cpu" if device == "auto" else device)
        if resolved.type != "cuda" or not torch.cuda.is_available():
            return sized_defaults("cpu")
        memory = torch.cuda.get_device_properties(resolved.index or 0).total_memory
    except (RuntimeError, ValueError, AssertionError):
        return sized_defaults("cpu")
    affinity = getattr(os, "sched_getaffinity", None)  # the cores this process may use (Linux)
    cpus = len(affinity(0)) if affinity else os.cpu_count()
    return sized_defaults("cuda", memory, cpus)


def size_to_device(config: RunConfig, device: str | torch.device) -> RunConfig:
    """`config` with each of its SIZED settings left None sized to `device` (a CUDA GPU: batch
    auto, its memory's token budget, the machine's threads), and those named in `sized`; given
    settings are kept and not named. A config sized already is returned as it is."""
    missing = [name for name in SIZED if config.option(name) is None]
    if not missing:
        return config
    figures = run_defaults(str(device))
    if is_served(config.model):  # rows per batch = answers committed at once; the server's in-flight cap bounds them
        figures["batch_size"] = SERVED_BATCH
    values = {name: AUTO if name == "batch_size" and figures[name] is None else figures[name] for name in missing}
    return config.replaced(**values, sized=tuple(n for n in SIZED if n in missing or n in config.sized))
