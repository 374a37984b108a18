"""Per-sample prediction cache: SQLite in WAL mode, one row per sample key, committed per batch.

The key (runner/keys.py) hashes everything that can change an answer: the model fingerprint and
the request the question makes, with every setting it carries. A kill -9 loses at most the batch
in flight: a batch's rows go in one transaction, so a row is either fully there or absent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from finbench.core.types import Prediction
from finbench.models.identity import file_sha256

log = logging.getLogger("finbench")

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    key TEXT PRIMARY KEY,
    question_id TEXT NOT NULL,
    prediction TEXT NOT NULL,
    created REAL NOT NULL DEFAULT (julianday('now'))
);
CREATE TABLE IF NOT EXISTS file_digests (
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (path, size, mtime_ns)
);
"""


class CacheWriteError(OSError):
    """The cache cannot take a batch (disk full, the file deleted or made read-only during the
    run): the run stops with this one line. `kept`: whether what was committed before is still
    there (not when the file itself is gone)."""

    def __init__(self, message: str, kept: bool = True) -> None:
        super().__init__(message)
        self.kept = kept

    def __str__(self) -> str:
        return str(self.args[0])


class PredictionCache:
    """get_many / put_many over one SQLite file; safe to reopen after a crash.

    A file that is not a readable finbench cache (truncated, garbage, failing SQLite's quick
    check) is moved aside to `<name>.corrupt-<time>` and a fresh cache is started; `notes` says
    so. A row that cannot be decoded is a cache miss: that sample is computed again. A cache file
    that cannot be written (read-only, immutable: SQLite would open it read-only, and its shared
    memory can end the process with SIGBUS) is refused at start; one that stops taking writes
    during the run (disk full, deleted with its folder, replaced) raises `CacheWriteError`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.notes: list[str] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"--cache {self.path}: cannot create its folder ({err.strerror or err})") from None
        _refuse_unwritable_files(self.path)
        try:
            self.connection = self._open()
        except sqlite3.DatabaseError as err:
            if self._unwritable():
                raise ValueError(f"--cache {self.path}: cannot write there ({err})") from None
            if self.path.is_dir():
                raise ValueError(f"--cache {self.path}: is a folder; give a file path, e.g. "
                                 f"{self.path / 'cache.sqlite'}") from None
            if not _corrupt(err):  # locked or busy: another run is using it, which is fine
                raise ValueError(f"--cache {self.path}: {err} (another process holds it too long?)") from None
            if not _named_like_a_cache(self.path):  # a mistyped path: never move a user's file aside
                raise ValueError(f"--cache {self.path}: this file is not a finbench cache ({err}); finbench "
                                 f"only replaces damaged caches named *{', *'.join(CACHE_SUFFIXES)}") from None
            aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            for suffix in ("", "-wal", "-shm"):
                companion = Path(f"{self.path}{suffix}")
                if companion.exists():
                    os.replace(companion, Path(f"{aside}{suffix}"))
            message = f"cache {self.path} was unreadable ({err}); moved it to {aside.name} and started a fresh one"
            log.warning(message)
            self.notes.append(message)
            self.connection = self._open()
        self.identity = _identity(self.path)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=30)
        try:
            _retry_while_locked(lambda: connection.execute("PRAGMA journal_mode=WAL"))
            connection.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            status = connection.execute("PRAGMA quick_check").fetchone()[0]
            if status != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {status}")
            connection.executescript(SCHEMA)
            connection.commit()
        except BaseException:
            connection.close()
            raise
        return connection

    def _unwritable(self) -> bool:
        folder = self.path.parent
        return not os.access(folder, os.W_OK) or (self.path.exists() and not os.access(self.path, os.W_OK))

    def get_many(self, keys: Sequence[str]) -> dict[str, Prediction]:
        found: dict[str, Prediction] = {}
        for start in range(0, len(keys), 500):  # SQLite caps the number of bound parameters
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, payload in self.connection.execute(
                    f"SELECT key, prediction FROM samples WHERE key IN ({marks})", chunk):
                try:
                    found[key] = _decode(payload)
                except Exception as err:  # noqa: BLE001 — a damaged row is a miss, never a crash
                    log.warning("cache row %s… is unreadable (%s): computing that sample again", key[:12], err)
        return found

    def put_many(self, rows: Iterable[tuple[str, Prediction]]) -> None:
        """One transaction: all rows of the batch or none. A file that is gone or another file now
        (its folder deleted during the run) is never written: SQLite would go on writing into the
        deleted file and the answers would vanish with it."""
        self.check_present()
        payload = [(key, p.id, json.dumps(dataclasses.asdict(p))) for key, p in rows]
        try:
            with self.connection:
                self.connection.executemany(
                    "INSERT OR REPLACE INTO samples (key, question_id, prediction) VALUES (?, ?, ?)", payload)
        except sqlite3.Error as err:  # disk full, made read-only, I/O error: what was committed is kept
            raise CacheWriteError(f"cache {self.path}: cannot write ({err})") from None

    def check_present(self) -> None:
        """CacheWriteError when the cache file was deleted or replaced since it was opened."""
        now = _identity(self.path)
        if now != self.identity:
            what = "deleted" if now is None else "replaced by another file"
            raise CacheWriteError(f"cache {self.path} was {what} during the run (was the run folder removed?); "
                                  "the answers committed to it are gone with it", kept=False)

    def file_digest(self, path: Path) -> str:
        """SHA-256 of a file's content, remembered by (path, size, mtime): a checkpoint is hashed
        in full once, then looked up."""
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        row = self.connection.execute(
            "SELECT sha256 FROM file_digests WHERE path = ? AND size = ? AND mtime_ns = ?", key).fetchone()
        if row:
            return row[0]

        digest = file_sha256(path)
        try:
            with self.connection:
                self.connection.execute("INSERT OR REPLACE INTO file_digests VALUES (?, ?, ?, ?)", (*key, digest))
        except sqlite3.Error as err:  # remembering is an optimisation: the digest is right either way
            log.warning("file digest of %s not remembered in the cache (%s)", path, err)
        return digest

    def __len__(self) -> int:
        return self.connection.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    def close(self) -> None:
        self.connection.close()


CACHE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None when there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _refuse_unwritable_files(path: Path) -> None:
    """The cache and its WAL companions must open for writing (an immutable or append-only file
    refuses even root, which `os.access` may not say)."""
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if not file.is_file():
            continue
        try:
            os.close(os.open(file, os.O_RDWR))
        except OSError as err:
            raise ValueError(f"--cache {path}: cannot write {file.name} ({err.strerror or err}; read-only, or made "
                             "immutable with chattr +i?)") from None


def _named_like_a_cache(path: Path) -> bool:
    """A damaged file is moved aside only when its name says it is a cache (finbench's default is
    cache.sqlite); any other unreadable file at --cache is the user's, given by mistake."""
    return path.suffix.lower() in CACHE_SUFFIXES or ".sqlite" in path.name.lower()


