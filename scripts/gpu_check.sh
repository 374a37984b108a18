#!/usr/bin/env bash
# One prepared H200 check (< 8 minutes): full-size Qwen2.5-VL-7B/3B shapes with random bf16 weights,
# 512 FinMME-like items through finbench and a generate+regex baseline, 8/4-bit if bitsandbytes
# imports. Writes benchmarks/results/gpu_check_h200.{json,md} (or $OUT). Runs on the GPU machine's
# own Python (torch 2.11, transformers 5.17, no network); wheels placed in .wheels/ (e.g.
# bitsandbytes, fetched on a machine with network by scripts/fetch_gpu_wheels.sh) are installed first.
# The vision towers run finbench's packed attention (no flash-attn needed); each model prints one
# headline line: prefill MFU, samples/s, projected FinMME minutes, ratio to generate+regex.
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
timeout 470 "$PYTHON" scripts/gpu_check.py --out "$OUT" "$@"
