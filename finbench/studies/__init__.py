"""Studies: one file each, each ending in `STUDY = ...` (the contract in `studies/base.py`),
registered here with `register_study`, in the one place a built-in study is added (docs/studies.md);
a study defined outside finbench registers itself with the same call, in a module named by the
FINBENCH_STUDIES environment variable (comma-separated modules, imported with the registry, so
that the command line has its flag) or by an installed package's entry point of the group
`finbench.studies` (a module that registers its study, or a `Study`), read the first time the
registry is listed (`all_studies`, the options, the settings: every function below) rather than
when it is imported — the command line's flags list it at once; `import finbench.studies` alone
does not pay for reading the installed packages' metadata. The engine (runner/studies.py), the reports, `compare`,
`sweep`, the API and start-up validation reach a study only through this registry.

Importing it imports neither torch nor pandas: the command line builds its flags from it."""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Mapping

from finbench.config.specs import RunConfig
from finbench.core.plugins import load_entry_points
from finbench.studies import circular, image_ablation, probes, sampling
from finbench.studies.base import Study

PLUGINS_ENV = "FINBENCH_STUDIES"
ENTRY_POINTS = "finbench.studies"
STUDIES: dict[str, Study] = {}


def register_study(study: Study) -> Study:
    """Make `study` known to every command (its flag on `run` and, with `sweep=True`, `sweep`; its
    API keyword; its results.json block, report section and comparison columns). A second study of
    the same name, results.json key or option is an error, never a silent replacement."""
    if not study.name or not study.option.name:
        raise ValueError(f"a study needs a name and an option: {study!r}")
    for other in STUDIES.values():
        if other is study:
            return study
        if other.name == study.name or other.block == study.block:
            raise ValueError(f"a study named {study.name!r} (results.json {study.block!r}) is already registered")
        if other.option.name == study.option.name or other.option.cli_flag == study.option.cli_flag:
            raise ValueError(f"the option {study.option.cli_flag} is already the study {other.name!r}'s")
    STUDIES[study.name] = study
    return study


for _builtin in (circular, image_ablation, sampling, probes):
    register_study(_builtin.STUDY)
for _module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
    importlib.import_module(_module)  # registers its study

__all__ = ["STUDIES", "Study", "active_studies", "all_studies", "check_studies", "entry_point_studies", "flat_config",
           "headlines", "register_study", "study_options", "study_settings"]


@functools.cache
def entry_point_studies() -> tuple[str, ...]:
    """Import (once) what the installed packages declare in the entry-point group `finbench.studies`:
    a module that registers its study, or a `Study` (registered here). The names loaded."""
    return load_entry_points(ENTRY_POINTS, _study_plugin)


def _study_plugin(found: Any) -> None:
    """A `Study` an entry point names is registered; a module registered its own on import."""
    if isinstance(found, Study):
        register_study(found)


def all_studies() -> list[Study]:
    """Every registered study, the installed packages' entry points included, in registration order
    (the order of variants.parquet's columns, results.json's blocks and the reports' sections)."""
    entry_point_studies()
    return list(STUDIES.values())


def active_studies(config: RunConfig) -> list[Study]:
    return [study for study in all_studies() if study.active(config)]


def study_options(sweep: bool = False) -> list[Any]:
    """The studies' options (`finbench.config.options.Option`); `sweep`: those `finbench sweep` takes."""
    return [study.option for study in all_studies() if study.option.sweep or not sweep]


def study_settings(given: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """RunConfig.studies from {option name: value as given} (command line or API): every study's
    option, coerced, its default where not given; sorted by name."""
    settings = {}
    for study in all_studies():
        value = given.get(study.option.name)
        settings[study.option.name] = study.option.default if value is None else study.option.coerce(value)
    return tuple(sorted(settings.items()))


def check_studies(config: RunConfig) -> None:
    """Every study's option checked with the rest of the config (one ValueError line)."""
    for study in all_studies():
        if study.option.check is not None:
            study.option.check(study.value(config), config)


def flat_config(config: RunConfig) -> dict[str, Any]:
    """The config as results.json records it: its fields, with each study's option as a field of
    its own ("permutations": 0, …) in place of `studies`."""
    return {**config.record(), **{s.option.name: s.value(config) for s in all_studies()}}


def headlines(results: Mapping[str, Any]) -> dict[str, Any]:
    """The studies' headline numbers of one results.json, by results.json key (for `finbench
    compare` and sweep.json), and the majority baseline's."""
    out: dict[str, Any] = {}
    for study in all_studies():
        found = study.headline(results.get(study.block)) if results.get(study.block) else None
        if found:
            out[study.block] = found
    majority = (results.get("majority_baseline") or {}).get("all")
    if majority:
        out["majority_baseline"] = {k: majority.get(k) for k in ("n", "best_baseline", "best_accuracy",
                                                                 "model_accuracy", "above_best")}
    return out


def question_means(run_dir: Any, samples: Any, benchmark: Any) -> Any:
    """Per-question scores by id that a paired comparison of this run folder should use (a study's,
    e.g. the mean of repeated samples, read from its variants.parquet), or None: its own answers."""
    from pathlib import Path

    import pandas as pd

    path = Path(run_dir) / "variants.parquet"
    if not path.is_file():
        return None
    variants = pd.read_parquet(path)
    if "study" not in variants.columns:
        return None
    for study in all_studies():
        rows = variants[variants["study"].astype(str) == study.name].reset_index(drop=True)
        found = study.question_means(samples, rows, benchmark) if len(rows) else None
        if found is not None:
            return found
    return None
