"""The MLflow target of `finbench track` (the `[track]` extra: mlflow-skinny with SQLAlchemy and
Alembic, MLflow ≥ 3.13). MLflow is imported only when something is recorded: `check` needs none.

The store is a database (`sqlite:///PATH/mlflow.db`, or another SQLAlchemy URI) or a tracking
server (`http(s)://HOST:PORT`) — never a folder (`./mlruns`, a file store recent MLflow refuses).
With SQLite, artifacts go beside the database, into `mlartifacts/` (the experiment's artifact
location, set when finbench creates the experiment), never into the working folder.

One folder is one MLflow run, found again by a tag holding a key of the folder's resolved path
(app/track.py `KEY_TAG`) — not its content digest: a resumed or rerun folder rewrites results.json
(new timestamps), and it is still the same run folder, so it updates its MLflow run instead of
making a second. The digest tag says which content the MLflow run holds: the same digest again is
left as it is; new content updates the run's metrics (a new point, the latest is the folder's),
tags and artifacts. MLflow never changes a param's value, so a folder whose options changed (a run
redone with --overwrite, another --limit) gets a new MLflow run, and its old one is deleted after the
new one is whole: still one run per folder. A run that fails half-way is deleted, not left half-written.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from finbench.app.track import DIGEST_TAG, KEY_TAG, Folder

DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
SERVERS = ("http", "https", "databricks")
ARTIFACTS = "mlartifacts"  # beside a SQLite store (mlflow server's own default name)
PARENT_TAG = "mlflow.parentRunId"
BATCH = 100  # MLflow takes at most 100 params or tags, and 1000 metrics, per call


def check(uri: str) -> None:
    """A store URI MLflow can take, checked without MLflow: a database or a server, a SQLite file
    whose folder exists (one ValueError line)."""
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.split("+")[0].lower()  # postgresql+psycopg2://…
    if not sep or scheme == "file":
        raise ValueError(f"--uri {uri}: a folder (a ./mlruns file store) is not a store recent MLflow takes; give a "
                         "database, e.g. sqlite:///runs/mlflow.db, or a tracking server's http(s)://HOST:PORT")
    if scheme not in DATABASES + SERVERS:
        raise ValueError(f"--uri {uri}: unknown store {scheme!r}; give sqlite:///PATH/mlflow.db, another database "
                         f"({', '.join(DATABASES[1:])}) or a tracking server's http(s)://HOST:PORT")
    if scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None:
            raise ValueError(f"--uri {uri}: an in-memory store keeps nothing; give a file: sqlite:///PATH/mlflow.db")
        if not path.parent.is_dir():
            raise ValueError(f"--uri {uri}: cannot open the store: the folder {path.parent} does not exist")
        if path.exists() and not path.is_file():
            raise ValueError(f"--uri {uri}: cannot open the store: {path} is not a file")


def sqlite_path(uri: str) -> Path | None:
    """The file of sqlite:///relative.db or sqlite:////absolute.db (None: in memory)."""
    rest = uri.partition("://")[2].split("?")[0]
    path = rest[1:] if rest.startswith("/") else rest
    return Path(path).expanduser() if path and path != ":memory:" else None


def record(folders: Sequence[Folder], uri: str, experiment: str) -> list[str]:
    """Each folder (a sweep with its variants) into the experiment of that name; one line each."""
    with warnings.catch_warnings():  # MLflow's use of SQLAlchemy warns of deprecations: not the user's to act on
        warnings.simplefilter("ignore", DeprecationWarning)
        return _record_all(folders, uri, experiment)


def _record_all(folders: Sequence[Folder], uri: str, experiment: str) -> list[str]:
    client = _open(uri)
    experiment_id = _experiment(client, experiment, uri)
    stamp = int(time.time() * 1000)
    lines = []
    for folder in folders:
        run_id, what = _record(client, experiment_id, folder, None, stamp)
        lines.append(f"{folder.path}: MLflow run {run_id} ({what})")
        for child in folder.children:
            child_id, child_what = _record(client, experiment_id, child, run_id, stamp)
            lines.append(f"  {child.name}: MLflow run {child_id} ({child_what}), under {run_id}")
    return lines


def _open(uri: str) -> Any:
    """A client of the store, opened (a new SQLite file gets MLflow's tables): one line if it cannot be."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as err:
        raise ValueError(f"the mlflow target needs the [track] extra (pip install 'finbench[track]'): {err}") from None
    for name in ("mlflow", "alembic"):  # set after the import, which configures them: table creation logs at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)
    except Exception as err:  # noqa: BLE001 — MLflow, SQLAlchemy or the network: one line, whatever raised it
        raise ValueError(f"--uri {uri}: cannot open the store ({_first_line(err)})") from None
    return client


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:300]


def _experiment(client: Any, name: str, uri: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage != "active":
            raise ValueError(f"--experiment {name}: deleted in {uri}; restore it (mlflow experiments restore) or "
                             "choose another name")
        return found.experiment_id
    path = sqlite_path(uri) if uri.lower().startswith("sqlite") else None
    location = (path.resolve().parent / ARTIFACTS).as_uri() if path is not None else None
    return client.create_experiment(name, artifact_location=location)


def _find(client: Any, experiment_id: str, folder: Folder) -> Any:
    found = client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{folder.tags[KEY_TAG]}'",
                               max_results=1)
    return found[0] if found else None


def _record(client: Any, experiment_id: str, folder: Folder, parent: str | None, stamp: int) -> tuple[str, str]:
    """(MLflow run id, what was done) for one folder: left as it is, updated, or written anew."""
    tags = {**folder.tags, **({PARENT_TAG: parent} if parent else {})}
    existing = _find(client, experiment_id, folder)
    if existing is not None:
        held = existing.data.tags
        if held.get(DIGEST_TAG) == tags[DIGEST_TAG] and held.get(PARENT_TAG) == parent:
            return existing.info.run_id, "unchanged"
        if all(existing.data.params.get(key, value) == value for key, value in folder.params.items()):
            _write(client, existing.info.run_id, folder, tags, stamp)
            return existing.info.run_id, "updated"
    run_id = client.create_run(experiment_id, run_name=folder.name, tags={k: v for k, v in tags.items()
                                                                          if k != DIGEST_TAG}).info.run_id
    try:
        _write(client, run_id, folder, tags, stamp)
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        client.delete_run(run_id)  # never a half-written run in the store
        raise
    if existing is None:
        return run_id, "new"
    client.delete_run(existing.info.run_id)
    return run_id, f"new: its options changed, so it replaces {existing.info.run_id}"


def _write(client: Any, run_id: str, folder: Folder, tags: dict[str, str], stamp: int) -> None:
    """Artifacts first, then params, metrics and tags, the digest last: a run whose digest tag is
    the folder's holds all of it."""
    from mlflow.entities import Metric, Param, RunTag

    for path in folder.artifacts:
        client.log_artifact(run_id, str(path))
    params = [Param(key, value[:6000]) for key, value in folder.params.items()]
    metrics = [Metric(key, value, stamp, 0) for key, value in folder.metrics.items()]
    others = [RunTag(key, value[:8000]) for key, value in tags.items() if key != DIGEST_TAG]
    for start in range(0, max(len(params), len(others)), BATCH):
        client.log_batch(run_id, params=params[start:start + BATCH], tags=others[start:start + BATCH])
    for start in range(0, len(metrics), BATCH * 10):
        client.log_batch(run_id, metrics=metrics[start:start + BATCH * 10])
    client.set_tag(run_id, DIGEST_TAG, tags[DIGEST_TAG])
