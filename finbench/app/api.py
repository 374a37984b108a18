"""The Python API: `evaluate`, `score` and `compare`. The command line is a thin layer over these.

    import finbench
    results, samples = finbench.evaluate(model="Qwen/Qwen2.5-VL-7B-Instruct", benchmark="finmme",
                                         data="/data/FinMME", limit=500, out="runs/q7b")
    runs = finbench.evaluate(model=loaded, benchmark="finmme,famma", data={"famma": "famma.json"})
    scores = finbench.score("runs/q7b", variant="paper", bootstrap=10_000)
    comparison = finbench.compare(["runs/bf16", "runs/8bit"])

Every option of `finbench run` is a keyword argument here (the fields of `finbench.config.specs.RunConfig`,
and each registered study's option, e.g. `permutations=3`: finbench/studies);
an already loaded model adapter (`finbench.models.load_model(...)`) can be passed instead of a name.
`batch_size` (a number or "auto"), `token_budget` and `workers` left out are sized to the device
at start-up, as for `finbench run` (results.json `config.sized` names them).
`gen_kwargs` may be a mapping or the command line's string (`"max_new_tokens=64,temperature=0.7"`),
`data` one source, a mapping benchmark → source, or the command line's list (`["famma=f.json"]`).
An `out` folder that holds the results of another run (another model, benchmark, data, protocol,
…) is refused unless `overwrite=True`; rerunning the same evaluation there resumes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from finbench.benchmarks import BENCHMARKS, data_source, get_benchmark, load_matching
from finbench.benchmarks.metrics import OFFICIAL
# RUN_IDENTITY: what makes a run folder's results another run's (the options declared `identity`:
# another model, data or protocol); the rest (limit, filters, batching, budgets, devices) reruns it
from finbench.config.files import RUNS, run_document
from finbench.config.run_options import RUN_IDENTITY, coerce
from finbench.config.specs import RunConfig
from finbench.core.types import DEFAULT_BENCHMARK, RESULTS_FILE
from finbench.report.format import declared_parts, run_headlines
from finbench.runner import startup  # by module: a test stands in for its loader
from finbench.runner.lock import folder_lock
from finbench.studies import all_studies, flat_config, study_options, study_settings

SUMMARY_FILE = "summary.json"


@dataclass
class MultiRunResult:
    """Runs of several benchmarks sharing one loaded model; `summary` is also SUMMARY_FILE."""
    out_dir: Path
    runs: dict[str, Any]  # benchmark name → RunResult
    summary: dict[str, Any]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.runs.values())


def benchmark_names(benchmark: str | Sequence[str]) -> list[str]:
    names = [b.strip().lower() for b in (benchmark.split(",") if isinstance(benchmark, str) else benchmark)]
    names = [n for n in names if n]
    if not names:
        raise ValueError("--benchmark: give at least one benchmark name")
    if len(set(names)) != len(names):
        raise ValueError(f"--benchmark {','.join(names)}: a benchmark is named twice")
    return names


def make_config(model: str, benchmark: str = DEFAULT_BENCHMARK, **options: Any) -> RunConfig:
    """A RunConfig from flat keyword options, each coerced as its declaration says
    (finbench/config/specs.py; a study's option, e.g. `permutations=3`, as its Study declares it:
    finbench/studies); an unknown option is one clear TypeError."""
    studied = {o.name for o in study_options()}
    known = (set(RunConfig.flat(model).record()) | studied) - {"model", "benchmark"}
    unknown = sorted(set(options) - known - {"studies"})
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    given = {**dict(options.pop("studies", ())), **{k: options.pop(k) for k in studied & set(options)}}
    return RunConfig.flat(model, benchmark=benchmark, studies=study_settings(given), **coerce(options))


def data_sources(values: Sequence[str], names: Sequence[str]) -> str | dict[str, str] | None:
    """The command line's --data values: one plain source, or BENCHMARK=SOURCE pairs."""
    pairs = {}
    for value in values:
        if not isinstance(value, (str, Path)):
            raise ValueError(f"data: {value!r} is not a path or hub id")
        value = str(value)
        name, sep, source = value.partition("=")
        if sep and name.strip().lower() in BENCHMARKS:
            pairs[name.strip().lower()] = source
        elif len(values) == 1 and len(names) == 1:
            return value
        elif sep and name.strip().isidentifier():
            raise ValueError(f"--data {value}: unknown benchmark {name.strip()!r} (known: {', '.join(BENCHMARKS)})")
        else:
            raise ValueError(f"--data {value}: with several --data values or benchmarks, write BENCHMARK=SOURCE")
    unknown = set(pairs) - set(names)
    if unknown:
        raise ValueError(f"--data names {', '.join(sorted(unknown))}, which is not in --benchmark {','.join(names)}")
    return pairs or None


