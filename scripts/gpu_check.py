"""GPU check: finbench vs the generate-then-regex baseline on full-size Qwen2.5-VL shapes.

Builds Qwen2.5-VL-7B- and 3B-shaped models with RANDOM weights in bf16 straight on the GPU from
their published config values (nothing is downloaded; a one-prefill scorer's cost does not
depend on weight values), makes FinMME-like items (1024×768 synthetic charts, ~300 prompt text
tokens), and measures for each model:
- finbench's constrained path (single/multi/numerical decoders, batched, prefetching):
  samples/s, prefill TFLOP/s (analytic FLOPs ÷ forward time) and MFU against 790 TFLOP/s,
  end-to-end TFLOP/s, peak memory, projected time for the 11,099 FinMME items;
- the baseline (batch 1, generate 32 new tokens, regex) on a subset: samples/s and the ratio;
- 8-bit and 4-bit runs (bitsandbytes, loaded through the real `from_pretrained` path from a
  saved checkpoint) when bitsandbytes is importable.
The vision tower runs finbench's packed attention (models/vision_attention.py: one call per layer
without flash-attn; the report's `attn_implementation` says which ran). Inside the prefill, the
vision tower, the M-RoPE position building (`get_rope_index`) and the language model are timed
apart (`prefill_parts_s`), and the planner's padding is reported (`padding_ratio`).
The tokenizer and processor are the real Qwen2.5-VL classes from the tiny model builder, with the
real image-processor pixel limits; the full-size configs' special-token ids are remapped to it.

    python scripts/gpu_check.py --out benchmarks/results            # the H200 run (scripts/gpu_check.sh)
    python scripts/gpu_check.py --tiny --out /tmp/gpu-check          # CPU mode: same logic, tiny shapes
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import io
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

H200_BF16_TFLOPS = 790.0  # measured dense bf16 matmul rate on this H200 (SPEC.md)
FINMME_ITEMS = 11_099
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 56 * 56, 28 * 28 * 16384  # the released processor's limits
TINY_OVERRIDES = {"layers": 2, "hidden_size": 64, "vision_depth": 2, "vocab_size": 448}


def build_processor(work: Path, tiny: bool) -> Any:
    """The real Qwen2.5-VL processor classes with a small offline tokenizer; full-size pixel
    limits so a 1024×768 chart becomes 999 image tokens as with the released model."""
    from transformers import AutoProcessor

    from finbench.offline.tiny import make_tiny

    folder = make_tiny("qwen2.5-vl", work / "processor")
    processor = AutoProcessor.from_pretrained(folder)
    if not tiny:
        processor.image_processor.size = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    return processor


def model_config(name: str, tokenizer: Any, tiny: bool) -> Any:
    """Published full-size config (or its scaled-down twin) with special tokens remapped."""
    from finbench.offline.shapes import full_size_config, scaled_down

    config = full_size_config(name)
    ids = {key: tokenizer.convert_tokens_to_ids(token) for key, token in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    for key, value in ids.items():
        setattr(config, key, value)
    for sub in (getattr(config, "text_config", None),):
        if sub is not None:
            sub.bos_token_id = sub.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return scaled_down(config, **TINY_OVERRIDES) if tiny else config


def make_items(path: Path, n_items: int, image_size: tuple[int, int], tokenizer: Any, text_tokens: int) -> Path:
    """FinMME-format parquet: synthetic charts upscaled to `image_size`, related sentences padded
    so the prompt text has about `text_tokens` tokens, replicated to `n_items` distinct ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from finbench.offline.finmme_synthetic import generate_items

    base = generate_items(n_items=min(n_items, 64), seed=0)
    filler = " Analysts attribute the change to funding costs, currency moves and seasonal demand."
    records = []
    for copy in range((n_items + len(base) - 1) // len(base)):
        for item in base:
            if len(records) == n_items:
                break
            record = {k: v for k, v in item.items() if not k.startswith("_")}
            image = Image.open(io.BytesIO(item["image"]["bytes"])).convert("RGB").resize(image_size, Image.BICUBIC)
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=90)
            sentences = record["related_sentences"]
            while len(tokenizer(record["question_text"] + sentences + record["verified_caption"])["input_ids"]) < text_tokens - 60:
                sentences += filler
            record.update(id=f"{item['id']}-{copy}", image={"bytes": buffer.getvalue(), "path": f"{item['id']}.jpg"},
                          related_sentences=sentences)
            records.append(record)
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def load_adapter(name: str, processor: Any, config: Any, device: str, dtype: Any, quant: str, work: Path) -> Any:
    """bf16: build in place on the device. 8/4-bit: save the random checkpoint with its processor
    and load it back through `load_model` — the path a user's checkpoint takes."""
    from finbench.models import load_model
    from finbench.models.qwen2_5_vl import Qwen25VL
    from finbench.offline.shapes import build_random_model

    model = build_random_model(config, dtype=dtype, device=device)
    if quant == "none":
        return Qwen25VL(model, processor, f"random:{name}")
    folder = work / f"{name}-checkpoint"
    if not (folder / "config.json").exists():
        model.save_pretrained(folder)
        processor.save_pretrained(folder)
    del model
    _free()
    return load_model(str(folder), dtype="bfloat16" if device != "cpu" else "float32", device=device, quant=quant)


