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

from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark

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


def drawn_texts(figure) -> list:
    """The texts a figure draws: titles, axis labels, legends, annotations, and the tick labels
    whose tick lies inside the axis' view (matplotlib keeps labels for ticks it does not draw)."""
    found = []
    for axes in figure.axes:
        (x0, x1), (y0, y1) = sorted(axes.get_xlim()), sorted(axes.get_ylim())
        found += [t for t in axes.get_xticklabels() if x0 - 1e-9 <= t.get_position()[0] <= x1 + 1e-9]
        found += [t for t in axes.get_yticklabels() if y0 - 1e-9 <= t.get_position()[1] <= y1 + 1e-9]
        found += [axes.title, axes.xaxis.label, axes.yaxis.label, *axes.texts]
        if axes.get_legend() is not None:
            found += axes.get_legend().get_texts()
    found += [*figure.texts, *(t for legend in figure.legends for t in legend.get_texts())]
    return list({id(t): t for t in found if t.get_visible() and t.get_text().strip()}.values())


def layout_problems(figure) -> list[str]:
    """What a reader would see cut or garbled: the figure's tight bounding box (everything it
    draws) reaching outside the figure, or two texts overlapping by more than a pixel. The figure
    is closed afterwards."""
    import itertools

    import matplotlib.pyplot as plt

    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    tight, inches = figure.get_tightbbox(renderer), figure.bbox_inches
    problems = [] if (tight.x0 >= -0.01 and tight.y0 >= -0.01 and tight.x1 <= inches.x1 + 0.01
                      and tight.y1 <= inches.y1 + 0.01) else [f"drawn outside the figure: {tight} vs {inches}"]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(figure)]
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1 and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1:
            problems.append(f"overlap: {a!r} / {b!r}")
    plt.close(figure)
    return problems