def other_run(config: RunConfig) -> str:
    """'' when `config.output.out` holds no results or those of the same evaluation; else what differs."""
    path = Path(config.output.out) / RESULTS_FILE
    try:
        previous = json.loads(path.read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):  # no results there (a damaged file is not a run's)
        return ""

    def same(field: str, value: Any) -> Any:
        if field in ("model", "data", "judge", "chat_template") and value and Path(str(value)).expanduser().exists():
            return str(Path(str(value)).expanduser().resolve())
        return value

    differences = [f"{field} {previous.get(field)!r} → {config.option(field)!r}" for field in RUN_IDENTITY
                   if same(field, previous.get(field)) != same(field, config.option(field))]
    return "; ".join(differences)


def refuse_other_results(config: RunConfig, overwrite: bool) -> None:
    differences = "" if overwrite else other_run(config)
    if differences:
        raise ValueError(f"--out {config.output.out} holds the results of another run ({differences}); pass --overwrite "
                         "to replace them, or choose another --out")


def evaluate(model: Any, benchmark: str | Sequence[str] = DEFAULT_BENCHMARK, *, data: Any = None,
             out: str | Path = "runs/latest", overwrite: bool = False, show_progress: bool = False,
             console: Any = None, command: str | None = None, **options: Any) -> Any:
    """Run (or resume) an evaluation and return its `RunResult` (`results, samples = ...`).

    `model` is a hub id, a local folder or a loaded adapter. With several benchmarks
    (`"finmme,famma"` or a list), the model is loaded once, each benchmark runs into
    `out/<name>/`, `out/summary.json` holds their scores (headline, CIs, the parts scored apart),
    and a `MultiRunResult` is returned; `data` may then be a mapping benchmark → source. An `out`
    holding another run's results is refused unless `overwrite` (see `RUN_IDENTITY`)."""
    names = benchmark_names(benchmark)
    data = _sources(data, names)
    source = model if isinstance(model, str) else str(model.source)  # a loaded adapter (models/contract.py)
    loaded = None if isinstance(model, str) else model
    if command is None:  # what results.json records as the command: this call
        arguments = ", ".join([repr(source), repr(benchmark), *(f"{k}={v!r}" for k, v in
                                                               {"data": data, "out": str(out), **options}.items())])
        command = f"finbench.evaluate({arguments})"
    configs = run_configs(source, names, data, out, **options)
    for config in configs.values():  # every bad option before the model is loaded (before torch is imported)
        startup.validate(config)
        refuse_other_results(config, overwrite)
    if len(names) == 1:
        config = configs[names[0]]
        with folder_lock(Path(out)):  # a second run into the folder is refused here, before torch loads
            _starting(console, source, loaded, names, show_progress)
            from finbench.runner.engine import run_benchmark

            return run_benchmark(config, loaded, show_progress=show_progress, console=console, command=command,
                                 validated=True)
    with folder_lock(Path(out)):  # summary.json's folder: one multi-benchmark run at a time
        return _evaluate_each(source, loaded, configs, show_progress, console, command, Path(out))


def run_configs(source: str, names: Sequence[str], data: Any, out: str | Path, **options: Any) -> dict[str, RunConfig]:
    """Each benchmark's RunConfig of one run: into `out`, or with several benchmarks into `out/<name>`."""
    if len(names) == 1:
        return {names[0]: make_config(source, names[0], data=_data_for(data, names[0], single=True), out=str(out),
                                      **options)}
    return {name: make_config(source, name, data=_data_for(data, name, single=False), out=str(Path(out) / name),
                              **options) for name in names}


