"""What a new user reads must be true (issue 55, items 1, 7 and 11): FCMR's rule is said to be
finbench's prompt and reading (FCMR publishes neither); `compare` without --out points to no file it
did not write; `finbench benchmarks` tells a GitHub repository from a hub set; `run --help` names
every protocol; the command summary names every command; `data check` shows one breakdown once
and a blank value as missing; another benchmark's data is refused naming whose data it looks like."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from helpers import ENV, cli

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "fcmr").exists() or not (SHARED / "finmmr").exists(),
                                  reason="../shared/data is absent")
WIDE = {**ENV, "COLUMNS": "250"}


def _flat(text: str) -> str:
    return " ".join(text.split())


# ---- item 1: FCMR's rule is finbench's prompt and reading, following the paper ---------------------------
@pytest.mark.parametrize("protocol", ["official", "constrained"])
def test_an_fcmr_run_says_its_prompt_and_reading_are_finbenchs_not_an_official_rule(tiny_qwen_dir, tmp_path, protocol):
    from finbench.benchmarks import get_benchmark

    data, _ = get_benchmark("fcmr").demo.write(tmp_path / "data", None)
    out = tmp_path / "run"
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "fcmr", "--data", str(data), "--protocol", protocol,
               "--limit", "2", "--max-new-tokens", "2", "--out", str(out), "--device", "cpu", "--dtype", "float32",
               "--bootstrap", "0", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    for text in (done.stdout, (out / "report.md").read_text()):
        text = _flat(text)
        assert "official rule" not in text, text
        assert ("the paper's exact match of the set, on finbench's prompt and answer reading (FCMR publishes no "
                "prompt or scorer)") in text, text


# ---- item 7: compare's caption, the benchmarks' list, run --help, the command summary -------------------
def test_compare_without_out_names_no_unwritten_file_and_with_out_names_the_one_written(
        tiny_qwen_dir, synthetic_parquet, tmp_path):
    runs = []
    for protocol in ("constrained", "official"):
        runs.append(tmp_path / protocol)
        done = cli("run", "--model", str(tiny_qwen_dir), "--data", str(synthetic_parquet), "--limit", "24",
                   "--protocol", protocol, "--max-new-tokens", "2", "--out", str(runs[-1]), "--device", "cpu",
                   "--dtype", "float32", "--bootstrap", "0", "--no-progress")
        assert done.returncode == 0, done.stderr[-3000:]
    base = ["compare", *map(str, runs), "--allow-mixed-protocols", "--bootstrap", "0"]
    unwritten = cli(*base, env=None)
    assert unwritten.returncode == 0, unwritten.stderr[-3000:]
    text = _flat(unwritten.stdout)
    assert "answers differ" in text and "first 10 of " in text, text  # more than ten: the caption is shown
    assert "comparison JSON" not in text and "--out FILE writes them all" in text
    written = tmp_path / "comparison.json"
    done = cli(*base, "--out", str(written))
    assert done.returncode == 0 and written.is_file()
    assert f"all of them are in {written}" in _flat(done.stdout.replace("\n", ""))
    assert json.loads(written.read_text())["disagreements"]


def test_the_benchmarks_list_says_a_github_repository_is_no_hub_set():
    from finbench.benchmarks import BENCHMARKS

    done = cli("benchmarks", env=None)
    assert done.returncode == 0
    text = _flat(done.stdout)
    for name, benchmark in BENCHMARKS.items():
        try:  # what `run` does without --data: a benchmark without a hub set says so
            benchmark.load(None, 1)
            hub = True
        except ValueError as err:
            hub = "no hub set" not in str(err)
        except Exception:  # noqa: BLE001 — offline: the hub set cannot be read here, but there is one
            hub = True
        if hub:
            assert f"(hub: {benchmark.hub_id})" in text, name
        else:
            assert f"hub: {benchmark.hub_id}" not in text, name
            assert f"(no hub set: --data a checkout of the GitHub repository {benchmark.hub_id})" in text, name


def test_run_help_names_every_protocol_of_every_benchmark():
    from finbench.benchmarks import BENCHMARKS

    done = cli("run", "--help", env=WIDE)
    assert done.returncode == 0
    text = _flat(done.stdout.replace("│", " "))
    section = text[text.index("--protocol"):][:600]
    for name, benchmark in BENCHMARKS.items():
        for protocol in benchmark.protocol_names:
            assert protocol in section, (name, protocol, section)
    assert "cot (finmmr)" in section and "official (finmme, famma" in section


def test_the_command_summary_names_every_command():
    from finbench.cli import app
    from finbench.cli.common import HELP

    names = [c.name or c.callback.__name__ for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert "judge-agreement" in names
    missing = [name for name in names if name not in HELP]
    assert not missing, missing


# ---- item 7: data check shows a breakdown once, a blank value as missing ------------------------------
@needs_shared
def test_data_check_shows_two_fields_with_the_same_values_once():
    done = cli("data", "check", "--benchmark", "fcmr", str(SHARED / "fcmr"), env=WIDE)
    assert done.returncode == 0, done.stderr
    titles = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("by ")]
    assert "by question_type = difficulty" in titles and "by difficulty" not in titles, titles
    assert len(titles) == len(set(titles))


def test_data_check_shows_no_empty_group_for_a_missing_column_or_a_blank_value(synthetic_parquet, tmp_path):
    import pandas as pd

    from finbench.app.datacheck import MISSING, check_data

    frame = pd.read_parquet(synthetic_parquet).head(12).drop(columns=["asset_class"])  # a column the data lacks
    frame.loc[:2, "chart_type"] = ""  # and a blank value in another
    path = tmp_path / "finmme.parquet"
    frame.to_parquet(path)
    report = check_data("finmme", path)
    assert "asset_class" not in report["counts"], report["counts"]  # nothing to count: no table of one blank group
    charts = report["counts"]["chart_type"]
    assert "" not in charts and charts[MISSING] == 3, charts
    done = cli("data", "check", "--benchmark", "finmme", str(path), env=WIDE)
    assert done.returncode == 0 and "by asset_class" not in done.stdout
    assert "column 'asset_class' is missing from the data" in " ".join(done.stdout.split())


# ---- item 11: another benchmark's data named -------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    from finbench.benchmarks import BENCHMARKS, get_benchmark

    root = tmp_path_factory.mktemp("demo-data")
    return {name: get_benchmark(name).demo.write(root / name, 2 if name != "finmme" else 8)[0] for name in BENCHMARKS}


def test_data_given_to_another_benchmark_is_refused_naming_the_benchmark_it_looks_like(demo_data):
    from finbench.benchmarks import data_source, get_benchmark, refusal_of

    for benchmark, other in itertools.permutations(demo_data, 2):
        done = cli("data", "check", "--benchmark", benchmark, str(demo_data[other]))
        if done.returncode == 1 and get_benchmark(benchmark).inspect is not None:
            # a benchmark that checks its own data in full lists the rows it cannot run; a run
            # refuses them at start-up (startup.validate's refusal_of), naming the benchmark they look like
            assert "rows a run refuses" in done.stdout, (benchmark, other, done.stdout)
            source = data_source(get_benchmark(benchmark), demo_data[other], {})
            named = f"it looks like {other} data: --benchmark {other}"
            assert refusal_of(get_benchmark(benchmark), source).endswith(named), (benchmark, other)
            continue
        assert done.returncode == 2, (benchmark, other, done.stdout)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert _flat(done.stderr).endswith(f"it looks like {other} data: --benchmark {other}"), (benchmark, other)


@needs_shared
def test_a_refusal_names_the_folder_and_its_count_of_files_not_each_file(tmp_path):
    done = cli("data", "check", "--benchmark", "finmme", str(SHARED / "finmmr"))
    assert done.returncode == 2
    text = _flat(done.stderr)
    assert f"{SHARED / 'finmmr'} (9 data files): not FinMME data" in text, text
    assert "easy_validation.json" not in text
    assert text.endswith("it looks like finmmr data: --benchmark finmmr")


# ---- item 14: the README says what Chromium adds to the tests and how to get it -------------------------
def test_the_readme_says_what_chromium_adds_to_the_tests_and_how_to_get_it():
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    section = _flat(readme[readme.index("Run the tests:"):readme.index("Python ≥ 3.10.")])
    users = sorted(f"tests/{path.name}" for path in (root / "tests").glob("test_*.py") if path.name != Path(__file__).name
                   and ("open_page(" in path.read_text() or "_chromium()" in path.read_text()))
    assert users and all(user in section for user in users), (users, section)
    assert "Chromium" in section and "apt-get install -y chromium" in section
    assert "FINBENCH_REQUIRE_CHROMIUM" in section and "skip" in section
