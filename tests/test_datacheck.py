"""`finbench data check --benchmark B PATH`: a local copy is validated without a model — records,
images, counts per split / task / domain — on the synthetic data in each benchmark's real layout
(offline/finmtm_synthetic.py, famma_synthetic.py), then fed broken."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from finbench.app.datacheck import check_data, message_kind
from finbench.cli import app
from finbench.offline import famma_synthetic
from finbench.offline.finmtm_synthetic import write_folder


@pytest.fixture(scope="module")
def finmtm_folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("finmtm") / "FinMTM", n_objective=4, n_sessions_per_level=1, n_agent=2)


def test_the_synthetic_finmtm_folder_is_the_hub_layout_and_checks_clean(finmtm_folder):
    files = sorted(str(p.relative_to(finmtm_folder)) for p in finmtm_folder.rglob("*.jsonl"))
    assert files == ["Agent/agent.jsonl", "MTQA/L1.jsonl", "MTQA/L2.jsonl", "MTQA/L3.jsonl", "MTQA/L4.jsonl",
                     "OQ/MC.jsonl", "OQ/SC.jsonl"]
    first = json.loads((finmtm_folder / "OQ" / "SC.jsonl").read_text().splitlines()[0])
    parts = first["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"]
    assert (finmtm_folder / "OQ" / parts[0]["image_url"]["url"]).is_file()  # the image beside its JSONL
    assert json.loads(first["choices"][0]["message"]["content"][0]["text"])["answer"] in "ABCDEF"
    report = check_data("finmtm", finmtm_folder)
    assert report["ok"] and report["n_errors"] == 0 and report["n_bad_images"] == 0
    assert report["n_records"] == 4 + 4 + 4 + 2
    assert report["counts"]["task"] == {"objective": 8, "dialogue": 4, "agent": 2}
    assert report["counts"]["question_type"] == {"single": 4, "multi": 4, "L1": 1, "L2": 1, "L3": 1, "L4": 1, "agent": 2}
    assert report["n_images"] == 8 + 5 + 2  # an L4 session spans two pages


def test_broken_records_and_images_are_named_and_counted(finmtm_folder, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(finmtm_folder, broken)
    first_image = json.loads((broken / "OQ" / "SC.jsonl").read_text().splitlines()[0])["messages"][0]["content"][0]
    (broken / "OQ" / first_image["image_url"]["url"]).unlink()  # a missing image
    mc = json.loads((broken / "OQ" / "MC.jsonl").read_text().splitlines()[0])["messages"][0]["content"][0]
    (broken / "OQ" / mc["image_url"]["url"]).write_bytes(b"not an image at all")  # an undecodable one
    with open(broken / "Agent" / "agent.jsonl", "a") as handle:
        handle.write("{broken json\n")
    report = check_data("finmtm", broken)
    assert not report["ok"] and report["n_errors"] == 2 and report["n_bad_images"] == 1
    kinds = {kind: found["n"] for kind, found in report["errors"].items()}
    assert sum(kinds.values()) == 2 and any("not found" in kind for kind in kinds)
    assert any("malformed JSON" in kind for kind in kinds)
    done = CliRunner().invoke(app, ["data", "check", "--benchmark", "finmtm", str(broken)], env={"COLUMNS": "160"})
    assert done.exit_code == 1 and "images that do not decode" in done.output and "problems:" in done.output
    clean = CliRunner().invoke(app, ["data", "check", "--benchmark", "finmtm", str(finmtm_folder)])
    assert clean.exit_code == 0 and "ok: every record loads" in clean.output
    unusable = CliRunner().invoke(app, ["data", "check", "--benchmark", "famma", str(tmp_path / "nothing.parquet")])
    assert unusable.exit_code == 2 and len(unusable.output.strip().splitlines()) == 1
    unknown = CliRunner().invoke(app, ["data", "check", "--benchmark", "finmmx", str(finmtm_folder)])
    assert unknown.exit_code == 2 and "unknown benchmark" in unknown.output


def test_famma_counts_per_split_language_and_the_unanswered_live_questions(tmp_path):
    records = [r for r in famma_synthetic.records() if r["question_type"] != "true-false"]
    records += famma_synthetic.chart_records(3, start=len(records))
    path = famma_synthetic.write_parquet(tmp_path / "famma.parquet", records)
    report = check_data("famma", path)
    assert report["ok"] and report["n_records"] == len(records)
    releases = {}
    for r in records:
        releases[r["release"]] = releases.get(r["release"], 0) + 1
    assert report["counts"]["split"] == releases
    assert report["counts"]["gold_status"]["unanswered"] == 1  # the live question whose answer is 'nan'
    assert set(report["counts"]["language"]) == {"english", "chinese", "french"}


def test_message_kinds_group_the_same_problem_across_records():
    assert message_kind("bad record: image 'a.png' not found (x)") == message_kind("bad record: image 'b.png' not found (x)")
    assert message_kind("bad record: line 12 is malformed") == "bad record: line N is malformed"
