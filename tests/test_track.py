"""`finbench track RUN_DIR… --to mlflow --uri URI` and `--track mlflow:URI` (issue 53): finished run
folders in a real MLflow SQLite store — one MLflow run per folder however often it is tracked, its
metrics equal to results.json's numbers, its files as artifacts; a sweep as one parent run with a
child per variant; every bad input one line, with nothing written to the store.

The expected metrics are read from results.json here, by their path in the file, independently of
finbench's flattening; the store is read back through MLflow's own client."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ENV, cli

mlflow = pytest.importorskip("mlflow", reason="the [track] extra (mlflow-skinny) is not installed")
from mlflow.tracking import MlflowClient  # noqa: E402


def _store(path: Path) -> str:
    return f"sqlite:///{path}"


def _runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("finbench")
    return client.search_runs([experiment.experiment_id]) if experiment is not None else []


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def _name(part: str) -> str:
    """A group's name as MLflow can hold it: what it refuses (e.g. "&") as "_"."""
    return re.sub(r"[^\w.\- ]", "_", part)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _expected_metrics(results: dict) -> dict[str, float]:
    """The numbers the issue names, read from results.json: headline metrics and their intervals,
    every breakdown group's accuracy and n, throughput, cost and the counts."""
    scores = results["scores"]
    expected = {f"scores.{key}": scores[key] for key in scores["headline"] if _number(scores[key])}
    expected["headline"] = scores[scores["primary"]]
    for key, interval in (scores.get("ci") or {}).items():  # none without bootstrap resamples
        expected.update({f"scores.ci.{key}.{end}": interval[end] for end in ("low", "high")
                         if _number(interval.get(end))})
    for field, groups in scores["breakdowns"].items():
        for group, cell in groups.items():
            expected[f"scores.breakdowns.{field}.{_name(group)}.accuracy"] = cell["accuracy"]
            expected[f"scores.breakdowns.{field}.{_name(group)}.n"] = cell["n"]
    expected.update({f"throughput.{k}": v for k, v in results["throughput"].items() if _number(v)})
    expected.update({f"cost.total.{k}": v for k, v in results["cost"]["total"].items() if _number(v)})
    expected.update({k: results[k] for k in ("n_questions", "n_cached", "n_computed")})
    expected["errors.count"] = results["errors"]["count"]
    return expected


