#!/usr/bin/env bash
# The model and decoding tests under the H200 machine's own pins (scripts/gpu-constraints.txt:
# torch 2.11.0, torchvision 0.26.0, transformers 5.17.0), on a CPU, in a venv of their own
# (default /tmp/finbench-device-pins; made once, ~1.5 min from a warm pip cache, several GB):
#   bash scripts/test_device_pins.sh [VENV]
# Not part of .ci/run (the install alone costs minutes); run it when fp8, decoding or a model
# family changes. torch 2.11's CPU `_scaled_mm` takes per-tensor scales only, which is what
# tests/test_fp8_reference.py holds the fp8 path to there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-/tmp/finbench-device-pins}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet -c scripts/gpu-constraints.txt -e '.[test]'
fi
export HF_HUB_OFFLINE=1
"$VENV/bin/python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
"$VENV/bin/python" -m pytest -n 0 -q -m "not slow" tests/test_fp8_reference.py tests/test_fp8_shared.py \
  tests/test_decoding.py tests/test_fast_paths.py tests/test_model_contract.py
