"""Throughput: finbench's constrained path vs a generate-then-regex baseline, side by side.

Same model, same synthetic FinMME questions, same prompts, one process:
- finbench: `run_benchmark` (threaded preprocessing with prefetch, length-bucketed batches,
  one prefill per choice question reading only the option rows of the LM head);
- baseline: what most runners do for local VLMs — one question at a time, `generate` 32 new
  tokens greedily, then a regex for the answer letter.
Absolute numbers on a CPU with a tiny model mean little; the ratio is the point. For GPU
figures at full model size see scripts/gpu_check.sh.

    python scripts/bench_throughput.py [--model DIR] [--n-items 72] [--batch-size 16]

Last line: `ratio: X.XX` (finbench samples/s ÷ baseline samples/s).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: build a tiny random Qwen2.5-VL)")
    parser.add_argument("--data", help="FinMME-format data (default: generate the synthetic set)")
    parser.add_argument("--n-items", type=int, default=72)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)

    import torch

    from finbench.benchmarks import finmme
    from finbench.offline.finmme_synthetic import write_parquet
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.offline.tiny import make_tiny
    from finbench.offline.baseline import run_baseline
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import RunConfig

    work = Path(tempfile.mkdtemp(prefix="finbench-bench-"))
    model_dir = args.model or str(make_tiny("qwen2.5-vl", work / "tiny-qwen2.5-vl"))
    data = args.data or str(write_parquet(work / "finmme.parquet", n_items=args.n_items))
    model = load_model(model_dir, LoadSpec(dtype=args.dtype, device=args.device))
    questions = finmme.load_questions(data, limit=args.n_items)
    print(f"model {model_dir} ({model.device}, {model.dtype}), {len(questions)} questions, "
          f"torch threads {torch.get_num_threads()}")

    # warm-up both paths on a few questions so one-time costs (allocations, lazy imports) are not charged
    run_baseline(model, finmme.BENCHMARK, questions[:2])
    run_benchmark(RunConfig.flat(model=model_dir, data=data, limit=4, out=str(work / "warmup"),
                            batch_size=args.batch_size), model, show_progress=False)

    result = run_benchmark(RunConfig.flat(model=model_dir, data=data, limit=args.n_items, out=str(work / "finbench"),
                                     batch_size=args.batch_size), model, show_progress=False)
    ours = result.results["throughput"]
    baseline = run_baseline(model, finmme.BENCHMARK, questions)

    print(f"finbench  : {ours['samples_per_s']:8.2f} samples/s  ({ours['samples']} samples in {ours['seconds']:.2f} s)")
    print("  stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(ours["stages_s"].items())))
    print("  (preprocess runs in worker threads, overlapped with the model; its time is summed over threads)")
    print(f"baseline  : {baseline['samples_per_s']:8.2f} samples/s  ({len(questions)} samples in "
          f"{baseline['seconds']:.2f} s, generate {baseline['new_tokens']} new tokens, "
          f"{baseline['parsed']} answers parsed by the regex)")
    print("  stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in baseline["stages_s"].items()))
    ratio = ours["samples_per_s"] / baseline["samples_per_s"]
    print(f"ratio: {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main(sys.argv[1:])
