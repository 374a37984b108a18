"""The generate-then-regex baseline that finbench is measured against: what most runners do for
local VLMs. One question at a time, sequential preprocessing, `generate` a fixed number of new
tokens greedily, then a regex for the answer. Used by the throughput scripts, never by runs."""

from __future__ import annotations

import re
import time
from typing import Any, Sequence

from finbench.benchmarks.base import Benchmark
from finbench.core.types import Question
from finbench.runner.run_requests import model_request

BASELINE_NEW_TOKENS = 32
BASELINE_PATTERN = re.compile(r"(?i)Answer\s*:\s*([A-N](?:\s*,\s*[A-N])*|-?[\d.]+)")


def run_baseline(model: Any, benchmark: Benchmark, questions: Sequence[Question],
                 new_tokens: int = BASELINE_NEW_TOKENS) -> dict[str, Any]:
    """samples/s and per-stage seconds of generate(batch 1, `new_tokens`) + regex."""
    import torch

    timings = {"preprocess": 0.0, "generate": 0.0, "extract": 0.0}
    answers = []
    cuda = model.device.type == "cuda"
    started = time.perf_counter()
    for question in questions:
        t0 = time.perf_counter()
        request = model_request(benchmark, question, "constrained")
        inputs = model.to_device(model.prepare([request]))
        t1 = time.perf_counter()
        texts, _ = model.generate(inputs, new_tokens)
        if cuda:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        match = BASELINE_PATTERN.search("Answer:" + texts[0])
        answers.append(match.group(1) if match else "")
        timings["preprocess"] += t1 - t0
        timings["generate"] += t2 - t1
        timings["extract"] += time.perf_counter() - t2
    seconds = time.perf_counter() - started
    return {"samples": len(questions), "samples_per_s": len(questions) / seconds, "seconds": seconds,
            "stages_s": timings, "new_tokens": new_tokens, "parsed": sum(1 for a in answers if a)}
