#!/usr/bin/env bash
# One prepared H200 check in one command, planned to 480 s (scripts/gpucheck/plan.py; one command may
# run 600 s, and 15 minutes of device time must hold a cold start and one short rerun):
#   bash scripts/gpu_check.sh --plan     every section in run order with its limit, and `total N s`
#                                        (no GPU, no torch needed)
#   set -o pipefail; bash scripts/gpu_check.sh 2>&1 | tee $OUT/gpu_check_log.txt      (a 600-s limit)
# 1. setup: wheels carried in .wheels/ installed under scripts/gpu-constraints.txt (the machine's
#    own torch 2.11 / torchvision / transformers 5.17 can never move), versions printed; nvidia-smi
#    samples clocks, power, temperature and utilisation every second ($OUT/gpu_check_smi.csv);
# 2. scripts/gpu_check.py under an outer `timeout` of what the plan has left: the default FinMME
#    projection, quant-fp8, think, compile-lm, then the cheap A/B rows, the profile, the baseline
#    and the kernel benchmarks while the budget lasts, every section under its own limit and written
#    as it goes. The outer limit's SIGTERM is written as the running section's `timed_out`; after a
#    SIGKILL, `gpu_check.py --mark-killed` writes it so. Per-run reports are off (--no-run-reports).
# TINY=1 runs the same sections on the CPU with tiny shapes and no budget (tests/test_scripts.py);
# GPU_CHECK_TOTAL=N replaces the 480-s total (the tests kill a tiny check this way). Further
# arguments go to gpu_check.py.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
OUT=${OUT:-benchmarks/results}
TINY=${TINY:-}
if [ "${1:-}" = "--plan" ]; then
  exec "$PYTHON" scripts/gpu_check.py "$@"
fi
STARTED=$SECONDS
TOTAL=${GPU_CHECK_TOTAL:-$(cd scripts && "$PYTHON" -c "from gpucheck.plan import TOTAL_S; print(TOTAL_S)")}
mkdir -p "$OUT"
echo "== setup"
if compgen -G ".wheels/*.whl" >/dev/null; then
  timeout 60 "$PYTHON" -m pip install --no-index --no-deps --quiet -c scripts/gpu-constraints.txt .wheels/*.whl \
    || echo "warning: carried wheels did not install"
fi
"$PYTHON" - <<'EOF'
import re, torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())
pins = dict(re.findall(r"^([\w-]+)==([\w.]+)", open("scripts/gpu-constraints.txt").read(), re.M))
for name, have in (("torch", torch.__version__), ("transformers", transformers.__version__)):
    if have.split("+")[0] != pins.get(name):
        print(f"note: {name} {have} is not the pinned {pins.get(name)} (scripts/gpu-constraints.txt)")
EOF
SMI_PID=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
    --format=csv -l 1 >"$OUT/gpu_check_smi.csv" 2>/dev/null &
  SMI_PID=$!
fi
stop_sampling() { if [ -n "$SMI_PID" ]; then kill "$SMI_PID" 2>/dev/null; fi; }
trap stop_sampling EXIT
LEFT=$((TOTAL - (SECONDS - STARTED)))
if [ -n "$TINY" ]; then
  # the smallest settings that still exercise every section: 4 items, 2 interleaved pairs an A/B
  # row, one timed repeat of each kernel benchmark; no budget but the outer limit, if given
  ARGS=(--tiny --n-items 4 --ab-items 4 --baseline-items 1 --pairs 2 --think-batch 2 --think-budget 8)
  [ -n "${GPU_CHECK_TOTAL:-}" ] || LEFT=3600
else
  ARGS=(--budget "$((LEFT - 5))")  # 5 s to write the files before the outer limit
fi
echo "== gpu_check (outer limit ${LEFT} s)"
timeout --kill-after=10 "$LEFT" "$PYTHON" scripts/gpu_check.py --out "$OUT" --no-run-reports "${ARGS[@]}" "$@"
STATUS=$?
if [ "$STATUS" -ne 0 ]; then
  echo "== gpu_check: exit $STATUS$([ "$STATUS" -eq 124 ] && echo ' (timed out)')"
  "$PYTHON" scripts/gpu_check.py --out "$OUT" --mark-killed  # a SIGKILL left its section `running`
fi
exit 0
