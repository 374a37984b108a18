"""A run's options in a file: read from YAML or TOML (`read_file`), and written back resolved
(`as_document`, `dump`: the `config.yaml` every run folder holds, and what `--print-config` prints).

A file's keys are the options of the command it is given to (`finbench run --config FILE`), so
what a key may hold is that command's declaration (finbench/cli/config_file.py checks it); this
module only reads and writes. Every bad file is one ValueError line naming it: missing, not UTF-8,
not YAML or TOML (with the line and column of the fault), or not a mapping. Torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

try:  # Python 3.11+; tomli is the same parser for 3.10 (pyproject.toml)
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_FILE = "config.yaml"  # the resolved options, in every run folder
RUNS = "runs"  # a file's list of runs, each entry's options over the file's others
PATHS = ("out", "cache")  # where the run writes: absolute in a written config
SIZED = "sized"  # the record's list of the options start-up sized to the device


def read_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML (.yaml, .yml, anything else) or TOML (.toml) file holds; one ValueError
    line for a file that is missing, unreadable or malformed, or that holds something else."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a config file") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror or err})") from None
    found = _toml(path, text) if path.suffix.lower() == ".toml" else _yaml(path, text)
    if found is None:
        raise ValueError(f"{path}: the file is empty; give a mapping of options, e.g. `model: …`")
    if not isinstance(found, dict):
        raise ValueError(f"{path}: expected a mapping of options (key: value), found a "
                         f"{type(found).__name__}")
    return found


def _yaml(path: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{path}: bad YAML{where}: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: bad YAML: {' '.join(str(err).split())}") from None


def _toml(path: Path, text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:  # its message ends "(at line L, column C)"
        raise ValueError(f"{path}: bad TOML: {' '.join(str(err).split())}") from None


def as_document(record: dict[str, Any]) -> dict[str, Any]:
    """A run's flat option record (results.json's `config`) as a config file holds it: a tuple of
    (key, value) pairs becomes a mapping (--gen-kwargs), any other tuple a list. What start-up
    sized to the device (`sized` names them) is left unset, as the run was asked: a rerun sizes it
    to its own device; `sized` itself is no option."""
    sized = set(record.get(SIZED) or ())
    return {key: None if key in sized else _plain(value) for key, value in record.items() if key != SIZED}


def run_document(record: dict[str, Any]) -> dict[str, Any]:
    """A run's config document (`as_document`) with its folder and cache as absolute paths: the
    run's config.yaml reruns it from any working folder."""
    document = as_document(record)
    for key in PATHS:
        if isinstance(document.get(key), str):
            document[key] = str(Path(document[key]).expanduser().resolve())
    return document


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        if value and all(isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)
                         for item in value):
            return {key: _plain(item) for key, item in value}
        return [_plain(item) for item in value]
    return value


def dump(document: dict[str, Any]) -> str:
    """YAML text of a config document, its keys in their order."""
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False)
