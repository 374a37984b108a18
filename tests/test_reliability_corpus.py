"""FAMMA and FinMTM bad input, each kind with its documented outcome (README "Reliability"), beside
the FinMME corpus of tests/test_reliability.py.

One FAMMA folder and one FinMTM folder hold every kind at once and are run once each through the
runner on a tiny model; every kind is then asserted:
- ERROR: a per-sample error naming the cause, stored, counted, and **scored as wrong** (in the
  score's denominator, correctness 0);
- ANSWERED: scored as usual (no error, in the denominator);
- UNSCORED: run and stored, but left out of the score as the official code leaves it out (no gold
  on FAMMA's live set; an empty gold on FinMTM, kept for score_old only);
- START-UP kinds (data a run cannot use at all): one line, exit code 2, nothing written.
"""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

import pytest
from PIL import Image

from finbench.benchmarks import get_benchmark
from finbench.config.specs import RunConfig
from finbench.runner.engine import run_benchmark

ERROR, ANSWERED, UNSCORED = "error", "answered", "unscored"
CONTEXT = 32768  # the tiny model's max_position_embeddings


def jpeg(color=(200, 30, 30), size=(48, 36)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def deep_line(depth: int = 200_000) -> bytes:
    return b'{"question_id": "deep", "x": ' + b"[" * depth + b"]" * depth + b"}"


# ---- FAMMA ------------------------------------------------------------------------------------------
def famma_record(qid: str, main: int, **overrides) -> dict:
    record = {"question_id": qid, "context": "A chart of sales. <image_1>", "question": "Which bar is highest?",
              "options": ["10", "20", "30", "40"], "image_1": "images/ok.jpg", "image_2": "None",
              "answers": "C", "question_type": "multiple-choice", "subfield": "equity", "language": "english",
              "topic_difficulty": "easy", "main_question_id": main, "sub_question_id": 1, "is_arithmetic": 0,
              "release": "release_basic", "explanation": ""}
    record.update(overrides)
    return record


# id → (record overrides, outcome, error substring / what the answered row must show)
FAMMA_KINDS: dict[str, tuple[dict, str, str]] = {
    "ok": ({}, ANSWERED, ""),
    "opt-quoted-string": ({"options": "'yes'"}, ERROR, "not a list of options"),
    "opt-number": ({"options": 5}, ERROR, "not a list of options"),
    "opt-empty": ({"options": []}, ERROR, "without options"),
    "opt-python-list-string": ({"options": "['10', '20', '30', '40']"}, ANSWERED, ""),
    "opt-letter-prefixed": ({"options": ["A. 10", "B. 20", "C. 30", "D. 40"]}, ANSWERED, ""),
    "opt-malformed-literal": ({"options": "['10', '20'"}, ERROR, "bad record"),
    "gold-a-and-c": ({"answers": "A and C"}, ANSWERED, "gold=AC"),
    "gold-letters-concatenated": ({"answers": "BD"}, ANSWERED, "gold=BD"),
    "gold-option-text": ({"answers": "30"}, ANSWERED, "gold=C"),
    "gold-beyond-options": ({"answers": "E"}, ERROR, "beyond the 4 given"),
    "gold-prose": ({"answers": "The answer is B"}, ERROR, "no option letter"),
    "gold-none-live": ({"answers": None}, UNSCORED, ""),
    "question-empty": ({"question": "   "}, ERROR, "question is empty"),
    "question-type-unknown": ({"question_type": "true-false"}, ERROR, "unknown question_type"),
    "question-huge": ({"question": "rising " * 30_000}, ERROR, f"exceeds the model's context of {CONTEXT}"),
    "open-numeric": ({"question_type": "open question", "options": None, "answers": "30"}, ANSWERED, ""),
    "image-missing-file": ({"image_1": "images/nowhere.jpg"}, ERROR, "not found"),
    "image-climbs-out": ({"image_1": "../../../../etc/passwd"}, ERROR, "'../../../../etc/passwd' climbs out"),
    "image-absolute": ({"image_1": "ABSOLUTE"}, ANSWERED, ""),  # replaced by the absolute path of ok.jpg
    "image-inline-base64": ({"image_1": base64.b64encode(jpeg()).decode()}, ANSWERED, ""),
    "image-garbage": ({"image_1": "@@ neither a path nor base64 @@"}, ERROR, "neither a readable path nor base64"),
    "image-undecodable": ({"image_1": "images/truncated.jpg"}, ERROR, "cannot be decoded"),
    "label-float-ids": ({"main_question_id": 77.0, "sub_question_id": 1.0}, ANSWERED, ""),
    "dup-id": ({"question_id": "ok"}, ERROR, "duplicate id 'ok'"),
    # one main question: the first sub-question's images are broken → it is its error, the second is
    # asked as its own group (issue 29 item 8)
    "group-first-broken": ({"main_question_id": 500, "image_1": "images/gone.jpg"}, ERROR, "not found"),
    "group-member-of-broken": ({"main_question_id": 500, "sub_question_id": 2, "context": "", "image_1": None},
                               ANSWERED, ""),
    # a later sub-question whose own context differs: the first one's is used, and a note says so
    "group-lead": ({"main_question_id": 600}, ANSWERED, ""),
    "group-member-differs": ({"main_question_id": 600, "sub_question_id": 2, "context": "Another context."},
                             ANSWERED, ""),
}
FAMMA_LINES = {  # raw lines of famma.jsonl: (bytes, outcome, error substring)
    "line-malformed-json": (b'{"question_id": "m", "question": ', ERROR, "malformed JSON"),
    "line-not-utf8": (b'{"question_id": "u", "question": "caf\xe9 \xff"}', ERROR, "field 'question' is not UTF-8 at byte"),
    "line-not-an-object": (b'["a", "list"]', ERROR, "expected a JSON object"),
    "line-nested-200000-deep": (deep_line(), ERROR, "nested too deeply"),
    "line-lone-surrogate": (b'{"question_id": "s", "question": "bad \\udcff", "question_type": "open question"}',
                            ERROR, "field 'question' is not valid UTF-8"),
}
# other files of the folder
FAMMA_FILES = {
    "array-bad-byte": (ERROR, "field 'question' is not UTF-8 at byte"),  # famma_array.json: one record with a non-UTF-8 byte
    "array-neighbour": (ANSWERED, ""),  # … its neighbour in the same array is read
    "array-bad-byte-in-name": (ERROR, "field name"),  # … a record whose field *name* holds one (issue 29 item 9)
    "binary-text-columns": (ANSWERED, "text=Which bar is highest?"),  # binary.parquet: text decoded, never b'…'
    "binary-not-utf8": (ERROR, "not valid UTF-8"),
}


@pytest.fixture(scope="module")
def famma_corpus(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("famma-corpus")
    folder = root / "data"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "ok.jpg").write_bytes(jpeg())
    (folder / "images" / "truncated.jpg").write_bytes(jpeg()[:80])
    (root / "outside.jpg").write_bytes(jpeg())
    lines, main = [], 1
    for qid, (overrides, _, _) in FAMMA_KINDS.items():
        if overrides.get("image_1") == "ABSOLUTE":
            overrides = {**overrides, "image_1": str(folder / "images" / "ok.jpg")}
        record = famma_record(qid, main, **overrides)
        main += 1
        lines.append(json.dumps(record).encode())
    line_numbers = {}
    for name, (raw, _, _) in FAMMA_LINES.items():
        lines.append(raw)
        line_numbers[name] = len(lines)
    (folder / "famma.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    # a JSON array whose first record holds one non-UTF-8 byte inside its question
    array = json.dumps([famma_record("array-bad-byte", 900, question="QUESTION"),
                        famma_record("array-neighbour", 901),
                        {**famma_record("array-bad-byte-in-name", 902), "NAME": "x"}]).encode()
    (folder / "famma_array.json").write_bytes(array.replace(b"QUESTION", b"caf\xe9?", 1).replace(b'"NAME"', b'"n\xe9me"'))
    # binary (not string) text columns, as a parquet writer may store them
    rows = [famma_record("binary-text-columns", 910), famma_record("binary-not-utf8", 911, question="caf\xe9")]
    table = pa.table({"question_id": pa.array([r["question_id"].encode() for r in rows], pa.binary()),
                      "question": pa.array([rows[0]["question"].encode(), b"caf\xe9"], pa.binary()),
                      "context": pa.array([r["context"].encode() for r in rows], pa.binary()),
                      "options": [r["options"] for r in rows], "answers": [r["answers"] for r in rows],
                      "question_type": pa.array([r["question_type"].encode() for r in rows], pa.binary()),
                      "image_1": [{"bytes": jpeg(), "path": "x.jpg"}] * 2,
                      "main_question_id": [910, 911], "sub_question_id": [1, 1], "language": ["english"] * 2,
                      "subfield": ["equity"] * 2, "topic_difficulty": ["easy"] * 2, "release": ["release_basic"] * 2})
    pq.write_table(table, folder / "binary.parquet")
    # `datasets` save_to_disk bookkeeping: never records
    (folder / "dataset_info.json").write_text(json.dumps({"citation": "", "features": {"question": {"dtype": "string"}}}))
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                   "_fingerprint": "abc", "_split": "release_basic"}))
    return folder, line_numbers


