"""The A/B rows: each change against the default on the same seeded weights, as interleaved
(default, variant) pairs, answers compared one by one — with the default runs beside it, and with
the reference (every fast path off) when it has run. A row cut by its limit keeps the pairs it
finished (`Report.partial`, with their count)."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from typing import Any, Callable, Iterator

from gpucheck.build import Check, _free
from gpucheck.sections import projection

# A/B variants: (fast-path changes against the default, extra RunConfig settings, global switch)
AB_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-pad-widths": {"paths": {"pad_widths": False}},
    "no-causal-prefill": {"paths": {"causal_prefill": False}},
    "no-static-decode": {"paths": {"static_decode": False}},
    "no-cuda-graphs": {"paths": {"cuda_graphs": False}},
    "no-vision-indices": {"paths": {"vision_indices": False}},
    "no-cudnn-sdpa": {"no_cudnn": True},
    "compile-lm": {"config": {"compile_lm": True}},  # the elementwise chains: planned early (gpucheck/plan.py)
    "compile-vision": {"config": {"compile_vision": True}},
}


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


def anchored(check: Check, result: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The variant's answers against the reference run, or, before it has run (fp8 and the
    elementwise compile row are planned first), against the default runs interleaved with it."""
    if check.reference_samples is not None:
        return compared(result.samples, check.reference_samples)
    return {**row["vs_default"], "anchor": "the interleaved default runs (no reference run yet)"}


def interleaved(check: Check, name: str, variant: Callable[[int], Any], pairs: int, compile_s: float = 0.0,
                load_s: float | None = None) -> tuple[dict[str, Any], Any]:
    """`pairs` × (the default run, then `variant(i)`), alternating on the same items, so a drift of the
    machine (clocks, heat, other work) falls on both alike. The row: each side's projected FinMME
    minutes per run, their median and spread (min, max), the pairs finished (`pairs`, of
    `pairs_planned`), and the answers against the default run beside them (`vs_default`); the
    variant's last result. After every pair the row so far is the section's `partial`: a row cut
    by its limit keeps it."""
    default_adapter = getattr(check, "headline", None) or check.adapter(check.paths)
    mine, base, rates, base_rates = [], [], [], []
    for i in range(pairs):
        default = check.run(default_adapter, f"{name}-default-{i}", check.args.ab_items)
        base.append(projection(default.results["throughput"], check.load_s)["projected_finmme_minutes"])
        base_rates.append(default.results["throughput"]["samples_per_s"])
        last = variant(i)
        throughput = last.results["throughput"]
        mine.append(projection(throughput, check.load_s if load_s is None else load_s, compile_s)["projected_finmme_minutes"])
        rates.append(throughput["samples_per_s"])
        row = _row(mine, base, rates, base_rates, pairs, compile_s)
        row["vs_default"] = compared(last.samples, default.samples)
        row.update(failed_samples(last.samples))
        check.report.partial = row
    return row, last


def failed_samples(samples: Any) -> dict[str, Any]:
    """The variant's failed samples and the first error: a row whose samples failed is timed on
    error paths, so its rate decides nothing (`output.verdict`)."""
    if "error" not in samples:  # a table without the column holds no failure
        return {"sample_errors": 0, "first_error": None}
    errors = samples["error"].fillna("").astype(str)
    failed = errors[errors != ""]
    return {"sample_errors": len(failed), "first_error": failed.iloc[0][:300] if len(failed) else None}


def _row(mine: list[float | None], base: list[float | None], rates: list[float], base_rates: list[float],
         planned: int, compile_s: float) -> dict[str, Any]:
    mine_, base_ = [m for m in mine if m], [b for b in base if b]
    return {"samples_per_s": statistics.median(rates), "samples_per_s_runs": list(rates),
            "default_samples_per_s_runs": list(base_rates), "pairs": len(rates), "pairs_planned": planned,
            "compile_s": compile_s, "projected_finmme_minutes": statistics.median(mine_) if mine_ else None,
            "minutes_spread": spread(mine_), "default_minutes": statistics.median(base_) if base_ else None,
            "default_minutes_spread": spread(base_)}


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
            **anchored(check, result, row)}


IN_MEMORY_QUANT = ("fp8", "int8wo", "int4wo")  # formats applied to loaded weights (models/quant.py)


def quant_section(check: Check, quant: str) -> dict[str, Any]:
    """The default paths on the same seeded weights quantized the way `--quant` does it: formats
    applied to loaded weights (fp8, torchao's) on a copy in memory with `quantize_loaded` (no 16-GB
    checkpoint written and read back; the load in its projection is the bf16 build plus the
    quantization), the others (bitsandbytes) through a checkpoint and `load_model(..., quant=quant)`."""
    import copy

    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.models.loading import resolve_device
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
        adapter = load_model(str(folder), LoadSpec(dtype="float32" if check.args.tiny else "bfloat16",
                                                   device=check.args.device, quant=quant))
        load_s = time.perf_counter() - started
    started = time.perf_counter()  # fp8's fused quantization compiles here: charged like a compiler's
    check.run(adapter, f"{quant}-warmup", min(8, check.args.ab_items))
    warmup_s = time.perf_counter() - started
    row, result = interleaved(check, f"quant-{quant}",
                              lambda i: check.run(adapter, f"{quant}-{i}", check.args.ab_items), check.args.pairs,
                              compile_s=warmup_s, load_s=load_s)
    report = {**row, "load_s": load_s, "quant": adapter.fingerprint().get("quant"),
              "memory_gib": (adapter.memory_footprint() or 0) / 2**30,
              **anchored(check, result, row)}
    del adapter
    _free()
    return report


