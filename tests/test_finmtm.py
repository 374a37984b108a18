"""FinMTM end to end: the three item kinds load, objective scores under both protocols against the
official rules restated, multi-turn messages, the agent replay, and a run through the CLI."""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from finbench.benchmarks import finmtm, get_benchmark, load_matching
from finbench.core.types import MULTI, OPEN, SINGLE, Prediction
from finbench.runner.run_requests import render
from finbench.scoring.tables import score_samples


def png(color) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(buffer, format="PNG")
    return buffer.getvalue()


def objective_record(question: str, options: list[str], gold, image: str) -> dict:
    text = question + "\n" + "\n".join(f"{'ABCDEFG'[i]}. {o}" for i, o in enumerate(options)) + \
        '\nAnswer in JSON: {"answer": ...}'
    gold_text = json.dumps({"answer": gold}) if gold is not None else "not json"
    return {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                                     {"type": "text", "text": text}]}],
            "choices": [{"message": {"content": [{"type": "text", "text": gold_text}]}}]}


def write_fixtures(folder: Path) -> Path:
    """OQ/SC.jsonl, OQ/MC.jsonl (images beside them and inline), MTQA/L2.jsonl, Agent/agent.jsonl."""
    (folder / "OQ").mkdir(parents=True)
    (folder / "OQ" / "chart.png").write_bytes(png((200, 0, 0)))
    inline = "data:image/png;base64," + base64.b64encode(png((0, 0, 200))).decode()
    sc = [objective_record("Which bar is tallest?", ["Q1", "Q2", "Q3", "Q4"], "B", "chart.png"),
          objective_record("Which line rises?", ["red", "blue"], ["A"], inline),
          objective_record("Empty gold?", ["x", "y"], [], "chart.png"),
          objective_record("Missing image?", ["x", "y"], "A", "nowhere.png")]
    mc = [objective_record("Which are positive?", ["a", "b", "c", "d", "e"], ["A", "C"], "chart.png"),
          objective_record("Which grew?", ["a", "b", "c"], ["b", "C"], inline)]
    (folder / "OQ" / "SC.jsonl").write_text("\n".join(json.dumps(r) for r in sc) + "\n{broken json\n")
    (folder / "OQ" / "MC.jsonl").write_text("\n".join(json.dumps(r) for r in mc) + "\n")
    (folder / "MTQA").mkdir()
    (folder / "MTQA" / "p1.png").write_bytes(png((0, 150, 0)))
    (folder / "MTQA" / "p2.png").write_bytes(png((150, 150, 0)))
    session = {"session_id": "s1", "task_type": "L2", "image_paths": ["p1.png", "p2.png"],
               "turns": [{"turn_id": 1, "question": "Revenue in 2023?", "gold_answer": "120"},
                         {"turn_id": 2, "question": "Growth vs 2022?", "gold_answer": "20%"},
                         {"turn_id": 3, "question": "And margin?", "gold_answer": "15%"}]}
    short = {"session_id": "s2", "image_path": "p1.png",
             "turns": [{"turn_id": 1, "question": "Name the company.", "gold_answer": "ACME"}]}
    (folder / "MTQA" / "L2.jsonl").write_text(json.dumps(session) + "\n" + json.dumps({**short, "task_type": "L1"}) + "\n")
    (folder / "Agent").mkdir()
    (folder / "Agent" / "k.png").write_bytes(png((9, 9, 9)))
    agent = {"sample_id": "a1", "question": "Is ACME's PE above its 5-year mean?", "image_path": "k.png",
             "ActionTrace": [{"tool": "FinQuery", "query": "ACME PE ratio 5 years"},
                             {"tool": "StockNews", "query": "ACME earnings news"}],
             "ToolResults": [{"tool": "FinQuery", "result": "PE 18.2, mean 15.0"}],
             "answer": "Yes, 18.2 > 15.0"}
    (folder / "Agent" / "agent.jsonl").write_text(json.dumps(agent) + "\n")
    return folder


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    return write_fixtures(tmp_path_factory.mktemp("finmtm"))