def _fill_once_minutes(throughput: dict[str, Any]) -> float | None:
    """FinMME minutes at this run's steady rate plus one pipeline fill."""
    wait, seconds, samples = throughput.get("first_batch_wait_s"), throughput["seconds"], throughput["samples"]
    if wait is None or not samples or seconds <= wait:
        return None
    return (wait + FINMME_ITEMS * (seconds - wait) / samples) / 60


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def warm_adapter(name: str, quant: str, args: argparse.Namespace, processor: Any, data: Path,
                 work: Path) -> tuple[Any, Any, float]:
    """A fresh random-weight adapter, its run config and its build (or load) seconds, after a
    warm-up run of 8 items (CUDA context, kernel autotuning and allocator growth are not charged
    to the measured run)."""
    import torch

    from finbench.runner.engine import run_benchmark
    from finbench.types import RunConfig

    dtype = torch.float32 if args.tiny else torch.bfloat16
    started = time.perf_counter()
    adapter = load_adapter(name, processor, model_config(name, processor.tokenizer, args.tiny), args.device, dtype,
                           quant, work)
    build_seconds = time.perf_counter() - started
    n_items = args.n_items if quant == "none" else args.n_quant_items
    run_config = RunConfig(model=f"random:{name}", data=str(data), limit=n_items, batch_size=args.batch_size,
                           token_budget=args.token_budget, workers=args.workers, out=str(work / f"run-{name}-{quant}"))
    run_benchmark(dataclasses.replace(run_config, limit=min(8, n_items), out=str(work / "warmup")),
                  adapter, show_progress=False)
    return adapter, run_config, build_seconds