@pytest.fixture(scope="module")
def famma_run(famma_corpus, tiny_model, tiny_qwen_dir, tmp_path_factory):
    folder, _ = famma_corpus
    out = tmp_path_factory.mktemp("famma-run") / "run"
    return run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), benchmark="famma", data=str(folder), batch_size=6,
                                   dtype="float32", device="cpu", out=str(out), bootstrap=0, max_new_tokens=3),
                         tiny_model, show_progress=False)


def famma_outcomes(folder: Path, line_numbers: dict[str, int]) -> dict[str, tuple[str, str, str]]:
    """sample id → (kind, outcome, needle) over every FAMMA kind."""
    out = {qid: (qid, outcome, needle) for qid, (_, outcome, needle) in FAMMA_KINDS.items()}
    out.update({f"{folder / 'famma.jsonl'}:{line_numbers[name]}": (name, outcome, needle)
                for name, (_, outcome, needle) in FAMMA_LINES.items()})
    ids = {"array-bad-byte": f"{folder / 'famma_array.json'}[0]",  # unreadable: named by where it is
           "array-bad-byte-in-name": f"{folder / 'famma_array.json'}[2]"}
    out.update({ids.get(qid, qid): (qid, outcome, needle) for qid, (outcome, needle) in FAMMA_FILES.items()})
    return out


