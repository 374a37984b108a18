"""The language model's attention as finbench's prefills and decode steps call it, at Qwen2.5-VL-7B
shapes (28 query heads, 4 KV heads, head dim 128): masked vs causal vs packed, and the host cost of
a first shape against a repeated one.

- prefill, masked: left-padded rows, a 4-D boolean mask, the KV heads repeated (transformers' SDPA
  path with a mask); on CUDA SDPA then picks cuDNN, which builds a graph for every new shape;
- prefill, causal: right-aligned rows, no mask, `is_causal` (models/fast_paths.py), GQA in SDPA;
- prefill, packed: the real tokens of all rows in one sequence, PyTorch's varlen kernel (causal);
- decode step: one query over the cache, masked with repeated KV heads vs `one_query_attention`
  (models/static_decode.py).
For each: host seconds of the first call at a new shape (what the host pays before the device can
start) and of a repeated call, and device seconds (CUDA events, median). Rows are 1,300–1,408 tokens,
as FinMME-like prompts with one 1024×768 chart.

    python scripts/bench_attention.py --out benchmarks/results     # CUDA (scripts/gpu_check.sh)
    python scripts/bench_attention.py --tiny --out /tmp/attention  # CPU: the logic on small shapes
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable


def _median_device_seconds(fn: Callable[[], Any], repeat: int, cuda: bool) -> float:
    import torch

    samples = []
    for _ in range(repeat):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def measure(name: str, make: Callable[[int], Callable[[], Any]], lengths: list[int], repeat: int,
            cuda: bool) -> dict[str, Any]:
    """`make(T)` builds the call for padded length T. Host seconds of the first call at T (a new
    shape), then of a repeated call at T, and device seconds at T."""
    import torch

    row: dict[str, Any] = {"variant": name}
    try:
        for label, length in (("first", lengths[0]), ("new_shape", lengths[1])):
            fn = make(length)
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            fn()
            row[f"host_{label}_s"] = time.perf_counter() - started
            if cuda:
                torch.cuda.synchronize()
        fn = make(lengths[1])
        started = time.perf_counter()
        fn()
        row["host_repeated_s"] = time.perf_counter() - started
        row["device_s"] = _median_device_seconds(fn, repeat, cuda)
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as err:
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from finbench.models.static_decode import one_query_attention

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tiny", action="store_true", help="CPU, small shapes (tests the logic)")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    cuda = not args.tiny
    if cuda and not torch.cuda.is_available():
        sys.exit("bench_attention: no CUDA device (use --tiny for the CPU mode)")
    device, dtype = torch.device("cuda" if cuda else "cpu"), torch.bfloat16 if cuda else torch.float32
    heads, kv_heads, dim = (28, 4, 128) if cuda else (4, 2, 16)
    rows = args.rows if cuda else 3
    lengths = [1408, 1376] if cuda else [40, 36]
    # drawn on the device in the benchmark's dtype: ~200 M numbers per call drawn on the CPU and
    # copied over took longer than the attention measured
    generator = torch.Generator(device=device).manual_seed(0)

    def tensors(length: int) -> tuple[Any, ...]:
        real = torch.randint(length - (64 if cuda else 6), length + 1, (rows,), generator=generator, device=device)
        q = torch.randn(rows, heads, length, dim, generator=generator, device=device, dtype=dtype)
        k, v = (torch.randn(rows, kv_heads, length, dim, generator=generator, device=device, dtype=dtype)
                for _ in range(2))
        return q, k, v, real

    def masked(length: int) -> Callable[[], Any]:
        q, k, v, real = tensors(length)
        columns = torch.arange(length, device=device)
        keep = columns[None, :] >= (length - real)[:, None]  # left padding
        mask = (columns[None, :, None] >= columns[None, None, :]) & keep[:, None, :]
        kr, vr = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
        return lambda: F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask[:, None])

    def causal(length: int) -> Callable[[], Any]:
        q, k, v, _ = tensors(length)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def packed(length: int) -> Callable[[], Any]:
        from torch.nn.attention.varlen import varlen_attn

        q, k, v, real = tensors(length)
        pick = lambda t: torch.cat([t[i, :, : int(n)].transpose(0, 1) for i, n in enumerate(real)])  # noqa: E731
        qp, kp, vp = pick(q), pick(k), pick(v)
        parameters = inspect.signature(varlen_attn).parameters
        if "enable_gqa" not in parameters:
            kp, vp = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (kp, vp))
        options = {"enable_gqa": True} if "enable_gqa" in parameters else {}
        options.update({"is_causal": True} if "is_causal" in parameters else {"window_size": (-1, 0)})
        cu = torch.nn.functional.pad(real.cumsum(0), (1, 0)).to(torch.int32)
        longest = int(real.max())
        return lambda: varlen_attn(qp, kp, vp, cu, cu, longest, longest, **options)

    def decode_masked(length: int) -> Callable[[], Any]:
        q, k, v, real = tensors(length)
        keep = torch.arange(length, device=device)[None, :] >= (length - real)[:, None]
        kr, vr = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
        return lambda: F.scaled_dot_product_attention(q[:, :, -1:], kr, vr, attn_mask=keep[:, None, None, :])

    def decode_grouped(length: int) -> Callable[[], Any]:
        q, k, v, real = tensors(length)
        keep = torch.arange(length, device=device)[None, :] >= (length - real)[:, None]
        return lambda: one_query_attention(q[:, :, -1:], k, v, keep)

    variants = [("prefill masked (repeat_kv)", masked), ("prefill causal (no mask)", causal),
                ("prefill packed (varlen)", packed), ("decode masked (repeat_kv)", decode_masked),
                ("decode one-query (grouped)", decode_grouped)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench_attention_tiny" if args.tiny else "bench_attention_h200"
    results: list[dict[str, Any]] = []
    payload: dict[str, Any] = {}
    backends = [("default", None)]
    if cuda:
        from torch.nn.attention import SDPBackend

        backends.append(("no cuDNN", [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]))
    for backend, allowed in backends:
        for name, make in variants:
            if allowed is not None and "packed" in name:
                continue  # not an SDPA backend choice
            if allowed is None:
                row = measure(name, make, lengths, args.repeat, cuda)
            else:
                from torch.nn.attention import sdpa_kernel

                with sdpa_kernel(allowed):
                    row = measure(name, make, lengths, args.repeat, cuda)
            row["backends"] = backend
            results.append(row)
            print(f"[{backend}] {name:28s} " + (row["error"] if "error" in row else
                  f"host first {1e3 * row['host_first_s']:.2f} ms, new shape {1e3 * row['host_new_shape_s']:.2f} ms, "
                  f"repeated {1e3 * row['host_repeated_s']:.2f} ms; device {1e3 * row['device_s']:.3f} ms"), flush=True)
            payload = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
                       "shape": {"rows": rows, "heads": heads, "kv_heads": kv_heads, "head_dim": dim,
                                 "lengths": lengths}, "results": results}
            (out / f"{stem}.json").write_text(json.dumps(payload, indent=1))
    return payload


if __name__ == "__main__":
    main(sys.argv[1:])
