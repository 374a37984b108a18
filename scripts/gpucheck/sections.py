"""The measured sections: the default run and its FinMME projection, the profiled batch, the
generate+regex baseline, the thinking row against the HBM roofline, and the two kernel
benchmarks (run as scripts of their own, under the section's limit)."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from gpucheck.build import Check
from gpucheck.output import FINMME_ITEMS

H200_BF16_TFLOPS = 790.0  # measured dense bf16 matmul rate on this H200 (SPEC.md)


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
    vision_attention.kernel_calls(adapter.model, reset=True)
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
            "vision_kernel_calls": dict(vision_attention.kernel_calls(adapter.model)), "graph_captures": adapter.graphs.captures,
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
    from finbench.runner.run_requests import first_prompt, render
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




def bench_section(check: Check, script: str) -> dict[str, Any]:
    """scripts/bench_<script>.py as a process of its own (its JSON beside the check's); killed with
    the section when its limit fires."""
    args = ["--tiny", "--repeat", "1"] + (["--sustain", "0.5"] if script == "gemm" else []) if check.args.tiny else []
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / f"bench_{script}.py"),
                           "--out", check.args.out, *args], capture_output=True, text=True)
    print(done.stdout[-2000:], done.stderr[-2000:], sep="\n", flush=True)
    if done.returncode:
        raise RuntimeError(f"bench_{script}.py exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return {"file": f"bench_{script}_{'tiny' if check.args.tiny else 'h200'}.json"}