def test_the_famma_and_finmtm_corpora_have_at_least_30_kinds_each():
    assert len(FAMMA_KINDS) + len(FAMMA_LINES) + len(FAMMA_FILES) + len(FAMMA_START_UP) >= 30
    assert len(FINMTM_KINDS) + len(FINMTM_LINES) + len(FINMTM_START_UP) >= 30


def test_every_famma_kind_has_its_documented_outcome(famma_corpus, famma_run):
    folder, line_numbers = famma_corpus
    samples = famma_run.samples
    by_id = samples.set_index("id")
    expected = famma_outcomes(folder, line_numbers)
    dup = [i for i in by_id.index if i.startswith("ok#dup")]
    assert len(dup) == 1
    wrong = []  # every kind whose outcome differs, listed at once
    for qid, (kind, outcome, needle) in expected.items():
        if (dup[0] if kind == "dup-id" else qid) not in by_id.index:
            wrong.append((kind, "no such sample"))
            continue
        row = by_id.loc[dup[0] if kind == "dup-id" else qid]
        if outcome == ERROR and not (needle in row["error"] and row["correct"] == 0.0):  # scored as wrong
            wrong.append((kind, row["error"], row["correct"]))
        elif outcome == ANSWERED and not (row["error"] == "" and row["correct"] in (0.0, 1.0)  # in the score
                                          and (not needle.startswith("gold=") or row["gold"] == needle[5:])
                                          and (not needle.startswith("text=") or row["question"] == needle[5:])):
            wrong.append((kind, row["error"], row["gold"], row["question"][:40]))
        elif outcome == UNSCORED and not (row["error"] == "" and math.isnan(row["correct"])):  # run, not scored
            wrong.append((kind, row["error"], row["correct"]))
    assert not wrong, wrong
    # every row but the metadata files' (none) is a sample; the score's denominator holds every
    # answered question and every error, and nothing else
    assert len(samples) == len(expected)
    scores = famma_run.results["scores"]
    n_unscored = sum(outcome == UNSCORED for _, outcome, _ in expected.values())
    assert scores["n"] == len(samples) - n_unscored and scores["n_unscored"] == n_unscored
    errors = int((samples["error"] != "").sum())
    assert scores["n_errors"] == errors == famma_run.results["errors"]["count"]
    assert scores["accuracy"] == pytest.approx(samples["correct"].sum() / scores["n"])
    # a group member takes its main question's context (the first sub-question's), with a note
    assert by_id.loc["group-member-differs", "question"] == "Which bar is highest?"
    notes = " | ".join(famma_run.results["notes"])
    assert "group-member-differs" in notes and "first one's are used" in notes
    assert "dataset_info.json" in notes and "state.json" in notes  # skipped, and said so
    assert not any("dataset_info" in i or "state.json" in i for i in samples["id"])


def test_a_famma_options_string_is_never_split_into_letters(famma_run):
    """Item 1 in numbers: the quoted-string rows are errors, not 1-letter options that score."""
    row = famma_run.samples.set_index("id").loc["opt-quoted-string"]
    assert list(row["options"]) == [] and row["error"]


# ---- FinMTM -------------------------------------------------------------------------------------------
def objective(question: str, options: list[str], gold_text: str | None, image: str = "chart.png", **extra) -> dict:
    text = question + "\n" + "\n".join(f"{'ABCDEFG'[i]}. {o}" for i, o in enumerate(options)) + \
        '\nAnswer in JSON: {"answer": ...}'
    record = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                                        {"type": "text", "text": text}]}]}
    if gold_text is not None:
        record["choices"] = [{"message": {"content": [{"type": "text", "text": gold_text}]}}]
    return {**record, **extra}


def gold(value) -> str:
    return json.dumps({"answer": value})


def session(sid: str, turns: list, **extra) -> dict:
    return {"session_id": sid, "task_type": "L2", "image_paths": ["p1.png"],
            "turns": [{"turn_id": n + 1, "question": q, "gold_answer": "x"} for n, q in enumerate(turns)], **extra}


