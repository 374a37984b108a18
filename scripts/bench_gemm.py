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


def fp8_layers(a: Any, b: Any) -> dict[str, Any] | str:
    """The fp8 callables to time for `a @ b` (a [M, K] bf16 activations, b [K, N] weights), or the
    reason there are none: `layer` is the production `--quant fp8` module (models/fp8.py
    `Fp8Linear`: activation quantization fused by torch.compile, then the row-wise `_scaled_mm`);
    `layer_unfused` the same with the eager quantization (the old path); `gemm` the `_scaled_mm`
    alone on activations quantized beforehand; `torchao` torchao's float8 dynamic-activation
    layer (per-row scales) where torchao is installed."""
    import torch

    from finbench.models.fp8 import Fp8Linear, SharedActivation, fp8_matmul_unavailable, quantize_rows, rowwise_matmul
    from finbench.models.quant import fits

    linear = torch.nn.Linear(b.shape[0], b.shape[1], bias=False, device="meta")
    if not fits(linear, "fp8"):  # _scaled_mm takes widths in multiples of 16 only (3420 raised)
        return f"{b.shape[0]}x{b.shape[1]} is not in multiples of 16: --quant fp8 keeps such a layer in bf16"
    reason = fp8_matmul_unavailable(a.device)
    if reason:
        return reason
    linear = torch.nn.Linear(b.shape[0], b.shape[1], bias=False, device=a.device, dtype=a.dtype)
    with torch.no_grad():
        linear.weight.copy_(b.t())
    layer = Fp8Linear.from_linear(linear)
    unfused = Fp8Linear(layer.weight, layer.weight_scale, None)
    unfused.activation = SharedActivation(1, quantize_rows)
    x_fp8, x_scale = quantize_rows(a)
    calls: dict[str, Any] = {
        "layer": lambda: layer(a), "layer_unfused": lambda: unfused(a),
        "gemm": lambda: rowwise_matmul(x_fp8, x_scale, layer.weight, layer.weight_scale, torch.bfloat16)}
    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

        ao = torch.nn.Sequential(torch.nn.Linear(b.shape[0], b.shape[1], bias=False, device=a.device, dtype=a.dtype))
        with torch.no_grad():
            ao[0].weight.copy_(b.t())
        quantize_(ao, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
        calls["torchao"] = lambda: ao(a)
    except Exception as err:  # noqa: BLE001 — torchao missing or too old: say so in the row
        calls["torchao"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return calls


LM_LAYER = {"hidden": 3584, "q": 3584, "kv": 512, "mlp": 18944, "tokens": 16384}  # one Qwen2.5-VL-7B decoder layer


def decoder_linears(device: Any, dtype: Any, tiny: bool) -> Any:
    """The seven linear layers of one language-model decoder layer as a module that calls them the
    way the layer does: q/k/v on one input, o on another, gate/up on a third, down on their product.
    Returns (module, inputs) with inputs (x, attention output, post-norm x)."""
    import torch

    shape = {k: max(8, v // 32) for k, v in LM_LAYER.items()} if tiny else LM_LAYER
    h, q, kv, mlp = shape["hidden"], shape["q"], shape["kv"], shape["mlp"]

    make = lambda i, o: torch.nn.Linear(i, o, bias=False, device=device, dtype=dtype)  # noqa: E731

    class Linears(torch.nn.Module):  # the parents as in transformers: self_attn and mlp
        def __init__(self) -> None:
            super().__init__()
            self.self_attn, self.mlp = torch.nn.Module(), torch.nn.Module()
            for name, (i, o) in {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}.items():
                self.self_attn.add_module(name, make(i, o))
            for name, (i, o) in {"gate_proj": (h, mlp), "up_proj": (h, mlp), "down_proj": (mlp, h)}.items():
                self.mlp.add_module(name, make(i, o))

        def forward(self, x: Any, attended: Any, normed: Any) -> Any:
            a, m = self.self_attn, self.mlp
            a.q_proj(x), a.k_proj(x), a.v_proj(x)
            a.o_proj(attended)
            return m.down_proj(m.gate_proj(normed) * m.up_proj(normed))

    torch.manual_seed(0)
    module = Linears()
    for linear in module.modules():
        if isinstance(linear, torch.nn.Linear):
            torch.nn.init.normal_(linear.weight, std=linear.in_features ** -0.5)
    tokens = shape["tokens"]
    inputs = tuple(torch.randn(tokens, width, device=device, dtype=dtype) for width in (h, q, h))
    return module, inputs


def layer_row(device: Any, dtype: Any, tiny: bool, time_it: Any, repeat: int) -> dict[str, Any]:
    """One decoder layer's linears, bf16 vs `--quant fp8` (the same `quantize_loaded` call: shared,
    fused activation quantization) — the figure the issue's goal (fp8 ≤ 0.6× bf16) is about."""
    import copy

    import torch

    from finbench.models.fp8 import fp8_matmul_unavailable
    from finbench.models.quant import quantize_loaded

    module, inputs = decoder_linears(device, dtype, tiny)
    row: dict[str, Any] = {"shape": "lm decoder layer, 7 linears", "tokens": inputs[0].shape[0]}
    with torch.inference_mode():
        row["bf16_seconds"] = time_it(lambda: module(*inputs), repeat)
        reason = fp8_matmul_unavailable(device)
        if reason:
            row["fp8"] = reason
            return row
        holder = torch.nn.Module()
        holder.language_model = copy.deepcopy(module)  # quantize_loaded quantizes the language model
        quantize_loaded(holder, "fp8", device)
        row["fp8_seconds"] = time_it(lambda: holder.language_model(*inputs), repeat)
        row["fp8_vs_bf16"] = row["fp8_seconds"] / row["bf16_seconds"]
    return row


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
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype) / k**0.5
        seconds = time_it(lambda: a @ b, args.repeat)
        row: dict[str, Any] = {"shape": name, "m": m, "k": k, "n": n, "seconds": seconds,
                               "tflops": 2 * m * k * n / seconds / 1e12, "kernels": kernel_names(lambda: a @ b, device)}
        fp8 = fp8_layers(a, b)
        if isinstance(fp8, dict):
            with torch.inference_mode():
                for kind, call in fp8.items():
                    if isinstance(call, str):
                        row[f"fp8_{kind}"] = call
                        continue
                    row[f"fp8_{kind}_seconds"] = time_it(call, args.repeat)
                    row[f"fp8_{kind}_vs_bf16"] = row[f"fp8_{kind}_seconds"] / seconds
                    row[f"fp8_{kind}_kernels"] = kernel_names(call, device)
            row["fp8_tflops"] = 2 * m * k * n / row["fp8_layer_seconds"] / 1e12
        else:
            row["fp8"] = fp8
        rows.append(row)
        print(f"{name:32s} {m:6d}x{k:5d}x{n:5d}  {row['tflops']:8.3g} TFLOP/s"
              + (f"  fp8 layer {row['fp8_layer_vs_bf16']:.2f}x of bf16 (unfused {row['fp8_layer_unfused_vs_bf16']:.2f}x, "
                 f"gemm {row['fp8_gemm_vs_bf16']:.2f}x, torchao {row.get('fp8_torchao_vs_bf16', float('nan')):.2f}x)"
                 if "fp8_layer_seconds" in row else f"  fp8: {row['fp8']}")
              + f"  {row['kernels'][:1]}", flush=True)
        write()
        del a, b
    layer = layer_row(device, dtype, args.tiny, time_it, args.repeat)
    print(f"{layer['shape']}: bf16 {1e3 * layer['bf16_seconds']:.2f} ms"
          + (f", fp8 {layer['fp8_vs_bf16']:.2f}x of it" if "fp8_vs_bf16" in layer else f", fp8: {layer['fp8']}"), flush=True)
    write({"decoder_layer": layer})
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
    return write({"decoder_layer": layer, "sustained": sustained})


if __name__ == "__main__":
    main(sys.argv[1:])
