#!/usr/bin/env bash
# One prepared H200 check, at most 9.5 minutes by its timeouts (570 s; the run tool allows 600), every section under its own and each
# writing its results as it goes (a later timeout keeps them):
#   0. nvidia-smi samples clocks, power, temperature and utilisation every second in the background
#      ($OUT/gpu_check_smi.csv), for the whole check;
#   1. scripts/bench_gemm.py (70 s): the production GEMM shapes (vision MLP 3420 vs padded 3456, the
#      language model's), bf16 vs fp8, kernel names, a 10-s sustained loop → bench_gemm_h200.json;
#   2. scripts/bench_attention.py (40 s): masked vs causal vs packed prefill attention and the decode
#      step's, host cost of a first shape vs a repeated one → bench_attention_h200.json;
#   3. scripts/gpu_check.py (460 s, its own 440-s budget and per-section limits, each section's
#      {name, limit_s, elapsed_s, status} in the JSON's `sections` list): Qwen2.5-VL-7B shapes with
#      random bf16 weights, 512 FinMME-like items through `finbench run`'s own CUDA defaults, one
#      full batch profiled (gpu_profile_qwen2.5-vl-7b.txt), a short generate+regex baseline, the
#      `think` row (batch 64, 256 reasoning tokens, vs the HBM roofline), then the A/B rows — cheap
#      levers, fp8, the compilers, in that order — each 3 interleaved pairs of 64 items with the
#      default, compared answer by answer with the reference → gpu_check_h200.{json,md}.
# Known things are not re-measured (the fp32 tower check, the full 3B run, the long baseline).
# Runs on the GPU machine's own Python; wheels placed in .wheels/ are installed first. Call it as
#   set -o pipefail; bash scripts/gpu_check.sh 2>&1 | tee $OUT/gpu_check_log.txt      (timeout_s 600)
# TINY=1 runs the same sections on the CPU with tiny shapes (tests/test_scripts.py); further
# arguments go to gpu_check.py.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
OUT=${OUT:-benchmarks/results}
TINY=${TINY:-}
mkdir -p "$OUT"
if compgen -G ".wheels/*.whl" >/dev/null; then
  "$PYTHON" -m pip install --no-index --no-deps --quiet .wheels/*.whl || echo "warning: carried wheels did not install"
fi
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
SMI_PID=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
    --format=csv -l 1 >"$OUT/gpu_check_smi.csv" 2>/dev/null &
  SMI_PID=$!
fi
stop_sampling() { if [ -n "$SMI_PID" ]; then kill "$SMI_PID" 2>/dev/null; fi; }
trap stop_sampling EXIT
section() {  # section NAME SECONDS COMMAND...: one line when it fails or times out; the others still run
  local name=$1 seconds=$2
  shift 2
  echo "== $name (limit ${seconds} s)"
  timeout "$seconds" "$@"
  local status=$?
  if [ "$status" -ne 0 ]; then echo "== $name: exit $status$([ "$status" -eq 124 ] && echo ' (timed out)')"; fi
  return 0
}
if [ -n "$TINY" ]; then
  # the smallest settings that still exercise every section: one timed repeat, half a second of
  # sustained GEMMs, 4 items, 2 interleaved pairs an A/B row, no per-run report (its plots were most
  # of each tiny run); well under 3 minutes on 2 loaded cores (the tests run it)
  section gemm 120 "$PYTHON" scripts/bench_gemm.py --tiny --out "$OUT" --repeat 1 --sustain 0.5
  section attention 120 "$PYTHON" scripts/bench_attention.py --tiny --out "$OUT" --repeat 1
  section gpu_check 900 "$PYTHON" scripts/gpu_check.py --tiny --out "$OUT" --n-items 4 --ab-items 4 --baseline-items 1 \
    --pairs 2 --think-batch 2 --think-budget 8 --no-run-reports "$@"
else
  section gemm 70 "$PYTHON" scripts/bench_gemm.py --out "$OUT"
  section attention 40 "$PYTHON" scripts/bench_attention.py --out "$OUT"
  section gpu_check 460 "$PYTHON" scripts/gpu_check.py --out "$OUT" --budget 440 "$@"
fi
