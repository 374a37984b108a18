"""Data parallel (torchrun, 2 CPU processes on gloo) and model parallel (--device-map auto)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import ENV as BASE_ENV
from helpers import cache_rows as _rows
from helpers import cli

from finbench.config.specs import RunConfig
from finbench.runner.batching import Item
from finbench.runner.distributed import World, shard
from finbench.runner.engine import run_benchmark

ENV = {**BASE_ENV, "OMP_NUM_THREADS": "1"}


def test_shards_cover_every_item_once_and_balance_tokens():
    items = [Item(i, "single", n) for i, n in enumerate([900, 50, 1200, 300, 300, 700, 1000, 20, 640, 410, 80])]
    shards = [shard(items, World(rank, 3, rank)) for rank in range(3)]
    indices = sorted(item.index for part in shards for item in part)
    assert indices == list(range(len(items)))  # disjoint and complete
    loads = [sum(item.n_tokens for item in part) for part in shards]
    assert max(loads) - min(loads) <= max(item.n_tokens for item in items)  # LPT bound
    assert shards == [shard(items, World(rank, 3, rank)) for rank in range(3)]  # every rank agrees


def _torchrun(args, out, nproc=2) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                             "-m", "finbench", "run", *args, "--out", str(out)],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def reference(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=24, batch_size=4,
                       dtype="float32", device="cpu", bootstrap=0, out=str(tmp_path_factory.mktemp("ref") / "run"))
    return run_benchmark(config, tiny_model, show_progress=False).samples


def _args(tiny_qwen_dir, synthetic_parquet, limit=24, batch_size=4):
    return ["--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit", str(limit),
            "--batch-size", str(batch_size),
            "--dtype", "float32", "--device", "cpu", "--bootstrap", "0", "--no-progress"]


def _same(samples, reference) -> None:
    columns = ["id", "answer", "gold", "error", "kind", "sample_key"]
    pd.testing.assert_frame_equal(samples[columns], reference[columns])
    for got, want in zip(samples["option_probs"], reference["option_probs"]):
        assert list(got) == pytest.approx(list(want), abs=1e-5)


@pytest.mark.slow
def test_two_ranks_give_the_single_process_results(tiny_qwen_dir, synthetic_parquet, reference, tmp_path):
    out = tmp_path / "dp"
    process = _torchrun(_args(tiny_qwen_dir, synthetic_parquet), out)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    import json

    results = json.loads((out / "results.json").read_text())
    assert results["n_computed"] == 24
    (note,) = [n for n in results["notes"] if n.startswith("data parallel over 2 ranks")]
    counts = [int(x) for x in note.split("[")[1].rstrip("] samples each").split(",")]
    assert sum(counts) == 24 and min(counts) > 0  # both ranks worked
    assert stdout.count("questions (") == 1  # only rank 0 reports
    _same(pd.read_parquet(out / "samples.parquet"), reference)


SLOW_RANK = """
import os, sys, time
from finbench.runner.cache import PredictionCache
reads = PredictionCache.get_many
def late_read(self, keys):  # rank 1 reads the cache late: rank 0 has committed answers by then
    if os.environ.get("RANK") == "1":
        time.sleep(float(os.environ["SLOW_RANK_SECONDS"]))
    return reads(self, keys)
PredictionCache.get_many = late_read
from finbench.cli import app
sys.argv[0] = "finbench"
app()
"""


@pytest.mark.slow
def test_ranks_agree_on_the_work_however_late_one_reads_the_cache(tiny_qwen_dir, synthetic_parquet, reference,
                                                                  tmp_path):
    """Each rank reads the shared cache, then shards what is not cached. A rank that read it after
    another had committed answers would shard a different list, and questions fell between the
    ranks (KeyError on rank 0). The ranks now wait for each other between reading and computing."""
    script = tmp_path / "slow_rank.py"
    script.write_text(SLOW_RANK)
    out = tmp_path / "late"
    process = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                str(script), "run", *_args(tiny_qwen_dir, synthetic_parquet), "--out", str(out)],
                               env={**ENV, "SLOW_RANK_SECONDS": "8"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    _same(pd.read_parquet(out / "samples.parquet"), reference)


@pytest.mark.slow
def test_a_killed_rank_loses_nothing_and_any_world_size_resumes(tiny_model, tiny_qwen_dir, synthetic_parquet,
                                                                 tmp_path):
    out = tmp_path / "killed"
    args = _args(tiny_qwen_dir, synthetic_parquet, limit=72, batch_size=1)  # a flag given twice is refused
    process = _torchrun(args, out)
    deadline = time.time() + 300
    children: list[str] = []
    while len(children) < 2 and time.time() < deadline and process.poll() is None:  # both workers up
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        time.sleep(0.05)
    assert len(children) == 2, "torchrun did not start two workers"
    while _rows(out / "cache.sqlite") < 4 and time.time() < deadline and process.poll() is None:
        time.sleep(0.005)
    os.kill(int(children[-1]), signal.SIGKILL)  # one rank dies; torchrun then stops the job
    process.communicate(timeout=300)
    assert process.returncode != 0
    saved = _rows(out / "cache.sqlite")
    assert 4 <= saved < 72
    resumed = cli("run", *args, "--out", str(out))  # one process resumes: no fresh one needed
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    import json

    results = json.loads((out / "results.json").read_text())
    assert results["n_cached"] == saved and results["n_computed"] == 72 - saved
    reference = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), batch_size=4,
                                        dtype="float32", device="cpu", bootstrap=0, out=str(tmp_path / "ref")),
                              tiny_model, show_progress=False).samples
    _same(pd.read_parquet(out / "samples.parquet"), reference)


def test_device_map_auto_gives_the_same_answers(tiny_qwen_dir, synthetic_parquet, reference, tmp_path):
    config = RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=24, batch_size=4,
                       dtype="float32", device="cpu", device_map="auto", bootstrap=0, out=str(tmp_path / "dm"))
    _same(run_benchmark(config, show_progress=False).samples, reference)
