#!/usr/bin/env bash
# The test suite against the newest releases of every dependency, so that a new release breaks this
# check rather than a user's install (which constraints.txt pins to what last passed):
#   bash scripts/newest.sh [--lock] [VENV] [-- PYTEST ARGS]
# VENV (default /tmp/finbench-newest) is made afresh. Each dependency of pyproject.toml (with the
# test, quant and serve extras) is installed at the newest release the package index has, its
# version bounds dropped, so a release pyproject.toml does not admit yet is tried too; then the
# README's test command runs. The versions that differ from constraints.txt are printed first.
# --lock: when the suite passes, constraints.txt is rewritten from that venv (the deliberate refresh;
# raise pyproject.toml's upper bounds to admit what it pins, and commit both).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=""
if [ "${1:-}" = "--lock" ]; then LOCK=1; shift; fi
VENV=/tmp/finbench-newest
if [ $# -gt 0 ] && [ "$1" != "--" ]; then VENV=$1; shift; fi
[ "${1:-}" = "--" ] && shift
rm -rf "$VENV"
python3 -m venv "$VENV"
# Every requirement's bare name, from pyproject.toml's dependencies and the extras the tests install.
names=$(python3 - <<'EOF'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted = list(project["dependencies"]) + [r for group in ("test", "quant", "serve") for r in extras[group]]
names = {re.match(r"[A-Za-z0-9_.\-]+", r).group(0) for r in wanted if not r.startswith("finbench")}
print(" ".join(sorted(names)))
EOF
)
"$VENV/bin/pip" install --quiet --upgrade $names
"$VENV/bin/pip" install --quiet --no-deps -e .
echo "== releases newer than constraints.txt"
"$VENV/bin/pip" freeze | grep -v '^-e\|^#' | sort > "$VENV/freeze.txt"
grep -v '^#' constraints.txt | sort | comm -13 - "$VENV/freeze.txt" || true
export HF_HUB_OFFLINE=1
"$VENV/bin/python" -m pytest "$@"
if [ -n "$LOCK" ]; then
  { grep '^#' constraints.txt; cat "$VENV/freeze.txt"; } > constraints.txt.new && mv constraints.txt.new constraints.txt
  echo "constraints.txt rewritten from $VENV: raise pyproject.toml's upper bounds to admit it, then commit both"
fi
