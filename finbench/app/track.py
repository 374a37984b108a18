"""Finished run folders recorded in an experiment tracker (`finbench track`, `--track` on run and
sweep): what a tracker is given of each folder, read from the folder alone, and the targets.

A run folder gives its resolved options as params (results.json's `config`: the model, benchmark,
protocol, quantization and every other option), every number results.json measures as a metric,
under its path in the file (`scores.<metric>`, `scores.ci.<metric>.low`,
`scores.breakdowns.<field>.<group>.accuracy`, `throughput.samples_per_s`, `cost.total.seconds`, …;
`headline` is the primary metric's value), its files as artifacts (results.json, report.html,
samples.parquet, config.yaml) and tags naming the folder and the SHA-256 of those files. A sweep
folder (sweep.json) is one parent run, with its variants' folders as children. Every folder is
read and checked before a target writes anything: a folder that is not a finished run is one
ValueError line, and nothing of any folder is recorded.

The targets (`TARGETS`): `mlflow` (app/track_mlflow.py; the `[track]` extra). A target's module
imports its library only when it records, so the commands start without it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.config.files import CONFIG_FILE, read_file
from finbench.core.types import RESULTS_FILE

# a target: the module that records into it (`check(uri)`, `record(folders, uri, experiment)`), imported when used
TARGETS = {"mlflow": "finbench.app.track_mlflow"}
EXPERIMENT = "finbench"  # the experiment runs are recorded in, unless `finbench track --experiment` names another
SWEEP_FILE = "sweep.json"  # app/sweep.py writes it; read here without importing the sweep (pandas)
SUMMARY_FILE = "summary.json"  # a run of several benchmarks: one run folder per benchmark below it
RUN_ARTIFACTS = (RESULTS_FILE, "report.html", "samples.parquet", CONFIG_FILE)
SWEEP_ARTIFACTS = (SWEEP_FILE, "report.html", "report.md", CONFIG_FILE)
# results.json's parts that say what ran rather than measure it: params and tags, not metrics
DESCRIPTIVE = ("config", "fingerprint", "decoding", "thinking", "environment", "provenance", "schema_version")
RUN_DIR_TAG, KEY_TAG, DIGEST_TAG, KIND_TAG = "finbench.run_dir", "finbench.folder_key", "finbench.digest", "finbench.kind"


@dataclass(frozen=True)
class Folder:
    """What a tracker records of one folder: a run (`kind` "run") or a sweep with its variants as
    `children`. `params` are text; `tags` hold the folder's path, a key to find it by, the digest
    of its `artifacts` and its kind."""

    path: Path
    kind: str
    name: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    artifacts: tuple[Path, ...]
    children: tuple["Folder", ...] = ()


def read_folders(paths: Sequence[str | Path]) -> list[Folder]:
    """Every folder read and checked, in order (a folder of several benchmarks' runs, with its
    summary.json, gives each of them); one ValueError line for the first that is no finished run."""
    folders: list[Folder] = []
    for given in paths:
        path = Path(given).expanduser().resolve()
        if (path / SWEEP_FILE).is_file():
            folders.append(read_sweep(path))
        elif not (path / RESULTS_FILE).is_file() and (path / SUMMARY_FILE).is_file():
            names = _json(path / SUMMARY_FILE).get("benchmarks") or {}
            folders += [read_run(path / name) for name in names]
        else:
            folders.append(read_run(path))
    return folders


def read_run(path: Path) -> Folder:
    """One run folder: its results.json's options, numbers and files."""
    if not path.is_dir():
        raise ValueError(f"{path}: no such run folder")
    if not (path / RESULTS_FILE).is_file():
        raise ValueError(f"{path}: no {RESULTS_FILE} here, so no finished run to record (a run writes it when it ends)")
    results = _json(path / RESULTS_FILE)
    if not isinstance(results.get("config"), dict) or not isinstance(results.get("scores"), dict):
        raise ValueError(f"{path / RESULTS_FILE}: not a finbench results file (no config or scores)")
    measured = {key: value for key, value in results.items() if key not in DESCRIPTIVE}
    metrics = numbers(measured)
    primary = results["scores"].get("primary")
    if isinstance(primary, str) and _number(results["scores"].get(primary)):
        metrics["headline"] = float(results["scores"][primary])
    command = (results.get("provenance") or {}).get("command")
    return _folder(path, "run", params(results["config"]), metrics, RUN_ARTIFACTS,
                   {"finbench.command": str(command)} if command else {})


