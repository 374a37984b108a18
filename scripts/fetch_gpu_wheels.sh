#!/usr/bin/env bash
# Fetch wheels the GPU machine lacks (it has no network) into .wheels/, to be carried with `run`.
# Only bitsandbytes is needed there (for the 8-bit / 4-bit runs); everything else finbench uses on
# that machine is installed already (datasets is optional: parquet falls back to pyarrow).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .wheels
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_24_x86_64 -d .wheels bitsandbytes
ls -la .wheels
