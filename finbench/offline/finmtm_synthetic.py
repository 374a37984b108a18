"""Synthetic FinMTM data in the hub set's on-disk layout, for demos and tests (no download).

`write_folder(folder)` writes what `HiThink-Research/FinMTM` holds, file for file, with images
beside the JSONL files that name them:
- `OQ/SC.jsonl`, `OQ/MC.jsonl`: objective items as chat JSONL — `messages[0].content` is an
  `image_url` part (a relative file name) and a `text` part (question, `A. …` option lines, the
  JSON answer instruction); the gold is `choices[0].message.content[0].text`, `{"answer": "B"}`
  or `{"answer": ["A", "C"]}`;
- `MTQA/L1.jsonl` … `MTQA/L4.jsonl`: open-ended sessions (`session_id`, `task_type`,
  `image_paths`, `turns` of `{turn_id, question, gold_answer}`); L4 sessions span two pages;
- `Agent/agent.jsonl`: agent tasks (`sample_id`, `question`, `image_path`, the reference
  `ActionTrace` of `{tool, query}`, recorded `ToolResults`, the gold `answer`).

The charts and their questions come from the FinMME generator (`finmme_synthetic`), so every
gold answer is read off its own chart. Item i depends only on (seed, i).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from finbench.offline.charts import LETTERS, MULTIPLE, NUMERICAL, SINGLE, Chart
from finbench.offline.finmme_synthetic import charts_context, synthetic_chart

TAG = "finmtm-synthetic"
LEVELS = ("L1", "L2", "L3", "L4")
ANSWER_FORMAT = {SINGLE: 'Answer in JSON: {"answer": "<letter>"}',
                 MULTIPLE: 'Answer in JSON with every correct letter: {"answer": ["<letter>", ...]}'}


def objective_record(chart: Chart, image: str, kind: str) -> dict[str, Any]:
    question = chart.questions[kind]
    lines = [question.text, *(f"{LETTERS[k]}. {option}" for k, option in enumerate(question.options)),
             ANSWER_FORMAT[kind]]
    gold = question.answer if kind == SINGLE else list(question.answer)
    return {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                                      {"type": "text", "text": "\n".join(lines)}]}],
            "choices": [{"message": {"role": "assistant",
                                     "content": [{"type": "text", "text": json.dumps({"answer": gold})}]}}]}


def _option_text(chart: Chart, kind: str) -> str:
    question = chart.questions[kind]
    return ", ".join(question.options[LETTERS.index(letter)] for letter in question.answer)


def session_record(charts: list[Chart], images: list[str], level: str, number: int) -> dict[str, Any]:
    """A session of three or four turns on one chart (two for L4: a cross-page question last)."""
    first = charts[0]
    numerical = first.questions[NUMERICAL]
    turns = [{"question": first.questions[SINGLE].text.replace(" Select all that apply.", ""),
              "gold_answer": _option_text(first, SINGLE)},
             {"question": numerical.text, "gold_answer": f"{numerical.answer}{'%' if numerical.unit == '%' else ''}"},
             {"question": first.questions[MULTIPLE].text, "gold_answer": _option_text(first, MULTIPLE)}]
    if level == "L3":  # adversarial: the user pushes back on a right answer
        turns.append({"question": f"I think the answer to the first question was wrong. Are you sure? {turns[0]['question']}",
                      "gold_answer": turns[0]["gold_answer"]})
    if level == "L4" and len(charts) > 1:
        turns.append({"question": f"On the second page: {charts[1].questions[NUMERICAL].text}",
                      "gold_answer": charts[1].questions[NUMERICAL].answer})
    return {"session_id": f"mtqa-{level}-{number:03d}", "task_type": level, "image_paths": images,
            "turns": [{"turn_id": k + 1, **turn} for k, turn in enumerate(turns)]}


def agent_record(chart: Chart, image: str, number: int) -> dict[str, Any]:
    """An agent task whose reference plan queries the chart's subject with two or three tools."""
    subject = chart.caption.rstrip(".")
    trace = [{"tool": "FinQuery", "query": f"{subject} latest figures"},
             {"tool": "StockNews", "query": f"{chart.knowledge_domain} news {subject}"}]
    if number % 2:
        trace.append({"tool": "AnalysisLib", "query": f"{subject} trend analysis"})
    results = [{"tool": call["tool"], "result": f"(recorded) {call['query']}: consistent with the chart"}
               for call in trace]
    numerical = chart.questions[NUMERICAL]
    return {"sample_id": f"agent-{number:03d}", "image_path": image,
            "question": f"Using the chart and the tools, check this: {numerical.text}",
            "Thought": "Read the chart, then confirm the figures with the market data tools.",
            "VisualObservation": [subject], "ActionTrace": trace, "ToolResults": results,
            "answer": numerical.answer}


def write_folder(folder: str | Path, n_objective: int = 12, n_sessions_per_level: int = 2, n_agent: int = 6,
                 seed: int = 0) -> Path:
    """Write the layout above into `folder` (created); returns it."""
    folder = Path(folder)
    for sub in ("OQ", "MTQA", "Agent"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    counter = iter(range(10**6))
    with charts_context():
        def chart_file(sub: str, name: str) -> tuple[Chart, str]:
            chart = synthetic_chart(next(counter), seed, TAG)
            suffix = "jpg" if chart.image[:2] == b"\xff\xd8" else "png"
            (folder / sub / f"{name}.{suffix}").write_bytes(chart.image)
            return chart, f"{name}.{suffix}"

        for kind, file in ((SINGLE, "SC"), (MULTIPLE, "MC")):
            records = [objective_record(*chart_file("OQ", f"{file.lower()}-{i:03d}"), kind) for i in range(n_objective)]
            _write_jsonl(folder / "OQ" / f"{file}.jsonl", records)
        for level in LEVELS:
            sessions = []
            for i in range(n_sessions_per_level):
                pages = [chart_file("MTQA", f"{level.lower()}-{i:03d}-p{p}") for p in range(2 if level == "L4" else 1)]
                sessions.append(session_record([c for c, _ in pages], [name for _, name in pages], level, i))
            _write_jsonl(folder / "MTQA" / f"{level}.jsonl", sessions)
        _write_jsonl(folder / "Agent" / "agent.jsonl",
                     [agent_record(*chart_file("Agent", f"agent-{i:03d}"), i) for i in range(n_agent)])
    return folder


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def demo_data(folder: str | Path, n_objective: int | None = None) -> tuple[Path, bool]:
    """`finbench demo --benchmark finmtm`'s data: FOLDER/finmtm-synthetic-N (N objective items per
    file, 12), the hub's layout."""
    n = n_objective or 12
    path = Path(folder) / f"finmtm-synthetic-{n}"
    if (path / "Agent" / "agent.jsonl").exists():  # the last file write_folder writes: a cut-off write is redone
        return path, False
    return write_folder(path, n_objective=n), True