def test_a_task_filter_that_matches_nothing_names_the_tasks(fixture_dir):
    # (an unreadable record takes its file's task, so the filters apply to it too)
    with pytest.raises(ValueError, match=r"finmtm: no questions matched.*--domain dialog: the data has dialogue$"):
        load_matching(finmtm.BENCHMARK, fixture_dir / "MTQA", None, ["dialog"], [])
    with pytest.raises(ValueError, match=r"--question-type L9: the data has multi$"):
        load_matching(finmtm.BENCHMARK, fixture_dir / "OQ" / "MC.jsonl", None, [], ["L9"])


def by_id(questions):
    return {q.id: q for q in questions}


def test_every_item_kind_loads_and_bad_items_are_errors(fixture_dir):
    questions = finmtm.load_questions(fixture_dir)
    assert len(questions) == 10  # 5 SC lines (one broken) + 2 MC + 2 sessions + 1 agent
    tasks = [q.meta.get("task") for q in questions]
    # the broken line takes its file's task: it is an objective item scored as wrong, not a lost row
    assert tasks.count("objective") == 7 and tasks.count("dialogue") == 2 and tasks.count("agent") == 1
    objective = {q.text.split("\n")[0]: q for q in questions if q.meta.get("task") == "objective" and q.text}
    first = objective["Which bar is tallest?"]
    assert first.kind == SINGLE and first.gold == "B" and len(first.options) == 4
    assert first.images == ((fixture_dir / "OQ" / "chart.png").read_bytes(),)
    assert objective["Which line rises?"].images == (png((0, 0, 200)),)  # the data: URL decoded
    assert objective["Empty gold?"].gold == "" and objective["Empty gold?"].meta["gold_status"] == "empty"
    assert "not found" in objective["Missing image?"].error
    mc = [objective["Which are positive?"], objective["Which grew?"]]
    assert all(q.kind == MULTI for q in mc)
    assert [q.gold for q in mc] == ["AC", json.dumps({"answer": ["b", "C"]})]  # lower case keeps its identity
    broken = [q for q in questions if q.error and "malformed JSON" in q.error]
    assert len(broken) == 1
    session = by_id(questions)["s1"]
    assert session.kind == OPEN and session.meta["level"] == "L2" and len(finmtm.request(session, "constrained").turns) == 3
    assert session.images == ((fixture_dir / "MTQA" / "p1.png").read_bytes(), (fixture_dir / "MTQA" / "p2.png").read_bytes())
    assert by_id(questions)["s2"].meta["level"] == "L1"  # task_type wins over the file name
    agent = by_id(questions)["a1"]
    assert agent.meta["task"] == "agent" and len(agent.fields["reference_calls"]) == 2
    # broken inputs: no turns, no level, no options, nothing recognisable
    assert finmtm.record_to_question({"turns": []}, 0, "x.jsonl").error
    assert "level" in finmtm.record_to_question({"turns": [{"question": "q"}]}, 0, "x.jsonl").error
    assert "option" in finmtm.record_to_question(objective_record("q", [], "A", "data:,")
                                                 | {"messages": [{"content": [{"type": "text", "text": "q"}]}]},
                                                 0, "x.jsonl").error
    assert finmtm.record_to_question({"foo": 1}, 0).error


# ---- objective scoring against the official rules, restated -----------------------------------
def official_parse(reply: str) -> list:
    """Qwen3VLClient.chat (split at the FIRST </think>) + etest.py cleaning and parse_model_answer."""
    s = reply.strip().split("</think>", 1)[-1].strip()
    s = s.replace("```json", "").replace("```", "").strip()
    s = s.replace("<|begin_of_box|>", "").replace("<|end_of_box|>", "").strip()
    if not s:
        return []
    if s.startswith('"') and s.endswith('"'):
        s = s[1:-1]
    s = s.replace('\\"', '"')
    try:
        answer = json.loads(s).get("answer", None)
    except Exception:
        return []
    return [answer] if isinstance(answer, str) else answer if isinstance(answer, list) else []


def eq1(pred, gold) -> float:
    p = {str(x).strip().upper() for x in pred if str(x).strip()}
    g = {str(x).strip().upper() for x in gold if str(x).strip()}
    if p - g:
        return 0.0
    return len(p & g) / len(g)


