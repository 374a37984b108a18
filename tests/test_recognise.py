"""Every benchmark recognises its data at start-up (`Benchmark.recognise`, benchmarks/recognise.py):
given another benchmark's demo data, `finbench run` is refused in one line before any model loads
and `finbench data check` says whose data it is not; given its own, it goes on."""

from __future__ import annotations

import itertools

import pytest
from helpers import cli

# the names the refusal gives each benchmark's data, written out here rather than read from finbench;
# a benchmark added to finbench is added here (test_every_built_in_benchmark_is_fed_the_others_data)
TITLES = {"finmme": "FinMME", "famma": "FAMMA", "finmtm": "FinMTM", "mme-finance": "MME-Finance", "finmmr": "FinMMR",
          "finchart-bench": "FinChart-Bench", "fcmr": "FCMR"}
# benchmarks of a user's own plain file (benchmarks/custom): no format is another benchmark's, so they
# are given every other benchmark's demo data apart (refused in at most two lines naming a file and
# a row), and their demo data is given to every other benchmark as any benchmark's is
OWN_FILES = ("custom",)


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    """{benchmark: the --data of its demo}, each written in its real on-disk format, small."""
    from finbench.benchmarks import get_benchmark

    root = tmp_path_factory.mktemp("demo-data")
    return {name: get_benchmark(name).demo.write(root / name, 2 if name != "finmme" else 8)[0]
            for name in (*TITLES, *OWN_FILES)}


def _refused(benchmark, data, model, out) -> tuple[list[str], str]:
    """(the output's lines, stderr) of a run of `benchmark` on `data` that must be refused at start-up."""
    done = cli("run", "--model", str(model), "--benchmark", benchmark, "--data", str(data), "--out", str(out),
               "--device", "cpu", "--no-progress")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert not out.exists()
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()], done.stderr


@pytest.mark.parametrize("benchmark, other", [*itertools.permutations(TITLES, 2),
                                              *itertools.product(TITLES, OWN_FILES)])
def test_a_run_given_another_benchmarks_demo_data_is_refused_in_one_line_before_any_model_loads(
        benchmark, other, demo_data, tiny_qwen_dir, tmp_path, no_model):
    lines, stderr = _refused(benchmark, demo_data[other], tiny_qwen_dir, tmp_path / "run")
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert f"not {TITLES[benchmark]} data — " in " ".join(stderr.split())


@pytest.mark.parametrize("own, other", list(itertools.product(OWN_FILES, TITLES)))
def test_a_run_of_your_own_file_given_a_benchmarks_demo_data_is_refused_before_any_model_loads(
        own, other, demo_data, tiny_qwen_dir, tmp_path, no_model):
    lines, _ = _refused(own, demo_data[other], tiny_qwen_dir, tmp_path / "run")
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error:"), lines


def test_every_built_in_benchmark_is_fed_the_others_data():
    from finbench.benchmarks import BENCHMARKS

    built_in = {name for name, b in BENCHMARKS.items() if b.load.__module__.startswith("finbench.")}
    assert built_in <= {*TITLES, *OWN_FILES}, f"add {built_in - set(TITLES)} to TITLES: its recogniser is untested"


@pytest.mark.parametrize("benchmark", (*TITLES, *OWN_FILES))
def test_each_benchmark_recognises_its_own_demo_data(benchmark, demo_data):
    from finbench.benchmarks import get_benchmark

    assert get_benchmark(benchmark).recognise(str(demo_data[benchmark])) == ""
    assert get_benchmark(benchmark).recognise(None) == ""  # the hub set: its loader says what it finds


def test_data_check_says_whose_data_it_is_not(demo_data):
    done = cli("data", "check", "--benchmark", "finmmr", str(demo_data["finmme"]))
    assert done.returncode == 2, done.stdout
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "not FinMMR data — missing required column(s) question, ground_truth" in \
        " ".join(done.stderr.split()), lines
    assert "records with an error" not in done.stdout


def test_a_benchmark_that_declares_no_recogniser_accepts_any_source(tmp_path):
    from finbench.benchmarks.recognise import anything, requires_columns

    assert anything(tmp_path) == ""
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n{"r": 2}\n')
    (tmp_path / "b.tsv").write_text("q\tanswer\n1\t2\n")
    assert requires_columns("X", ("q", "r"))(tmp_path) == ""  # across the files
    refusal = requires_columns("X", ("q", "answer"), per_file=True)(tmp_path)
    assert refusal.startswith(f"{tmp_path / 'a.jsonl'}: not X data — missing required column(s) answer (have: q, r)")
    assert requires_columns("X", ("q",))("owner/name") == ""  # a hub id: told by loading it
