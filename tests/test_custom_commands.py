"""A custom file through every command — the Python API (with its data options), `score`, `report`,
`compare`, `sweep` — and its identity (the content digest of rows and image bytes: `data check`
prints the one results.json records; an image replaced under the same path is asked again, a gold
fixed is not); benchmarks written as Python files seen by every command: FINBENCH_BENCHMARKS from
the shell, and the entry points of an installed package for both registries, read only when needed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import toybench
from helpers import ENV, cli, run_cli

from finbench.offline import custom_synthetic as forms

TESTS = Path(__file__).resolve().parent


def _digest(output: str) -> str:
    return re.search(r"content digest \(rows and image bytes\): (sha256:[0-9a-f]+)", output).group(1)


def _run(model, data, out, *extra):
    done = cli("run", "--model", str(model), "--benchmark", "custom", "--data", str(data), "--out", str(out),
               "--device", "cpu", "--dtype", "float32", "--no-progress", "--bootstrap", "0", "--max-new-tokens", "4",
               *extra)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), pd.read_parquet(out / "samples.parquet")


def test_the_content_digest_is_data_checks_and_results_and_follows_rows_and_image_bytes(tiny_qwen_dir, tmp_path):
    data = forms.write_csv(tmp_path / "data")
    checked = cli("data", "check", "--benchmark", "custom", str(data))
    results, _ = _run(tiny_qwen_dir, data, tmp_path / "run")
    assert results["provenance"]["data"]["content"] == _digest(checked.stdout)
    assert set(results["provenance"]["data"]["files"]) == {str(data)}  # the CSV's own digest beside it

    (tmp_path / "data" / "images" / "chart4.png").write_bytes(forms.png(99))  # row n1's image, same path
    changed = _digest(cli("data", "check", "--benchmark", "custom", str(data)).stdout)
    again, samples = _run(tiny_qwen_dir, data, tmp_path / "run")
    assert changed != _digest(checked.stdout) and again["provenance"]["data"]["content"] == changed
    assert again["provenance"]["data"]["files"] == results["provenance"]["data"]["files"]  # the CSV itself is the same
    assert (again["n_cached"], again["n_computed"]) == (10, 1)  # only the row whose image changed is asked again

    frame = pd.read_csv(data, dtype=str, keep_default_na=False)
    frame.loc[frame["id"] == "s1", "answer"] = "C"  # a gold fixed: the same request, so nothing is asked again
    frame.to_csv(data, index=False)
    fixed, samples = _run(tiny_qwen_dir, data, tmp_path / "run")
    assert (fixed["n_cached"], fixed["n_computed"]) == (11, 0) and fixed["provenance"]["data"]["content"] != changed
    row = samples.set_index("id").loc["s1"]
    assert row["gold"] == "C" and row["correct"] == float(row["answer"] == "C")


def test_the_api_takes_the_data_options_and_score_report_compare_and_sweep_read_custom_runs(tiny_qwen_dir, tmp_path):
    import finbench

    data, spec, images = forms.write_renamed(tmp_path / "data")
    results, samples = finbench.evaluate(model=str(tiny_qwen_dir), benchmark="custom", data=str(data),
                                         data_spec=str(spec), image_root=str(images), out=str(tmp_path / "api"),
                                         device="cpu", dtype="float32", bootstrap=0, max_new_tokens=4)
    assert results["errors"]["count"] == 0 and len(samples) == 11
    assert results["config"]["data_spec"] == str(spec) and results["config"]["image_root"] == str(images)
    assert results["scores"]["accuracy"] == pytest.approx(samples["correct"].mean())
    _run(tiny_qwen_dir, data, tmp_path / "cli", "--spec", str(spec), "--image-root", str(images), "--batch-size", "1")

    scored = cli("score", str(tmp_path / "api"), "--bootstrap", "20")
    assert scored.returncode == 0, scored.stderr[-2000:]
    rescored = json.loads((tmp_path / "api" / "scores_official.json").read_text())
    assert rescored["accuracy"] == pytest.approx(results["scores"]["accuracy"]) and "sector" in rescored["breakdowns"]
    assert cli("report", str(tmp_path / "api")).returncode == 0 and (tmp_path / "api" / "report.html").is_file()
    compared = cli("compare", str(tmp_path / "api"), str(tmp_path / "cli"), "--bootstrap", "20",
                   "--out", str(tmp_path / "compare.json"))
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert json.loads((tmp_path / "compare.json").read_text())["n_shared"] == 11

    swept = cli("sweep", "--model", str(tiny_qwen_dir), "--benchmark", "custom", "--data", str(data), "--spec", str(spec),
                "--image-root", str(images), "--dtype", "float32,bfloat16", "--device", "cpu", "--bootstrap", "0",
                "--out", str(tmp_path / "sweep"))
    assert swept.returncode == 0, swept.stdout[-2000:] + swept.stderr[-2000:]
    swept = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert len(swept["variants"]) == 2, list(swept)


def _plugin_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (*extra.pop("paths", "").split(os.pathsep), str(TESTS), ENV.get("PYTHONPATH", ""))
                           if p)
    return {**ENV, "PYTHONPATH": path, **extra}


def test_a_benchmark_named_in_finbench_benchmarks_runs_from_the_shell(tiny_qwen_dir, tmp_path):
    env = _plugin_env(FINBENCH_BENCHMARKS="toybench")
    listed = run_cli("benchmarks", env=env)
    assert listed.returncode == 0 and "toybench: ToyBench" in listed.stdout
    data = toybench.write_data(tmp_path / "toy")
    out = tmp_path / "run"
    done = run_cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "toybench", "--data", str(data), "--out", str(out),
                   "--dtype", "float32", "--device", "cpu", "--no-progress", "--bootstrap", "0", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["benchmark"] == "toybench" and results["errors"]["count"] == 0 and results["n_questions"] == 9
    without = run_cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "toybench", "--out", str(tmp_path / "no"),
                      env=_plugin_env())
    assert without.returncode == 2 and "unknown benchmark 'toybench'" in without.stderr


def test_entry_points_of_an_installed_package_add_a_benchmark_and_a_study_read_only_when_needed(tmp_path):
    site = tmp_path / "site"
    info = site / "finbench_toyplugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: finbench-toyplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[finbench.benchmarks]\ntoybench = toybench:BENCHMARK\n\n"
                                           "[finbench.studies]\nnudge = toystudy\n")
    env = _plugin_env(paths=str(site))
    listed = run_cli("benchmarks", env=env)
    assert listed.returncode == 0 and "toybench: ToyBench" in listed.stdout, listed.stderr[-2000:]
    assert "--nudge" in run_cli("run", "--help", env={**env, "COLUMNS": "200"}).stdout  # the study's flag
    probe = ("import json, sys\nfrom finbench.benchmarks import get_benchmark\nimport finbench.studies\n"
             "before = sorted(m for m in ('toybench', 'toystudy') if m in sys.modules)\n"
             "get_benchmark('finmme')\nbuilt_in = 'toybench' in sys.modules\n"
             "found = get_benchmark('toybench').name\nprint(json.dumps([before, built_in, found]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [[], False, "toybench"]  # read on a miss, never on import