def agent(sid: str, **extra) -> dict:
    return {"sample_id": sid, "question": "Is ACME's PE above its 5-year mean?", "image_path": "k.png",
            "ActionTrace": [{"tool": "FinQuery", "query": "ACME PE ratio 5 years"}],
            "ToolResults": [{"tool": "FinQuery", "result": "PE 18.2, mean 15.0"}], "answer": "Yes", **extra}


FOUR = ["Q1", "Q2", "Q3", "Q4"]
# (file, id) → (record, outcome, error substring)
FINMTM_KINDS: dict[str, tuple[str, dict, str, str]] = {
    "obj-ok": ("OQ/SC.jsonl", objective("Which bar?", FOUR, gold("B"), id="obj-ok"), ANSWERED, ""),
    "obj-gold-list": ("OQ/SC.jsonl", objective("Which line?", FOUR, gold(["A"]), id="obj-gold-list"), ANSWERED, ""),
    "obj-gold-lower-case": ("OQ/MC.jsonl", objective("Which grew?", FOUR, gold(["b", "C"]), id="obj-gold-lower-case"),
                            ANSWERED, ""),
    "obj-multi": ("OQ/MC.jsonl", objective("Which are up?", FOUR, gold(["A", "C"]), id="obj-multi"), ANSWERED, ""),
    "obj-image-inline": ("OQ/SC.jsonl", objective("Inline?", FOUR, gold("A"), id="obj-image-inline",
                                                  image="data:image/png;base64," + base64.b64encode(jpeg()).decode()),
                         ANSWERED, ""),
    "obj-image-in-hub-image-folder": ("OQ/SC.jsonl", objective("Hub layout?", FOUR, gold("A"), image="hub.png",
                                                               id="obj-image-in-hub-image-folder"), ANSWERED, ""),
    "obj-gold-empty": ("OQ/SC.jsonl", objective("Empty gold?", FOUR, gold([]), id="obj-gold-empty"), UNSCORED, ""),
    "obj-gold-not-json": ("OQ/SC.jsonl", objective("Gold B?", FOUR, "B", id="obj-gold-not-json"), ERROR, "is not JSON"),
    "obj-no-choices": ("OQ/SC.jsonl", objective("No choices?", FOUR, None, id="obj-no-choices"), ERROR, "no gold"),
    "obj-gold-no-answer-field": ("OQ/SC.jsonl", objective("Other key?", FOUR, '{"label": "A"}',
                                                          id="obj-gold-no-answer-field"), ERROR, 'no "answer" field'),
    "obj-gold-number": ("OQ/SC.jsonl", objective("Number gold?", FOUR, gold(3), id="obj-gold-number"), ERROR,
                        "not an option label"),
    "obj-gold-beyond-options": ("OQ/SC.jsonl", objective("E of 4?", FOUR, gold("E"), id="obj-gold-beyond-options"),
                                ERROR, "'E' is not one of the 4 options"),
    "obj-content-not-a-list": ("OQ/SC.jsonl", {"id": "obj-content-not-a-list", "messages": [{"content": "text"}],
                                               "choices": [{"message": {"content": [{"text": gold("A")}]}}]},
                               ERROR, "must be a list"),
    "obj-text-part-object": ("OQ/SC.jsonl", {"id": "obj-text-part-object", "messages": [{"content": [
        {"type": "text", "text": {"q": "A. x"}}]}], "choices": [{"message": {"content": [{"text": gold("A")}]}}]},
                             ERROR, "is not text"),
    "obj-no-option-lines": ("OQ/SC.jsonl", objective("No options", [], gold("A"), id="obj-no-option-lines"), ERROR,
                            "no option lines"),
    "obj-image-missing": ("OQ/SC.jsonl", objective("Missing?", FOUR, gold("A"), image="nowhere.png",
                                                   id="obj-image-missing"), ERROR, "not found"),
    "obj-image-url": ("OQ/SC.jsonl", objective("URL?", FOUR, gold("A"), image="https://example.com/a.png",
                                               id="obj-image-url"), ERROR, "is a URL"),
    "obj-image-climbs-out": ("OQ/SC.jsonl", objective("Climb?", FOUR, gold("A"), image="../../../etc/passwd",
                                                      id="obj-image-climbs-out"), ERROR, "climbs out"),
    "obj-not-any-kind": ("OQ/SC.jsonl", {"id": "obj-not-any-kind", "foo": 1}, ERROR, "neither an objective item"),
    "ses-ok": ("MTQA/L2.jsonl", session("ses-ok", ["Revenue?", "Growth?"]), ANSWERED, ""),
    "ses-one-turn": ("MTQA/L2.jsonl", session("ses-one-turn", ["Name it."]), ANSWERED, ""),
    "ses-blank-turn": ("MTQA/L2.jsonl", session("ses-blank-turn", ["Revenue?", "   "]), ERROR, "turn 2's question is empty"),
    "ses-turn-object": ("MTQA/L2.jsonl", session("ses-turn-object", ["Revenue?", {"text": "Growth?"}]), ERROR,
                        "turn 2's question is a dict, not text"),
    "ses-huge-later-turn": ("MTQA/L2.jsonl", session("ses-huge-later-turn", ["Revenue?", "rising " * 30_000]), ERROR,
                            "turn 2: prompt of"),
    "ses-level-from-file-name": ("MTQA/L2.jsonl", {**session("ses-level-from-file-name", ["q"]), "task_type": "none"},
                                 ANSWERED, ""),
    "ses-no-turns": ("MTQA/L2.jsonl", session("ses-no-turns", []), ERROR, "at least one turn"),
    "ses-turns-not-a-list": ("MTQA/L2.jsonl", {**session("ses-turns-not-a-list", []), "turns": "q1"}, ERROR,
                             "turns must be a list"),
    "ses-image-missing": ("MTQA/L2.jsonl", {**session("ses-image-missing", ["q"]), "image_paths": ["gone.png"]},
                          ERROR, "not found"),
    "agent-ok": ("Agent/agent.jsonl", agent("agent-ok"), ANSWERED, ""),
    "agent-1mb-tool-result": ("Agent/agent.jsonl", agent("agent-1mb-tool-result", ToolResults=[
        {"tool": "FinQuery", "result": "PE 18.2 " * 131_072}]), ERROR, "turn 2: prompt of"),
    "agent-question-object": ("Agent/agent.jsonl", agent("agent-question-object", question={"text": "Is it?"}),
                              ERROR, "the agent question is a dict, not text"),
    "agent-blank-question": ("Agent/agent.jsonl", agent("agent-blank-question", question="  "), ERROR, "is empty"),
    "agent-trace-not-a-list": ("Agent/agent.jsonl", agent("agent-trace-not-a-list", ActionTrace="FinQuery"), ERROR,
                               "ActionTrace must be a list"),
}
FINMTM_LINES = {  # raw lines appended to a file: (file, bytes, task the error is scored in, error substring)
    "obj-malformed-line": ("OQ/SC.jsonl", b'{"messages": [', "objective", "malformed JSON"),
    "obj-line-not-utf8": ("OQ/MC.jsonl", b'{"id": "x\xff"}', "objective", "field 'id' is not UTF-8 at byte"),
    "ses-malformed-line": ("MTQA/L2.jsonl", b"{nope", "dialogue", "malformed JSON"),
    "agent-malformed-line": ("Agent/agent.jsonl", b'{"sample_id": ', "agent", "malformed JSON"),
    "agent-line-nested-deep": ("Agent/agent.jsonl", deep_line(), "agent", "nested too deeply"),
}


