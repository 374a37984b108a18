"""GEMMs at the production shapes of Qwen2.5-VL-7B: which kernel runs and at what rate.

The H200 profile showed the vision MLP's GEMMs (width 3420) in an Ampere fallback kernel at ~240
TFLOP/s while the others ran ~790 (models/padding.py). This measures, per shape: bf16 time (CUDA
events, median of `--repeat` after a warm-up), TFLOP/s, the kernel's name (torch.profiler, one
call), and fp8 (`torch._scaled_mm`, e4m3, per-tensor scales) where the GPU has it; then one shape
for `--sustain` seconds back to back, TFLOP/s per second (clocks and power in nvidia-smi's log:
scripts/gpu_check.sh samples them meanwhile). The vision shapes come twice: the published width
3420 and the padded 3456.

    python scripts/bench_gemm.py --out benchmarks/results          # CUDA (scripts/gpu_check.sh)
    python scripts/bench_gemm.py --tiny --out /tmp/gemm            # CPU: the logic on small shapes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# (name, M rows = tokens, K, N): 16,384 tokens is a quarter of 16 charts' patches or a batch's text
SHAPES = [
    ("vision gate/up 3420", 16384, 1280, 3420), ("vision gate/up 3456 (padded)", 16384, 1280, 3456),
    ("vision down 3420", 16384, 3420, 1280), ("vision down 3456 (padded)", 16384, 3456, 1280),
    ("vision qkv", 16384, 1280, 3840), ("vision merger", 4096, 5120, 5120),
    ("lm qkv", 16384, 3584, 4608), ("lm o", 16384, 3584, 3584),
    ("lm gate/up", 16384, 3584, 18944), ("lm down", 16384, 18944, 3584),
    ("lm decode gate/up (64 rows)", 64, 3584, 18944),
]
SUSTAINED = "lm gate/up"


def tiny_shapes() -> list[tuple[str, int, int, int]]:
    return [(name, max(8, m // 256), max(8, k // 32), max(8, n // 32)) for name, m, k, n in SHAPES]


def timer(device: Any):
    """A function that times `fn` `repeat` times and returns the median seconds per call."""
    import torch

    def time_it(fn: Any, repeat: int) -> float:
        fn()
        if device.type != "cuda":
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - started)
            return statistics.median(samples)
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return statistics.median(samples)

    return time_it


def kernel_names(fn: Any, device: Any) -> list[str]:
    """Names of the device kernels (CUDA) or operators (CPU) one call of `fn` launches."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CUDA if device.type == "cuda" else torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as profiler:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    names = []
    for event in profiler.events():
        kind = getattr(event, "device_type", None)
        on_device = kind is not None and "CUDA" in str(kind)
        if (on_device or device.type != "cuda") and event.name not in names:
            names.append(event.name)
    return names[:4]


def fp8_gemm(a: Any, b: Any) -> Any:
    """A callable for e4m3 `a @ b` with unit per-tensor scales, or the reason there is none."""
    import torch

    if a.device.type != "cuda" or torch.cuda.get_device_capability(a.device) < (8, 9):
        return "needs a CUDA GPU of compute capability 8.9 or later"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return "this torch has no torch._scaled_mm"
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants the second operand
    one = torch.ones((), device=a.device)
    try:
        torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError) as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tiny", action="store_true", help="CPU, small shapes (tests the logic)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sustain", type=float, default=10.0, help="seconds of back-to-back GEMMs on one shape")
    args = parser.parse_args(argv)
    device = torch.device("cpu" if args.tiny else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gemm: no CUDA device (use --tiny for the CPU mode)")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    time_it = timer(device)
    rows: list[dict[str, Any]] = []
    stem = "bench_gemm_tiny" if args.tiny else "bench_gemm_h200"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(extra: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                   "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), "shapes": rows, **(extra or {})}
        (out / f"{stem}.json").write_text(json.dumps(payload, indent=1))
        return payload

    for name, m, k, n in (tiny_shapes() if args.tiny else SHAPES):
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        seconds = time_it(lambda: a @ b, args.repeat)
        row: dict[str, Any] = {"shape": name, "m": m, "k": k, "n": n, "seconds": seconds,
                               "tflops": 2 * m * k * n / seconds / 1e12, "kernels": kernel_names(lambda: a @ b, device)}
        fp8 = fp8_gemm(a, b)
        if callable(fp8):
            row["fp8_seconds"] = time_it(fp8, args.repeat)
            row["fp8_tflops"] = 2 * m * k * n / row["fp8_seconds"] / 1e12
            row["fp8_kernels"] = kernel_names(fp8, device)
        else:
            row["fp8"] = fp8
        rows.append(row)
        print(f"{name:32s} {m:6d}x{k:5d}x{n:5d}  {row['tflops']:8.3g} TFLOP/s"
              + (f"  fp8 {row['fp8_tflops']:8.3g}" if "fp8_tflops" in row else f"  fp8: {row['fp8']}")
              + f"  {row['kernels'][:1]}", flush=True)
        write()
        del a, b
    name, m, k, n = next(s for s in (tiny_shapes() if args.tiny else SHAPES) if s[0] == SUSTAINED)
    a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
    per_second: list[float] = []
    finish = time.perf_counter() + args.sustain
    while time.perf_counter() < finish:
        started, calls = time.perf_counter(), 0
        while time.perf_counter() - started < min(1.0, args.sustain):
            a @ b
            calls += 1
            if device.type == "cuda" and calls % 8 == 0:
                torch.cuda.synchronize()
        if device.type == "cuda":
            torch.cuda.synchronize()
        per_second.append(2 * m * k * n * calls / (time.perf_counter() - started) / 1e12)
    sustained = {"shape": name, "seconds": args.sustain, "tflops_per_second": per_second}
    print(f"sustained {name}: " + " ".join(f"{t:.0f}" for t in per_second) + " TFLOP/s, second by second", flush=True)
    return write({"sustained": sustained})


if __name__ == "__main__":
    main(sys.argv[1:])