def _corrupt(err: sqlite3.DatabaseError) -> bool:
    """Is this error a damaged file (not SQLite, malformed, failing the quick check), as opposed
    to a lock held by another run sharing the cache?"""
    name = getattr(err, "sqlite_errorname", "")
    return name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or str(err).startswith("quick_check") or (
        not name and not isinstance(err, sqlite3.OperationalError))


def _retry_while_locked(statement: Any, seconds: float = 30.0) -> Any:
    """Switching to WAL needs a moment alone with the file; runs (or ranks) opening one cache at
    the same moment wait for each other instead of failing."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as err:
            if getattr(err, "sqlite_errorname", "") not in ("SQLITE_BUSY", "SQLITE_LOCKED") \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _are_numbers(values: Any) -> bool:
    return all(map(_is_number, values))


# What every stored Prediction field must be: a row with another type (a damaged or hand-edited
# file) is a miss, not a crash when the samples table is built after the whole run. None is
# allowed where the field's default is None.
_FIELD_CHECKS: dict[str, Any] = {
    **dict.fromkeys(("id", "answer", "generated_text", "reasoning_text", "prompt"), lambda v: isinstance(v, str)),
    **dict.fromkeys(("n_generated_tokens", "reasoning_tokens"), lambda v: isinstance(v, int)),
    **dict.fromkeys(("prompt_tokens", "image_tokens", "generated_tokens"), lambda v: v is None or isinstance(v, int)),
    "seconds": _is_number, "budget_cut": lambda v: isinstance(v, bool),
    "confidence": lambda v: v is None or _is_number(v), "error": lambda v: v is None or isinstance(v, str),
    "option_logprobs": _are_numbers, "step_logprobs": lambda steps: all(map(_are_numbers, steps)),
}


def _decode(payload: str) -> Prediction:
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise TypeError(f"a {type(data).__name__}, not an object")
    data["option_logprobs"] = tuple(data["option_logprobs"])
    data["step_logprobs"] = tuple(tuple(s) for s in data["step_logprobs"])
    wrong = [name for name, valid in _FIELD_CHECKS.items() if name in data and not valid(data[name])]
    if wrong:
        raise TypeError(f"wrong type in {', '.join(wrong)}")
    return Prediction(**data)
