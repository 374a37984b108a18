"""Benchmarks: one file each, each ending in `BENCHMARK = Benchmark(...)` (the contract in
`benchmarks/base.py`), registered here with `register`, in the one place a built-in benchmark is
added (docs/adding-a-benchmark.md); a benchmark defined outside finbench registers itself with the
same call, or is the `BENCHMARK` of a module finbench imports for it (registered then), as the
studies' are (studies/__init__.py):

- the modules named by the FINBENCH_BENCHMARKS environment variable (comma-separated), imported
  with the registry, at the end of this module;
- the Python entry points of the group `finbench.benchmarks` of installed packages (each names a
  module or a `Benchmark`), read the first time a name is not found among those registered and
  when every benchmark is listed (`all_benchmarks`): reading the installed packages' metadata
  costs tens of milliseconds, which a command that names a built-in benchmark never pays.

The runner, the judge, the scorer, the reports and the CLI reach a benchmark only through its
`Benchmark`."""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Callable, Mapping, Sequence

from finbench.benchmarks import custom, famma, fcmr, finchart_bench, finmme, finmmr, finmtm, mme_finance
from finbench.benchmarks.base import Benchmark, DataSource
from finbench.benchmarks.recognise import anything
from finbench.core.plugins import load_entry_points
from finbench.core.types import DEFAULT_BENCHMARK, Question

PLUGINS_ENV = "FINBENCH_BENCHMARKS"
ENTRY_POINTS = "finbench.benchmarks"

BENCHMARKS: dict[str, Benchmark] = {}


def register(benchmark: Benchmark) -> Benchmark:
    """Make `benchmark` known to every command (`finbench run --benchmark NAME`, score, report,
    leaderboard, demo) under its lower-case name; a second benchmark of the same name is an
    error, never a silent replacement."""
    name = benchmark.name.lower()
    if name != benchmark.name or "," in name or "=" in name or not name.strip():
        raise ValueError(f"benchmark name {benchmark.name!r}: lower case, without ',' or '=' (they separate "
                         "benchmarks and data sources on the command line)")
    if BENCHMARKS.get(name, benchmark) is not benchmark:
        raise ValueError(f"a benchmark named {name!r} is already registered")
    BENCHMARKS[name] = benchmark
    return benchmark


for _builtin in (finmme, famma, finmtm, mme_finance, finmmr, finchart_bench, fcmr, custom):
    register(_builtin.BENCHMARK)

__all__ = ["BENCHMARKS", "DEFAULT_BENCHMARK", "Benchmark", "all_benchmarks", "check_protocol", "data_option_names",
           "data_source", "describe", "get_benchmark", "load_matching", "looks_like",
           "refusal_of", "register"]


@functools.cache
def entry_point_plugins() -> tuple[str, ...]:
    """Import (once) what the installed packages declare in the entry-point group `finbench.benchmarks`:
    a module (its `BENCHMARK`, or what it registered itself) or a `Benchmark`. The names loaded."""
    return load_entry_points(ENTRY_POINTS, plugin)


def plugin(found: Any) -> None:
    """Register what a plugin names: a `Benchmark`, or a module's `BENCHMARK` (a module that
    registered its own already is left as it is: `register` takes the same benchmark twice)."""
    benchmark = found if isinstance(found, Benchmark) else getattr(found, "BENCHMARK", None)
    if isinstance(benchmark, Benchmark):
        register(benchmark)


def all_benchmarks() -> list[Benchmark]:
    """Every benchmark, the installed packages' entry points included, in registration order."""
    entry_point_plugins()
    return list(BENCHMARKS.values())


def get_benchmark(name: str) -> Benchmark:
    if name.lower() not in BENCHMARKS:
        entry_point_plugins()  # a name not found: the installed packages' benchmarks may hold it
    try:
        return BENCHMARKS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}") from None