def resolved_options(model: str, benchmark: str | Sequence[str] = DEFAULT_BENCHMARK, *, data: Any = None,
                     out: str | Path = "runs/latest", **options: Any) -> dict[str, Any]:
    """The options a run would run with, as its run folder's config.yaml will hold them (what
    start-up sizes to the device left unset), checked as a run checks them before anything loads;
    nothing runs. Several benchmarks: {"runs": [one per benchmark]}, a config file that runs each."""
    names = benchmark_names(benchmark)
    documents = []
    for config in run_configs(model, names, _sources(data, names), out, **options).values():
        startup.validate_options(config)
        documents.append(run_document(flat_config(config)))
    return documents[0] if len(documents) == 1 else {RUNS: documents}


def _sources(data: Any, names: Sequence[str]) -> Any:
    """`data` as evaluate takes it: one source, a mapping benchmark → source, or the command line's list."""
    if isinstance(data, (list, tuple)):
        return data_sources(data, names)
    if isinstance(data, Path):
        return str(data)
    if data is not None and not isinstance(data, (str, Mapping)):
        raise TypeError(f"data={data!r}: expected a path or hub id, a mapping benchmark → source, or a list of "
                        "them as on the command line")
    return data


def _evaluate_each(source: str, loaded: Any, configs: Mapping[str, RunConfig], show_progress: bool, console: Any,
                   command: str, out: Path) -> Any:
    """evaluate() of several benchmarks, their options checked: the model loaded once, each run."""
    names = list(configs)
    _starting(console, source, loaded, names, show_progress)
    from finbench.runner.distributed import world_from_env
    from finbench.runner.engine import run_benchmark

    for name, config in configs.items():  # and every unusable data set before the first benchmark runs
        _check_data(name, config)
    loaded_with = None
    if loaded is None:  # the one loader: device map, the rank's device and every loading option
        loaded_with = next(iter(configs.values()))
        loaded = startup.load_for_run(loaded_with, world_from_env())
    runs = {name: run_benchmark(config, loaded, show_progress=show_progress, console=console, command=command,
                                validated=True, loaded_with=loaded_with) for name, config in configs.items()}
    if any(run.samples is None for run in runs.values()):  # a data-parallel rank other than 0
        return MultiRunResult(Path(out), runs, {})
    summary = summary_file(source, runs)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str))
    return MultiRunResult(Path(out), runs, summary)


def _starting(console: Any, source: str, loaded: Any, names: Sequence[str], show_progress: bool) -> None:
    """The command's first progress line, once its options are checked and its folder locked, and
    before torch, the data and the model load (seconds, even for a run served from the cache): what
    it is loading (rank 0 alone). On a terminal, and in a pipe where progress is shown (the
    progress lines follow there too); --no-progress leaves a refusal as a pipe's one line."""
    import os

    shown = show_progress or getattr(console, "is_terminal", False)
    if console is not None and shown and os.environ.get("RANK", "0") == "0":
        what = "the data" if loaded is not None else f"{source} and the data"
        console.print(f"loading {what} of {', '.join(names)} …", markup=False, highlight=False)


SUMMARY_PARTS = ("ci", "dialogue", "agent", "breakdowns", "bootstrap")  # beside the numbers, in summary.json
SUMMARY_SCALE = "fraction"
SUMMARY_SCALE_NOTE = ("every score, CI, accuracy, rate and share in this file is on 0–1, as results.json holds it, "
                      "except where an entry names its own scale: each `headline` (value, low, high ×100, as the "
                      "console prints them; `headline.fraction` holds them on 0–1) and the metrics of the parts a "
                      "rule scores apart, on the scales `part_scales` names; ratios (`retained`) and counts are "
                      "what they are")


def summary_file(model: str, runs: Mapping[str, Any]) -> dict[str, Any]:
    """SUMMARY_FILE: the model, the one scale its numbers are on, and each benchmark's entry."""
    return {"model": model, "scale": SUMMARY_SCALE, "scale_note": SUMMARY_SCALE_NOTE,
            "benchmarks": {name: run_summary(run.results, run.out_dir) for name, run in runs.items()}}


