"""The generic family against a specific one on the same checkpoint: a tiny Qwen2.5-VL answered
through `--family auto` (models/auto.py: the model's own generation step, full-vocabulary logits of
the last position, no fast paths) and through `qwen2.5-vl` (models/qwen2_5_vl.py: option rows
only, and on CUDA the mask-free prefill, static and graphed decode steps). Each family runs the
same FinMME items twice into its own folder, the second pass after the cache is dropped; the
report is the median samples/s of the timed passes and the ratio specific / generic (> 1: the
specific family is faster). The answers of both must agree: the script says when they do not.

    python scripts/bench_auto_family.py                       # CPU, tiny model, 40 items
    python scripts/bench_auto_family.py --model DIR --items 200 --device cuda
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path


def _run(model: str, family: str, data: Path, out: Path, device: str, batch_size: int) -> tuple[float, list[str]]:
    """One evaluation without a cache: samples/s (the run's own throughput) and the answers."""
    import pandas as pd

    from finbench.app.api import evaluate

    shutil.rmtree(out, ignore_errors=True)
    evaluate(model, "finmme", data=str(data), out=out, family=family, device=device, dtype="float32"
             if device == "cpu" else "auto", batch_size=batch_size, bootstrap=0)
    results = json.loads((out / "results.json").read_text())
    answers = pd.read_parquet(out / "samples.parquet").sort_values("id")["answer"].tolist()
    return float(results["throughput"]["samples_per_s"]), answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint folder (default: a tiny Qwen2.5-VL built here)")
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per family")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    from finbench.offline.finmme_synthetic import write_parquet
    from finbench.offline.tiny import make_tiny

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model = args.model or str(make_tiny("qwen2.5-vl", root / "tiny-qwen2.5-vl", weights_dtype="float32"))
        data = write_parquet(root / "finmme.parquet", n_items=args.items, seed=0)
        speeds: dict[str, list[float]] = {}
        answers: dict[str, list[str]] = {}
        for _ in range(args.repeat + 1):  # the first pass of each warms up (imports, allocator)
            for family in ("qwen2.5-vl", "auto"):
                speed, answers[family] = _run(model, family, data, root / family, args.device, args.batch_size)
                speeds.setdefault(family, []).append(speed)
        generic, specific = (statistics.median(speeds[f][1:]) for f in ("auto", "qwen2.5-vl"))
        print(f"model {model} · {args.items} FinMME items · device {args.device} · batch {args.batch_size}")
        print(f"qwen2.5-vl: {specific:.2f} samples/s · auto: {generic:.2f} samples/s · "
              f"ratio qwen2.5-vl / auto = {specific / generic:.2f}")
        if answers["auto"] != answers["qwen2.5-vl"]:
            print("the answers differ between the two families")


if __name__ == "__main__":
    main()
