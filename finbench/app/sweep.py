"""`finbench sweep`: one evaluation under several settings, each compared against the first.

Axes: `--models A,B` (instruct vs thinking checkpoints, or bf16 vs pre-quantized checkpoints),
`--quant none,8bit,4bit,int8wo,int4wo,fp8`, `--dtype …`,
`--think-budget 0,256,1024`; several axes give their product. Every variant runs into its own run
folder `OUT/<variant>` with one shared cache `OUT/cache.sqlite`, then `OUT/sweep.json`,
`OUT/report.html` and `OUT/report.md` compare each variant against the first: scores with
bootstrap CIs, paired deltas (paired bootstrap, exact McNemar, Holm), flipped questions, the
option-distribution shift (KL(reference ‖ variant), top-1 agreement, gold-probability shift, per
domain), memory and speed, and accuracy against reasoning tokens for budget sweeps. `study`
gathers a quantization study in one row per variant (what it really ran as, flips right→wrong and
wrong→right with McNemar and Holm, KL, agreement, gold shift, ECE, the domains that lose most,
memory and speed ratios); `domain_sensitivity` holds every domain's accuracy per variant. With
`--permutations` / `--image-ablation` every variant runs the robustness studies too, and each
variant of sweep.json carries their numbers (`studies`: circular, image_ablation,
majority_baseline), shown side by side in the sweep's reports.

Served from the cache without the model: the comparison reads only the run folders
(`samples.parquet`, `results.json`), so `finbench compare OUT/a OUT/b` needs no model. A rerun of
the sweep whose model folder is gone takes each variant's model fingerprint from that variant's
own `results.json` (written by the run that computed the answers) — the fingerprint of weights
that no longer exist cannot be recomputed, and the recorded one is the fingerprint the cached
answers were keyed with. The variant runs in the engine's replay mode (runner/replay.py): no model, nothing computed;
a question not in the cache fails the run before anything is computed, with one line.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
from rich.markup import escape

from finbench.benchmarks import data_source, get_benchmark, load_matching
from finbench.benchmarks.metrics import ACCURACY
from finbench.config.files import CONFIG_FILE, dump, run_document
from finbench.config.run_options import sweep_flags
from finbench.config.specs import RunConfig
from finbench.core.encodable import write_text
from finbench.report.html import write_sweep_report
from finbench.report.markdown import write_sweep_markdown
from finbench.runner import startup  # by module: a test stands in for its loader
from finbench.runner.lock import folder_lock
from finbench.runner.replay import Replay
from finbench.studies import flat_config, headlines, question_means, study_options

if TYPE_CHECKING:
    from finbench.benchmarks.base import Benchmark

AXES = ("model", "quant", "dtype", "think_budget")
SWEEP_FILE = "sweep.json"


def parse_axis(text: str | None, cast: type = str) -> list[Any]:
    """'a,b,c' → ['a', 'b', 'c'] (whitespace trimmed, empty parts dropped)."""
    if text is None:
        return []
    try:
        return [cast(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{text!r}: expected a comma-separated list of {cast.__name__} values") from None


def plan_variants(base: RunConfig, axes: dict[str, Sequence[Any]]) -> list[tuple[str, RunConfig]]:
    """(name, config) per variant, the product of the axes in AXES order; the first is the
    reference. A name lists the axes that vary, e.g. `quant-8bit` or `model-B_think_budget-256`."""
    unknown = set(axes) - set(AXES)
    if unknown:
        raise ValueError(f"unknown sweep axis {sorted(unknown)}; known: {', '.join(AXES)}")
    values = {axis: list(axes.get(axis) or [base.option(axis)]) for axis in AXES}
    for axis, vals in values.items():
        if len(set(vals)) != len(vals):
            raise ValueError(f"--{axis.replace('_', '-')}: a value is repeated ({vals})")
    varying = [a for a in AXES if len(values[a]) > 1]
    if not varying:
        raise ValueError("a sweep needs at least two variants: give an axis two or more values, "
                         "e.g. --quant none,8bit")
    models = values["model"]
    short = {m: _slug(Path(m).name or m) for m in models}
    if len(set(short.values())) != len(models):
        short = {m: f"{i}-{short[m]}" for i, m in enumerate(models)}
    variants = []
    for combo in itertools.product(*(values[a] for a in AXES)):
        setting = dict(zip(AXES, combo))
        name = "_".join(f"{a}-{short[setting[a]] if a == 'model' else _slug(str(setting[a]))}" for a in varying)
        variants.append((name, base.replaced(**setting)))
    return variants


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def _load_or_recorded(config: RunConfig, run_dir: Path, checkpoint: Any = None) -> tuple[Any, Any]:
    """(model, None): the model (the one loader: runner/startup.py, given the `checkpoint` record its
    check read); or (None, replay) when the model cannot be loaded but the variant's run folder
    records an earlier run: the run is then served from the cache alone (runner/replay.py)."""
    try:
        return startup.load_for_run(config, checkpoint=checkpoint), None
    except ValueError:
        if not (run_dir / "results.json").is_file():
            raise
        return None, Replay.from_run(config.model, run_dir)


def validate_variants(variants: Sequence[tuple[str, RunConfig]], out: Path) -> dict[str, Any]:
    """Every variant checked before any of them runs: its options, then what its model's family
    refuses (from config.json alone, no weights: e.g. a thinking budget on a model without a
    thinking block). A model that cannot be found passes when its variant's run folder records an
    earlier run: it will be served from the cache alone (runner/replay.py). Returns each checked
    variant's checkpoint record (runner/startup.py `check_family`), for its load. Last, each
    quantized variant's share of the language model its format would quantize, from the module
    tree alone (models/quant_share.py): every variant below the load's threshold in one message.
    And the data, read once, before any variant's model loads."""
    for _, config in variants:  # what the options alone decide, every variant's, before torch is imported
        startup.validate_options(config)
    for _, config in variants:
        startup.validate(config)
    checked = {}
    for name, config in variants:
        try:
            checked[name] = startup.check_family(config)
        except ValueError as err:
            if (out / name / "results.json").is_file() and not Path(config.model).expanduser().exists():
                continue
            raise ValueError(f"variant {name}: {err}") from None
    _refuse_unquantizable([(name, config) for name, config in variants
                           if name in checked and checked[name] is not None and checked[name].declared is None])
    _check_data(variants[0][1])  # last (it reads the data): one data set for every variant
    return checked