def measure(name: str, quant: str, args: argparse.Namespace, processor: Any, data: Path, work: Path) -> dict[str, Any]:
    from finbench.benchmarks import finmme
    from finbench.models import vision_attention
    from finbench.runner.baseline import run_baseline
    from finbench.runner.engine import run_benchmark

    adapter, run_config, build_seconds = warm_adapter(name, quant, args, processor, data, work)
    vision_attention.KERNEL_CALLS.clear()
    result = run_benchmark(run_config, adapter, show_progress=False).results
    errors = result["errors"]["count"]
    first_error = next(iter(result["errors"].get("by_message", {})), "")
    if errors == result["n_questions"]:  # no sample answered: its "rate" is not a rate
        raise RuntimeError(f"all {errors} samples failed: {first_error}")
    throughput = result["throughput"]
    samples_per_s = throughput["samples_per_s"]
    stages = throughput["stages_s"]
    report: dict[str, Any] = {
        "model": name, "quant": quant, "dtype": str(adapter.dtype).removeprefix("torch."), "device": str(adapter.device),
        "parameters": sum(p.numel() for p in adapter.model.parameters()),
        "build_or_load_s": build_seconds, "samples": throughput["samples"], "seconds": throughput["seconds"],
        "samples_per_s": samples_per_s,
        "image_tokens_per_s": throughput["image_tokens_per_s"],
        "mean_prompt_tokens": throughput["prompt_tokens"] / max(throughput["samples"], 1),
        "mean_image_tokens": throughput["image_tokens"] / max(throughput["samples"], 1),
        "stages_s": stages, "final_max_batch": throughput["final_max_batch"], "oom_retries": throughput["oom_retries"],
        "attn_implementation": adapter.attn_implementation,
        "vision_kernel_calls": dict(vision_attention.KERNEL_CALLS), "prefill_parts_s": throughput.get("model_parts_s", {}),
        "padding_ratio": throughput.get("padding_ratio"),
        "prefill_flops_total": throughput["prefill_flops"],
        "prefill_tflops_per_s": throughput["prefill_tflops_per_s"],
        "end_to_end_tflops_per_s": throughput["prefill_flops"] / throughput["seconds"] / 1e12,
        "peak_memory_gib": throughput.get("peak_memory_gib", throughput.get("peak_rss_gib")),
        "projected_finmme_minutes": FINMME_ITEMS / samples_per_s / 60 if samples_per_s else None,
        # a full run pays the pipeline fill (first batch preprocessed, nothing to compute yet) once
        "first_batch_wait_s": throughput.get("first_batch_wait_s"),
        "projected_finmme_minutes_fill_once": _fill_once_minutes(throughput),
        "accuracy_random_weights": result["scores"].get("accuracy"),
        # failed samples are cheap, so some failing would flatter the rate: shown in the headline
        "sample_errors": errors, "first_sample_error": first_error,
    }
    if report["prefill_tflops_per_s"]:
        report["prefill_mfu"] = report["prefill_tflops_per_s"] / H200_BF16_TFLOPS
    report["end_to_end_mfu"] = report["end_to_end_tflops_per_s"] / H200_BF16_TFLOPS
    first = quant == "none" and name == args.models.split(",")[0]
    if first and args.profile_items > 0:
        report["profile"] = profile_batch(run_config, adapter, args, work, Path(args.out) / f"gpu_profile_{name}.txt")
    if first and args.baseline_items > 0:  # the ratio for the first model (the 3B's was 34.6x, 2026-11)
        questions = finmme.load_questions(str(data), limit=args.baseline_items + 1)
        run_baseline(adapter, finmme.BENCHMARK, questions[:1])  # warm-up
        baseline = run_baseline(adapter, finmme.BENCHMARK, questions[1:])
        report["baseline"] = baseline
        report["speedup_vs_baseline"] = samples_per_s / baseline["samples_per_s"]
    del adapter
    _free()
    return report


def run_ab(report: dict[str, Any], args: argparse.Namespace, processor: Any, data: Path, work: Path,
           written: Any) -> None:
    """The first model again, once per `--ab` variant, each on a fresh adapter (a compiled one
    stays compiled); results go to report["ab"] and are written after each variant. A variant
    that fails records its error; the others still run."""
    for variant in filter(None, args.ab.split(",")):
        print(f"== {report['model']} A/B: {variant}", flush=True)
        try:
            adapter, run_config, _ = warm_adapter(report["model"], "none", args, processor, data, work)
            report.setdefault("ab", {})[variant] = AB_VARIANTS[variant](
                run_config, adapter, work / f"run-{report['model']}-{variant}")
            del adapter
        except Exception as err:  # noqa: BLE001 — a comparison only
            traceback.print_exc()
            report.setdefault("ab", {})[variant] = {"error": f"{type(err).__name__}: {err}"}
        _free()
        written()


def _ab_report(throughput: dict[str, Any], extra_seconds: float = 0.0) -> dict[str, Any]:
    return {"samples_per_s": throughput["samples_per_s"], "seconds": throughput["seconds"],
            "stages_s": throughput["stages_s"], "prefill_parts_s": throughput.get("model_parts_s", {}),
            "prefill_tflops_per_s": throughput["prefill_tflops_per_s"],
            "projected_finmme_minutes": (extra_seconds + FINMME_ITEMS / throughput["samples_per_s"]) / 60}


def without_cudnn_sdpa(run_config: Any, adapter: Any, out: Path) -> dict[str, Any]:
    """The same run with PyTorch's cuDNN SDPA backend off in the prefill too (decode steps leave it
    out already: models/base.py `decode_attention`); the language model's masked prefill attention
    then takes the memory-efficient kernel. Says whether cuDNN's per-shape graph builds (~2.7 ms of
    host time per call on the H200) cost more than its faster kernel gains."""
    import torch

    from finbench.runner.engine import run_benchmark

    switch = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)
    enabled = torch.backends.cuda.cudnn_sdp_enabled() if switch else None
    try:
        if switch:
            switch(False)
        return _ab_report(run_benchmark(dataclasses.replace(run_config, out=str(out)), adapter,
                                        show_progress=False).results["throughput"])
    finally:
        if switch:
            switch(enabled)