@pytest.fixture(scope="module")
def finmtm_corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("finmtm-corpus") / "FinMTM"
    files: dict[str, list[bytes]] = {}
    for _, (file, record, _, _) in FINMTM_KINDS.items():
        files.setdefault(file, []).append(json.dumps(record).encode())
    lines = {}
    for name, (file, raw, _, _) in FINMTM_LINES.items():
        files[file].append(raw)
        lines[name] = f"{folder / file}:{len(files[file])}"
    for file, content in files.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_bytes(b"\n".join(content) + b"\n")
    for name in ("OQ/chart.png", "MTQA/p1.png", "Agent/k.png", "image/hub.png"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(jpeg())
    # the hub layout's image index: not records
    (folder / "image" / "metadata.jsonl").write_text(json.dumps({"file_name": "hub.png", "caption": "a chart"}) + "\n")
    return folder, lines


@pytest.fixture(scope="module")
def finmtm_run(finmtm_corpus, tiny_model, tiny_qwen_dir, tmp_path_factory):
    folder, _ = finmtm_corpus
    seen_lengths = []
    original = tiny_model.generate

    def recording(inputs, *args, **kwargs):
        seen_lengths.append(int(inputs["input_ids"].shape[1]))
        return original(inputs, *args, **kwargs)

    tiny_model.generate = recording
    try:
        out = tmp_path_factory.mktemp("finmtm-run") / "run"
        result = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(folder), batch_size=8,
                                         dtype="float32", device="cpu", out=str(out), bootstrap=0, max_new_tokens=3),
                               tiny_model, show_progress=False)
    finally:
        del tiny_model.generate
    return result, seen_lengths


