"""Adding a study is its own file plus one registration call: the nudge study (tests/toystudy.py:
an option, variants, a results.json block, a report section and a comparison column) registered
through `finbench.studies.register_study` runs end to end through `finbench run`, `sweep`,
`score`, `report` and `compare` — each a fresh process that imports it through FINBENCH_STUDIES,
as a plugin would be — while no file under finbench/ knows its name. References: accuracies
restated from the parquet files in plain pandas."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import toystudy  # registers the nudge study on import, as FINBENCH_STUDIES does in a fresh process

from helpers import ENV, run_cli

from finbench.studies import STUDIES

STUDIES.pop(toystudy.NAME, None)  # in this process (shared with other test files) only the built-in studies

PACKAGE = Path(__file__).resolve().parent.parent / "finbench"
TESTS = Path(__file__).resolve().parent
TEXT = "Read every option before answering."


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(TESTS), ENV.get("PYTHONPATH", "")) if p)
    return {**ENV, "FINBENCH_STUDIES": "toystudy", "PYTHONPATH": path}


def _cli(*args: str) -> str:
    done = run_cli(*args, env=_env())
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout + done.stderr


def _right(frame: pd.DataFrame) -> pd.Series:
    return (frame["answer"].astype(str) == frame["gold"].astype(str)) & (frame["error"].astype(str) == "")


def test_no_file_under_finbench_knows_the_toy_study():
    assert [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".j2", ".json", ".toml"}
            and toystudy.NAME in p.read_text(encoding="utf-8", errors="replace").lower()] == []


def test_register_study_refuses_a_second_study_of_the_same_name_or_flag():
    from finbench.config.options import Option
    from finbench.studies import STUDIES, register_study
    from finbench.studies.circular import STUDY as CIRCULAR

    assert register_study(toystudy.STUDY) is toystudy.STUDY
    assert register_study(toystudy.STUDY) is toystudy.STUDY  # the same study again: nothing changes
    try:
        twin = toystudy.Nudge()
        with pytest.raises(ValueError, match="already registered"):
            register_study(twin)
        twin.name, twin.option = "other", CIRCULAR.option
        with pytest.raises(ValueError, match="--permutations is already"):
            register_study(twin)
        twin.option = Option("other", "", "")
        assert register_study(twin) is twin and STUDIES["other"] is twin
    finally:
        STUDIES.pop("other", None)
        STUDIES.pop(toystudy.NAME, None)  # the other tests see the built-in registry only


def test_a_registered_study_runs_scores_reports_sweeps_and_compares_end_to_end(tiny_qwen_dir, synthetic_parquet,
                                                                               tmp_path):
    common = ["--data", str(synthetic_parquet), "--limit", "4", "--device", "cpu", "--bootstrap", "0", "--no-progress"]
    assert "--nudge" in _cli("run", "--help") and "--nudge" in _cli("sweep", "--help")

    out = tmp_path / "run"
    ran = _cli("run", "--model", str(tiny_qwen_dir), "--dtype", "float32", "--out", str(out), "--nudge", TEXT, *common)
    results = json.loads((out / "results.json").read_text())
    samples, variants = pd.read_parquet(out / "samples.parquet"), pd.read_parquet(out / "variants.parquet")
    nudged = variants[variants["study"] == toystudy.NAME]
    choices = samples[samples["kind"].isin(["single", "multi"])]
    assert len(nudged) == len(choices) > 0 and set(nudged["variant"]) == {"nudged"}
    assert set(nudged["nudged_by"]) == {TEXT} and set(nudged["id"]) == set(choices["id"])
    assert (nudged["rotation"] == 0).all() and (nudged["probe"] == "").all()  # the built-in studies' columns stay empty
    block = results[toystudy.NAME]
    assert block["n"] == len(nudged) and block["text"] == TEXT
    assert block["accuracy"] == pytest.approx(_right(nudged).mean())
    assert block["base_accuracy"] == pytest.approx(_right(choices).mean())
    assert results["config"][toystudy.NAME] == TEXT and results["config"]["permutations"] == 0  # flat, as always
    assert results["variants"]["n"] == len(nudged)
    assert f"nudge ({len(nudged)} items, ×100)" in ran

    _cli("score", str(out), "--bootstrap", "0")
    assert json.loads((out / "scores_official.json").read_text())["accuracy"] == pytest.approx(
        results["scores"]["accuracy"])
    (out / "report.md").unlink()
    (out / "report.html").unlink()
    _cli("report", str(out))
    assert f"## {toystudy.TITLE}" in (out / "report.md").read_text()
    assert toystudy.TITLE in (out / "report.html").read_text()

    sweep = tmp_path / "sweep"
    _cli("sweep", "--model", str(tiny_qwen_dir), "--dtype", "float32,bfloat16", "--out", str(sweep), "--nudge", TEXT,
         *common)
    summary = json.loads((sweep / "sweep.json").read_text())
    for variant in summary["variants"]:
        found = json.loads((sweep / variant["name"] / "results.json").read_text())[toystudy.NAME]
        assert variant["studies"][toystudy.NAME] == {k: found[k] for k in ("n", "accuracy", "base_accuracy")}
    assert "nudged accuracy ×100" in (sweep / "report.md").read_text()

    compared = _cli("compare", str(out), str(sweep / "dtype-bfloat16"), "--bootstrap", "0", "--out",
                    str(tmp_path / "compare.json"))
    studies = json.loads((tmp_path / "compare.json").read_text())["studies"]
    assert studies[out.name][toystudy.NAME] == {k: block[k] for k in ("n", "accuracy", "base_accuracy")}
    assert "robustness studies" in compared and "nudged" in compared  # its column in the console's table


def test_the_api_keywords_fill_runconfig_studies_and_results_json_keeps_them_flat():
    from finbench.app.api import make_config
    from finbench.studies import flat_config
    from finbench.studies.circular import STUDY as CIRCULAR

    config = make_config("m", "finmme", permutations=3, image_ablation="blank, noise", probes=["open-ended"])
    assert config.studies == (("image_ablation", ("blank", "noise")), ("permutations", 3),
                              ("probes", ("open-ended",)), ("samples", 1))  # every study's option, sorted
    assert CIRCULAR.value(config) == 3 and CIRCULAR.value(make_config("m", "finmme")) == 0
    flat = flat_config(config)
    assert "studies" not in flat and (flat["permutations"], flat["image_ablation"], flat["samples"],
                                      flat["probes"]) == (3, ("blank", "noise"), 1, ("open-ended",))
    with pytest.raises(TypeError, match="unknown option"):
        make_config("m", "finmme", permutation=3)