def read_sweep(path: Path) -> Folder:
    """A sweep folder: its axes and shared options as params, each variant's numbers and the
    study's rows as metrics (`variants.<name>.…`, `study.<name>.…`), its variants as children."""
    sweep = _json(path / SWEEP_FILE)
    variants = sweep.get("variants")
    if not isinstance(variants, list) or not all(isinstance(v, dict) and v.get("name") for v in variants):
        raise ValueError(f"{path / SWEEP_FILE}: not a finbench sweep file (no variants)")
    options = read_file(path / CONFIG_FILE) if (path / CONFIG_FILE).is_file() else {}
    given = {"benchmark": sweep.get("benchmark"), "reference": sweep.get("reference"),
             **{f"axis.{axis}": values for axis, values in (sweep.get("axes") or {}).items()}, **options}
    metrics = numbers({"variants": {v["name"]: v for v in variants},
                       "study": {row.get("name"): row for row in sweep.get("study") or [] if isinstance(row, dict)}})
    children = tuple(read_run(path / variant["name"]) for variant in variants)
    return _folder(path, "sweep", params(given), metrics, SWEEP_ARTIFACTS, {}, children)


def _folder(path: Path, kind: str, given: dict[str, str], metrics: dict[str, float], names: Sequence[str],
            tags: dict[str, str], children: tuple[Folder, ...] = ()) -> Folder:
    artifacts = tuple(path / name for name in names if (path / name).is_file())
    tags = {RUN_DIR_TAG: str(path), KEY_TAG: hashlib.sha256(str(path).encode()).hexdigest()[:32],
            DIGEST_TAG: digest(artifacts), KIND_TAG: kind, **tags}
    return Folder(path, kind, "/".join(path.parts[-2:]), given, metrics, tags, artifacts, children)


def _json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: cannot be read ({err})") from None
    if not isinstance(found, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return found


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metric_key(path: Sequence[str]) -> str:
    """A metric's name from its path in the file: the parts joined by "."; a character a tracker's
    name cannot hold (MLflow: letters, digits, _ - . space) becomes "_" ("Funds & Asset" → "Funds _ Asset")."""
    return ".".join(re.sub(r"[^\w.\- ]", "_", str(part)) for part in path).lstrip(".")[:250]


def numbers(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[str, float]:
    """Every finite number of a JSON tree (lists, text and true/false left out), by `metric_key`."""
    found: dict[str, float] = {}
    for key, value in tree.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            found.update(numbers(value, path))
        elif _number(value):
            found[metric_key(path)] = float(value)
    return found


def params(options: Mapping[str, Any]) -> dict[str, str]:
    """Options as a tracker's text params: text as it is, anything else as JSON (true, null, [..])."""
    return {metric_key((key,)): value if isinstance(value, str) else json.dumps(value, default=str)
            for key, value in options.items()}


def digest(files: Sequence[Path]) -> str:
    """SHA-256 of the files' names and bytes, in order: what the tracker holds of the folder."""
    sha = hashlib.sha256()
    for path in files:
        sha.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        sha.update(b"\0")
    return sha.hexdigest()


def tracker(text: str | None) -> tuple[str, str] | None:
    """`--track TARGET:URI` as (target, URI), checked as far as it can be without opening the store
    (a target whose library is missing, a store the target refuses): one ValueError line."""
    if text is None:
        return None
    target, sep, uri = text.partition(":")
    if not sep or target not in TARGETS or not uri:
        raise ValueError(f"--track {text}: expected TARGET:URI with a target of {', '.join(TARGETS)}, e.g. "
                         "mlflow:sqlite:///runs/mlflow.db")
    check_target(target, uri)
    return target, uri


def check_target(target: str, uri: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"--to {target}: unknown tracker; known: {', '.join(TARGETS)}")
    importlib.import_module(TARGETS[target]).check(uri)


def track(paths: Sequence[str | Path], target: str, uri: str, experiment: str) -> list[str]:
    """Record the folders in `target`'s store at `uri` (an experiment of that name); one line per
    folder recorded. Every folder is read first: a bad one records nothing."""
    check_target(target, uri)
    folders = read_folders(paths)
    return importlib.import_module(TARGETS[target]).record(folders, uri, experiment)
