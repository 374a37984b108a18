"""The parsers and start-up checks the run options' declarations (finbench/config/specs.py) name:
each turns or checks one option's value, with one ValueError line. Torch-free: every option is
checked before any library loads (runner/startup.py `validate_options`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from finbench.benchmarks import get_benchmark
from finbench.config.gen_kwargs import GENERATION_KEYS, parse_gen_kwargs
from finbench.core.sources import check_judge_source, looks_like_path
from finbench.core.types import AUTO, DTYPE_NAMES, QUANT_CHOICES

DEVICE_NAME = re.compile(r"auto|(cpu|mps|cuda)(:\d+)?")
DEVICE_MAPS = (None, "auto", "balanced", "balanced_low_0", "sequential")
DATA_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".tsv")


def batch_size(value: Any) -> int | str:
    """--batch-size: a number of rows (the command line's digits too) or "auto", parsed once here."""
    if value == AUTO or isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise ValueError(f"--batch-size {value}: expected a positive integer or 'auto'")


def generation_settings(value: Any) -> tuple[tuple[str, Any], ...]:
    """--gen-kwargs as RunConfig holds it, from a mapping, (key, value) pairs, or the command line's
    `max_new_tokens=64,temperature=0.7` (one string, or its comma-separated parts); anything else
    is one clear error."""
    if isinstance(value, str) or isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return parse_gen_kwargs(value if isinstance(value, str) else ",".join(value))
    if isinstance(value, Mapping):
        return tuple(sorted(value.items()))
    try:
        pairs = [tuple(pair) for pair in value]
        if all(len(pair) == 2 and isinstance(pair[0], str) for pair in pairs):
            return tuple(sorted(pairs))
    except TypeError:
        pass
    raise TypeError(f"gen_kwargs={value!r}: expected a mapping such as {{'max_new_tokens': 64}} or the string "
                    "'max_new_tokens=64,temperature=0.7'")


def at_least(flag: str, low: int) -> Callable[[Any, Any], None]:
    """A check that a number given is `low` or more."""
    def check(value: Any, config: Any) -> None:
        if value is not None and value < low:
            raise ValueError(f"{flag} {value}: must be at least {low}")
    return check


def existing_file(flag: str) -> Callable[[Any, Any], None]:
    """A check that a path given is a file."""
    def check(value: Any, config: Any) -> None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(f"{flag} {value}: no such file")
    return check


def existing_folder(flag: str) -> Callable[[Any, Any], None]:
    """A check that a path given is a folder."""
    def check(value: Any, config: Any) -> None:
        if value is not None and not Path(value).expanduser().is_dir():
            raise ValueError(f"{flag} {value}: no such folder")
    return check


def one_of(flag: str, choices: tuple[Any, ...], expected: str = "") -> Callable[[Any, Any], None]:
    """A check that the value is one of `choices` (the message lists them, or says `expected`)."""
    def check(value: Any, config: Any) -> None:
        if value not in choices:
            raise ValueError(f"{flag} {value}: expected {expected or 'one of ' + ', '.join(map(str, choices))}")
    return check


def protocol(value: str, config: Any) -> None:
    names = get_benchmark(config.benchmark).protocol_names
    if value not in names:
        raise ValueError(f"--protocol {value}: expected one of {', '.join(names)}")


def positive_batch(value: Any, config: Any) -> None:
    if value not in (None, AUTO) and not (isinstance(value, int) and value >= 1):
        raise ValueError(f"--batch-size {value}: must be a positive integer or 'auto'")


def think_budget(value: int, config: Any) -> None:
    if value < 0:
        raise ValueError(f"--think-budget {value}: must be 0 (no reasoning) or a positive token count")


def device(value: str, config: Any) -> None:
    if not DEVICE_NAME.fullmatch(value):
        raise ValueError(f"--device {value}: expected auto, cpu, cuda or cuda:N")


def dtype(value: str, config: Any) -> None:
    if value != "auto" and value not in DTYPE_NAMES:  # the name only (auto is decided at load)
        raise ValueError(f"--dtype {value}: expected one of auto, {', '.join(DTYPE_NAMES)}")


quant = one_of("--quant", QUANT_CHOICES)
device_map = one_of("--device-map", DEVICE_MAPS, "auto, balanced, balanced_low_0 or sequential")


def chat_template(value: str | None, config: Any) -> None:
    if value and not Path(value).is_file():
        raise ValueError(f"--chat-template {value}: no such file")


def gen_kwargs(value: tuple[tuple[str, Any], ...], config: Any) -> None:
    for key, setting in value:
        if key not in GENERATION_KEYS:
            raise ValueError(f"--gen-kwargs: unknown key {key!r} (known: {', '.join(GENERATION_KEYS)})")
        if key in ("max_new_tokens", "top_k") and setting < 1 or key in ("temperature", "top_p") and setting < 0:
            raise ValueError(f"--gen-kwargs: {key}={setting} is out of range")


def data(value: str | None, config: Any) -> None:
    if value is not None and not Path(value).exists() and looks_like_path(value, DATA_SUFFIXES):
        raise ValueError(f"--data {value}: no such file or folder")  # anything else is a hub id ("owner/name")


def judge(value: str | None, config: Any) -> None:
    check_judge_source(value)


def request_timeout(value: float, config: Any) -> None:
    if not value > 0:
        raise ValueError(f"--request-timeout {value}: must be a positive number of seconds")


def out(value: str, config: Any) -> None:
    check_writable(Path(value))


def check_writable(out_dir: Path) -> None:
    """The run folder can be made (or is a writable folder) — checked without making it."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ValueError(f"--out {out_dir}: cannot write there ({existing} is not a folder)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out_dir}: cannot write there (permission denied on {existing})")