def compile_vision(run_config: Any, adapter: Any, out: Path) -> dict[str, Any]:
    """The same run with `--compile-vision` (models/compile.py: the vision blocks' fp32 norm and
    rotary chains fused by Inductor). A warm-up run of 8 items pays the compilation; the projection
    charges it once. The adapter stays compiled afterwards."""
    from finbench.runner.engine import run_benchmark

    started = time.perf_counter()
    run_benchmark(dataclasses.replace(run_config, limit=8, out=str(out) + "-warmup", compile_vision=True),
                  adapter, show_progress=False)
    compile_s = time.perf_counter() - started
    throughput = run_benchmark(dataclasses.replace(run_config, out=str(out), compile_vision=True), adapter,
                               show_progress=False).results["throughput"]
    return {**_ab_report(throughput, compile_s), "compile_and_warmup_s": compile_s,
            "compiled": dict(adapter.compiled_blocks)}


AB_VARIANTS = {"no-cudnn-sdpa": without_cudnn_sdpa, "compile-vision": compile_vision}


def profile_batch(run_config: Any, adapter: Any, args: argparse.Namespace, work: Path, path: Path) -> str:
    """torch.profiler over one run of `--profile-items` fresh items: the top kernels by device
    time go to `path` (where the prefill's time goes, kernel by kernel). Never fails the check."""
    import torch

    from finbench.runner.engine import run_benchmark

    try:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        config = dataclasses.replace(run_config, limit=args.profile_items, out=str(work / "profile"))
        with torch.profiler.profile(activities=activities) as profiler:
            run_benchmark(config, adapter, show_progress=False)
        sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
        path.write_text(f"# torch.profiler, {args.profile_items} items, sorted by {sort}\n"
                        + profiler.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=70))
        return str(path.name)
    except Exception as err:  # noqa: BLE001 — a diagnostic only
        traceback.print_exc()
        return f"failed: {type(err).__name__}: {err}"


def headline(report: dict[str, Any]) -> str:
    """One line per model: what the H200 run is for."""
    mfu = f"{100 * report['prefill_mfu']:.1f}%" if report.get("prefill_mfu") else "–"
    ratio = f"{report['speedup_vs_baseline']:.1f}x" if "speedup_vs_baseline" in report else "–"
    projected = report.get("projected_finmme_minutes")
    fill_once = (f"{report['projected_finmme_minutes_fill_once']:.1f} min"
                 if report.get("projected_finmme_minutes_fill_once") else "–")
    ab_text = "".join(f", {variant} {ab['samples_per_s']:.2f} samples/s ({ab['projected_finmme_minutes']:.1f} min)"
                      if "samples_per_s" in ab else f", {variant} failed ({ab.get('error')})"
                      for variant, ab in report.get("ab", {}).items())
    return (f"{report['model']} {report['quant']}: prefill MFU {mfu}, {report['samples_per_s']:.2f} samples/s, "
            f"projected FinMME ({FINMME_ITEMS:,} items) {projected:.1f} min ({fill_once} with the pipeline fill "
            f"paid once), vs generate+regex {ratio}, "
            f"padding {report.get('padding_ratio') or 0:.3f}, vision attention {report['attn_implementation']} "
            f"{report.get('vision_kernel_calls')}, "
            f"prefill parts {', '.join(f'{k} {v:.1f} s' for k, v in report['prefill_parts_s'].items())}{ab_text}"
            + (f" — WARNING: {report['sample_errors']} samples failed ({report['first_sample_error']})"
               if report.get("sample_errors") else ""))


