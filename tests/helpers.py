"""Helpers shared by the tests: sharpened tiny models (built once per session), the CLI in a
subprocess or in this process, a cache's row count, PNG bytes and FinMME records."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_cli(*args: str, env: dict | None = None, timeout: int = 600, **kwargs) -> subprocess.CompletedProcess:
    """`finbench ARGS…` in a fresh process, offline."""
    return subprocess.run([sys.executable, "-m", "finbench.cli", *args], capture_output=True, text=True,
                          env=env or ENV, timeout=timeout, **kwargs)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`finbench ARGS…` in this process (typer's CliRunner on the same `app` the console script
    calls), answered as `run_cli` answers: returncode, stdout, stderr. A fresh process costs
    importing torch and transformers again (seconds on a loaded machine) and adds nothing unless
    the process itself is what is tested (signals, kill -9, import-time checks) — use `run_cli`
    there. `env` may be a whole environment (ENV plus changes): only what differs from this
    process's is set, for the call. An exception that escaped the command is appended to stderr as
    its traceback, as a process would print it; sys.argv is the command's for the call (a run
    records it as its provenance)."""
    import traceback
    from unittest import mock

    from typer.testing import CliRunner

    from finbench.cli import app

    changes = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    with mock.patch.object(sys, "argv", ["finbench", *args]):
        done = CliRunner().invoke(app, list(args), env=changes)
    stderr = done.stderr
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        stderr += "".join(traceback.format_exception(done.exception))
    return subprocess.CompletedProcess(["finbench", *args], done.exit_code, done.stdout, stderr)


def shared(*parts: str) -> Path:
    """A path under the project's shared/ folder, which lies beside the checkout (../shared from the
    repository root): real data, fixtures and references the tests read, never copied into the
    repository. Whether it is there is the caller's question (a test skips, or CI requires it)."""
    return Path(__file__).resolve().parents[2].joinpath("shared", *parts)


def cache_rows(path: str | Path) -> int:
    """Committed rows of a run's cache, read-only (0 while it does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet
        return 0


SHARPEN = 4.0
_SHARPENED: dict[tuple, Path] = {}  # (session's base temp, family, options) → the built folder


def sharpened_tiny_dir(tmp_path_factory, family: str, **tiny_options) -> Path:
    """A tiny model of `family` whose matrices are scaled ×4. At the stock init (std 0.02) a random
    model gives the same answer to every question, which would hide bugs that mix up rows;
    sharpened, its answers depend on the image and text. Saved back, so it loads like a real
    checkpoint. `tiny_options` go to `make_tiny` (e.g. thinking=True). Built once per session and
    family/options (building and sharpening costs seconds; the fixtures of many files ask for the
    same ones): callers read the folder, never write into it (copy it first)."""
    key = (str(tmp_path_factory.getbasetemp()), family, tuple(sorted(tiny_options.items())))
    if key in _SHARPENED and _SHARPENED[key].is_dir():
        return _SHARPENED[key]
    import torch
    from transformers import AutoModelForImageTextToText

    from finbench.offline.tiny import make_tiny

    name = f"tiny-{family}" + "".join(f"-{k}" for k, v in sorted(tiny_options.items()) if v)
    path = make_tiny(family, tmp_path_factory.mktemp("models") / name, weights_dtype="float32", **tiny_options)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2:
                parameter.mul_(SHARPEN)
    model.save_pretrained(path)
    _SHARPENED[key] = path
    return path


def finmme_request(question, images=None, protocol: str = "constrained", thinking: bool = False):
    """The adapter request FinMME makes for `question` (a ModelRequest), shown `images` (default:
    the question's own, decoded). Another number of images than the question has puts that many
    placeholders first (text-only prompts, or a second chart), as the constrained template does."""
    from dataclasses import replace

    from finbench.benchmarks import finmme
    from finbench.runner.preprocess import decode_images
    from finbench.runner.run_requests import first_prompt, render

    prompt = first_prompt(finmme.request(question, protocol))
    images = decode_images(question) if images is None else list(images)
    if len(images) != len(prompt.images):
        message = prompt.messages[-1]
        text = [part for part in message["content"] if part["type"] != "image"]
        content = [{"type": "image"} for _ in images] + text
        prompt = replace(prompt, messages=(*prompt.messages[:-1], {**message, "content": content}),
                         images=tuple(range(len(images))))
    return render(finmme.BENCHMARK, prompt, images, thinking)


def png_bytes(width: int = 40, height: int = 30, mode: str = "RGB", fmt: str = "PNG", color=None, **save) -> bytes:
    """An image file's bytes: one colour (default red, or grey 120 in a one-channel mode), `fmt`
    with `save` options (e.g. a JPEG's quality)."""
    import io

    from PIL import Image

    if color is None:
        color = 120 if mode in ("1", "L", "I;16") else (200, 10, 10)[: len(mode)]
    buffer = io.BytesIO()
    Image.new(mode, (width, height), color).save(buffer, format=fmt, **save)
    return buffer.getvalue()


def finmme_record(qid: str = "q1", **fields) -> dict:
    """A FinMME record: a single-choice question on a bar chart (the image inline), answer C of
    four, Banking; `fields` replace or add columns."""
    record = {"id": qid, "image": {"bytes": png_bytes(), "path": "x.png"}, "question_text": "Which bar is highest?",
              "question_type": "single_choice", "options": ["10", "20", "30", "40"], "answer": "C", "unit": "",
              "verified_caption": "A bar chart.", "related_sentences": "Sales grew.", "knowledge_domain": "Banking"}
    record.update(fields)
    return record


def assert_refused_in_one_line(done, message: str, out) -> None:
    """A CLI result refused at start-up: exit 2, exactly one `error:` line holding `message`, and no
    run folder made."""
    assert done.exit_code == 2, done.output[-2000:]
    errors = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.output
    assert not out.exists()


def gold_copy(source: Path, dest: Path, n_bootstrap: int = 200) -> Path:
    """A copy of FinMME run folder `source` whose every answer is set to the gold, its results.json
    rescored: a second run that differs from the first on every question it got wrong."""
    import json
    import shutil

    import pandas as pd

    from finbench.benchmarks import get_benchmark
    from finbench.scoring.tables import score_samples

    shutil.copytree(source, dest)
    samples = pd.read_parquet(dest / "samples.parquet")
    samples["answer"], samples["correct"] = samples["gold"], 1.0
    samples.to_parquet(dest / "samples.parquet")
    results = json.loads((dest / "results.json").read_text())
    results["scores"] = score_samples(samples, benchmark=get_benchmark("finmme"), n_bootstrap=n_bootstrap)
    (dest / "results.json").write_text(json.dumps(results))
    return dest
