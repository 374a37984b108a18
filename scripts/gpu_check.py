"""GPU check: the run a user gets on full-size Qwen2.5-VL-7B shapes, and each lever A/B.

Builds a Qwen2.5-VL-7B-shaped model with RANDOM bf16 weights straight on the GPU from the published
config values (nothing is downloaded; a one-prefill scorer's cost does not depend on weight values)
and FinMME-like items (1024×768 synthetic charts, ~300 prompt text tokens), then runs the sections
in the order of the plan (scripts/gpucheck/plan.py; `--plan` prints it with each limit and the
total), each under its own limit and written to the JSON as it goes:
1. `run`: `--n-items` items through `finbench run`'s own defaults on this machine (batch size, token
   budget and workers from runner/defaults.py, the function the CLI calls; every fast path at its
   CUDA default), one forward a planned batch; the FinMME projection is load + compile + pipeline
   fill + 11,099 items at the steady rate;
2. `quant-fp8` (`--quant-ab`): the same seeded weights quantized in memory, `--pairs` interleaved
   (default, fp8) runs of `--ab-items` items;
3. `think`: `--think-batch` rows through the thinking step (`--think-budget` greedy tokens, finished
   rows compacted) and the constrained answer: decode tokens/s, ms per step, the HBM roofline;
4. `compile-lm`: the language model's elementwise chains compiled (RMSNorm, rotary, SiLU·mul),
   compile time charged, interleaved pairs;
5. while the budget lasts: `reference` (every fast path off), the cheap levers one by one, the
   other compilers, one profiled batch (MFU), a generate+regex baseline, bench_gemm and
   bench_attention.
Each A/B row is judged only outside the spreads of its pairs (`verdict`), its answers compared one
by one with the reference (or, before it runs, with the default runs beside it). Every section is
recorded in run order as {name, limit_s, elapsed_s, status: pending | running | done | timed_out |
skipped | failed} in the JSON's `sections` list, from the start; a section cut by its limit or by
the outer one (SIGTERM) is `timed_out` and keeps what it finished; after a SIGKILL,
`--mark-killed` (gpu_check.sh runs it) writes the running one `timed_out`.

    python scripts/gpu_check.py --plan                               # the H200 plan, no GPU needed
    python scripts/gpu_check.py --out benchmarks/results             # the H200 run (scripts/gpu_check.sh)
    python scripts/gpu_check.py --tiny --out /tmp/gpu-check          # CPU mode: same logic, tiny shapes
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()  # the budget counts the imports too: the shell's outer limit does
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the gpucheck package beside this file
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from gpucheck import plan  # noqa: E402
from gpucheck.ab import (AB_VARIANTS, ab_section, compiled_modules, interleaved, quant_section,  # noqa: E402,F401
                         set_compiled, uncompiled)
from gpucheck.build import Check, run_settings  # noqa: E402,F401 (tests/test_run_defaults.py)
from gpucheck.output import headline, markdown, verdict  # noqa: E402,F401
from gpucheck.report import Report, SectionTimeout, deadline, mark_killed  # noqa: E402,F401
from gpucheck.sections import baseline_section, bench_section, profile_section, run_section, think_section  # noqa: E402

DEFAULT_AB = [v for v in AB_VARIANTS if v != "default"]  # `default` vs itself: only on request


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tiny", action="store_true", help="CPU mode: tiny shapes, few items (tests the logic)")
    parser.add_argument("--plan", action="store_true", help="print the H200 plan (limits, total) and exit")
    parser.add_argument("--mark-killed", action="store_true", help="after a SIGKILL: write the running section "
                        "of --out's check files timed_out, the pending ones skipped, and exit")
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
    parser.add_argument("--ab", default=",".join(DEFAULT_AB), help=f"A/B rows ({', '.join(AB_VARIANTS)}; '' = none)")
    parser.add_argument("--quant-ab", default="fp8", help="quantized A/B rows (each if models/quant.py offers it)")
    parser.add_argument("--no-benches", action="store_true", help="leave out bench_gemm.py and bench_attention.py")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole check (default: the "
                        f"plan's {plan.TOTAL_S} s less the shell's setup on CUDA, none with --tiny)")
    parser.add_argument("--no-run-reports", action="store_true", help="write no report.html/.md for the check's runs "
                        "(gpu_check.sh's setting: nobody reads them, and rendering them is most of a tiny run)")
    args = parser.parse_args(argv)
    args.ab_list = [v for v in filter(None, args.ab.split(",")) if v != "reference"]
    unknown = set(args.ab_list) - set(AB_VARIANTS)
    if unknown:
        parser.error(f"--ab: unknown variant(s) {', '.join(sorted(unknown))}")
    args.device = "cpu" if args.tiny else "cuda"
    args.think_budget = (16 if args.tiny else 256) if args.think_budget is None else args.think_budget
    args.think_batch = (4 if args.tiny else 64) if args.think_batch is None else args.think_batch
    if args.budget is None and not args.tiny:
        args.budget = float(plan.TOTAL_S - plan.OVERHEAD_S["setup"])
    return args


def order(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(section, kind) in run order for these arguments (gpucheck/plan.py `sections`)."""
    ab = args.ab_list if args.ab_items > 0 else []
    quants = list(filter(None, args.quant_ab.split(","))) if args.ab_items > 0 else []
    return plan.sections(ab, quants, args.think_budget > 0, args.baseline_items > 0, not args.no_benches)


def work_of(check: Check, name: str, kind: str) -> Any:
    """The function that runs section `name` of `kind`."""
    out = Path(check.args.out)
    return {"run": lambda: run_section(check), "think": lambda: think_section(check),
            "profile": lambda: profile_section(check, out / f"gpu_profile_{check.args.model}.txt"),
            "baseline": lambda: baseline_section(check),
            "quant": lambda: quant_section(check, name.removeprefix("quant-")),
            "gemm": lambda: bench_section(check, "gemm"), "attention": lambda: bench_section(check, "attention"),
            }.get(kind, lambda: ab_section(check, name))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.plan:
        print(plan.plan_text(order(args)))
        return {}
    if args.mark_killed:
        print("marked:", ", ".join(mark_killed(Path(args.out))) or "nothing was left running")
        return {}
    import torch

    if not args.tiny and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device (use --tiny for the CPU mode)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sections = order(args)
    limit = (lambda kind: None) if args.tiny else plan.SECTION_S.get
    check = Check(args, Path(tempfile.mkdtemp(prefix="finbench-gpu-check-")))
    report = check.report = Report(out, "gpu_check_tiny" if args.tiny else "gpu_check_h200", args,
                                   [(name, limit(kind)) for name, kind in sections], started=STARTED)
    try:
        with report.stop_on_term():
            if report.section("build", limit("build"), check.build) is not None:
                for name, kind in sections[1:]:
                    where = report.payload["results"] if kind in plan.RESULT_KINDS else report.payload["ab"]
                    if report.section(name, limit(kind), work_of(check, name, kind), where) is not None and kind == "run":
                        report.payload["results"]["run"]["settings"] = check.settings
    except SectionTimeout:  # the outer limit between two sections
        report.stopped = report.stopped or "stopped by the outer time limit"
    report.finish()
    print(headline(report.payload), flush=True)
    print(markdown(report.payload, report.stem), flush=True)
    if report.stopped:  # out now: the cut work may have left threads that would hold the exit
        sys.stdout.flush()
        os._exit(124)
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