def run_summary(results: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """One benchmark's entry of summary.json: where it is, its counts, its headline score with CI
    (×100, and on 0–1 under `fraction`), the rule's headline metrics and counts (0–1; the ×100
    copies a scorer keeps beside them are left out), the parts scored apart (FinMTM dialogue and
    agent, with n, CIs and `part_scales`), the breakdowns (n, accuracy, Wilson CI), and what the
    console prints beside them: the robustness studies (`studies`), the majority and prior
    baselines (`baselines`), the label balance of the choice items (`label_balance`) and the calibration (`calibration`, `selective`)."""
    scores = results["scores"]
    headline = run_headlines(scores, also=())[0]  # headline_score's, with the top of its scale (`full`)
    full = headline.pop("full") or 100.0
    headline = {**headline, "scale": "percent" if full == 100.0 else f"0–{full:g}",
                "fraction": {k: None if headline[k] is None else headline[k] / full for k in ("value", "low", "high")}}
    metrics = set(scores.get("headline") or ())
    entry = {"out": str(out_dir), "protocol": results["protocol"], "n_questions": results["n_questions"],
             "errors": results["errors"]["count"], "headline": headline,
             "scores": {k: v for k, v in scores.items() if (isinstance(v, (int, float)) or v is None)
                        and (k in metrics or k == "n" or k.startswith("n_"))},
             **{k: scores[k] for k in SUMMARY_PARTS if k in scores}}
    parts = {part.name: {m.key: "fraction" if m.percent else f"0–{m.full:g}" for m in part.metrics}
             for part in declared_parts(scores.get("benchmark")) if scores.get(part.name)}
    if parts:
        entry["part_scales"] = parts

    entry["studies"] = {s.block: results[s.block] for s in all_studies() if results.get(s.block)}
    entry["baselines"] = results.get("majority_baseline")
    entry["label_balance"] = scores.get("label_balance")  # constant answer, macro-recall, lowest recall (scoring/balance.py)
    entry["calibration"] = scores.get("calibration")
    entry["selective"] = scores.get("selective")
    return entry


def _check_data(name: str, config: RunConfig) -> None:
    """Read one question of a benchmark's data (with the run's filters): a data set that cannot be
    read, or that nothing matches, is a start-up error naming the benchmark, not an error found
    after the benchmarks before it have run."""
    try:
        benchmark = get_benchmark(name)
        load_matching(benchmark, data_source(benchmark, config.data, config.option), 1, config.domains,
                      config.question_types)
    except (ValueError, OSError) as err:
        raise ValueError(str(err) if str(err).startswith(f"{name}: ") else f"{name}: {err}") from None


def _data_for(data: Any, name: str, single: bool) -> Any:
    if isinstance(data, Mapping):
        unknown = set(data) - {name} if single else set()
        if unknown:
            raise ValueError(f"--data names {', '.join(sorted(unknown))}, which this run does not evaluate")
        return data.get(name)
    if data is not None and not single:
        raise ValueError("several benchmarks: give --data as BENCHMARK=SOURCE, once per benchmark")
    return data


def score(run_dir: str | Path, *, variant: str | None = None, bootstrap: int = 0, seed: int = 0,
          console: Any = None) -> dict[str, Any]:
    """Re-score a finished run folder from its samples.parquet (no model needed) under `variant`
    (None: the official rule); also writes RUN_DIR/scores_<variant>.json. Nothing is printed (the
    API returns values; `console` is accepted and unused)."""
    from finbench.app.runs import score_run

    return score_run(Path(run_dir), variant or OFFICIAL.name, bootstrap, seed)[0]


def compare(run_dirs: Sequence[str | Path], *, out: str | Path | None = None, bootstrap: int = 1000, seed: int = 0,
            allow_mixed_protocols: bool = False, console: Any = None) -> dict[str, Any]:
    """Paired comparison of run folders against the first (see `finbench compare`); `out`: the JSON
    is written there too. Nothing is printed (`console` is accepted and unused)."""
    from finbench.app.runs import compare_run_dirs, write_json

    result = compare_run_dirs([Path(d) for d in run_dirs], bootstrap, seed, allow_mixed_protocols)
    if out is not None:
        write_json(Path(out), result)
    return result

