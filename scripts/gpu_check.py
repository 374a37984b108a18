"""GPU check: the run a user gets on full-size Qwen2.5-VL-7B shapes, and each lever A/B.

Builds a Qwen2.5-VL-7B-shaped model with RANDOM bf16 weights straight on the GPU from the published
config values (nothing is downloaded; a one-prefill scorer's cost does not depend on weight values)
and FinMME-like items (1024×768 synthetic charts, ~300 prompt text tokens), then, section by
section, each under its own time limit and written to the JSON as soon as it is done:
1. `run`: `--n-items` items through `finbench run`'s own defaults on this machine (batch size, token
   budget and workers from runner/defaults.py `sized_defaults`, the same function the CLI calls;
   every fast path at its CUDA default, models/fast_paths.py), without per-stage syncs; the
   FinMME projection is load + compile + pipeline fill + 11,099 items at the steady rate;
2. `profile`: one full batch again with `--profile` (stage and model-part seconds device-exact,
   prefill TFLOP/s and MFU against 790 TFLOP/s) under torch.profiler (the top kernels by device
   time to gpu_profile_<model>.txt);
3. `baseline`: a short generate(batch 1)+regex baseline (`--baseline-items`) and the ratio;
4. `think`: `--think-batch` items through the thinking step (`--think-budget` greedy tokens with
   finished rows compacted, runner/compaction.py) and the constrained answer: decode tokens/s, ms
   per step, the fraction of the HBM roofline;
5. the A/B rows, `--ab-items` items on the same seeded weights: `reference` (every fast path off,
   widths unpadded) once, then each change — the cheap levers (a path off, the cuDNN SDPA backend
   off), then the quantized rows (`--quant-ab`, quantized in memory), then the compilers — as
   `--pairs` interleaved (default, variant) runs, judged only outside their spreads
   (`verdict`), answers compared one by one with `reference`.
Every section runs under its own limit (cut to what `--budget` leaves) and is recorded, in run
order, as {name, limit_s, elapsed_s, status: done | timed_out | skipped | failed} in the JSON's
`sections` list; its figures go to `results` (or `ab`). A section that runs out of time or fails
records why; the others go on while the budget lasts.

    python scripts/gpu_check.py --out benchmarks/results            # the H200 run (scripts/gpu_check.sh)
    python scripts/gpu_check.py --tiny --out /tmp/gpu-check          # CPU mode: same logic, tiny shapes
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import io
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

H200_BF16_TFLOPS = 790.0  # measured dense bf16 matmul rate on this H200 (SPEC.md)
FINMME_ITEMS = 11_099
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 56 * 56, 28 * 28 * 16384  # the released processor's limits
TINY_OVERRIDES = {"layers": 2, "hidden_size": 64, "vision_depth": 2, "vocab_size": 448}
TINY_VISION_MLP = 107  # 3420 / 32: no multiple of 64, as the published width is none of 16 bytes
# A/B variants: (fast-path changes against the default, extra RunConfig settings, global switch)
AB_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-pad-widths": {"paths": {"pad_widths": False}},
    "no-causal-prefill": {"paths": {"causal_prefill": False}},
    "no-static-decode": {"paths": {"static_decode": False}},
    "no-cuda-graphs": {"paths": {"cuda_graphs": False}},
    "no-vision-indices": {"paths": {"vision_indices": False}},
    "no-cudnn-sdpa": {"no_cudnn": True},
    # the costly rows last (after the quantized rows, main()), so that a short budget cuts them first
    "compile-vision": {"config": {"compile_vision": True}},
    "compile-lm": {"config": {"compile_lm": True}},
}
# seconds each section may take on the H200 (within the --budget gpu_check.sh gives this script;
# the warm-up runs inside "run")
# (an A/B row is 3 pairs of 64-item runs, ~5 s each on the H200 at the last run's rates, ~30 s a
# row: on paper the 440-s budget reaches fp8 with the default --ab list; trim --ab to reach the
# compilers)
SECTION_SECONDS = {"build": 90, "run": 120, "profile": 60, "baseline": 40, "think": 40, "ab": 40,
                   "ab-compile": 100, "ab-quant": 75}


class SectionTimeout(BaseException):
    """A section's time is up. A BaseException, so that no handler of the runner (the batch retry in
    runner/loop.py, the report writer in runner/outputs.py) takes it for an ordinary failure and
    carries on: it unwinds to `Report.section`, which records the section as timed out."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise SectionTimeout in the main thread after `seconds` (None: no limit)."""
    if not seconds:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise SectionTimeout(f"over its {seconds:g} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Report:
    """The check's JSON and Markdown, rewritten (write-then-rename) after every section."""

    def __init__(self, out: Path, stem: str, args: argparse.Namespace) -> None:
        import torch
        import transformers

        self.out, self.stem, self.started = out, stem, time.perf_counter()
        self.budget = args.budget
        self.payload: dict[str, Any] = {
            "tiny": args.tiny, "model": args.model, "sections": [], "results": {}, "ab": {},
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "transformers": transformers.__version__,
                            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                            "cpus": os.cpu_count()},
            "note": "random weights; accuracy is chance level and not a result"}

    def left(self) -> float | None:
        return None if not self.budget else self.budget - (time.perf_counter() - self.started)

    def section(self, name: str, limit: float | None, work: Callable[[], Any], where: dict[str, Any] | None = None) -> Any:
        """Run `work` under `limit` seconds (cut to what the budget leaves); record its result or why
        it has none under `name`, in `where` (default: the results), append its record
        {name, limit_s, elapsed_s, status} to the run-ordered `sections` list, and write. Status:
        "done", "timed_out" (over its limit, even when the work came back late), "skipped" (no
        budget left, or the section itself says it cannot run here) or "failed"."""
        where = self.payload["results"] if where is None else where
        left = self.left()
        record: dict[str, Any] = {"name": name, "limit_s": limit, "elapsed_s": 0.0, "status": "skipped"}
        self.payload["sections"].append(record)
        if left is not None and left < 5:
            where[name] = {"skipped": "the check's time budget ran out"}
            self.write()
            return None
        limit = min(x for x in (limit, left) if x) if (limit or left) else None
        record["limit_s"] = limit
        print(f"== {name}" + (f" (limit {limit:.0f} s)" if limit else ""), flush=True)
        started = time.perf_counter()
        result, status = None, "done"
        try:
            with deadline(limit):
                result = work()
            where[name] = result if isinstance(result, dict) else {"result": result}
        except SectionTimeout as err:
            where[name], status = {"error": f"SectionTimeout: {err}"}, "timed_out"
        except Exception as err:  # noqa: BLE001 — one section failing must not cost the others
            traceback.print_exc()
            where[name], status = {"error": f"{type(err).__name__}: {err}"}, "failed"
        elapsed = time.perf_counter() - started
        if status == "done" and limit and elapsed > limit:  # the alarm came late (a long C call)
            status = "timed_out"
        elif status == "done" and "skipped" in where[name]:
            status = "skipped"
        record.update(elapsed_s=elapsed, status=status)
        where[name]["section_s"] = elapsed
        self.write()
        return result if status == "done" else None

    def write(self) -> None:
        self.payload["seconds"] = time.perf_counter() - self.started
        for path, text in ((self.out / f"{self.stem}.json", json.dumps(self.payload, indent=1, default=str)),
                           (self.out / f"{self.stem}.md", markdown(self.payload, self.stem))):
            partial = path.with_suffix(path.suffix + ".partial")
            partial.write_text(text)
            partial.replace(path)