def test_every_finmtm_kind_has_its_documented_outcome(finmtm_corpus, finmtm_run):
    folder, lines = finmtm_corpus
    result, _ = finmtm_run
    samples = result.samples.set_index("id")
    scores = result.results["scores"]
    wrong = []  # every kind whose outcome differs, listed at once
    for qid, (_, _, outcome, needle) in FINMTM_KINDS.items():
        if qid not in samples.index:
            wrong.append((qid, "no such sample"))
            continue
        row = samples.loc[qid]
        if (needle not in row["error"]) if outcome == ERROR else row["error"] != "":
            wrong.append((qid, row["error"]))
        elif row["task"] == "objective" and outcome != UNSCORED and (
                math.isnan(row["correct"]) or outcome == ERROR and row["correct"] != 0.0):  # in the score, wrong
            wrong.append((qid, "objective row not scored as expected", row["correct"]))
    for name, (_, _, task, needle) in FINMTM_LINES.items():
        row = samples.loc[lines[name]] if lines[name] in samples.index else None
        if row is None or needle not in row["error"] or row["task"] != task:
            wrong.append((name, None if row is None else (row["error"], row["task"])))
    assert not wrong, wrong
    assert len(samples) == len(FINMTM_KINDS) + len(FINMTM_LINES)  # image/metadata.jsonl is no record
    assert any("metadata.jsonl" in note for note in result.results["notes"])
    # objective: every error in the denominator, scored 0; only the well-formed empty gold left out
    objective = result.samples[result.samples["task"] == "objective"]
    errors = objective["error"] != ""
    assert scores["n"] == len(objective) - 1 and scores["n_empty_gold"] == 1 and scores["n_score_old"] == len(objective)
    assert scores["n_errors"] == int(errors.sum())
    assert (objective.loc[errors, "correct"] == 0).all()
    # agent: the broken items are scored 0 in the tool score, and counted
    agents = result.samples[result.samples["task"] == "agent"]
    tool = agents["rule_score"].where(agents["error"] == "", 0.0)
    assert scores["agent"]["n"] == len(agents) and scores["agent"]["n_errors"] == int((agents["error"] != "").sum())
    assert scores["agent"]["tool_score"] == pytest.approx(tool.mean())
    dialogue = result.samples[result.samples["task"] == "dialogue"]
    assert scores["dialogue"]["n_errors"] == int((dialogue["error"] != "").sum()) >= 6


def test_an_over_long_later_turn_fails_alone_and_is_never_batched(finmtm_corpus, finmtm_run, tiny_model,
                                                                  tiny_qwen_dir, tmp_path):
    """Item 8: agent round 2 with a 1 MB tool result and a dialogue's huge turn 2 are that
    sample's error; no generate call ever saw a prompt over the context; the sessions that shared
    their batch have exactly the replies they get alone."""
    folder, _ = finmtm_corpus
    result, lengths = finmtm_run
    assert lengths and max(lengths) <= CONTEXT
    samples = result.samples.set_index("id")
    for qid in ("agent-1mb-tool-result", "ses-huge-later-turn"):
        assert f"exceeds the model's context of {CONTEXT}" in samples.loc[qid, "error"]
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "L2.jsonl").write_text(json.dumps(FINMTM_KINDS["ses-ok"][1]) + "\n")
    (alone / "p1.png").write_bytes(jpeg())
    single = run_benchmark(RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(alone), dtype="float32",
                                     device="cpu", out=str(tmp_path / "run"), bootstrap=0, max_new_tokens=3),
                           tiny_model, show_progress=False).samples.set_index("id")
    assert samples.loc["ses-ok", "raw_output"] == single.loc["ses-ok", "raw_output"]
    assert len(json.loads(samples.loc["ses-ok", "raw_output"])) == 2


# ---- MME-Finance -----------------------------------------------------------------------------------------
def _mmfin_row(index, **fields) -> dict:
    return {"index": index, "image": base64.b64encode(jpeg()).decode(), "question": "What is the revenue in Q2?",
            "answer": "42", "task_category": "OCR", "image_type": "Table", "image_style": "Computer Screenshot",
            "background": "", **fields}


# id → (file, row fields, outcome, error substring / the question text the item must show)
MMFIN_KINDS: dict[str, tuple[str, dict, str, str]] = {
    "official-writer-row": ("MMfin.tsv", {}, UNSCORED, "What is the revenue in Q2?"),
    "quoted-question": ("MMfin.tsv", {"question": 'What does the label "Net income" show?'}, UNSCORED,
                        'What does the label "Net income" show?'),
    "tab-and-newline-in-quotes": ("MMfin.tsv", {"question": "Line 1\tcell\nLine 2?"}, UNSCORED, "Line 1\tcell\nLine 2?"),
    "english-set-chinese-name": ("MMfin.tsv", {"question": "What is 腾讯's revenue?"}, UNSCORED, "What is 腾讯's revenue?"),
    "chinese-set-english-text": ("MMfin_CN.tsv", {"question": "What is EBITDA?"}, UNSCORED, "What is EBITDA?"),
    "minimal-quoting-row": ("MMfin_CN.tsv", {"question": '"净利润" 是多少？'}, UNSCORED, '"净利润" 是多少？'),
    "empty-question": ("MMfin.tsv", {"question": ""}, ERROR, "question is empty"),
    "empty-answer": ("MMfin.tsv", {"answer": ""}, ERROR, "answer is empty"),
    "image-reference-to-no-row": ("MMfin.tsv", {"image": "999"}, ERROR, "names no row"),
    "image-not-base64": ("MMfin.tsv", {"image": "!" * 80}, ERROR, "not base64"),
    "binary-yes": ("MMfin_Binary.tsv", {"question": "收入增长了吗？", "answer": "是"}, ANSWERED, "收入增长了吗？"),
    "binary-no-with-stop": ("MMfin_Binary.tsv", {"question": "利润下降了吗？", "answer": "否。"}, ANSWERED, "利润下降了吗？"),
    "binary-answer-not-yes-no": ("MMfin_Binary.tsv", {"answer": "也许"}, ERROR, "is not one of"),
}
MMFIN_LINES = {  # raw lines appended to MMfin_CN.tsv (written with pandas' default quoting): (bytes, error substring)
    "line-not-utf8": (b'"90"\t"x"\t"\xff\xfeQ?"\t"1"\t"OCR"\t"Table"\t"Computer Screenshot"\t""\n',
                      "field 'question' is not valid UTF-8"),
    "line-too-many-fields": (b"91\tx\tQ?\t1\tOCR\tTable\tComputer Screenshot\t\textra\n", "9 tab-separated fields"),
    "line-too-few-fields": (b"92\tx\n", "bad record"),  # pandas pads the missing fields: empty question, no image
}