CASES = [  # (gold list, generated reply)
    (["A"], '{"answer": "A"}'),
    (["A", "C"], '<think>maybe {"answer": "B"}</think>{"answer": ["A"]}'),  # first </think>
    (["A", "C"], '<think>a</think><think>b</think>{"answer": ["A", "C"]}'),  # after the first: unparseable
    (["B"], "B"),  # no '{': no answer
    (["P"], '{"answer": "P"}'),  # beyond N, same identity
    (["P"], '{"answer": "Q"}'),  # beyond N, another identity
    (["A"], '{"answer": " a"}'),  # current: equal after strip/upper; old: raw strings differ
    (["A", "C"], '{"answer": "A,C"}'),  # one unknown option
    (["B", "D"], '```json\n{"answer": ["D", "B"]}\n```'),
    (["C"], '<|begin_of_box|>{"answer": "C"}<|end_of_box|>'),
    ([], '{"answer": "A"}'),  # empty gold: skipped by the current protocol, wrong under the old one
    ([], "no answer"),  # empty gold, nothing parsed: the old snapshot's set() == set() counts it right
]


def test_objective_scores_equal_the_official_rules_under_both_protocols():
    rows = []
    for n, (gold, reply) in enumerate(CASES):
        gold_text = json.dumps({"answer": gold})
        kind = MULTI if len(gold) > 1 else SINGLE
        answer = finmtm.extract_official(reply)
        rows.append({"id": f"o{n}", "benchmark": "finmtm", "kind": kind, "answer": answer, "error": "",
                     "gold": finmtm.canonical_gold(gold, gold_text)})
    out = score_samples(pd.DataFrame(rows), benchmark=get_benchmark("finmtm"))
    evaluated = [(g, official_parse(r)) for g, r in CASES if g]  # etest.py skips an empty gold
    current = [eq1(p, g) for g, p in evaluated]
    # the old etest.py (before 0305353): is_correct = set(pred) == set(gold) over EVERY line,
    # accuracy = correct / total — empty golds included
    old = [float(set(official_parse(r)) == set(g)) for g, r in CASES]
    assert out["n"] == len(evaluated) == 10 and out["n_empty_gold"] == 2 and out["n_score_old"] == 12
    assert out["score"] == pytest.approx(sum(current) / len(current))
    assert out["accuracy"] == pytest.approx(sum(c == 1.0 for c in current) / len(current))
    assert out["score_old"] == pytest.approx(sum(old) / len(old))
    # hand-computed: current 1, 0.5, 0, 0, 1, 0, 1, 0, 1, 1 → 5.5 / 10; old: 4 exact raw sets (" a" ≠ "A")
    # and the empty gold nothing was parsed for → 5 / 12
    assert current == [1, 0.5, 0, 0, 1, 0, 1, 0, 1, 1] and out["score_old"] == pytest.approx(5 / 12)
    # no breakdown counts the rows only score_old scores as wrong: they have their own label
    by_kind = out["breakdowns"]["kind"]
    assert by_kind["(empty gold: score_old only)"]["n"] == 2
    assert sum(g["n"] for k, g in by_kind.items() if not k.startswith("(empty")) == 10


def test_constrained_letters_and_errors_score_as_official_lists():
    rows = [{"id": "c1", "benchmark": "finmtm", "kind": MULTI, "gold": "AC", "answer": "A", "error": ""},
            {"id": "c2", "benchmark": "finmtm", "kind": SINGLE, "gold": "B", "answer": "B", "error": "bad image"},
            {"id": "c3", "benchmark": "finmtm", "kind": OPEN, "gold": "", "answer": "[]", "error": "", "task": "dialogue"}]
    out = score_samples(pd.DataFrame(rows), benchmark=get_benchmark("finmtm"))
    assert out["n"] == 2 and out["score"] == pytest.approx(0.25) and out["n_errors"] == 1
    assert out["dialogue"]["n"] == 1 and out["dialogue"]["score"] is None  # no judge: unscored


