"""Data parallel over two "nodes" (torchrun --nnodes 2 on 127.0.0.1, gloo), each with its own
cache folder: every rank writes its own cache shard, rank 0 merges every answer into the run
folder's cache at the end, and the answers are the single process's."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from helpers import ENV as BASE_ENV
from helpers import cache_rows, cli
from served_server import free_port

from finbench.config.specs import RunConfig
from finbench.runner.distributed import World, shard_path
from finbench.runner.engine import run_benchmark

ENV = {**BASE_ENV, "OMP_NUM_THREADS": "1"}
LIMIT = 16


def test_a_rank_writes_its_own_shard_only_over_several_nodes(tmp_path):
    path = tmp_path / "cache.sqlite"
    assert shard_path(path, World(1, 4, 1, 4)) == path  # one node: the ranks share the file (WAL, local disk)
    assert shard_path(path, World(3, 4, 1, 2)) == tmp_path / "cache.rank3.sqlite"
    assert World(3, 4, 1, 2).nodes == 2 and World(0, 4, 0, 0).nodes == 1


def _args(tiny_qwen_dir, data):
    return ["--model", str(tiny_qwen_dir), "--data", str(data), "--limit", str(LIMIT), "--batch-size", "4",
            "--dtype", "float32", "--device", "cpu", "--bootstrap", "0", "--no-progress"]


@pytest.mark.slow
def test_two_nodes_with_their_own_cache_folders_give_the_single_process_answers(tiny_model, tiny_qwen_dir,
                                                                                 synthetic_parquet, tmp_path):
    port = free_port()
    outs = [tmp_path / "node0" / "run", tmp_path / "node1" / "run"]  # separate folders, as on two machines
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                               "--node_rank", str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port),
                               "-m", "finbench", "run", *_args(tiny_qwen_dir, synthetic_parquet), "--out", str(out)],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, out in enumerate(outs)]
    done = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], done[0][1][-3000:] + done[1][1][-3000:]
    shards = [cache_rows(outs[0] / "cache.rank0.sqlite"), cache_rows(outs[1] / "cache.rank1.sqlite")]
    assert sum(shards) == LIMIT and min(shards) > 0  # each rank wrote its own answers on its own node
    assert cache_rows(outs[0] / "cache.sqlite") == LIMIT  # merged into the run folder at the end
    assert not (outs[1] / "samples.parquet").exists()  # only rank 0 writes the run

    reference = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), data=str(synthetic_parquet), limit=LIMIT,
                                        batch_size=4, dtype="float32", device="cpu", bootstrap=0,
                                        out=str(tmp_path / "single")), tiny_model, show_progress=False).samples
    samples = pd.read_parquet(outs[0] / "samples.parquet")
    columns = ["id", "answer", "gold", "error", "kind", "sample_key"]
    pd.testing.assert_frame_equal(samples[columns], reference[columns])
    for got, want in zip(samples["option_probs"], reference["option_probs"]):
        assert list(got) == pytest.approx(list(want), abs=1e-5)

    rerun = cli("run", *_args(tiny_qwen_dir, synthetic_parquet), "--out", str(outs[0]))  # one process resumes
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    results = json.loads((outs[0] / "results.json").read_text())
    assert results["n_cached"] == LIMIT and results["n_computed"] == 0