def _check_run(client: MlflowClient, run, folder: Path) -> None:
    results = _results(folder)
    got = run.data.metrics
    for key, value in _expected_metrics(results).items():
        assert got.get(key) == pytest.approx(value, rel=1e-12, abs=1e-12), (folder.name, key, got.get(key), value)
    config = results["config"]
    for key in ("model", "benchmark", "protocol", "quant", "dtype", "limit"):
        assert run.data.params[key] == (config[key] if isinstance(config[key], str) else json.dumps(config[key]))
    assert run.data.tags["finbench.run_dir"] == str(folder.resolve())
    assert re.fullmatch(r"[0-9a-f]{64}", run.data.tags["finbench.digest"])
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"results.json", "report.html", "samples.parquet", "config.yaml"} <= names
    held = Path(client.download_artifacts(run.info.run_id, "results.json", str(folder.parent / "downloaded")))
    assert held.read_bytes() == (folder / "results.json").read_bytes()


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, tiny_qwen_dir, synthetic_parquet):
    """Three run folders of one `runs:` file, each tracked at its end by `track:` (--track) into
    its own store."""
    root = tmp_path_factory.mktemp("track")
    config = root / "study.yaml"
    config.write_text(yaml.safe_dump({
        "model": str(tiny_qwen_dir), "data": str(synthetic_parquet), "dtype": "float32", "device": "cpu",
        "bootstrap": 0, "progress": False, "out": str(root / "runs"), "track": f"mlflow:{_store(root / 'by-run.db')}",
        "runs": [{"limit": 2}, {"limit": 3}, {"limit": 2, "protocol": "official", "max_new_tokens": 2}]}))
    done = cli("run", "--config", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    folders = sorted((root / "runs").iterdir())
    assert [f.name for f in folders] == ["limit-2", "limit-2_max_new_tokens-2_protocol-official", "limit-3"]
    return root, folders, done


def test_three_folders_one_tracked_twice_are_three_mlflow_runs_whose_metrics_equal_results_json(three_runs):
    root, folders, _ = three_runs
    uri = _store(root / "mlflow.db")
    first = cli("track", *map(str, folders), "--to", "mlflow", "--uri", uri)
    assert first.returncode == 0, first.stderr[-3000:]
    again = cli("track", str(folders[0]), "--to", "mlflow", "--uri", uri)
    assert again.returncode == 0 and "(unchanged)" in again.stdout, again.stdout + again.stderr
    runs = _runs(uri)
    assert len(runs) == 3
    client = MlflowClient(tracking_uri=uri)
    by_folder = {run.data.tags["finbench.run_dir"]: run for run in runs}
    for folder in folders:
        _check_run(client, by_folder[str(folder.resolve())], folder)
    assert not (root / "mlruns").exists() and (root / "mlartifacts").is_dir()  # beside the store, not ./mlruns

    # the folder rerun (every answer from the cache: results.json rewritten): its one MLflow run is updated
    rerun = cli("run", "--config", str(folders[0] / "config.yaml"))
    assert rerun.returncode == 0 and _results(folders[0])["n_cached"] == 2, rerun.stderr[-3000:]
    updated = cli("track", str(folders[0]), "--to", "mlflow", "--uri", uri)
    assert updated.returncode == 0 and "(updated)" in updated.stdout, updated.stdout + updated.stderr
    runs = _runs(uri)
    assert len(runs) == 3
    run = next(r for r in runs if r.data.tags["finbench.run_dir"] == str(folders[0].resolve()))
    assert run.info.run_id == by_folder[str(folders[0].resolve())].info.run_id
    assert run.data.metrics["n_cached"] == 2 and run.data.metrics["n_computed"] == 0
    _check_run(client, run, folders[0])

    # its options changed (another --limit): MLflow keeps params as they were logged, so the folder's run is
    # replaced by a new one — still one MLflow run for the folder
    wider = cli("run", "--config", str(folders[0] / "config.yaml"), "--limit", "3")
    assert wider.returncode == 0, wider.stderr[-3000:]
    replaced = cli("track", str(folders[0]), "--to", "mlflow", "--uri", uri)
    assert replaced.returncode == 0 and "replaces" in replaced.stdout, replaced.stdout + replaced.stderr
    runs = _runs(uri)
    assert len(runs) == 3
    run = next(r for r in runs if r.data.tags["finbench.run_dir"] == str(folders[0].resolve()))
    assert run.info.run_id != by_folder[str(folders[0].resolve())].info.run_id and run.data.params["limit"] == "3"
    _check_run(client, run, folders[0])


def test_track_on_run_records_each_run_of_a_runs_list_at_its_end(three_runs):
    root, folders, done = three_runs
    assert done.stderr.count("MLflow run ") == 3, done.stderr
    uri = _store(root / "by-run.db")
    runs = _runs(uri)
    assert sorted(run.data.tags["finbench.run_dir"] for run in runs) == sorted(str(f.resolve()) for f in folders)


def test_a_sweep_is_tracked_as_one_parent_run_with_a_child_per_variant(tmp_path, tiny_qwen_dir, synthetic_parquet):
    uri = _store(tmp_path / "mlflow.db")
    out = tmp_path / "sweep"
    config = tmp_path / "sweep.toml"
    config.write_text(f'model = "{tiny_qwen_dir}"\ndata = "{synthetic_parquet}"\ndtype = ["float32", "bfloat16"]\n'
                      f'device = "cpu"\nlimit = 2\nbootstrap = 0\nprogress = false\nout = "{out}"\n')
    done = cli("sweep", "--config", str(config), "--track", f"mlflow:{uri}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert yaml.safe_load((out / "config.yaml").read_text())["dtype"] == ["float32", "bfloat16"]
    again = cli("track", str(out), "--to", "mlflow", "--uri", uri)  # once more: nothing new
    assert again.returncode == 0 and again.stdout.count("(unchanged)") == 3, again.stdout + again.stderr

    runs = _runs(uri)
    parents = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    assert len(runs) == 3 and len(parents) == 1
    parent = parents[0]
    assert parent.data.tags["finbench.kind"] == "sweep" and parent.data.tags["finbench.run_dir"] == str(out.resolve())
    children = [run for run in runs if run is not parent]
    assert {run.data.tags["mlflow.parentRunId"] for run in children} == {parent.info.run_id}
    assert sorted(Path(run.data.tags["finbench.run_dir"]).name for run in children) == ["dtype-bfloat16",
                                                                                       "dtype-float32"]
    client = MlflowClient(tracking_uri=uri)
    for child in children:
        _check_run(client, child, Path(child.data.tags["finbench.run_dir"]))
    sweep = json.loads((out / "sweep.json").read_text())
    for variant in sweep["variants"]:
        for key, value in variant["scores"].items():
            assert parent.data.metrics[f"variants.{variant['name']}.scores.{key}"] == pytest.approx(value)
    assert {"sweep.json", "report.html", "config.yaml"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_bad_tracker_input_is_one_line_and_writes_nothing(three_runs, tmp_path):
    _, folders, _ = three_runs
    good = str(folders[0])
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "garbage.db").write_text("not a database\n")
    cases = [
        ([good, str(tmp_path / "not-a-run")], _store(tmp_path / "a.db"), "not-a-run: no results.json here"),
        ([good, str(tmp_path / "absent")], _store(tmp_path / "a.db"), "absent: no such run folder"),
        ([good], _store(tmp_path / "no-folder" / "a.db"), "cannot open the store: the folder"),
        ([good], str(tmp_path / "mlruns"), "a folder (a ./mlruns file store) is not a store"),
        ([good], f"file://{tmp_path}/mlruns", "a folder (a ./mlruns file store) is not a store"),
        ([good], _store(tmp_path / "garbage.db"), "cannot open the store ((sqlite3.DatabaseError) file is not a "
                                                  "database)"),
        ([good], "sqlite://", "an in-memory store keeps nothing"),
    ]
    for dirs, uri, message in cases:
        done = cli("track", *dirs, "--to", "mlflow", "--uri", uri)
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1 and message in " ".join(lines[0].split()), (uri, done.stderr)
        assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db", "not-a-run"]  # no store was made
    assert (tmp_path / "garbage.db").read_text() == "not a database\n"

    done = cli("track", good, "--to", "trackio", "--uri", _store(tmp_path / "a.db"))
    assert done.returncode == 2 and "--to trackio: unknown tracker; known: mlflow" in done.stderr
    done = cli("run", "--model", "m", "--track", "mlflow:./mlruns")  # refused before the run (no model "m" is read)
    assert done.returncode == 2 and "--uri ./mlruns: a folder" in done.stderr
    done = cli("run", "--model", "m", "--track", "wandb:x")
    assert done.returncode == 2 and "--track wandb:x: expected TARGET:URI with a target of mlflow" in done.stderr


def test_mlflow_is_imported_only_when_something_is_recorded():
    probe = ("import sys\nfrom finbench.cli import app\nfrom finbench.app.track import tracker\n"
             "tracker('mlflow:sqlite:///x.db')\n"
             "print(sorted(m for m in ('mlflow', 'sqlalchemy', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