def summary_lines(reports: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | quant | samples/s | prefill TFLOP/s | prefill MFU | e2e TFLOP/s | peak GiB | 11,099 items (min) | baseline samples/s | speedup |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        base = r.get("baseline", {})
        lines.append("| {model} | {quant} | {sps:.2f} | {tf} | {mfu} | {e2e:.1f} | {mem:.1f} | {proj:.1f} | {bs} | {sp} |".format(
            model=r["model"], quant=r["quant"], sps=r["samples_per_s"],
            tf=f"{r['prefill_tflops_per_s']:.1f}" if r.get("prefill_tflops_per_s") else "–",
            mfu=f"{100 * r['prefill_mfu']:.1f}%" if r.get("prefill_mfu") else "–",
            e2e=r["end_to_end_tflops_per_s"], mem=r["peak_memory_gib"] or 0.0, proj=r["projected_finmme_minutes"] or 0.0,
            bs=f"{base['samples_per_s']:.2f}" if base else "–",
            sp=f"{r['speedup_vs_baseline']:.1f}×" if "speedup_vs_baseline" in r else "–"))
    return lines


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tiny", action="store_true", help="CPU mode: tiny shapes, few items (tests the logic)")
    parser.add_argument("--models", default="qwen2.5-vl-7b,qwen2.5-vl-3b")
    parser.add_argument("--n-items", type=int, default=512)
    parser.add_argument("--n-quant-items", type=int, default=128)
    parser.add_argument("--baseline-items", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=None, help="default: auto (halve on OOM)")
    parser.add_argument("--token-budget", type=int, default=98304)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--text-tokens", type=int, default=300)
    parser.add_argument("--ab", default="compile-vision,no-cudnn-sdpa",
                        help=f"after all models, reruns of the first, each with one change (of "
                             f"{', '.join(AB_VARIANTS)}; '' = none)")
    parser.add_argument("--profile-items", type=int, default=16, help="profile one batch of the first model (0: off)")
    parser.add_argument("--quant", default="auto", help="auto (8bit,4bit if bitsandbytes imports), none, or a list")
    args = parser.parse_args(argv)
    if args.tiny:
        args.device = "cpu"
        image_size = (224, 168)
    else:
        import torch

        if not torch.cuda.is_available():
            sys.exit("gpu_check: no CUDA device (use --tiny for the CPU mode)")
        args.device = "cuda"
        image_size = (1024, 768)
    unknown = set(filter(None, args.ab.split(","))) - set(AB_VARIANTS)
    if unknown:
        parser.error(f"--ab: unknown variant(s) {', '.join(sorted(unknown))}")
    quants = _quant_modes(args.quant)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="finbench-gpu-check-"))
    processor = build_processor(work, args.tiny)
    data = make_items(work / "items.parquet", max(args.n_items, args.n_quant_items, args.baseline_items + 1),
                      image_size, processor.tokenizer, args.text_tokens)
    reports: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []
    started = time.perf_counter()
    stem = "gpu_check_tiny" if args.tiny else "gpu_check_h200"
    for name in args.models.split(","):
        for quant in ["none"] + (quants if name == args.models.split(",")[-1] else []):
            print(f"== {name} {quant}", flush=True)
            try:
                report = measure(name, quant, args, processor, data, work)
            except Exception as err:  # one model failing must not cost the others' figures
                traceback.print_exc()
                failures.append({"model": name, "quant": quant, "error": f"{type(err).__name__}: {err}"})
                _free()
                continue
            reports.append(report)
            print(json.dumps(report, indent=1, default=str), flush=True)
            print(headline(report), flush=True)
            _write(out, stem, reports, failures, started, args.tiny)  # a later timeout keeps these
    first = [r for r in reports if r["model"] == args.models.split(",")[0] and r["quant"] == "none"]
    if first and args.ab:
        run_ab(first[0], args, processor, data, work,
               lambda: _write(out, stem, reports, failures, started, args.tiny))
    _write(out, stem, reports, failures, started, args.tiny)
    for report in reports:
        print(headline(report), flush=True)
    print("\n".join(summary_lines(reports)))
    return reports


def _write(out: Path, stem: str, reports: list[dict[str, Any]], failures: list[dict[str, str]],
           started: float, tiny: bool) -> None:
    import torch
    import transformers

    environment = {"python": platform.python_version(), "torch": torch.__version__,
                   "transformers": transformers.__version__,
                   "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    payload = {"reports": reports, "failures": failures, "seconds": time.perf_counter() - started, "tiny": tiny,
               "environment": environment, "note": "random weights; accuracy is chance level and not a result"}
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=2, default=str))
    failed = "".join(f"\n- {f['model']} {f['quant']} failed: {f['error']}" for f in failures)
    headlines = "".join(f"\n- {headline(r)}" for r in reports)
    (out / f"{stem}.md").write_text(f"# {stem}\n\n{environment}\n\n" + "\n".join(summary_lines(reports))
                                    + f"\n{headlines}\n{failed}\n")


def _quant_modes(option: str) -> list[str]:
    if option == "none":
        return []
    if option != "auto":
        return option.split(",")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        print("bitsandbytes is not importable: skipping 8-bit and 4-bit runs", flush=True)
        return []
    return ["8bit", "4bit"]


if __name__ == "__main__":
    main(sys.argv[1:])
