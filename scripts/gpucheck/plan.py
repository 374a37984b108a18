"""The H200 run's plan: every section in run order with its time limit (seconds), and the total.

One lent H200 gets ~15 minutes of device time for every try together, a cold start included, and
one command may run 600 s: the check is planned to 480 s (`TOTAL_S`), so that a cold start and a
short rerun still fit. The order puts the figures that decide the defaults first — the default
FinMME projection, then fp8, the thinking row and one compile row on the language model's
elementwise chains (RMSNorm, rotary, SiLU·mul: `--compile-lm`) — and the cheap A/B rows after them,
run while the budget lasts. No torch here: `gpu_check.sh --plan` prints this on any machine.
"""

from __future__ import annotations

from typing import Sequence

TOTAL_S = 480  # the H200 command's planned time; one command may run 600 s
# seconds outside gpu_check.py's sections: the shell's install step, then Python's imports
OVERHEAD_S = {"setup": 20, "start": 15}
# each section's limit on the H200 (an A/B row: `--pairs` 3 × (default, variant) runs of 64 items,
# ~6 s a run at the projected rates, one forward a batch, no per-run reports)
SECTION_S = {"build": 75, "run": 90, "quant": 75, "think": 35, "compile": 100, "reference": 15, "ab": 40,
             "profile": 30, "baseline": 30, "gemm": 70, "attention": 40}
RESULT_KINDS = ("build", "run", "profile", "baseline", "think", "gemm", "attention")  # the others: A/B rows
ELEMENTWISE_COMPILE = "compile-lm"  # the compile row planned early (regional: norms, rotary, SiLU·mul)
WHAT = {"setup": "carried wheels installed under scripts/gpu-constraints.txt; versions printed",
        "start": "Python, torch and transformers imported",
        "build": "Qwen2.5-VL-7B shapes, random bf16 weights on the GPU, FinMME-like items",
        "run": "the default FinMME projection: 512 items through finbench run's CUDA defaults",
        "quant": "the same weights quantized in memory, interleaved pairs with the default",
        "think": "64 rows × 256 reasoning tokens, the fraction of the HBM roofline",
        "compile": "compiled, compile time charged, interleaved pairs with the default",
        "reference": "every fast path off: the answers' anchor for the levers",
        "ab": "one lever changed, interleaved pairs with the default",
        "profile": "one full batch under torch.profiler (prefill MFU)",
        "baseline": "generate(batch 1) + regex on a few items",
        "gemm": "scripts/bench_gemm.py: production GEMM shapes, bf16 vs fp8",
        "attention": "scripts/bench_attention.py: prefill and decode attention kernels"}


def sections(ab: Sequence[str], quants: Sequence[str], think: bool, baseline: bool,
             benches: bool = True) -> list[tuple[str, str]]:
    """(section, kind) in run order: build, run, the quantized rows, think, the elementwise compile
    row, then what runs while the budget lasts — the reference, the cheap levers, the other
    compilers, the profile, the baseline and the two kernel benchmarks."""
    order = [("build", "build"), ("run", "run")] + [(f"quant-{q}", "quant") for q in quants]
    order += [("think", "think")] if think else []
    order += [(v, "compile") for v in ab if v == ELEMENTWISE_COMPILE]
    levers = [v for v in ab if not v.startswith("compile-")]
    order += [("reference", "reference")] + [(v, "ab") for v in levers] if levers else []
    order += [(v, "compile") for v in ab if v.startswith("compile-") and v != ELEMENTWISE_COMPILE]
    order += [("profile", "profile")] + ([("baseline", "baseline")] if baseline else [])
    return order + ([("gemm", "gemm"), ("attention", "attention")] if benches else [])


def planned(order: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """The sections whose limits fit in TOTAL_S after the overhead, in order, and those after them
    (they run only when the earlier ones finish under their limits)."""
    spent = sum(OVERHEAD_S.values())
    inside, after = [], []
    for name, kind in order:
        limit = SECTION_S[kind]
        if not after and spent + limit <= TOTAL_S:
            inside.append((name, kind, limit))
            spent += limit
        else:
            after.append((name, kind, limit))
    return inside, after


def plan_text(order: Sequence[tuple[str, str]]) -> str:
    """The plan as `gpu_check.sh --plan` prints it; its `total N s` line is the sum of the limits."""
    inside, after = planned(order)
    lines = ["H200 plan (bash scripts/gpu_check.sh, one command), limits in run order:"]
    rows = [(name, name, limit) for name, limit in OVERHEAD_S.items()] + inside
    for number, (name, kind, limit) in enumerate(rows, 1):
        lines.append(f"{number:3d}. {name:<20} {limit:4d} s  {WHAT[kind]}")
    total = sum(limit for _, _, limit in rows)
    lines.append(f"total {total} s (goal ≤ {TOTAL_S} s; the command limit is 600 s)")
    if after:
        lines.append("then, while the budget lasts (each cut to what is left): "
                     + ", ".join(f"{name} {limit} s" for name, _, limit in after))
    return "\n".join(lines)