@pytest.fixture(scope="module")
def mmfin_corpus(tmp_path_factory):
    import csv

    import pandas as pd

    folder = tmp_path_factory.mktemp("mmfin-corpus")
    files: dict[str, list[dict]] = {}
    for number, (kind, (file, fields, _, _)) in enumerate(MMFIN_KINDS.items(), 1):
        files.setdefault(file, []).append(_mmfin_row(number, **fields))
    for file, rows in files.items():  # VLMEvalKit's dump_tsv quotes every field; the CN file has pandas' default
        quoting = csv.QUOTE_MINIMAL if file == "MMfin_CN.tsv" else csv.QUOTE_ALL
        pd.DataFrame(rows).to_csv(folder / file, sep="\t", index=False, encoding="utf-8", quoting=quoting)
    with (folder / "MMfin_CN.tsv").open("ab") as tsv:
        for line, _ in MMFIN_LINES.values():
            tsv.write(line)
    return folder


@pytest.fixture(scope="module")
def mmfin_run(mmfin_corpus, tiny_model, tiny_qwen_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("mmfin-run")
    config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="mme-finance", data=str(mmfin_corpus), dtype="float32",
                       device="cpu", out=str(out), bootstrap=0, max_new_tokens=3)
    return run_benchmark(config, tiny_model, show_progress=False)


def test_every_mme_finance_kind_has_its_documented_outcome(mmfin_corpus, mmfin_run):
    samples = mmfin_run.samples.set_index("id")
    scores = mmfin_run.results["scores"]
    for number, (kind, (file, _, outcome, expected)) in enumerate(MMFIN_KINDS.items(), 1):
        row = samples.loc[f"{file[:-4]}-{number}"]
        if outcome == ERROR:
            assert expected in row["error"], (kind, row["error"])
        else:
            assert row["error"] == "" and row["question"] == expected, (kind, row["error"], row["question"])
        language = "en" if file == "MMfin.tsv" else "zh"  # the set decides, whatever the text
        assert row["language"] == language, kind
    for kind, (_, needle) in MMFIN_LINES.items():
        assert samples["error"].str.contains(needle, regex=False).any(), kind
    errors = [k for k, v in MMFIN_KINDS.items() if v[2] == ERROR]
    open_errors = sum(1 for k in errors if MMFIN_KINDS[k][0] != "MMfin_Binary.tsv") + len(MMFIN_LINES)
    assert mmfin_run.results["errors"]["count"] == len(errors) + len(MMFIN_LINES)
    # open items: errors score 0 in the denominator, the rest are unjudged (no --judge); binary: 3 items, 1 error
    assert scores["n_open"] == open_errors and scores["score"] == 0.0 and scores["n_binary"] == 3
    assert scores["n_unjudged"] == sum(1 for v in MMFIN_KINDS.values() if v[2] == UNSCORED)


# every reply form of the binary set, as the fork compares it: (reply, what it counts as: 是, 否 or neither)
BINARY_REPLY_FORMS = {"是": "是", "否": "否", "是。": "是", "否。": "否", "。是。": "是", "是。。": "是", " 是": None,
                      "是\n": None, "是的": None, "不是": None, "Yes": None, "No": None, "yes": None, "A": None,
                      "B": None, "A.": None, "答案：是": None, "是否": None, "": None, "对": None}


