"""The table of a run's options, derived from RunConfig's fields, where each is declared once
(finbench/config/specs.py, `option(...)`): its flag and help text for `finbench run` (and `finbench
sweep` where `sweep`/`axis` says so), its API keyword and coercion (`finbench.api.make_config`), its
start-up check (runner/startup.py `validate_options`), the RunConfig spec that holds it, and whether
it is part of the run's identity (`RUN_IDENTITY`); the checks across options are `CROSS_CHECKS`.
Torch-free: the commands build their parameters from this table before anything heavy loads. Each
study declares its own option in its file (finbench/studies/)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from finbench.benchmarks import BENCHMARKS, data_option_names, get_benchmark
from finbench.config.options import Option, field_options
from finbench.config.specs import RunConfig


def run_options() -> list[Option]:
    """Every option of RunConfig (its fields' and its specs', in field order): name, flag
    (`cli_flag`), value type (`kind`, `many`), default, help, coercion, check, the spec that holds
    it. What a reader of settings from elsewhere (a file) checks its keys and values against; the
    studies' own options are `finbench.studies.study_options()`."""
    return field_options(RunConfig)


RUN_OPTIONS: list[Option] = run_options()
OPTIONS = {option.name: option for option in RUN_OPTIONS}
RUN_IDENTITY = tuple(option.name for option in RUN_OPTIONS if option.identity)


def _think_budget_protocol(config: RunConfig) -> None:
    if config.decode.think_budget > 0 and config.protocol not in get_benchmark(config.benchmark).constrained_protocols:
        raise ValueError("--think-budget applies to the constrained protocol (official generates freely)")


def _quant_vision_quant(config: RunConfig) -> None:
    if config.load.quant_vision and config.load.quant == "none":
        raise ValueError("--quant-vision applies with --quant (8bit, 4bit, int8wo, int4wo, fp8)")


def check_data_options(benchmark_name: str, option: Callable[[str], Any]) -> None:
    """A data option (--spec, --image-root) the benchmark does not read is refused, never ignored
    (`option`: the value given of each option name; `finbench run` and `finbench data check` alike)."""
    benchmark = get_benchmark(benchmark_name)
    for name in data_option_names():
        if option(name) is not None and name not in benchmark.data_options:
            readers = [b.name for b in BENCHMARKS.values() if name in b.data_options]
            raise ValueError(f"{OPTIONS[name].cli_flag}: {benchmark.name} does not read it (read by: {', '.join(readers)})")


def _data_options_read(config: RunConfig) -> None:
    check_data_options(config.benchmark, config.option)


# what one option's declaration cannot check alone; the served options' own are sources.py `check_sources`
CROSS_CHECKS: list[Callable[[RunConfig], None]] = [_think_budget_protocol, _quant_vision_quant, _data_options_read]


def run_flags() -> list[Option]:
    """The options `finbench run` takes from this table (the rest it writes itself)."""
    return [option for option in RUN_OPTIONS if option.run]


def sweep_flags() -> list[Option]:
    """`finbench sweep`'s flags from this table: its plain options with one value for every
    variant, then its axes (several values, comma-separated or repeated; --model and --models are
    the sweep's own)."""
    plain = [dataclasses.replace(o, help=o.sweep_help or o.help, default=o.sweep_default or o.default)
             for o in RUN_OPTIONS if o.sweep]
    axes = [dataclasses.replace(o, help=o.sweep_help or o.help, default=(), kind=str, many=True, parse=None)
            for o in RUN_OPTIONS if o.axis and o.name != "model"]
    return plain + axes


def coerce(options: dict[str, Any]) -> dict[str, Any]:
    """Each declared option's value as RunConfig holds it (the rest as given: `RunConfig.flat` refuses
    an unknown one)."""
    return {name: OPTIONS[name].coerce(value) if name in OPTIONS else value for name, value in options.items()}


def check_options(config: RunConfig) -> None:
    """Every declared option's own check, then the checks across options (one ValueError line)."""
    for option in RUN_OPTIONS:
        if option.check is not None:
            option.check(config.option(option.name), config)
    for check in CROSS_CHECKS:
        check(config)