def _check_data(config: RunConfig) -> None:
    """The sweep's data, read before any variant's model loads: a source that cannot be read (a hub
    set not in the local cache, offline) or that the filters leave empty is one line now, not an
    error after the first variant's model has loaded."""
    benchmark = get_benchmark(config.benchmark)
    load_matching(benchmark, data_source(benchmark, config.data, config.option), 1, config.domains,
                  config.question_types)


def _refuse_unquantizable(variants: Sequence[tuple[str, RunConfig]]) -> None:
    if not any(config.load.quant != "none" for _, config in variants):
        return
    from finbench.models.quant_share import share_refusals

    refused = share_refusals(variants)
    if refused:
        raise ValueError(f"{len(refused)} variant(s) would run mostly unquantized, so their loads would be refused: "
                         f"{'; '.join(refused)}. Drop them from --quant, or sweep a model whose linear layers they can "
                         "quantize (int4wo needs input widths that are multiples of 128: "
                         "`finbench models make-tiny qwen2.5-vl DIR --quant bf16` builds a tiny one)")


def run_sweep(base: RunConfig, axes: dict[str, Sequence[Any]], out: str | Path, *, show_progress: bool = False,
              console: Any = None) -> dict[str, Any]:
    """Run every variant (resuming from the shared cache), then compare; returns sweep.json's content."""
    out = Path(out)
    cache = Path(base.output.cache) if base.output.cache else out / "cache.sqlite"
    variants = [(name, config.replaced(out=str(out / name), cache=str(cache)))
                for name, config in plan_variants(base, axes)]
    checked = validate_variants(variants, out)  # once: run_benchmark does not validate them again

    with folder_lock(out):  # one sweep per folder: a second is refused before any model loads
        summary = _run_variants(base, axes, out, variants, checked, show_progress, console)
        write_text(out / CONFIG_FILE, dump(sweep_document(base, axes)))  # `finbench sweep --config` reruns it
        return summary