# ---- multi-turn sessions ------------------------------------------------------------------------------
def test_a_hub_id_not_in_the_local_cache_is_one_clear_error():
    with pytest.raises(ValueError, match="local Hugging Face cache"):
        finmtm.load_questions("HiThink-Research/FinMTM-not-cached")


def test_session_turns_carry_text_history_and_reattach_images(fixture_dir):
    session = by_id(finmtm.load_questions(fixture_dir))["s1"]
    images = ["IMG1", "IMG2"]
    request = finmtm.request(session, "constrained")
    assert request == finmtm.request(session, "official")  # sessions are asked the same way under both
    first = render(finmtm.BENCHMARK, request.turn_prompt(()), images)
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert first.messages[0]["content"][0]["text"] == finmtm.OPEN_ENDED_SYSTEM_PROMPT
    third = render(finmtm.BENCHMARK, request.turn_prompt(["<think>x</think>120", "20%"]), images)
    roles = [m["role"] for m in third.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    # history is text only; the reply is what follows the first </think>
    assert third.messages[1]["content"] == [{"type": "text", "text": "Revenue in 2023?"}]
    assert third.messages[2]["content"] == [{"type": "text", "text": "120"}]
    assert third.messages[4]["content"] == [{"type": "text", "text": "20%"}]
    # the current turn: both images again, then the question
    assert third.messages[-1]["content"] == [{"type": "image"}, {"type": "image"},
                                             {"type": "text", "text": "And margin?"}]
    assert third.images == tuple(images)
    assert sum(p.get("type") == "image" for m in third.messages for p in m["content"]) == len(third.images)


def restated_dialogue(turn_dims: list[list[float]], checklist: list[float]) -> float:
    """finmtm_eval/metrics.py: turn_capability_score (uniform mean of 5 clamped dims), mean over
    turns, session = mean of the checklist; dialogue_score = (0.5·turn + 0.5·session) × 10."""
    turns = [sum(min(max(v, 0), 10) for v in dims) / 5 for dims in turn_dims]
    turn = sum(turns) / len(turns)
    session = sum(min(max(v, 0), 10) for v in checklist) / len(checklist)
    return (0.5 * turn + 0.5 * session) * 10


def test_judge_replies_score_as_the_official_metrics(fixture_dir):
    session = by_id(finmtm.load_questions(fixture_dir))["s1"]
    prediction = Prediction(id="s1", answer="", generated_text=json.dumps(["120", "20%", "15%"]))
    requests = finmtm.judge_requests(session, prediction)
    prompts = [r.prompt.messages[0]["content"][-1]["text"] for r in requests]
    # the official client sends the session's images first, then the text (judge/MTQA)
    assert all(r.prompt.images == (0, 1) and [c["type"] for c in r.prompt.messages[0]["content"]] ==
               ["image", "image", "text"] and r.max_new_tokens == 4096 for r in requests)
    assert len(prompts) == 4 and "Ground Truth: 20%" in prompts[1] and "T1答：120" in prompts[1]
    assert "Multi_Step_Numerical_Calculation" in prompts[-1]
    dims = [[8, 7, 9, 6, 5], [12, -1, 5, 5, 5], [10, 10, 10, 10, 10]]
    replies = [json.dumps(dict(zip(finmtm.JUDGE_FIELDS, d))) for d in dims]
    replies.append("```json\n" + json.dumps({"Checklist_Scores": {"Multi_Step_Numerical_Calculation": 6,
                                                                  "Chart_Numerical_Estimation": 9}}) + "\n```")
    score, details = finmtm.read_judgement(session, prediction, replies)
    assert score == pytest.approx(restated_dialogue(dims, [6, 9]))
    assert details["parsed"] is True and details["unreadable"] == []
    # broken replies: a turn missing a dimension scores 0, a session missing an item scores 0 (the
    # official 0-filled reading) — and the session is flagged, as the official evaluator's
    # evaluation_status "error" does, so that the runner fails it closed (no score: test_judge.py)
    broken = [replies[0], '{"Visual_Precision": 9}', "not json", '{"Checklist_Scores": {"Chart_Numerical_Estimation": 9}}']
    score, details = finmtm.read_judgement(session, prediction, broken)
    assert details["turn_scores"] == [pytest.approx(7.0), 0.0, 0.0] and details["session_score"] == 0.0
    assert score == pytest.approx((0.5 * 7 / 3 + 0.5 * 0) * 10)
    assert details["parsed"] is False and details["unreadable"] == ["T2", "T3", "session"]
    only_session = finmtm.read_judgement(session, prediction, replies[:3] + ["{}"])[1]
    assert only_session["parsed"] is False and only_session["unreadable"] == ["session"]


# ---- agent replay -------------------------------------------------------------------------------------
def restated_tool_score(tp: int, n_pred: int, n_ref: int) -> tuple[float, float, float, float]:
    """judge/Agent/judge.py resolve_tool_metrics + metrics.f_beta_score / tool_score (β = 2, ×25)."""
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_ref if n_ref else 0.0
    f2 = 0.0 if 4 * p + r == 0 else 5 * p * r / (4 * p + r)
    return p, r, f2, 25 * f2


def test_agent_replay_scores_a_recorded_trace(fixture_dir):
    agent = by_id(finmtm.load_questions(fixture_dir))["a1"]
    round1 = json.dumps({"Thought": "t", "ActionTrace": [{"tool": "FinQuery", "query": "ACME PE"},
                                                         {"tool": "VisitWeb", "query": "acme.com"},
                                                         {"tool": "FinQuery", "query": "ACME PE"}]})
    round2 = 'ok {"Thought": "u", "ActionTrace": [{"tool": "FinQuery", "query": "ACME 5 years mean"}]} <FINISHED>'
    prediction = Prediction(id="a1", answer="", generated_text=json.dumps([round1, round2]))
    score, details = finmtm.rule_judgement(agent, prediction)
    # unique predicted calls: FinQuery×2 (different queries), VisitWeb; reference FinQuery, StockNews
    assert len(details["predicted_calls"]) == 3 and len(details["matched_pairs"]) == 1
    p, r, f2, qt = restated_tool_score(1, 3, 2)
    assert (details["precision"], details["recall"]) == (pytest.approx(p), pytest.approx(r))
    assert details["f2"] == pytest.approx(f2) and score == pytest.approx(qt)
    # the second round sees the recorded tool results as its observation
    request = finmtm.request(agent, "constrained").turn_prompt([round1])
    assert "PE 18.2, mean 15.0" in request.messages[-1]["content"][0]["text"]
    # broken: no JSON at all → no calls, score 0
    nothing = Prediction(id="a1", answer="", generated_text=json.dumps(["I would search.", "done"]))
    assert finmtm.rule_judgement(agent, nothing)[0] == 0.0
    assert restated_tool_score(2, 2, 2)[3] == 25.0


def test_metric_functions_equal_metrics_py_restated():
    """finmtm_eval/metrics.py, restated from its text: clamp (non-numbers and NaN → lower),
    F-beta (β > 0, 0 when β²p + r = 0), Qt = 25·F2, uniform turn mean (mapping: missing → 0),
    dialogue = (α·turn + (1 − α)·session) × scale/10, agent = Qa[0,50] + Qr[0,25] + Qt."""
    from finbench.benchmarks.finmtm import eval_metrics as metrics

    def f(p, r, b=2.0):
        p, r = min(max(p, 0), 1), min(max(r, 0), 1)
        return 0.0 if b * b * p + r == 0 else (1 + b * b) * p * r / (b * b * p + r)

    for p, r in [(0, 0), (1, 0), (0.5, 0.25), (1, 1), (2, -1), (0.3, 0.9)]:
        assert metrics.f_beta_score(p, r) == pytest.approx(f(p, r))
        assert metrics.f_beta_score(p, r, beta=1.0) == pytest.approx(f(p, r, 1.0))
        assert metrics.tool_score(p, r) == pytest.approx(25 * f(p, r))
    with pytest.raises(ValueError):
        metrics.f_beta_score(0.5, 0.5, beta=0)
    assert metrics.clamp("x", 0, 10) == 0 and metrics.clamp(float("nan"), 1, 10) == 1 and metrics.clamp(11, 0, 10) == 10
    dims = {"visual_precision": 8, "financial_logic": 12, "data_accuracy": -3, "temporal_awareness": "7"}
    assert metrics.turn_capability_score(dims) == pytest.approx((8 + 10 + 0 + 0 + 7) / 5)
    assert metrics.turn_capability_score([1, 2, 3, 4, 5]) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        metrics.turn_capability_score([1, 2])
    assert metrics.dialogue_score(6, 8) == pytest.approx((0.5 * 6 + 0.5 * 8) * 10)
    assert metrics.dialogue_score(6, 8, alpha=0.25, report_scale=10) == pytest.approx(0.25 * 6 + 0.75 * 8)
    assert metrics.dialogue_score(20, -5) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        metrics.dialogue_score(1, 1, alpha=1.5)
    total = metrics.agent_score(60, 10, 0.5, 1.0)
    assert total == pytest.approx({"answer": 50, "reasoning": 10, "tool": 25 * f(0.5, 1.0),
                                   "total": 60 + 25 * f(0.5, 1.0)})


# ---- end to end ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_finmtm_run_end_to_end(tiny_model, tiny_qwen_dir, fixture_dir, tmp_path):
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import RunConfig

    seen = []
    original = tiny_model.prepare

    def recording(requests):
        seen.extend(requests)
        return original(requests)

    tiny_model.prepare = recording
    try:
        config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(fixture_dir), out=str(tmp_path / "run"),
                           dtype="float32", device="cpu", max_new_tokens=6, bootstrap=50)
        result = run_benchmark(config, tiny_model, show_progress=False)
    finally:
        tiny_model.prepare = original
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert len(samples) == 10 and (tmp_path / "run" / "report.html").exists()
    objective = samples[samples["task"] == "objective"]
    assert set(objective["kind"]) == {SINGLE, MULTI}
    # 7 objective rows: the empty gold skipped (kept for score_old), the missing image and the broken
    # line kept as errors scored wrong
    assert results["scores"]["n"] == 6 and results["scores"]["n_score_old"] == 7 and results["scores"]["n_errors"] == 2
    session = samples.set_index("id").loc["s1"]
    assert len(json.loads(session["raw_output"])) == 3 and session["error"] == ""
    # turn 3's request held the two earlier replies as text and the images again
    third = [r for r in seen if len(r.messages) == 6]
    assert third and sum(p.get("type") == "image" for p in third[0].messages[-1]["content"]) == 2
    assert results["scores"]["dialogue"]["n_judged"] == 0  # no --judge: generated, stored, unscored
    agent = samples.set_index("id").loc["a1"]
    assert not math.isnan(agent["rule_score"]) and results["scores"]["agent"]["n_scored"] == 1
    assert result.results["n_questions"] == 10


