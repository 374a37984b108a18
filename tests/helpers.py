"""Helpers shared by the tests: sharpened tiny models, the CLI in a subprocess, a cache's row count."""

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


def sharpened_tiny_dir(tmp_path_factory, family: str, **tiny_options) -> Path:
    """A tiny model of `family` whose matrices are scaled ×4. At the stock init (std 0.02) a random
    model gives the same answer to every question, which would hide bugs that mix up rows;
    sharpened, its answers depend on the image and text. Saved back, so it loads like a real
    checkpoint. `tiny_options` go to `make_tiny` (e.g. thinking=True)."""
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
    return path


def finmme_request(question, images=None, protocol: str = "constrained", thinking: bool = False):
    """The adapter request FinMME makes for `question` (a ModelRequest), shown `images` (default:
    the question's own, decoded). Another number of images than the question has puts that many
    placeholders first (text-only prompts, or a second chart), as the constrained template does."""
    from dataclasses import replace

    from finbench.benchmarks import finmme
    from finbench.runner.preprocess import decode_images
    from finbench.runner.requests import first_prompt, render

    prompt = first_prompt(finmme.request(question, protocol))
    images = decode_images(question) if images is None else list(images)
    if len(images) != len(prompt.images):
        message = prompt.messages[-1]
        text = [part for part in message["content"] if part["type"] != "image"]
        content = [{"type": "image"} for _ in images] + text
        prompt = replace(prompt, messages=(*prompt.messages[:-1], {**message, "content": content}),
                         images=tuple(range(len(images))))
    return render(finmme.BENCHMARK, prompt, images, thinking)