def sweep_document(base: RunConfig, axes: dict[str, Sequence[Any]], check: bool = False) -> dict[str, Any]:
    """The sweep's resolved options, as its folder's config.yaml holds them: the model (or
    models), each axis's values and every option `finbench sweep` takes, as the variants share
    them. `check`: first plan the variants and check their options, as the sweep does before any
    runs (nothing is loaded)."""
    if check:
        for _, config in plan_variants(base, axes):
            startup.validate_options(config)
    taken = {o.name for o in sweep_flags()} | {o.name for o in study_options(sweep=True)}
    models = list(axes.get("model") or [base.model])
    document: dict[str, Any] = {"models": models} if len(models) > 1 else {"model": models[0]}
    document.update({k: v for k, v in run_document(flat_config(base)).items() if k in taken})
    document.update({axis: list(values) for axis, values in axes.items() if axis != "model" and values})
    return document


def _run_variants(base: RunConfig, axes: dict[str, Sequence[Any]], out: Path, variants: list[tuple[str, RunConfig]],
                  checked: dict[str, Any], show_progress: bool, console: Any) -> dict[str, Any]:
    from finbench.runner.defaults import SIZED, size_to_device
    from finbench.runner.distributed import rank_device, world_from_env
    from finbench.runner.engine import run_benchmark

    # sized once, before any model loads: every variant runs with the same batch settings
    sized = size_to_device(base, rank_device(base.load.device, world_from_env()))
    variants = [(name, config.replaced(**{f: sized.option(f) for f in (*SIZED, "sized")}))
                for name, config in variants]
    run_dirs, names, failed = [], [], []
    for name, config in variants:
        run_dir = out / name
        try:  # a load can still refuse (what only the loaded weights tell): the finished variants are kept
            model, replay = _load_or_recorded(config, run_dir, checked.get(name))
        except ValueError as err:
            failed.append({"variant": name, "error": str(err)})
            if console is not None:
                console.print(f"[bold red]variant {name} failed to load:[/] {escape(str(err))}")
            continue
        if console is not None:
            console.print(f"[bold]variant {name}[/]" + (" (model missing: served from the cache)"
                                                         if replay is not None else ""))
        run_benchmark(config, model=model, show_progress=show_progress, console=console, validated=True, replay=replay,
                      loaded_with=config if model is not None else None)
        del model  # one model in memory at a time
        run_dirs.append(run_dir)
        names.append(name)
    if failed and len(run_dirs) < 2:
        finished = f"; finished: {names[0]} ({run_dirs[0]})" if names else ""
        raise ValueError("; ".join(f"variant {f['variant']}: {f['error']}" for f in failed)
                         + f"{finished} — fewer than two variants to compare, so no {SWEEP_FILE}")
    summary = summarize(run_dirs, names, n_bootstrap=base.output.bootstrap, seed=base.output.seed,
                        axes={a: [str(v) for v in vals] for a, vals in axes.items() if vals})
    if failed:
        summary["failed"] = failed
    write_sweep(out, summary)
    return summary


def write_sweep(out: Path, summary: dict[str, Any]) -> None:
    from finbench.app.runs import write_json

    write_json(Path(out) / SWEEP_FILE, summary)
    write_sweep_report(out, summary)
    write_sweep_markdown(out, summary)


