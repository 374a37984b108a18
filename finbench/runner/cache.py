"""Per-sample prediction cache: SQLite in WAL mode, one row per sample key, committed per batch.

The key hashes everything that can change an answer: the model fingerprint, the protocol, the
prompt template version, the decoding settings and the question's content (text, options,
prompt fields, image bytes). A kill -9 loses at most the batch in flight: a batch's rows go in
one transaction, so a row is either fully there or absent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from finbench.types import Prediction, Question

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    key TEXT PRIMARY KEY,
    question_id TEXT NOT NULL,
    prediction TEXT NOT NULL,
    created REAL NOT NULL DEFAULT (julianday('now'))
)
"""


def question_digest(question: Question) -> str:
    """Hash of what the model is shown. The gold answer and grouping metadata are left out:
    they do not change the answer, so fixing a gold label keeps the cache valid."""
    digest = hashlib.sha256()
    content = {"id": question.id, "benchmark": question.benchmark, "kind": question.kind,
               "text": question.text, "options": list(question.options), "unit": question.unit,
               "fields": {k: v for k, v in question.fields.items() if k != "raw_answer"},
               "question_type": question.meta.get("question_type", "")}
    digest.update(json.dumps(content, sort_keys=True, default=str).encode())
    for image in question.images:
        digest.update(hashlib.sha256(image).digest())
    return digest.hexdigest()


def sample_key(fingerprint: Mapping[str, Any], protocol: str, prompt_version: str,
               decoding: Mapping[str, Any], question: Question) -> str:
    payload = json.dumps({"model": fingerprint, "protocol": protocol, "prompt": prompt_version,
                          "decoding": decoding, "question": question_digest(question)},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class PredictionCache:
    """get_many / put_many over one SQLite file; safe to reopen after a crash."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(self.path, timeout=30)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
        self.connection.execute(SCHEMA)
        self.connection.commit()

    def get_many(self, keys: Sequence[str]) -> dict[str, Prediction]:
        found: dict[str, Prediction] = {}
        for start in range(0, len(keys), 500):  # SQLite caps the number of bound parameters
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, payload in self.connection.execute(
                    f"SELECT key, prediction FROM samples WHERE key IN ({marks})", chunk):
                found[key] = _decode(payload)
        return found

    def put_many(self, rows: Iterable[tuple[str, Prediction]]) -> None:
        with self.connection:  # one transaction: all rows of the batch or none
            self.connection.executemany(
                "INSERT OR REPLACE INTO samples (key, question_id, prediction) VALUES (?, ?, ?)",
                [(key, p.id, json.dumps(dataclasses.asdict(p))) for key, p in rows])

    def __len__(self) -> int:
        return self.connection.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    def close(self) -> None:
        self.connection.close()


def _decode(payload: str) -> Prediction:
    data = json.loads(payload)
    data["option_logprobs"] = tuple(data["option_logprobs"])
    data["step_logprobs"] = tuple(tuple(s) for s in data["step_logprobs"])
    return Prediction(**data)
