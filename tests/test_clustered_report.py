"""The clustered error bars (results.json `scores.clustered`) in a single run's report.md, report.html
and console summary: the table's cells are the stored values ×100, formatted here by hand, and the
console line's SE ratio is recomputed from the two stored SEs."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from finbench.config.specs import RunConfig
from finbench.report.console import print_run
from finbench.report.markdown import run_markdown
from finbench.report.run_sections import clustered_line, clustered_section
from finbench.runner.engine import run_benchmark


@pytest.fixture(scope="module")
def run(tiny_model, tiny_qwen_dir, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("clustered") / "run"
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmme", data=str(synthetic_parquet), out=str(out),
                       dtype="float32", device="cpu", bootstrap=0, limit=10)
    return out, run_benchmark(config, tiny_model, show_progress=False).results


def _hand_built() -> dict:
    return {"scores": {"clustered": {"by": "image", "n_clusters": 7, "metrics": {
        "accuracy": {"se": 0.14, "se_iid": 0.1, "design_effect": 1.96, "ci": {"low": 0.2, "high": 0.7488}},
        "score": {"se": None, "se_iid": 0.05, "design_effect": None, "ci": {"low": None, "high": None}}}}}}


def test_the_section_and_line_of_a_hand_built_summary():
    section = clustered_section(_hand_built())
    assert section["id"] == "clustered" and "clustered by image, 7 clusters" in section["note"]
    rows = section["tables"][0]["rows"]
    assert rows[0] == ["accuracy", "10.00", "14.00", "1.96", "[20.00, 74.88]"]
    assert rows[1] == ["score", "5.00", "–", "–", "–"]  # a metric with fewer than two clusters: no SE
    line = clustered_line(_hand_built())
    assert line.startswith("clustered by image (G 7): accuracy SE ×1.40 of iid") and "design effect 1.96" in line
    assert clustered_line({"scores": {}}) is None
    assert clustered_section({"scores": {"clustered": {"metrics": {}}}}) is None


def test_a_runs_reports_show_the_stored_clustered_values(run):
    out, results = run
    found = results["scores"]["clustered"]
    assert found["by"] == "image" and found["n_clusters"] > 1
    m = found["metrics"]["accuracy"]
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## Clustered error bars (×100)" in md and 'id="clustered"' in html
    cells = ["accuracy", f"{100 * m['se_iid']:.2f}", f"{100 * m['se']:.2f}", f"{m['design_effect']:.2f}",
             f"[{100 * m['ci']['low']:.2f}, {100 * m['ci']['high']:.2f}]"]
    assert "| " + " | ".join(cells) + " |" in md
    assert f"clustered by image, {found['n_clusters']} clusters" in md and f"{found['n_clusters']} clusters" in html
    assert run_markdown(json.loads((out / "results.json").read_text())) == md


def test_the_console_adds_one_line_and_keeps_the_others(run):
    out, results = run
    buffer = io.StringIO()
    print_run(results, out, Console(file=buffer, width=300))
    text = buffer.getvalue()
    m = results["scores"]["clustered"]["metrics"]["accuracy"]
    ratio = m["se"] / m["se_iid"]
    assert not math.isnan(ratio)
    lines = [line for line in text.splitlines() if line.startswith("clustered by ")]
    assert lines == [clustered_line(results)] and f"SE ×{ratio:.2f} of iid" in lines[0]
    assert f"(G {results['scores']['clustered']['n_clusters']})" in lines[0]
    for start in ("errors: ", "10 questions (", "wrote "):
        assert any(line.startswith(start) for line in text.splitlines()), start


def test_a_line_marked_x100_holds_no_ratio():
    """Image ablation's console line is ×100; its `retained` ratio is written as a share of the
    base (120.0 % of the base), never as a bare 1.200 among ×100 numbers."""
    from finbench.report.studies import study_lines

    found = {"metric": "accuracy", "n": 10, "base_score": 0.5, "score": 0.6, "retained": 1.2,
             "base_accuracy": 0.5, "accuracy": 0.6, "retained_accuracy": 1.2}
    [line] = study_lines({"image_ablation": {"blank": found}})
    assert "×100" in line and "1.200" not in line and "120.0 % of the base" in line
