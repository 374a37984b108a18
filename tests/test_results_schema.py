"""Results that validate, and labels that say what was computed (issue 49, item 8): results.json's
schema takes its benchmarks and protocols from the registry (`report/schema.py` `results_schema`),
and a run of every registered benchmark under every protocol it accepts validates against it; the
reports name the clustered interval t(G − 1) and the headline CI's bootstrap (its method and what
it resamples), as computed."""

from __future__ import annotations

import json

import jsonschema
import pytest

from finbench.benchmarks import BENCHMARKS, get_benchmark

PAIRS = [(name, protocol) for name in sorted(BENCHMARKS) for protocol in BENCHMARKS[name].protocol_names]


def test_the_schema_s_enums_are_the_registry_s():
    from finbench.report.schema import results_schema

    schema = results_schema()
    assert schema["properties"]["benchmark"]["enum"] == sorted(BENCHMARKS)
    assert set(schema["properties"]["protocol"]["enum"]) == {p for _, p in PAIRS}


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-data")
    return {name: get_benchmark(name).demo.write(root / name, None)[0] for name in sorted(BENCHMARKS)}


@pytest.mark.parametrize("name, protocol", PAIRS)
def test_a_run_of_every_benchmark_and_protocol_validates(name, protocol, demo_data, tiny_model, tmp_path):
    """report/results.schema.json: "One run's results" — of any registered benchmark, under any
    protocol it accepts (`Benchmark.protocol_names`)."""
    from finbench.app.api import make_config
    from finbench.report.schema import results_schema
    from finbench.runner.engine import run_benchmark

    config = make_config(model=tiny_model.source, benchmark=name, data=str(demo_data[name]), protocol=protocol,
                         limit=4, out=str(tmp_path / "run"), device="cpu", dtype="float32", bootstrap=0,
                         max_new_tokens=4, max_pixels=28 * 28 * 16)
    run_benchmark(config, model=tiny_model, show_progress=False)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    jsonschema.validate(results, results_schema())
    assert results["benchmark"] == name and results["protocol"] == protocol


def test_reports_name_the_intervals_they_computed(tiny_qwen_dir, demo_data, tmp_path):
    """scoring/clustered.py: "intervals use the t quantile with G − 1 degrees of freedom, not the
    normal one"; scoring/tables.py: the headline CIs are percentile bootstrap intervals whose
    resampled unit (`bootstrap.unit`) is the question or, where questions share a cluster, the
    cluster. Console, report.md and report.html say so."""
    from helpers import ENV, cli

    out = tmp_path / "run"
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "finchart-bench", "--data",
               str(demo_data["finchart-bench"]), "--out", str(out), "--device", "cpu", "--dtype", "float32",
               "--bootstrap", "30", "--no-progress", "--max-pixels", str(28 * 28 * 16), env={**ENV, "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["scores"]["bootstrap"]["unit"] == "cluster"
    label = "95% CI (percentile bootstrap ×30, clusters resampled)"
    markdown, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (done.stdout, markdown, html):
        assert label in text
    for text in (markdown, html):
        assert "t(G − 1)" in text and "normal 95% interval" not in text