def summarize(run_dirs: Sequence[Path], names: Sequence[str], n_bootstrap: int = 1000, seed: int = 0,
              axes: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The sweep's comparison from its run folders alone (no model, no cache)."""
    from finbench.app.runs import load_samples, run_benchmark_of
    from finbench.scoring.tables import _jsonable, compare_runs
    from finbench.scoring.stats import distribution_comparison

    run_dirs = [Path(d) for d in run_dirs]
    dfs = [load_samples(d) for d in run_dirs]
    results = [json.loads((d / "results.json").read_text()) for d in run_dirs]
    benchmark = run_benchmark_of(dfs[0], run_dirs[0])
    means = [question_means(d, df, benchmark) for d, df in zip(run_dirs, dfs)]
    comparison = compare_runs(dfs, list(names), benchmark=benchmark, n_bootstrap=n_bootstrap, seed=seed,
                              means=means)
    variants = []
    for name, run_dir, df, result in zip(names, run_dirs, dfs, results):
        throughput = result.get("throughput", {})
        scores = result.get("scores", {})
        variants.append({
            "name": name, "run_dir": str(run_dir), "model": result["config"]["model"],
            "quant": result["config"].get("quant"), "dtype": result["fingerprint"].get("dtype"),
            # what the model really ran as (models/quant.py): a --quant value or prequantized:<format>
            "quant_label": result["fingerprint"].get("quant", "none"),
            "quantized": quantized_summary(result["fingerprint"].get("quantization")),
            "calibration": {k: (scores.get("calibration") or {}).get(k) for k in ("n", "ece", "brier", "mean_confidence")},
            "think_budget": result["config"].get("think_budget", 0),
            "scores": {k: scores.get(k) for k in scores.get("headline", [])},
            "ci": {k: scores.get("ci", {}).get(k) for k in scores.get("headline", [])},
            "model_memory_gib": throughput.get("model_memory_gib"),
            "peak_memory_gib": throughput.get("peak_memory_gib", throughput.get("peak_rss_gib")),
            "peak_memory_kind": "cuda allocated" if "peak_memory_gib" in throughput else "process RSS (cumulative)",
            "samples_per_s": throughput.get("samples_per_s"),
            "all_from_cache": bool(throughput.get("all_from_cache")),
            **_reasoning_summary(df),
            "studies": headlines(result),  # each study's headline numbers, majority_baseline (finbench/studies)
        })
    distributions = distribution_comparison(dfs, list(names))
    domains = _domain_sensitivity(dfs, names, benchmark)
    return _jsonable({
        "benchmark": benchmark.name, "reference": names[0], "axes": axes or {}, "variants": variants,
        "comparison": comparison, "flip_matrix": flip_matrix(dfs, names),
        "distributions": distributions, "domain_sensitivity": domains,
        "study": study_rows(variants, comparison, distributions, domains),
        "units": "scores, agreement and probabilities on 0–1; KL in nats; memory in GiB",
    })


def quantized_summary(report: dict[str, Any] | None) -> str:
    """One line of what a variant's model really held (its fingerprint's quantization report)."""
    if not report:
        return "not quantized"
    lm = report.get("parts", {}).get("language_model", {})
    types = ", ".join(f"{t} ×{n}" for t, n in (lm.get("types") or {}).items()) or "none quantized"
    vision = report.get("parts", {}).get("vision", {})
    extra = f"; vision {vision.get('quantized', 0)}/{vision.get('layers', 0)}" if vision.get("quantized") else ""
    fmt = report.get("format", {})
    how = f" ({fmt['kernel']})" if fmt.get("kernel") else " (dequantized)" if fmt.get("dequantized") else ""
    return f"language model {lm.get('quantized', 0)}/{lm.get('layers', 0)} linears: {types}{extra}{how}"


def _domain_sensitivity(dfs: Sequence[pd.DataFrame], names: Sequence[str], benchmark: Benchmark) -> dict[str, Any]:
    """Per-domain accuracy of every run on the questions they all share (official correctness)."""
    import torch

    from finbench.scoring.tables import per_question_correct
    from finbench.scoring.stats import domain_sensitivity

    field = benchmark.domain_field
    frames = [df.assign(_correct=per_question_correct(df, benchmark)).set_index(df["id"].astype(str)) for df in dfs]
    shared = frames[0].index
    for frame in frames[1:]:
        shared = shared.intersection(frame.index, sort=False)
    if field not in frames[0].columns or not len(shared):
        return {"reference": names[0], "n": 0, "domains": [], "meaning": f"no {field!r} column"}
    correct = torch.tensor(np.stack([f["_correct"].reindex(shared).fillna(0).to_numpy(np.float64) for f in frames]))
    return domain_sensitivity(correct, frames[0][field].reindex(shared).tolist(), list(names))


def study_rows(variants: Sequence[dict[str, Any]], comparison: dict[str, Any], distributions: dict[str, Any],
               domains: dict[str, Any]) -> list[dict[str, Any]]:
    """The study in one row per variant against the reference: what it ran as, the primary
    score's change with its paired CI, flips both ways with McNemar (Holm), the option-distribution
    shift, calibration, the domains that lose most, memory and speed ratios."""
    reference = variants[0]
    primary = comparison["primary"]
    by_run = {c["run"]: c for c in comparison["comparisons"]}
    rows = []
    for variant in variants[1:]:
        c, d = by_run[variant["name"]], distributions["runs"].get(variant["name"], {})
        losing = sorted((row["delta"][variant["name"]], row["domain"]) for row in domains["domains"]
                        if row["delta"].get(variant["name"]) is not None)
        rows.append({
            "name": variant["name"], "quant_label": variant["quant_label"], "quantized": variant["quantized"],
            "primary": primary, "delta": c["delta"][primary]["value"], "delta_ci": c["delta"][primary].get("ci"),
            "right_to_wrong": c["mcnemar"]["baseline_only"], "wrong_to_right": c["mcnemar"]["run_only"],
            "mcnemar_p": c["mcnemar"]["p"], "p_holm": c.get("p_holm"),
            "comparison": {k: c.get(k) for k in ("diff", "se_diff", "ci_diff", "significant", "mde", "verdict",
                                                 "per_question", "cluster_by", "n_clusters")},
            "kl_mean": d.get("kl_mean"), "agreement": d.get("agreement"), "gold_shift_mean": d.get("gold_shift_mean"),
            "ece": variant["calibration"].get("ece"),
            "ece_delta": _difference(variant["calibration"].get("ece"), reference["calibration"].get("ece")),
            "domains_losing_most": [{"domain": name, "delta": delta} for delta, name in losing[:3] if delta < 0],
            "memory_ratio": _ratio(variant.get("model_memory_gib"), reference.get("model_memory_gib")),
            "speed_ratio": _ratio(variant.get("samples_per_s"), reference.get("samples_per_s")),
        })
    return rows


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


def _reasoning_summary(df: pd.DataFrame) -> dict[str, Any]:
    """Accuracy against reasoning spent: mean reasoning tokens, share cut by the budget."""
    correct = pd.to_numeric(df.get("correct", pd.Series(dtype=float)), errors="coerce")
    tokens = pd.to_numeric(df["reasoning_tokens"], errors="coerce") if "reasoning_tokens" in df else None
    return {ACCURACY.key: float(correct.mean()) if len(correct) else None,
            "reasoning_tokens_mean": float(tokens.mean()) if tokens is not None and len(tokens) else 0.0,
            "reasoning_tokens_max": int(tokens.max()) if tokens is not None and len(tokens) else 0,
            "budget_cut_share": float(df["budget_cut"].astype(bool).mean()) if "budget_cut" in df else 0.0}


def flip_matrix(dfs: Sequence[pd.DataFrame], names: Sequence[str]) -> dict[str, Any]:
    """counts[i][j] = questions (shared by all runs) right in run i and wrong in run j."""
    correct = [df.set_index(df["id"].astype(str))["correct"].astype(float) > 0.5 for df in dfs]
    shared = correct[0].index
    for c in correct[1:]:
        shared = shared.intersection(c.index)
    hits = np.stack([c.reindex(shared).to_numpy(dtype=bool) for c in correct])  # [R, N]
    counts = (hits[:, None, :] & ~hits[None, :, :]).sum(-1)
    return {"runs": list(names), "n": int(len(shared)), "counts": counts.tolist(),
            "meaning": "counts[i][j]: right in runs[i], wrong in runs[j]"}