def data_option_names() -> list[str]:
    """The run options some registered benchmark's loader reads beside --data (`Benchmark.data_options`)."""
    return list(dict.fromkeys(name for benchmark in BENCHMARKS.values() for name in benchmark.data_options))


def data_source(benchmark: Benchmark, data: Any, option: Callable[[str], Any] | Mapping[str, Any]) -> Any:
    """--data as `benchmark`'s loader, recogniser and data check take it: as given, or, for a
    benchmark that reads run options beside it (`Benchmark.data_options`), a `DataSource` holding
    their values (`option`: a run's `config.option`, or a mapping name → value)."""
    if not benchmark.data_options or data is None:
        return data
    read = option.get if isinstance(option, Mapping) else option
    return DataSource(str(data), tuple((name, read(name)) for name in benchmark.data_options))


def check_protocol(benchmark: Benchmark, protocol: str | None) -> None:
    """A --protocol the benchmark does not accept is one ValueError line (None: not given)."""
    if protocol is not None and protocol not in benchmark.protocol_names:
        raise ValueError(f"--protocol {protocol}: {benchmark.name} has {', '.join(benchmark.protocol_names)}")


def refusal_of(benchmark: Benchmark, source: Any) -> str:
    """`benchmark.recognise(source)` ("" when the source looks like its data), and, when it does
    not, the registered benchmarks whose data it looks like (`looks_like`)."""
    refusal = benchmark.recognise(source)
    return refusal + looks_like(benchmark, source) if refusal else ""


def looks_like(benchmark: Benchmark, source: Any) -> str:
    """"; it looks like X data: --benchmark X": the other registered benchmarks whose data `source`
    looks like, named as --benchmark takes them ("" for none; benchmarks that declare no recogniser
    take anything, so they are never named)."""
    alike = [b.name for b in BENCHMARKS.values()
             if b is not benchmark and b.recognise is not anything and not b.recognise(source)]
    return f"; it looks like {' or '.join(alike)} data: --benchmark {alike[0]}" if alike else ""


MAX_VALUES_SHOWN = 30  # filter values listed when nothing matched


def load_matching(benchmark: Benchmark, source: Any, limit: int | None, domains: Sequence[str],
                  question_types: Sequence[str], notes: list[str] | None = None) -> list[Question]:
    """The questions a run's data and filters select; none is an error that names the values the
    data does have, so a misspelt --domain or --question-type is fixed from the message."""
    questions = benchmark.load(source, limit, domains, question_types, notes=notes)
    if questions:
        return questions
    message = f"{benchmark.name}: no questions matched the data and filters"
    if domains or question_types:
        everything = benchmark.load(source)  # only on this error path: the filters left nothing
        unknown = ""
        for flag, field, asked in (("--domain", benchmark.domain_field, domains),
                                   ("--question-type", "question_type", question_types)):
            have = sorted({str(q.meta[field]) for q in everything if q.meta.get(field) is not None})
            missing = [value for value in asked if value not in have]
            if missing:
                shown = ", ".join(have[:MAX_VALUES_SHOWN]) + (f", … ({len(have)} in all)" if len(have) > MAX_VALUES_SHOWN else "")
                unknown += f"; {flag} {', '.join(missing)}: the data has {shown or 'none'}"
        message += unknown or "; each filter matches some questions, but no question matches all of them"
    raise ValueError(message)


def describe(benchmark: Benchmark) -> dict[str, str]:
    """One benchmark for `finbench benchmarks`."""
    where = (f"hub: {benchmark.hub_id}" if benchmark.hub_set else
             f"no hub set: --data a checkout of the GitHub repository {benchmark.hub_id}")
    return {"name": benchmark.name, "title": benchmark.title, "hub": benchmark.hub_id if benchmark.hub_set else "",
            "where": where,
            "forms": "; ".join(benchmark.forms), "protocols": "; ".join(benchmark.protocols),
            "metrics": benchmark.metrics}


for _module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
    plugin(importlib.import_module(_module))  # its BENCHMARK, or what it registered itself
