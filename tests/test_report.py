"""report.html / report.md, confidences, the selective curve, and "all from cache" reruns.

The page is opened in headless Chromium (Debian's `chromium`): it must load with no JavaScript
error (the page records errors into its own DOM, read back with --dump-dom; Chromium's console
log on stderr is checked too), show every plot and the sample browser, and a screenshot is saved
under the test's temporary folder. The check itself is tried on a page that throws."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from finbench.runner.engine import run_benchmark
from finbench.types import RunConfig

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("FINBENCH_REQUIRE_CHROMIUM"):
            pytest.fail("chromium is required here (FINBENCH_REQUIRE_CHROMIUM) but not installed")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return found


def open_page(page: Path, workdir: Path, screenshot: Path | None = None) -> tuple[str, list[str]]:
    """(DOM after the scripts ran, JavaScript errors) of `page` in headless Chromium."""
    chromium = _chromium()
    workdir.mkdir(parents=True, exist_ok=True)
    profile = workdir / f"profile-{len(list(workdir.iterdir()))}"
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                           "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    html_tag = re.search(r"<html[^>]*>", dom)
    assert html_tag, dom[:500]
    errors = []
    if "data-js-errors" in html_tag.group(0):
        box = re.search(r'<pre id="js-errors"[^>]*>(.*?)</pre>', dom, re.S)
        errors.append(box.group(1) if box else html_tag.group(0))
    errors += [line for line in done.stderr.splitlines()
               if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    if screenshot is not None:
        shot = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}-shot", "--window-size=1280,2000",
                               "--virtual-time-budget=5000", f"--screenshot={screenshot}", page.as_uri()],
                              capture_output=True, text=True, timeout=180)
        assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    return dom, errors


@pytest.fixture(scope="module")
def demo_run(tiny_model, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "run"
    config = RunConfig(model=tiny_model.source, data=str(synthetic_parquet), batch_size=8, dtype="float32",
                       device="cpu", out=str(out), bootstrap=200)
    return run_benchmark(config, model=tiny_model, show_progress=False), config


def test_every_answer_has_a_confidence_and_the_selective_curve_reaches_zero(demo_run):
    result, _ = demo_run
    samples = pd.read_parquet(result.out_dir / "samples.parquet")
    assert samples["confidence"].between(0, 1, inclusive="right").all()  # every kind, no NaN
    single = samples[samples["kind"] == "single"]
    assert all(math.isclose(c, max(p), rel_tol=1e-6) for c, p in zip(single["confidence"], single["option_probs"]))
    scores = result.results["scores"]
    selective = {row["tau"]: row for row in scores["selective"]}
    assert selective[0.0]["coverage"] == 1.0 and selective[1.0]["coverage"] == 0.0
    for tau, row in selective.items():  # coverage = answered share, counted one question at a time
        answered = sum(1 for c in samples["confidence"] if tau <= 0 or c > tau)
        assert row["n_answered"] == answered and row["coverage"] == answered / len(samples)
        if answered == 0:
            assert row["accuracy"] is None and row.get("finscore") is None  # a gap, never a drawn 0
    calibration = scores["calibration"]
    assert calibration["n"] == len(samples) and set(calibration["n_by_kind"]) == {"single", "multi", "numerical"}
    for b in calibration["bins"]:  # the same confidence, binned by hand
        members = [(c, k) for c, k in zip(samples["confidence"], samples["correct"])
                   if (b["low"] < c <= b["high"]) or (b["low"] == 0 and c == 0)]
        assert b["n"] == len(members)
        if members:
            assert math.isclose(b["accuracy"], sum(k for _, k in members) / len(members))


def test_report_opens_in_chromium_with_every_plot_and_the_sample_browser(demo_run, tmp_path):
    result, _ = demo_run
    page = result.out_dir / "report.html"
    html = page.read_text()
    assert "http://" not in html and "https://" not in html  # self-contained: nothing fetched
    dom, errors = open_page(page, tmp_path / "chromium", screenshot=tmp_path / "report.png")
    assert errors == []
    assert 'data-ready="1"' in dom
    scores = result.results["scores"]
    expected = {"headline", "reliability", "selective", "throughput by stage",
                *(f"by {c}" for c in scores["breakdowns"])}
    plots = set(re.findall(r'<img class="plot" data-plot="([^"]+)"[^>]*src="data:image/png;base64,', dom))
    assert plots == expected
    assert dom.count('<tr class="sample"') == result.results["n_questions"]
    assert dom.count('src="data:image/jpeg;base64,') == result.results["n_questions"]  # thumbnails (≤ 200)
    for element in ('id="f-domain"', 'id="f-kind"', 'id="f-correct"', 'id="f-cmin"', 'id="config"',
                    'id="fingerprint"', 'id="stages"'):
        assert element in dom, element
    assert (tmp_path / "report.png").exists()

    # broken: a page that throws is caught by the same check
    broken = tmp_path / "broken.html"
    broken.write_text(html.replace("</body>", "<script>null.boom();</script></body>"))
    _, errors = open_page(broken, tmp_path / "chromium")
    assert errors and "boom" in " ".join(errors)


def test_report_markdown_and_rebuild_without_the_data(demo_run, tmp_path):
    result, _ = demo_run
    run = tmp_path / "copy"
    shutil.copytree(result.out_dir, run)
    results = json.loads((run / "results.json").read_text())
    results["config"]["data"] = str(tmp_path / "gone.parquet")
    (run / "results.json").write_text(json.dumps(results))
    from finbench.report.html import write_report

    page = write_report(run).read_text()
    assert "data:image/jpeg" not in page and page.count("data:image/png") >= 4  # no thumbnails, still a report
    markdown = (run / "report.md").read_text()
    for key in results["scores"]["headline"]:
        value = results["scores"][key]
        assert f"{100 * value:.2f}" in markdown  # ×100 only where labelled
    assert "×100" in markdown and "![" not in markdown


def test_a_rerun_served_from_the_cache_keeps_the_throughput(demo_run, tiny_model):
    result, config = demo_run
    again = run_benchmark(config, model=tiny_model, show_progress=False)
    assert again.results["n_computed"] == 0
    first, kept = result.results["throughput"], again.results["throughput"]
    assert kept["all_from_cache"] and kept["samples_per_s"] == first["samples_per_s"] > 0
    assert "served entirely from the cache" in (result.out_dir / "report.html").read_text()


def test_sweep_report_opens_in_chromium(demo_run, tmp_path):
    """A sweep page built from two run folders alone (the second a perturbed copy)."""
    from finbench.sweep import summarize, write_sweep

    result, _ = demo_run
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(result.out_dir, a)
    shutil.copytree(result.out_dir, b)
    samples = pd.read_parquet(b / "samples.parquet")
    samples["option_probs"] = [list(reversed(p)) for p in samples["option_probs"]]
    samples.loc[samples.index[:10], "correct"] = 1 - samples.loc[samples.index[:10], "correct"]
    samples.loc[samples.index[:10], "answer"] = samples.loc[samples.index[:10], "gold"]
    samples.to_parquet(b / "samples.parquet")
    summary = summarize([a, b], ["a", "b"], n_bootstrap=100)
    write_sweep(tmp_path, summary)
    dom, errors = open_page(tmp_path / "report.html", tmp_path / "chromium", screenshot=tmp_path / "sweep.png")
    assert errors == []
    plots = set(re.findall(r'<img class="plot" data-plot="([^"]+)"', dom))
    assert {"accuracy vs memory", "accuracy vs speed", "flip matrix", "KL per domain"} <= plots
    assert 'id="flips"' in dom and 'id="deltas"' in dom
    assert summary["distributions"]["runs"]["b"]["kl_mean"] > 0
    assert (tmp_path / "report.md").read_text().count("|") > 10
