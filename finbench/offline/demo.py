"""`finbench demo --benchmark B`: synthetic data of each benchmark in its real on-disk format, and
the run settings that keep a demo on a tiny random model short. What data a benchmark's demo
writes is the benchmark's own declaration (`Benchmark.demo`, benchmarks/base.py), so a new
benchmark brings its demo with it; the writers are the `demo_data` functions of this package:

- FinMME: the hub's parquet (`finmme_synthetic`), kept in FINBENCH_HOME as it always was;
- FAMMA: the hub's parquet (`famma_synthetic`: its edge cases and chart questions in three
  languages), written into the run folder as OUT/data/…/release_basic.parquet;
- FinMTM: the hub's folder layout (`finmtm_synthetic`: OQ/, MTQA/, Agent/), into OUT/data/;
- MME-Finance: the official VLMEvalKit layout (`mme_finance_synthetic`), into OUT/data/.

A demo generates short answers and, where the benchmark asks for it, judges with the same tiny
model (a vision-language judge, shown the images), so every part of the score is computed and
shown (at chance level: the weights are random).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from finbench.app.api import make_config, refuse_other_results
from finbench.benchmarks import BENCHMARKS, get_benchmark
from finbench.core.types import RESULTS_FILE
from finbench.offline.tiny import make_tiny
from finbench.runner.lock import folder_lock

DEMO_MAX_NEW_TOKENS = 16  # a random model's free text is noise: a few tokens show the path
DEMO_MODEL = "tiny-qwen2.5-vl"  # the demo's model, built once into FINBENCH_HOME (cli.demo)


def demos() -> list[str]:
    """The benchmarks that have a demo."""
    return [name for name, benchmark in BENCHMARKS.items() if benchmark.demo is not None]


def demo_model(home: Path, announce: Callable[[Path], None] = lambda folder: None) -> tuple[Path, bool]:
    """(the demo's tiny model in `home`, whether it was built now). Built once under FINBENCH_HOME's
    lock: a second process sharing the home waits, then reuses the build. Built beside its folder and
    renamed into place, so a build killed half way leaves no folder that looks finished."""
    import shutil

    model_dir = home / DEMO_MODEL
    with folder_lock(home, "FINBENCH_HOME", wait=True):
        if (model_dir / "config.json").exists():
            return model_dir, False
        announce(model_dir)
        partial = model_dir.with_name(f".{model_dir.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        make_tiny("qwen2.5-vl", partial)
        if model_dir.is_symlink() or model_dir.is_file():  # without config.json: not a finished build
            model_dir.unlink()
        shutil.rmtree(model_dir, ignore_errors=True)
        partial.replace(model_dir)
        return model_dir, True


def demo_data(benchmark: str, home: Path, out: Path, n_items: int | None = None,
              overwrite: bool = False) -> tuple[Path, bool]:
    """(where the demo's data is, whether it was written now); written once per size. A demo
    whose run `out` would refuse (it holds another run's results, and not `overwrite`) raises
    that refusal here, before its data is written into OUT/data: a refusal writes nothing."""
    demo = get_benchmark(benchmark).demo
    folder = home if demo.in_home else out / "data"
    if not overwrite and not demo.in_home and (out / RESULTS_FILE).is_file():
        _refuse_other_results(benchmark, home, out, folder, demo, n_items)
    return demo.write(folder, n_items)


def _refuse_other_results(benchmark: str, home: Path, out: Path, folder: Path, demo: Any, n_items: int | None) -> None:
    """The run's own start-up check (api.refuse_other_results) on the config the demo will run,
    its data path found by writing the data into a scratch folder first."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        written, _ = demo.write(Path(scratch), n_items)
        data = folder / written.relative_to(scratch)
    model_dir = home / DEMO_MODEL
    config = make_config(str(model_dir), benchmark, data=str(data), out=str(out), dtype="float32", device="cpu",
                         **demo_options(benchmark, model_dir))
    refuse_other_results(config, overwrite=False)


def demo_options(benchmark: str, model_dir: Path) -> dict[str, Any]:
    """evaluate() options of the demo (FinMME's demo keeps the defaults it always had)."""
    demo = get_benchmark(benchmark).demo
    options: dict[str, Any] = {"max_new_tokens": DEMO_MAX_NEW_TOKENS} if demo.short_generation else {}
    if demo.self_judge:
        options["judge"] = str(model_dir)
        if demo.judge_max_new_tokens is not None:
            options["judge_max_new_tokens"] = demo.judge_max_new_tokens
    return options
