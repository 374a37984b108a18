"""What a `--model`, `--judge` or `--data` string names: a local path, a hub id (`owner/name`) or,
for a model, the URL of a server that serves it (`is_served`).
Pure string and path checks, importable without torch: start-up refuses a missing path in one
line before any library loads (runner/startup.py `validate`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence


def is_served(source: str | None) -> bool:
    """A source that names a model behind an OpenAI-compatible server (`http(s)://HOST:PORT/v1`):
    the served adapter (models/served.py) answers for it, nothing is loaded here."""
    return bool(source) and source.lower().startswith(("http://", "https://"))


def looks_like_path(source: str, suffixes: Sequence[str] = ()) -> bool:
    """A source that is meant as a path (absolute, ./…, ~/…, more than one '/', or ending in one of
    `suffixes`), not a hub id, when it does not exist."""
    return source.startswith((".", "/", "~")) or source.count("/") != 1 or Path(source).suffix in suffixes


def check_judge_source(source: str | None) -> None:
    """A --judge that is neither a folder nor a hub id is one line, before any model loads: a path
    (absolute, ./…, ~/…, or with more than one '/') that does not exist is not taken for a hub id."""
    if not source or is_served(source) or Path(source).expanduser().exists():
        return
    if looks_like_path(source):
        raise ValueError(f"--judge {source}: no such model folder (a hub id is written owner/name)")


SERVED_READINGS = ("auto", "logprobs", "decision")  # --served-reading (models/served.py)


def check_sources(config: Any) -> None:
    """The options of a served model, across options (each one's own range is its declaration's,
    finbench/config/specs.py): each applies only with a server's URL as --model or --judge (one
    ValueError line)."""
    refused = served_refusal(config) if is_served(config.model) else None
    if refused:
        raise ValueError(refused)
    load = config.load
    served = [name for name, value in (("--served-model", load.served_model), ("--api-key-env", load.api_key_env),
                                       ("--in-flight", load.in_flight), ("--served-thinking", load.served_thinking or None),
                                       ("--served-reading", None if load.served_reading == "auto" else 1))
              if value is not None]
    if served and not (is_served(config.model) or is_served(config.judging.judge)):
        raise ValueError(f"{', '.join(served)}: for a served model (--model or --judge http(s)://HOST:PORT/v1)")
    if config.judging.judge_served_model is not None and not is_served(config.judging.judge):
        raise ValueError("--judge-served-model: for a served judge (--judge http(s)://HOST:PORT/v1)")
    if load.api_key_env and not os.environ.get(load.api_key_env):
        raise ValueError(f"--api-key-env {load.api_key_env}: the environment variable {load.api_key_env} is not set")


# options that change how finbench loads weights: a server has loaded its own (RunConfig names → flags)
LOADING_FLAGS = {"quant": "--quant", "quant_vision": "--quant-vision", "allow_dequantized": "--allow-dequantized",
                 "dtype": "--dtype", "device_map": "--device-map", "revision": "--revision",
                 "trust_remote_code": "--trust-remote-code", "attn_implementation": "--attn-implementation",
                 "chat_template": "--chat-template", "max_pixels": "--max-pixels",
                 "device_preprocess": "--device-preprocess", "compile_vision": "--compile-vision",
                 "compile_lm": "--compile-lm", "think_budget": "--think-budget"}


def served_refusal(config: Any) -> str | None:
    """The loading options a served --model was given, as one line; None when there are none."""
    unset = {"quant": "none", "dtype": "auto", "think_budget": 0}
    given = [flag for name, flag in LOADING_FLAGS.items()
             if config.option(name) not in (unset.get(name), None, False)]
    if not given:
        return None
    return (f"{', '.join(given)}: not for a served model ({config.model}): the server loaded its weights and "
            "renders its prompts; set these where it is started")