@pytest.mark.parametrize("reply, reads", BINARY_REPLY_FORMS.items())
def test_every_binary_reply_form_counts_as_the_fork_counts_it(reply, reads):
    import pandas as pd

    from finbench.scoring.tables import score_samples

    rows = pd.DataFrame([{"id": f"{gold}", "kind": "single", "gold": gold, "answer": reply, "options": ["是", "否"],
                          "option_probs": [], "error": "", "language": "zh"} for gold in ("A", "B")])
    out = score_samples(rows, benchmark=get_benchmark("mme-finance"))
    right = {"是": 1, "否": 1, None: 0}[reads]  # right on one of the two items (是 gold, 否 gold), or on neither
    tp, fp, fn = {"是": (1, 1, 0), "否": (0, 0, 1), None: (0, 0, 0)}[reads]
    assert out["binary_accuracy"] == right / 2
    assert out["binary_f1"] == (2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)


MMFIN_START_UP = {  # name → (files to write {name: bytes}, the line's substring)
    "mmfin-empty-file": ({"MMfin.tsv": b"index\tquestion\tanswer\n"}, "no records (the data is empty)"),
    "mmfin-given-finmtm-file": ({"d.jsonl": json.dumps(objective("q", FOUR, gold("A"))).encode()},
                                "not MME-Finance data — missing required column(s) question, answer"),
    "mmfin-given-finmme-data": ({"d.jsonl": json.dumps({"id": "f0", "question_text": "Which?", "options": ["x", "y"],
                                                        "image": {"path": "a.png"}}).encode()},
                                "not MME-Finance data — missing required column(s) question, answer, index (have: id, image"),
    "mmfin-quote-left-open": ({"MMfin.tsv": b'index\tquestion\tanswer\timage\n1\t"open\t2\tx\n'}, "cannot read"),
}


@pytest.mark.parametrize("case", MMFIN_START_UP)
def test_mme_finance_data_a_run_cannot_use_is_one_start_up_line(case, tiny_qwen_dir, tmp_path):
    from typer.testing import CliRunner

    from finbench.cli import app

    files, needle = MMFIN_START_UP[case]
    data = tmp_path / "data"
    data.mkdir()
    for name, content in files.items():
        (data / name).write_bytes(content)
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", "mme-finance", "--data",
                                    str(data / next(iter(files))), "--out", str(tmp_path / "run"), "--device", "cpu",
                                    "--no-progress"])
    assert done.exit_code == 2, (done.exit_code, done.output)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "run").exists()


# ---- data a run cannot use: one start-up line, exit 2, nothing written -----------------------------------
def _finmme_line() -> str:
    return json.dumps({"id": "f0", "question_text": "Which?", "question_type": "single_choice", "answer": "A",
                       "options": ["x", "y"], "image": {"path": "a.png"}, "knowledge_domain": "Banking"})


FAMMA_START_UP = {  # name → (files to write {name: bytes}, the line's substring)
    "famma-empty-file": ({"d.jsonl": b""}, "no records (the data is empty)"),
    "famma-given-finmme-data": ({"d.jsonl": _finmme_line().encode()}, "not FAMMA data — missing required column(s) question"),
    "famma-given-finmtm-data": ({"d.jsonl": json.dumps(objective("q", FOUR, gold("A"))).encode()},
                                "not FAMMA data"),
    "famma-not-json": ({"d.json": b"this is { not json\nat all"}, "cannot read"),
    "famma-truncated-parquet": ({"d.parquet": b"PAR1" + b"\0" * 100}, "cannot read"),
    "famma-folder-without-data": ({"notes.txt": b"hello"}, "no parquet/arrow/jsonl/json/tsv files"),
}
FINMTM_START_UP = {
    "finmtm-empty-file": ({"d.jsonl": b"\n"}, "no records (the data is empty)"),
    "finmtm-given-finmme-data": ({"d.jsonl": _finmme_line().encode()}, "not FinMTM data — no record has messages"),
    "finmtm-given-famma-data": ({"d.jsonl": json.dumps(famma_record("x", 1)).encode()}, "not FinMTM data"),
    "finmtm-not-json": ({"d.json": b"[1, 2"}, "cannot read"),
    "finmtm-only-metadata": ({"image/metadata.jsonl": b'{"file_name": "a.png"}'}, "no parquet/arrow/jsonl/json/tsv files"),
}


@pytest.mark.parametrize("benchmark, case", [("famma", c) for c in FAMMA_START_UP] + [("finmtm", c) for c in FINMTM_START_UP])
def test_data_a_run_cannot_use_is_one_start_up_line(benchmark, case, tiny_qwen_dir, tmp_path):
    from typer.testing import CliRunner

    from finbench.cli import app

    files, needle = (FAMMA_START_UP if benchmark == "famma" else FINMTM_START_UP)[case]
    data = tmp_path / "data"
    for name, content in files.items():
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(content)
    target = data if len(files) != 1 or "/" in next(iter(files)) or case.endswith("without-data") else data / next(iter(files))
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--benchmark", benchmark, "--data", str(target),
                                    "--out", str(tmp_path / "run"), "--device", "cpu", "--no-progress"])
    assert done.exit_code == 2, (done.exit_code, done.output)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "run").exists()  # nothing written