@pytest.mark.slow
def test_raw_output_does_not_depend_on_what_shares_the_batch(tiny_model, tiny_qwen_dir, fixture_dir, tmp_path):
    """An objective reply batched with a multi-turn session stays the reply as generated (it was
    wrapped in a JSON list, and then scored 0); a one-turn session is a list of one reply."""
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import RunConfig

    outputs = {}
    for batch_size in (16, 1):
        config = RunConfig.flat(model=str(tiny_qwen_dir), benchmark="finmtm", data=str(fixture_dir), protocol="official",
                           out=str(tmp_path / f"b{batch_size}"), dtype="float32", device="cpu", max_new_tokens=4,
                           batch_size=batch_size, bootstrap=0)
        run_benchmark(config, tiny_model, show_progress=False)
        outputs[batch_size] = pd.read_parquet(tmp_path / f"b{batch_size}" / "samples.parquet").set_index("id")
    together, alone = outputs[16], outputs[1]
    objective = together.index[(together["task"] == "objective") & (together["error"] == "")]
    assert len(objective) >= 4
    for qid in objective:
        assert together.loc[qid, "raw_output"] == alone.loc[qid, "raw_output"], qid
        assert not together.loc[qid, "raw_output"].startswith('["')
    one_turn = json.loads(together.loc["s2", "raw_output"])
    assert isinstance(one_turn, list) and len(one_turn) == 1
    assert finmtm.replies(Prediction(id="s2", answer="", generated_text="plain reply")) == ["plain reply"]
