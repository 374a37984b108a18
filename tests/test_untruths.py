"""Smaller untruths (issue 42): what finbench says must be what happened — no library bar from the
Python API, no file written unasked, no empty tables, no "all from cache" while a judge ran, no
count that leaves records out, no judge named that was not given."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ENV, cli

API_RUN = """
import sys
import finbench
finbench.evaluate(sys.argv[1], data=sys.argv[2], out=sys.argv[3], dtype="float32", device="cpu", limit=4)
print("done")
"""


@pytest.mark.slow
def test_the_python_api_shows_no_loading_weights_bar(tmp_path, tiny_qwen_dir, synthetic_parquet):
    done = subprocess.run([sys.executable, "-c", API_RUN, str(tiny_qwen_dir), str(synthetic_parquet),
                           str(tmp_path / "run")], capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
    assert "Loading weights" not in done.stderr and "it/s]" not in done.stderr, done.stderr[-2000:]


def test_a_load_leaves_the_caller_s_bar_setting_as_it_was():
    from transformers.utils import logging as hf_logging

    from finbench.models.library_logs import no_library_bars

    before = hf_logging.is_progress_bar_enabled()
    try:
        for setting in (hf_logging.enable_progress_bar, hf_logging.disable_progress_bar):
            setting()
            was = hf_logging.is_progress_bar_enabled()
            with no_library_bars():
                assert not hf_logging.is_progress_bar_enabled()
            assert hf_logging.is_progress_bar_enabled() == was
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()


@pytest.fixture(scope="module")
def finmmr_run(tmp_path_factory, tiny_qwen_dir):
    """A FinMMR run (numerical answers only) on its demo data, one item per difficulty."""
    from finbench.benchmarks import get_benchmark

    root = tmp_path_factory.mktemp("finmmr")
    data, _ = get_benchmark("finmmr").demo.write(root / "data", 1)
    out = root / "run"
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finmmr", "--data", str(data), "--out", str(out),
               "--dtype", "float32", "--device", "cpu", "--no-progress", "--bootstrap", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    return data, out


def test_compare_writes_no_file_unasked_and_prints_no_empty_tables_for_a_numeric_benchmark(finmmr_run, tmp_path):
    import shutil

    _, out = finmmr_run
    other = tmp_path / "copy"
    shutil.copytree(out, other)
    before = sorted(p.name for p in out.iterdir())
    done = cli("compare", str(out), str(other), "--bootstrap", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == before and not (other / "compare.json").exists()
    assert "wrote" not in done.stdout
    assert "option distributions" not in done.stdout  # no choice item: nothing to compare there
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in done.stdout.splitlines()
            if line.strip().startswith("│")]
    # no row of dashes alone (a wrapped row's continuation line has blank cells, not dashes)
    assert not any(len(cells) > 1 and cells[1:] and all(cell == "–" for cell in cells[1:]) for cells in rows), done.stdout
    written = tmp_path / "asked" / "compare.json"
    done = cli("compare", str(out), str(other), "--bootstrap", "0", "--out", str(written))
    assert done.returncode == 0 and json.loads(written.read_text())["n_shared"] == 3
    assert f"wrote {written}" in done.stdout


def test_data_check_counts_every_record_of_a_field_with_a_missing_row(tmp_path):
    from finbench.benchmarks import get_benchmark

    copy, _ = get_benchmark("finmmr").demo.write(tmp_path / "data", 2)  # two items per difficulty file
    stripped = 0
    for file in sorted(copy.glob("*.json")):
        records = json.loads(file.read_text())
        for record in records[:1]:
            record.pop("subfield", None)
            stripped += 1
        file.write_text(json.dumps(records))
    done = cli("data", "check", "--benchmark", "finmmr", str(copy))
    table = done.stdout[done.stdout.index("by subfield"):]
    table = table[:table.index("└")]  # that table alone
    rows = {cells[0]: int(cells[1]) for cells in (
        [c.strip() for c in line.strip("│").split("│")] for line in table.splitlines()[3:]
        if line.startswith("│")) if len(cells) == 2}
    assert rows.get("(missing)") == stripped == 3 and sum(rows.values()) == 6, table


@pytest.mark.slow
def test_a_rerun_whose_judge_ran_does_not_say_all_from_cache(tmp_path, tiny_qwen_dir):
    from finbench.benchmarks import get_benchmark

    data, _ = get_benchmark("mme-finance").demo.write(tmp_path / "data", 1)
    args = ["run", "--model", str(tiny_qwen_dir), "--benchmark", "mme-finance", "--data", str(data), "--out",
            str(tmp_path / "run"), "--max-new-tokens", "4", "--dtype", "float32", "--device", "cpu", "--no-progress",
            "--bootstrap", "0"]
    assert cli(*args).returncode == 0
    done = cli(*args, "--judge", str(tiny_qwen_dir), "--judge-max-new-tokens", "4", "--overwrite")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["n_computed"] == 0 and results["judge"]["n_computed"] == results["judge"]["n_calls"] > 0
    assert not results["throughput"].get("all_from_cache")
    assert "all from cache" not in done.stdout
    assert f"the judge: {results['judge']['n_computed']} of {results['judge']['n_calls']} call" in done.stdout
