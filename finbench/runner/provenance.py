"""Where a result came from: enough to reproduce it or to tell two results apart.

`provenance()` is recorded in every results.json: finbench's version and git commit, the command,
when it started (ISO 8601), the data's fingerprint (the SHA-256 of each local file, or the hub id
and the revision in the local Hugging Face cache), the seed, the versions of the libraries that
change numbers, and the device. Nothing here may fail a run: a value that cannot be read is "".
"""

from __future__ import annotations

import datetime
import hashlib
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import torch

from finbench.benchmarks import get_benchmark
from finbench.benchmarks.records import data_files
from finbench.runner.cache import PredictionCache

RESULTS_SCHEMA_VERSION = "1.1"  # bump on any incompatible change of results.json (see report/results.schema.json;
# 1.1: one `started`, provenance.started in ISO 8601 — the top-level float is gone)
LIBRARIES = ("torch", "torchvision", "transformers", "accelerate", "bitsandbytes", "datasets", "pyarrow", "numpy",
             "pandas", "pillow", "tokenizers")


def provenance(config: Any, started: float, device: torch.device, file_digest: Callable[[Path], str],
               command: str | None = None) -> dict[str, Any]:
    return {
        "finbench_version": _version("finbench"),
        "git_commit": git_commit(),
        "command": command if command is not None else shlex.join(["finbench", *sys.argv[1:]]),
        "started": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds"),
        "data": data_fingerprint(config.data, file_digest, get_benchmark(config.benchmark).files),
        "seed": config.output.seed,
        "versions": {"python": platform.python_version(), **{name: _version(name) for name in LIBRARIES}},
        "device": device_name(device),
    }


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def git_commit() -> str:
    """The checkout's commit when finbench runs from a git checkout (e.g. `pip install -e .`),
    with `-dirty` when files differ from it; "" for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return ""
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{commit}-dirty" if commit and dirty else commit


def data_fingerprint(source: str | None, file_digest: Callable[[Path], str],
                     files_of: Callable[[Any], list[Path]] = data_files) -> dict[str, Any]:
    """SHA-256 per local data file (the benchmark's data files, `files_of`; remembered in the cache
    by path, size and mtime), or the hub id with the commit the local Hugging Face cache holds for it."""
    if source is not None and Path(source).exists():
        try:
            files = {str(path): file_digest(path) for path in files_of(source)}
        except (OSError, ValueError):
            return {"source": str(source), "files": {}, "digest": ""}
        combined = hashlib.sha256("".join(f"{p}:{d}" for p, d in sorted(files.items())).encode()).hexdigest()
        return {"source": str(source), "files": files, "digest": combined[:16]}
    return {"source": source or "(the benchmark's hub set)", "hub_revision": _hub_revision(source)}


def _hub_revision(hub_id: str | None) -> str:
    if not hub_id:
        return ""
    try:
        from huggingface_hub import constants

        ref = Path(constants.HF_HUB_CACHE) / f"datasets--{hub_id.replace('/', '--')}" / "refs" / "main"
        return ref.read_text().strip() if ref.is_file() else ""
    except Exception:  # noqa: BLE001 — provenance never fails a run
        return ""


def device_name(device: torch.device) -> str:
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"cpu: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"cpu: {platform.processor() or platform.machine()}"


def cache_file_digest(config: Any) -> Callable[[Path], str]:
    """File digests for provenance, remembered in the run's cache (reopened: the run closed it)."""
    def digest(path: Path) -> str:
        location = Path(config.output.cache or Path(config.output.out) / "cache.sqlite")
        if not location.is_file():  # gone (the run folder removed?): never a fresh empty cache in its place
            return ""
        try:
            cache = PredictionCache(location)
            try:
                return cache.file_digest(path)
            finally:
                cache.close()
        except Exception:  # noqa: BLE001 — provenance never fails a run
            return ""
    return digest