def plot_borders(dom: str) -> dict[str, bool]:
    """name → whether the plot image's outer 3-pixel frame is plain background: a title, label or
    legend cut at the image's edge would leave its pixels there."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    out = {}
    for name, data in re.findall(r'<img class="plot" data-plot="([^"]+)"[^>]*src="data:image/png;base64,([^"]+)"', dom):
        pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("L"))
        frame = np.concatenate([pixels[:3].ravel(), pixels[-3:].ravel(), pixels[:, :3].ravel(), pixels[:, -3:].ravel()])
        out[name] = bool((frame >= 250).all())
    return out


@pytest.fixture(scope="module")
def demo_run(tiny_model, synthetic_parquet, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "run"
    config = RunConfig.flat(model=tiny_model.source, data=str(synthetic_parquet), batch_size=8, dtype="float32",
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
    borders = plot_borders(dom)
    assert set(borders) == expected and all(borders.values()), borders  # nothing cut at an image's edge

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

    page = write_report(run).read_text()  # the thumbnails come from the run folder: the data is never re-read
    assert page.count("data:image/jpeg") == results["n_questions"] and page.count("data:image/png") >= 4
    (run / "thumbnails.parquet").unlink()  # a run folder written before the runs kept their thumbnails
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
    from finbench.app.sweep import summarize, write_sweep

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
    borders = plot_borders(dom)
    assert set(borders) == plots and all(borders.values()), borders
    from finbench.report.html import sweep_figures

    # long variant names next to each other: legends and labels must not collide
    long_names = {**summary, "variants": [dict(v, name=f"think_budget-{1024 * k}-instruct-checkpoint")
                                          for k, v in enumerate(summary["variants"])]}
    for name, figure in sweep_figures(long_names).items():
        assert layout_problems(figure) == [], name
    assert 'id="flips"' in dom and 'id="deltas"' in dom
    assert summary["distributions"]["runs"]["b"]["kl_mean"] > 0
    assert (tmp_path / "report.md").read_text().count("|") > 10


WIDTH_PROBE = """<script>
window.addEventListener("load", function () {
  var page = document.documentElement.clientWidth, wide = [];
  document.querySelectorAll("body *").forEach(function (element) {
    var right = element.getBoundingClientRect().right;
    if (right > page + 0.5) wide.push((element.id || element.tagName.toLowerCase()) + " " + Math.round(right));
  });
  document.documentElement.setAttribute("data-wider-than-page", wide.join("; ") || "none");
});
</script>"""


def wider_than_the_page(page: Path, workdir: Path, width: int = 1280) -> list[str]:
    """The elements of `page` whose right edge passes the viewport of a `width`-px headless Chromium
    window ("id-or-tag right-edge"), measured by a script added to a copy of the page."""
    chromium = _chromium()
    probe = workdir / f"probe-{page.name}"
    probe.write_text(page.read_text().replace("</body>", WIDTH_PROBE + "</body>"))
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={workdir / 'profile-width'}",
                           f"--window-size={width},2000", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180)
    found = re.search(r'data-wider-than-page="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    return [] if found.group(1) == "none" else found.group(1).split("; ")


def test_a_quantization_sweep_page_fits_1280_px(demo_run, tmp_path):
    """The widest page finbench writes: a sweep's quantization study (15 columns) with real-length
    labels — the format a variant ran as, what it quantized — must fit a 1280 px window."""
    from finbench.app.sweep import summarize, write_sweep

    result, _ = demo_run
    names = ["quant-none", "quant-int8wo", "quant-int4wo", "quant-8bit"]
    for name in names:
        shutil.copytree(result.out_dir, tmp_path / name)
    summary = summarize([tmp_path / n for n in names], names, n_bootstrap=50)
    for variant, quant in zip(summary["variants"], ["none", "int8wo", "int4wo", "8bit"]):
        variant["quant_label"] = quant
    for row in summary["study"]:
        row["quant_label"] = row["name"].split("-", 1)[1] + " (vision tower in bf16)"
        row["quantized"] = ("language model 196/196 linears: torchao.IntxUnpackedToInt8Tensor ×196; lm_head and "
                            "vision tower not quantized")
        row["domains_losing_most"] = [{"domain": "Funds & Asset Management", "delta": -0.25},
                                      {"domain": "Corporate Finance", "delta": -0.125}]
    summary["axes"] = {"quant": ["none", "int8wo", "int4wo", "8bit"]}
    write_sweep(tmp_path, summary)
    assert 'id="study"' in (tmp_path / "report.html").read_text()
    assert wider_than_the_page(tmp_path / "report.html", tmp_path) == []


def test_every_plot_of_a_run_fits_its_figure_and_no_texts_overlap(demo_run):
    from finbench.report.html import run_figures

    result, _ = demo_run
    figures = run_figures(result.results)
    assert {"headline", "reliability", "selective", "throughput by stage"} <= set(figures)
    for name, figure in figures.items():
        assert layout_problems(figure) == [], name
    # broken: the old layout (a rotated, crowded axis and an axes title wider than its figure) is caught
    import matplotlib.pyplot as plt

    old, axis = plt.subplots(figsize=(3.8, 3.6))
    axis.bar(range(4), [10, 30, 70, 31])
    axis.set_xticks(range(4))
    axis.set_xticklabels(["FinScore", "domain-normalised accuracy (F)", "multi-answer error rate (P_H)", "accuracy"],
                         rotation=30, ha="right", fontsize=8)
    axis.set(title="accuracy by cognitive_dimension (whiskers: 95% Wilson interval)", ylim=(0, 100))
    old.tight_layout()
    assert layout_problems(old)


def test_the_headline_chart_draws_scores_and_puts_the_penalty_beside_them(demo_run):
    from finbench.benchmarks import get_benchmark
    from finbench.report.html import headline_figure

    scores = demo_run[0].results["scores"]
    assert "p_h" in scores["headline"]
    figure = headline_figure(scores)
    panels = figure.axes
    labels = [[t.get_text().replace("\n", " ") for t in axes.get_xticklabels()] for axes in panels]
    declared = get_benchmark("finmme").scorer  # labels and the penalty come from the rule's declarations
    assert labels[0] == [declared.metric(k).label for k in scores["headline"] if k != "p_h"]
    assert labels[1] == [declared.metric("p_h").label] and "penalty" in panels[1].get_ylabel()
    bars = [[patch.get_height() for patch in axes.patches] for axes in panels]
    assert bars[1] == [pytest.approx(100 * scores["p_h"])]
    assert panels[0].patches[0].get_facecolor() != panels[1].patches[0].get_facecolor()
    # a benchmark without a penalty: one panel of scores
    famma_like = {"headline": ["accuracy"], "accuracy": 0.4, "ci": {}}
    assert len(headline_figure(famma_like).axes) == 1
    import matplotlib.pyplot as plt

    plt.close("all")


def test_finmtm_pages_show_the_dialogue_and_agent_parts_and_f2(tiny_model, tiny_qwen_dir, tmp_path):
    from test_finmtm import write_fixtures

    data = write_fixtures(tmp_path / "finmtm")
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(data), out=str(tmp_path / "run"),
                       dtype="float32", device="cpu", max_new_tokens=4, bootstrap=50)
    result = run_benchmark(config, tiny_model, show_progress=False)
    agent = result.results["scores"]["agent"]
    page = (tmp_path / "run" / "report.html").read_text()
    markdown = (tmp_path / "run" / "report.md").read_text()
    for text in (page, markdown):
        assert "FinMTM agent items" in text and "tool F2 ×100" in text and "Qt = 25·F2" in text
        assert f"{100 * agent['f2']:.2f}" in text
        assert "2 dialogue sessions generated and stored, not scored" in text
    assert 'class="part" data-part="agent"' in page and 'class="unscored" data-part="dialogue"' in page
    dom, errors = open_page(tmp_path / "run" / "report.html", tmp_path / "chromium", screenshot=tmp_path / "finmtm.png")
    assert errors == [] and 'data-plot="FinMTM agent"' in dom
    assert all(plot_borders(dom).values())


def test_a_thinking_sweep_has_no_quantization_study_section():
    """The study rows of a sweep whose variants all run unquantized say "not quantized" in every
    row: shown only when quantization is an axis (or the variants run as different formats)."""
    from finbench.report.format import quantization_study
    from finbench.report.markdown import _study_markdown

    row = {"name": "think_budget-256", "quant_label": "none", "quantized": "not quantized", "delta": 0.1,
           "delta_ci": None, "right_to_wrong": 1, "wrong_to_right": 2, "mcnemar_p": 0.5, "p_holm": 0.5,
           "kl_mean": 0.1, "agreement": 0.9, "gold_shift_mean": 0.0, "ece": 0.1, "ece_delta": 0.0,
           "domains_losing_most": [], "memory_ratio": 1.0, "speed_ratio": 1.0, "primary": "finscore"}
    thinking = {"reference": "think_budget-0", "axes": {"think_budget": [0, 256]}, "study": [row],
                "variants": [{"name": "think_budget-0", "quant_label": "none"},
                             {"name": "think_budget-256", "quant_label": "none"}]}
    assert quantization_study(thinking) == []
    assert not any("Quantization study" in part for part in _study_markdown(thinking))
    quant = {**thinking, "axes": {"quant": ["none", "8bit"]},
             "variants": [{"name": "quant-none", "quant_label": "none"}, {"name": "quant-8bit", "quant_label": "8bit"}]}
    assert quantization_study(quant) == [row]
    assert any(part.startswith("## Quantization study (against think_budget-0") for part in _study_markdown(quant))
