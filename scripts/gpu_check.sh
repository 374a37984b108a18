#!/usr/bin/env bash
# One prepared H200 check (at most 9.5 minutes by its timeouts). First the vision towers alone
# (scripts/bench_vision.py on CUDA: fp32 equality and calls per layer at reduced depth, then bf16
# timing at the published depth: stock vs varlen vs padded SDPA vs --compile-vision), then
# full-size Qwen2.5-VL-7B/3B shapes with random bf16 weights, 512 FinMME-like items through
# finbench, a generate+regex baseline for the 7B, 8/4-bit if bitsandbytes imports, and last the 7B
# again once per A/B variant (`ab` in the JSON): --compile-vision, then the cuDNN SDPA backend off
# in the prefill too (decode steps leave it out by default). One batch of the 7B is profiled
# (gpu_profile_*.txt). Writes benchmarks/results/gpu_check_h200.{json,md} (or $OUT) after each
# model and variant. Runs on the GPU machine's own Python (torch 2.11, transformers 5.17, no
# network); wheels placed in .wheels/ (e.g. bitsandbytes, fetched on a machine with network by
# scripts/fetch_gpu_wheels.sh) are installed first. Each model prints one headline line: prefill
# MFU, samples/s, projected FinMME minutes, ratio to generate+regex, the A/B rates. Call it
# through the device tool as
#   set -o pipefail; bash scripts/gpu_check.sh 2>&1 | tee $OUT/gpu_check_log.txt      (timeout_s 600;
#   run scripts/fetch_gpu_wheels.sh here first and carry [".wheels"] for the 8-bit / 4-bit runs: 43 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
if compgen -G ".wheels/*.whl" >/dev/null; then
  "$PYTHON" -m pip install --no-index --no-deps --quiet .wheels/*.whl || echo "warning: carried wheels did not install"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
VISION="$OUT/bench_vision_h200.txt"
echo "# command: scripts/gpu_check.sh (bench_vision.py --device cuda --compile, fp32 depth 4 then bf16 published depth)" >"$VISION"
timeout 90 "$PYTHON" scripts/bench_vision.py --device cuda --dtype float32 --depth 4 --repeat 2 --compile 2>&1 \
  | tee -a "$VISION" || echo "bench_vision fp32 failed (exit $?)" | tee -a "$VISION"
timeout 130 "$PYTHON" scripts/bench_vision.py --device cuda --dtype bfloat16 --depth 0 --repeat 3 --compile 2>&1 \
  | tee -a "$VISION" || echo "bench_vision bf16 failed (exit $?)" | tee -a "$VISION"
timeout "${GPU_CHECK_SECONDS:-340}" "$PYTHON" scripts/gpu_check.py --out "$OUT" "$@"