# ---- the model, the processor, the items ------------------------------------------------------
def build_processor(work: Path, tiny: bool) -> Any:
    """The real Qwen2.5-VL processor classes with a small offline tokenizer; full-size pixel
    limits so a 1024×768 chart becomes 999 image tokens as with the released model."""
    from transformers import AutoProcessor

    from finbench.offline.tiny import make_tiny

    processor = AutoProcessor.from_pretrained(make_tiny("qwen2.5-vl", work / "processor"))
    if not tiny:
        processor.image_processor.size = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    return processor


def model_config(name: str, tokenizer: Any, tiny: bool) -> Any:
    """Published full-size config (or its scaled-down twin) with special tokens remapped."""
    from finbench.offline.shapes import full_size_config, scaled_down

    config = full_size_config(name)
    for key, token in [("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                       ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]:
        setattr(config, key, tokenizer.convert_tokens_to_ids(token))
    config.text_config.bos_token_id = config.text_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if not tiny:
        return config
    config = scaled_down(config, **TINY_OVERRIDES)
    config.vision_config.intermediate_size = TINY_VISION_MLP  # misaligned like the 7B's 3420: padded to 128
    return config


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


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Batch size, token budget and workers: what was given, else `finbench run`'s defaults for this
    device and machine (runner/defaults.py `run_defaults`, the function the CLI calls)."""
    from finbench.runner.defaults import run_defaults

    sized = run_defaults(args.device)
    batch = sized["batch_size"] if args.batch_size is None else None if args.batch_size == "auto" else int(args.batch_size)
    return {"batch_size": batch, "token_budget": sized["token_budget"] if args.token_budget is None else args.token_budget,
            "workers": sized["workers"] if args.workers is None else args.workers}


class Check:
    """Everything the sections share: the seeded model(s), adapters, data and the run settings."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.settings = run_settings(args)
        self.paths = self._default_paths()
        self.models: dict[str, Any] = {}
        self.reference_samples: Any = None

    def _default_paths(self) -> Any:
        from finbench.models.fast_paths import FastPaths

        return FastPaths.everywhere() if self.args.tiny else FastPaths()  # the tiny check takes the CUDA paths

    def build(self) -> dict[str, Any]:
        import torch

        from finbench.offline.shapes import build_random_model

        self.processor = build_processor(self.work, self.args.tiny)
        image_size = (224, 168) if self.args.tiny else (1024, 768)
        n_data = max(self.args.n_items, self.args.ab_items, self.args.baseline_items + 1)
        self.data = make_items(self.work / "items.parquet", n_data, image_size, self.processor.tokenizer,
                               self.args.text_tokens)
        self.config = model_config(self.args.model, self.processor.tokenizer, self.args.tiny)
        self.dtype = torch.float32 if self.args.tiny else torch.bfloat16
        started = time.perf_counter()
        self.models["padded"] = build_random_model(self.config, dtype=self.dtype, device=self.args.device,
                                                   seed=self.args.seed)
        self.load_s = time.perf_counter() - started
        return {"settings": self.settings, "fast_paths": dataclasses.asdict(self.paths), "items": n_data,
                "load_s": self.load_s, "parameters": sum(p.numel() for p in self.models["padded"].parameters()),
                "note": "load_s builds random weights on the device; a checkpoint read from disk takes longer "
                        "(the quantized A/B rows load one and record it)"}

    def unpadded_model(self) -> Any:
        """A second copy of the same seeded weights, never padded (the reference and no-pad rows)."""
        from finbench.offline.shapes import build_random_model

        if "unpadded" not in self.models:
            self.models["unpadded"] = build_random_model(self.config, dtype=self.dtype, device=self.args.device,
                                                         seed=self.args.seed)
        return self.models["unpadded"]

    def adapter(self, paths: Any, model: Any = None) -> Any:
        """An adapter over the padded model (padded in place by the first) or over `model`."""
        from finbench.models.qwen2_5_vl import Qwen25VL

        adapter = Qwen25VL(model if model is not None else self.models["padded"], self.processor,
                           f"random:{self.args.model}", fast_paths=paths)
        if model is None:  # later adapters find the widths padded already: report what the first did
            self.padded_widths = getattr(self, "padded_widths", None) or adapter.padded_widths
            adapter.padded_widths = self.padded_widths if adapter.fast.pad_widths else {}
        return adapter

    def run_config(self, name: str, n_items: int, **changes: Any) -> Any:
        from finbench.types import RunConfig

        return RunConfig(model=f"random:{self.args.model}", data=str(self.data), limit=n_items, bootstrap=0,
                         out=str(self.work / f"run-{name}"), **self.settings, **changes)

    def run(self, adapter: Any, name: str, n_items: int, **changes: Any) -> Any:
        from finbench.runner.engine import run_benchmark

        with without_reports() if self.args.no_run_reports else contextlib.nullcontext():
            return run_benchmark(self.run_config(name, n_items, **changes), adapter, show_progress=False)


@contextlib.contextmanager
def without_reports() -> Iterator[None]:
    """The check's own runs write no report.html / report.md (`--no-run-reports`, the tiny check's
    setting): nobody reads them, and rendering a run's plots is ~90% of a tiny run on 2 CPU cores
    (seconds each, dozens of runs). Their samples and results are written as ever; the timed part
    of a run ends before its outputs."""
    from finbench.report import html

    real = html.write_report
    html.write_report = lambda folder, *args, **kwargs: None  # runner/outputs.py imports it per call
    try:
        yield
    finally:
        html.write_report = real


# ---- sections --------------------------------------------------------------------------------
def projection(throughput: dict[str, Any], load_s: float, compile_s: float = 0.0) -> dict[str, Any]:
    """FinMME minutes = load + compile + pipeline fill + 11,099 items at the steady rate (the rate
    after the fill: samples / (seconds - fill))."""
    fill, seconds, samples = throughput.get("first_batch_wait_s") or 0.0, throughput["seconds"], throughput["samples"]
    steady = samples / (seconds - fill) if samples and seconds > fill else None
    return {"load_s": load_s, "compile_s": compile_s, "fill_s": fill, "steady_samples_per_s": steady,
            "projected_finmme_minutes": (load_s + compile_s + fill + FINMME_ITEMS / steady) / 60 if steady else None}


def run_section(check: Check) -> dict[str, Any]:
    from finbench.models import vision_attention

    adapter = check.adapter(check.paths)
    check.headline = adapter
    check.run(adapter, "warmup", min(8, check.args.n_items))  # CUDA context, autotuning, allocator growth
    vision_attention.KERNEL_CALLS.clear()
    result = check.run(adapter, "run", check.args.n_items).results
    errors = result["errors"]["count"]
    if errors == result["n_questions"]:  # no sample answered: its "rate" is not a rate
        raise RuntimeError(f"all {errors} samples failed: {next(iter(result['errors'].get('by_message', {})), '')}")
    throughput = result["throughput"]
    check.final_max_batch = throughput["final_max_batch"]
    return {"samples": throughput["samples"], "seconds": throughput["seconds"],
            "samples_per_s": throughput["samples_per_s"], "image_tokens_per_s": throughput["image_tokens_per_s"],
            "mean_prompt_tokens": throughput["prompt_tokens"] / max(throughput["samples"], 1),
            "padding_ratio": throughput.get("padding_ratio"), "stages_s_host": throughput["stages_s"],
            "final_max_batch": check.final_max_batch, "oom_retries": throughput["oom_retries"],
            "end_to_end_tflops_per_s": (throughput["prefill_flops"] or 0) / throughput["seconds"] / 1e12,
            "peak_memory_gib": throughput.get("peak_memory_gib", throughput.get("peak_rss_gib")),
            "fingerprint": {k: v for k, v in result["fingerprint"].items() if k in (
                "attn_implementation", "padded_widths", "fast_paths", "compiled", "dtype")},
            "vision_kernel_calls": dict(vision_attention.KERNEL_CALLS), "graph_captures": adapter.graphs.captures,
            "graphs": adapter.graphs.failure or ("on" if adapter.graphs.enabled else "off"),
            **projection(throughput, check.load_s), "sample_errors": errors,
            "accuracy_random_weights": result["scores"].get("accuracy")}


def profile_section(check: Check, path: Path) -> dict[str, Any]:
    """One full batch, synchronised (`--profile`): timed on its own (the stages and the MFU, free
    of the profiler's overhead), then again under torch.profiler for the kernel table."""
    import torch

    rows = check.args.profile_items or getattr(check, "final_max_batch", None) or check.settings["batch_size"] or 64
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    adapter = getattr(check, "headline", None) or check.adapter(check.paths)
    throughput = check.run(adapter, "profile-timed", rows, profile=True).results["throughput"]
    with torch.profiler.profile(activities=activities) as profiler:
        check.run(adapter, "profile", rows, profile=True)
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    path.write_text(f"# torch.profiler, one batch of {rows} items (--profile), sorted by {sort}\n"
                    + profiler.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=70))
    tflops = throughput["prefill_tflops_per_s"]
    return {"items": rows, "file": path.name, "stages_s": throughput["stages_s"],
            "prefill_parts_s": throughput.get("model_parts_s", {}), "prefill_tflops_per_s": tflops,
            "prefill_mfu": tflops / H200_BF16_TFLOPS if tflops else None}


def baseline_section(check: Check) -> dict[str, Any]:
    from finbench.benchmarks import finmme
    from finbench.offline.baseline import run_baseline

    adapter = getattr(check, "headline", None) or check.adapter(check.paths)
    questions = finmme.load_questions(str(check.data), limit=check.args.baseline_items + 1)
    run_baseline(adapter, finmme.BENCHMARK, questions[:1])  # warm-up
    baseline = run_baseline(adapter, finmme.BENCHMARK, questions[1:])
    run = check.report.payload["results"].get("run", {})
    if run.get("samples_per_s"):
        baseline["speedup"] = run["samples_per_s"] / baseline["samples_per_s"]
    return baseline


def compared(samples: Any, reference: Any) -> dict[str, Any]:
    """Answer by answer against the reference run (same items, same seeded weights)."""
    if reference is None:
        return {"vs_reference": "no reference run"}
    joined = samples.merge(reference, on="id", suffixes=("", "_ref"))
    gaps = [abs(x - y) for a, b in zip(joined["option_probs"], joined["option_probs_ref"])
            if len(a) == len(b) for x, y in zip(a, b)]
    return {"compared": len(joined), "answers_equal": int((joined["answer"] == joined["answer_ref"]).sum()),
            "max_option_prob_diff": max(gaps) if gaps else 0.0,
            "max_confidence_diff": float((joined["confidence"] - joined["confidence_ref"]).abs().max())}


HBM_BYTES_PER_S = 4.8e12  # H200 HBM3e peak bandwidth


class _Thinker:
    """The run's adapter as a thinking model for the `think` row: the 7B instruct model has no
    thinking block, so two single-token markers stand for its tags (random weights: only the shapes
    and the loop are measured). Everything else is the adapter's."""

    TAGS = ("<|box_start|>", "<|box_end|>")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.capabilities = dataclasses.replace(inner.capabilities, thinking=True, thinking_tags=self.TAGS)

    def thinking_token_ids(self) -> tuple[int, int]:
        open_id, close_id = (self.inner.single_token_ids([tag])[0] for tag in self.TAGS)
        return open_id, close_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def decode_bytes_per_step(config: Any, weight_bytes: int, rows: int, context: float, kv_bytes: int = 2) -> float:
    """Bytes one decode step must move at least: every language-model weight once (the LM head
    included) and each row's keys and values over its `context` tokens."""
    text = getattr(config, "text_config", config)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv = 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * kv_bytes
    return weight_bytes + rows * context * kv


def think_section(check: Check) -> dict[str, Any]:
    """Reasoning at the bandwidth limit: a batch of `--think-batch` items through the thinking step
    (runner/thinking.py `think`: the greedy loop with compaction, `--think-budget` tokens) and then
    the constrained single-choice answer, each timed device-exact. Decode tokens/s, ms per step, and
    the fraction of the HBM roofline (bytes per step from the shapes / 4.8 TB/s per step time)."""
    import torch

    from finbench.benchmarks import finmme
    from finbench.runner.decoding import AnswerVocabulary, decode_single
    from finbench.runner.preprocess import decode_images
    from finbench.runner.requests import first_prompt, render
    from finbench.runner.thinking import think

    adapter = getattr(check, "headline", None) or check.adapter(check.paths)
    rows = check.args.think_batch
    singles = [q for q in finmme.load_questions(str(check.data)) if q.kind == "single"]
    questions = (singles * (rows // max(len(singles), 1) + 1))[:rows]
    requests = [render(finmme.BENCHMARK, first_prompt(finmme.request(q, "constrained")), decode_images(q), False)
                for q in questions]
    inputs = adapter.to_device(adapter.prepare(requests))
    cuda = adapter.device.type == "cuda"
    seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        yield
        if cuda:
            torch.cuda.synchronize()
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started

    thinker, budget = _Thinker(adapter), check.args.think_budget
    think(thinker, inputs, min(budget, 4), ["Answer:"] * len(requests))  # warm-up (graphs, allocator)
    with stage("prefill"):
        adapter.prefill(dict(inputs))
    rebuilt, reasoning = think(thinker, inputs, budget, ["Answer:"] * len(requests), stage)
    with stage("answer"):
        answers = decode_single(adapter, rebuilt, torch.tensor([len(q.options) for q in questions]),
                                AnswerVocabulary.for_model(adapter))
    decode_s = max(seconds["think"] - seconds["prefill"], 1e-9)
    tokens = sum(r.tokens for r in reasoning)
    steps = max(r.tokens for r in reasoning)
    # read every step: the decoder's weights and the LM head, not the input embedding (rows gathered)
    read = {id(p): p for p in adapter.model.model.language_model.parameters()}
    for p in adapter.model.get_input_embeddings().parameters():
        read.pop(id(p), None)
    read.update({id(p): p for p in adapter.model.get_output_embeddings().parameters()})
    weight_bytes = sum(p.numel() * p.element_size() for p in read.values())
    context = float(inputs["attention_mask"].sum(-1).float().mean()) + steps / 2
    per_step = decode_bytes_per_step(check.config, weight_bytes, len(requests), context)
    ms_per_step = 1e3 * decode_s / max(steps - 1, 1)  # the prefill gives the first token
    return {"batch": len(requests), "budget": budget, "tokens": tokens, "steps": steps, "decode_s": decode_s,
            "tokens_per_s": tokens / decode_s, "ms_per_step": ms_per_step, "bytes_per_step": per_step,
            "roofline_ms_per_step": 1e3 * per_step / HBM_BYTES_PER_S,
            "roofline_fraction": (1e3 * per_step / HBM_BYTES_PER_S) / ms_per_step,
            "stages_s": seconds, "answers": len(answers), "cut": sum(r.cut for r in reasoning),
            "note": "random weights: rows seldom stop, so the batch decodes at full width; the roofline "
                    "counts LM weights + KV over the mean context, at 4.8 TB/s"}


ROTARY = "compiled rotary"  # compiled_modules' value for a language model whose rotary is compiled


def compiled_modules(model: Any) -> dict[Any, Any]:
    """The modules `module.compile()` compiled in place, with their compiled call, and the language
    models whose rotary application runs compiled (models/compile.py `compile_rotary`)."""
    found = {module: module._compiled_call_impl for module in model.modules()
             if getattr(module, "_compiled_call_impl", None) is not None}
    found.update({module: ROTARY for module in model.modules() if getattr(module, "finbench_compiled_rotary", False)})
    return found


def set_compiled(modules: dict[Any, Any], on: bool) -> None:
    """Switch the compiled modules of a compile row on (their compiled call) or off (eager), so that
    the default runs interleaved with it run eagerly on the same, shared model."""
    from finbench.models.compile import set_rotary

    for module, impl in modules.items():
        if impl is ROTARY:
            set_rotary(module, on)
        else:
            module._compiled_call_impl = impl if on else None


def uncompiled(model: Any) -> None:
    """Undo `module.compile()` everywhere (the compile rows compile the shared model in place)."""
    set_compiled(compiled_modules(model), False)


@contextlib.contextmanager
def cudnn_off(off: bool) -> Iterator[None]:
    import torch

    switch = getattr(torch.backends.cuda, "enable_cudnn_sdp", None) if off else None
    enabled = torch.backends.cuda.cudnn_sdp_enabled() if switch else None
    if switch:
        switch(False)
    try:
        yield
    finally:
        if switch:
            switch(enabled)


def spread(values: list[float]) -> list[float]:
    return [min(values), max(values)] if values else []


def interleaved(check: Check, name: str, variant: Callable[[int], Any], pairs: int, compile_s: float = 0.0,
                load_s: float | None = None) -> tuple[dict[str, Any], Any]:
    """`pairs` × (the default run, then `variant(i)`), alternating on the same items, so a drift of the
    machine (clocks, heat, other work) falls on both alike. The row: each side's projected FinMME
    minutes per run, their median and spread (min, max); the variant's last samples for the answers."""
    default_adapter = getattr(check, "headline", None) or check.adapter(check.paths)
    mine, base, rates, base_rates, last = [], [], [], [], None
    for i in range(pairs):
        throughput = check.run(default_adapter, f"{name}-default-{i}", check.args.ab_items).results["throughput"]
        base.append(projection(throughput, check.load_s)["projected_finmme_minutes"])
        base_rates.append(throughput["samples_per_s"])
        last = variant(i)
        throughput = last.results["throughput"]
        mine.append(projection(throughput, check.load_s if load_s is None else load_s, compile_s)["projected_finmme_minutes"])
        rates.append(throughput["samples_per_s"])
    mine, base = [m for m in mine if m], [b for b in base if b]
    row = {"samples_per_s": statistics.median(rates), "samples_per_s_runs": rates,
           "default_samples_per_s_runs": base_rates, "pairs": pairs, "compile_s": compile_s,
           "projected_finmme_minutes": statistics.median(mine) if mine else None, "minutes_spread": spread(mine),
           "default_minutes": statistics.median(base) if base else None, "default_minutes_spread": spread(base)}
    return row, last


def ab_section(check: Check, variant: str) -> dict[str, Any]:
    spec = AB_VARIANTS.get(variant, {})
    if variant == "reference":  # the answers' anchor: run once, every fast path off, widths unpadded
        from finbench.models.fast_paths import FastPaths

        adapter = check.adapter(FastPaths.reference(), check.unpadded_model())
        result = check.run(adapter, variant, check.args.ab_items)
        check.reference_samples = result.samples
        throughput = result.results["throughput"]
        return {"samples_per_s": throughput["samples_per_s"], "seconds": throughput["seconds"],
                "fast_paths": adapter.fast.on(), "padded_widths": adapter.padded_widths, "compiled": [],
                "sample_errors": result.results["errors"]["count"], **projection(throughput, check.load_s)}
    paths = dataclasses.replace(check.paths, **spec.get("paths", {}))
    adapter = check.adapter(paths, check.unpadded_model() if not paths.pad_widths else None)
    changes = spec.get("config", {})
    compile_s, compiled = 0.0, {}
    try:
        if changes:  # compiling happens in this first small run: charged once to the projection
            started = time.perf_counter()
            check.run(adapter, f"{variant}-warmup", min(8, check.args.ab_items), **changes)
            compile_s = time.perf_counter() - started
            compiled = compiled_modules(adapter.model)
            set_compiled(compiled, False)  # eager for the default runs; on again for each variant run

        def run_variant(i: int) -> Any:
            set_compiled(compiled, True)
            try:
                with cudnn_off(bool(spec.get("no_cudnn"))):
                    return check.run(adapter, f"{variant}-{i}", check.args.ab_items, **changes)
            finally:
                set_compiled(compiled, False)

        row, result = interleaved(check, variant, run_variant, check.args.pairs, compile_s)
    finally:
        if changes:
            uncompiled(adapter.model)
        _free()  # here, not between sections: a skipped section costs nothing (gc.collect takes ~0.5 s)
    return {**row, "fast_paths": adapter.fast.on(), "padded_widths": adapter.padded_widths,
            "compiled": sorted({**adapter.compiled_blocks, **adapter.compiled_language_model}),
            "sample_errors": result.results["errors"]["count"],
            **compared(result.samples, check.reference_samples)}


IN_MEMORY_QUANT = ("fp8", "int8wo", "int4wo")  # formats applied to loaded weights (models/quant.py)


def quant_section(check: Check, quant: str) -> dict[str, Any]:
    """The default paths on the same seeded weights quantized the way `--quant` does it: formats
    applied to loaded weights (fp8, torchao's) on a copy in memory with `quantize_loaded` (no 16-GB
    checkpoint written and read back; the load in its projection is the bf16 build plus the
    quantization), the others (bitsandbytes) through a checkpoint and `load_model(..., quant=quant)`."""
    import copy

    from finbench.models import load_model
    from finbench.models.base import resolve_device
    from finbench.models.quant import QUANT_CHOICES, inspect_quantization, quant_unavailable, quantize_loaded
    from finbench.models.qwen2_5_vl import Qwen25VL

    if quant not in QUANT_CHOICES:
        return {"skipped": f"--quant {quant} is not available in this build (models/quant.py offers "
                           f"{', '.join(QUANT_CHOICES)})"}
    device = resolve_device(check.args.device)
    unavailable = quant_unavailable(quant, device)  # fp8 off an FP8 GPU, a package
    if unavailable:
        return {"skipped": unavailable}
    started = time.perf_counter()
    if quant in IN_MEMORY_QUANT:
        model = copy.deepcopy(check.unpadded_model())
        quantize_loaded(model, quant, device)
        adapter = Qwen25VL(model, check.processor, f"random:{check.args.model}", quant=quant,
                           quant_report=inspect_quantization(model), fast_paths=check.paths)
        load_s = check.load_s + time.perf_counter() - started
    else:
        folder = check.work / "checkpoint"
        if not (folder / "config.json").exists():
            check.unpadded_model().save_pretrained(folder)
            check.processor.save_pretrained(folder)
        adapter = load_model(str(folder), dtype="float32" if check.args.tiny else "bfloat16",
                             device=check.args.device, quant=quant)
        load_s = time.perf_counter() - started
    started = time.perf_counter()  # fp8's fused quantization compiles here: charged like a compiler's
    check.run(adapter, f"{quant}-warmup", min(8, check.args.ab_items))
    warmup_s = time.perf_counter() - started
    row, result = interleaved(check, f"quant-{quant}",
                              lambda i: check.run(adapter, f"{quant}-{i}", check.args.ab_items), check.args.pairs,
                              compile_s=warmup_s, load_s=load_s)
    report = {**row, "load_s": load_s, "quant": adapter.fingerprint().get("quant"),
              "memory_gib": (adapter.memory_footprint() or 0) / 2**30,
              **compared(result.samples, check.reference_samples)}
    del adapter
    _free()
    return report


# ---- output ----------------------------------------------------------------------------------
def headline(payload: dict[str, Any]) -> str:
    run = payload["results"].get("run", {})
    profile, baseline = payload["results"].get("profile", {}), payload["results"].get("baseline", {})
    if "samples_per_s" not in run:
        return f"{payload['model']}: no run ({run.get('error') or run.get('skipped') or 'not reached'})"
    mfu = f"{100 * profile['prefill_mfu']:.1f}%" if profile.get("prefill_mfu") else "–"
    ratio = f"{baseline['speedup']:.1f}x" if baseline.get("speedup") else "–"
    projected = run.get("projected_finmme_minutes")
    return (f"{payload['model']} through finbench run's defaults {run.get('settings', '')}: "
            f"{run['samples_per_s']:.2f} samples/s, projected FinMME ({FINMME_ITEMS:,} items) "
            f"{projected:.1f} min (load {run['load_s']:.1f} s + fill {run['fill_s']:.1f} s + steady "
            f"{run['steady_samples_per_s']:.2f}/s), prefill MFU {mfu} (profiled batch), vs generate+regex {ratio}"
            if projected else f"{payload['model']}: {run['samples_per_s']:.2f} samples/s")


def verdict(name: str, row: dict[str, Any]) -> str:
    """The rule that turns an interleaved A/B row into a default, only outside the noise: the row's
    projected minutes (compile time included) against the default runs between them; when the two
    spreads (min..max over the pairs) overlap, "within noise" and nothing changes. A lever whose
    removal is slower pays (keep it on); one whose removal is faster should be off; a compiler or
    a quantization that is faster pays. Rates only: the answers are compared beside it."""
    mine, base = row.get("projected_finmme_minutes"), row.get("default_minutes")
    if name in ("reference", "default") or not mine or not base:
        return ""
    low, high = row.get("minutes_spread") or [mine, mine]
    base_low, base_high = row.get("default_minutes_spread") or [base, base]
    figures = f"{mine:.2f} vs {base:.2f} min"
    if base_low <= high and low <= base_high:
        return f"within noise ({figures}; spreads {low:.2f}-{high:.2f} and {base_low:.2f}-{base_high:.2f} overlap)"
    faster = high < base_low
    if name.startswith("no-"):
        lever = name.removeprefix("no-")
        return (f"{lever} does not pay here ({figures}): its CUDA default should be off" if faster else
                f"{lever} pays ({figures}): keep it on")
    if name.startswith("compile-"):
        return (f"pays ({figures}, compile included): make --{name} the CUDA default" if faster else
                f"does not pay ({figures}): leave --{name} opt-in")
    return f"pays ({figures})" if faster else f"does not pay ({figures})"


def markdown(payload: dict[str, Any], stem: str) -> str:
    lines = [f"# {stem}", "", str(payload["environment"]), "", f"- {headline(payload)}", "",
             "| section | limit (s) | elapsed (s) | status |", "|---|---|---|---|"]
    for record in payload["sections"]:
        limit = f"{record['limit_s']:.0f}" if record["limit_s"] else "–"
        lines.append(f"| {record['name']} | {limit} | {record['elapsed_s']:.1f} | {record['status']} |")
    lines.append("")
    for name, section in {**payload["results"], **payload["ab"]}.items():
        if "error" in section or "skipped" in section:
            lines.append(f"- {name}: {section.get('error') or section.get('skipped')}")
    think = payload["results"].get("think", {})
    if "tokens_per_s" in think:
        lines.append(f"- think: {think['tokens_per_s']:.0f} decode tokens/s at batch {think['batch']}, "
                     f"{think['ms_per_step']:.2f} ms per step, {100 * think['roofline_fraction']:.0f}% of the HBM roofline")
    lines += ["", "| A/B | samples/s | projected FinMME (min) | default (min) | answers equal to reference | max Δ option prob | note | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for name, row in payload["ab"].items():
        if "samples_per_s" not in row:
            lines.append(f"| {name} | – | – | – | – | – | {row.get('error') or row.get('skipped') or ''} | |")
            continue
        equal = f"{row['answers_equal']}/{row['compared']}" if "compared" in row else "(reference)"
        gap = f"{row['max_option_prob_diff']:.2e}" if "max_option_prob_diff" in row else "–"
        minutes = f"{row['projected_finmme_minutes']:.2f}" if row.get("projected_finmme_minutes") else "–"
        base = f"{row['default_minutes']:.2f}" if row.get("default_minutes") else "–"
        note = f"compile {row['compile_s']:.0f} s" if row.get("compile_s") else ""
        lines.append(f"| {name} | {row['samples_per_s']:.2f} | {minutes} | {base} | {equal} | {gap} | {note} | "
                     f"{verdict(name, row)} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tiny", action="store_true", help="CPU mode: tiny shapes, few items (tests the logic)")
    parser.add_argument("--model", default="qwen2.5-vl-7b")
    parser.add_argument("--n-items", type=int, default=512)
    parser.add_argument("--ab-items", type=int, default=64)
    parser.add_argument("--baseline-items", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved (default, variant) runs per A/B row")
    parser.add_argument("--think-budget", type=int, default=None, help="reasoning tokens of the think row "
                        "(default 256, 16 with --tiny; 0: no row)")
    parser.add_argument("--think-batch", type=int, default=None, help="rows of the think row's batch (default 64, 4 with --tiny)")
    parser.add_argument("--profile-items", type=int, default=None, help="default: one full batch of the run")
    parser.add_argument("--batch-size", default=None, help="default: finbench run's (auto on CUDA)")
    parser.add_argument("--token-budget", type=int, default=None, help="default: finbench run's for this GPU")
    parser.add_argument("--workers", type=int, default=None, help="default: finbench run's for this machine")
    parser.add_argument("--text-tokens", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="weight seed (every A/B row uses the same weights)")
    parser.add_argument("--ab", default=",".join(AB_VARIANTS), help=f"A/B rows after the reference ({', '.join(AB_VARIANTS)}; '' = none)")
    parser.add_argument("--quant-ab", default="fp8", help="quantized A/B rows (each if models/quant.py offers it)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole check (default: 440 on CUDA, none with --tiny)")
    parser.add_argument("--no-run-reports", action="store_true", help="write no report.html/.md for the check's runs "
                        "(gpu_check.sh's tiny settings: rendering them is most of a tiny run)")
    args = parser.parse_args(argv)
    unknown = set(filter(None, args.ab.split(","))) - set(AB_VARIANTS)
    if unknown:
        parser.error(f"--ab: unknown variant(s) {', '.join(sorted(unknown))}")
    args.device = "cpu" if args.tiny else "cuda"
    args.think_budget = (16 if args.tiny else 256) if args.think_budget is None else args.think_budget
    args.think_batch = (4 if args.tiny else 64) if args.think_batch is None else args.think_batch
    if args.budget is None and not args.tiny:
        args.budget = 440.0
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    args = parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device (use --tiny for the CPU mode)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check = Check(args, Path(tempfile.mkdtemp(prefix="finbench-gpu-check-")))
    report = check.report = Report(out, "gpu_check_tiny" if args.tiny else "gpu_check_h200", args)
    limit = (lambda name: None) if args.tiny else SECTION_SECONDS.get
    if report.section("build", limit("build"), check.build) is None:
        return report.payload
    if report.section("run", limit("run"), lambda: run_section(check)) is not None:
        report.payload["results"]["run"]["settings"] = check.settings
    report.section("profile", limit("profile"), lambda: profile_section(check, out / f"gpu_profile_{args.model}.txt"))
    if args.baseline_items > 0:
        report.section("baseline", limit("baseline"), lambda: baseline_section(check))
    if args.think_budget > 0:
        report.section("think", limit("think"), lambda: think_section(check))
    # the order the budget cuts from the end: the cheap rows, then the quantized ones, then compilers
    chosen = [v for v in filter(None, args.ab.split(",")) if v != "reference"]
    cheap = [v for v in chosen if "config" not in AB_VARIANTS[v]]
    for variant in ["reference", *cheap] if args.ab_items > 0 else []:
        report.section(variant, limit("ab"), lambda variant=variant: ab_section(check, variant), report.payload["ab"])
    for quant in filter(None, args.quant_ab.split(",")) if args.ab_items > 0 else []:
        report.section(f"quant-{quant}", limit("ab-quant"), lambda quant=quant: quant_section(check, quant),
                       report.payload["ab"])
    for variant in [v for v in chosen if v not in cheap] if args.ab_items > 0 else []:
        report.section(variant, limit("ab-compile"), lambda variant=variant: ab_section(check, variant),
                       report.payload["ab"])
    print(headline(report.payload), flush=True)
    print(markdown(report.payload, report.stem), flush=True)
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
