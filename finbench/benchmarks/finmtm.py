"""FinMTM — A Multi-Turn Multimodal Benchmark for Financial Reasoning and Agent Evaluation (2026).

11,133 Chinese/English items: single- and multi-choice objective items, multi-turn open-ended
sessions (levels L1–L4) and agent tasks. Data: the hub set `HiThink-Research/FinMTM` (JSONL files
such as `OQ/SC.jsonl`, images beside them) or the same files locally. Official code:
HiThink-Research/FinMTM @ 40557ba (inference/SC_MC/etest.py, inference/MTQA/inference.py,
judge/MTQA, judge/Agent, finmtm_eval/metrics.py).

Two protocols for objective items:
- `constrained` (default): the item's text and images, the answer read from option-letter logits.
- `official`: the item's own message (images, then text), free generation, the official parser.
Sessions are always generated turn by turn (text-only history, images re-attached every turn)
and judged by `--judge`; agent items are replayed offline (recorded tool results as observations)
and scored on their tool plan. Scoring lives in `finbench.scoring.finmtm`.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, Demo, options_not_rendered
from finbench.benchmarks.records import local_file, read_table, skipped_note
from finbench.requests import (Choose, Generate, Prompt, Request, Session, Turn, system_message,
                               user_message)
from finbench.scoring import finmtm as scoring
from finbench.scoring.finmtm import (CAPABILITIES, clamp, dialogue_score, f_beta_score, tool_score,
                                     turn_capability_score)
from finbench.types import MULTI, OPEN, OPTION_LETTERS, SINGLE, Question

NAME = "finmtm"
HUB_ID = "HiThink-Research/FinMTM"
HUB_SPLIT = "train"
GROUP_COLUMNS = ("question_type", "kind")  # breakdowns of the objective score
DOMAIN_FIELD = "task"  # the meta field --domain filters on (task: objective, dialogue, agent)
FORMS = ("objective chat JSONL (messages + choices)", "open-ended session JSONL (turns, image_paths)",
         "agent JSONL (question, image_path, ActionTrace, ToolResults)")
PROTOCOLS = ("constrained", "official (objective items); sessions and agent items: official generation")
METRICS = ("objective: Eq. 1 score and old exact-set protocol; dialogue: (0.5·turn + 0.5·session)×10 "
           "by --judge; agent: tool precision, recall, F2, Qt = 25·F2 (offline replay)")

OBJECTIVE, DIALOGUE, AGENT = "objective", "dialogue", "agent"
LEVELS = ("L1", "L2", "L3", "L4")

# ---- official texts -------------------------------------------------------------------------------
# inference/MTQA/inference.py OPEN_ENDED_SYSTEM_PROMPT (manuscript Figure 10)
OPEN_ENDED_SYSTEM_PROMPT = (
    "You are a financial expert. Read the current question, the supplied image(s), "
    "and the conversation history. Answer only the current question. Do not include "
    "explanations unless the question explicitly requires them."
)
OFFICIAL_MAX_NEW_TOKENS = 4096  # the official client's max_tokens
JUDGE_MAX_NEW_TOKENS = 4096  # judge/Agent/qwen3vl.py chat(max_tokens=4096), the MTQA judge's client
THINK_CLOSE = "</think>"  # the official client keeps a reply's text after the first one
BOX_MARKERS = re.compile(r"<\|begin_of_box\|>|<\|end_of_box\|>")
JUDGE_FIELDS = ("Visual_Precision", "Financial_Logic", "Data_Accuracy", "Cross_Modal_Verification",
                "Temporal_Awareness")
LEVEL_CHECKLISTS = {
    "L1": ("Comprehension", ("Entity_Recognition", "Spatial_Awareness")),
    "L2": ("Calculation", ("Multi_Step_Numerical_Calculation", "Chart_Numerical_Estimation")),
    "L3": ("Self-correction", ("Adversarial_Robustness", "Logical_Consistency")),
    "L4": ("Memory", ("Cross_Page_Entity_Linking", "Long_Context_Memory", "Multi_Source_Knowledge_Fusion")),
}
# judge/MTQA/judge/turn_judge.py: the auditor rubric, scale 0–10 per dimension
TURN_JUDGE_TEMPLATE = """You are a **Senior Financial Auditor & Quantitative Analyst**.
Your task is to audit an AI agent's performance in analyzing financial documents (Candlestick charts, Balance Sheets, Research Reports, Pie/Bar charts).

You apply **Institutional-Grade Standards**. In finance, a decimal error or a hallucinated trend results in millions of dollars in losses.
**Be extremely harsh. Do not forgive "minor" numerical errors.**

---
### 1. Financial Scoring Metrics (0-10 Scale)

**A. Visual Precision & OCR (视觉精度与数据提取)**
- 0: no usable answer or completely unsupported content
- 1-3: wrong row/col; confuses O/C or H/L; misses units
- 4-6: gets number but misses context
- 7-8: accurate reads and correct color code understanding
- 9-10: pixel-perfect tiny labels and complex interactions

**B. Financial Logic & Calculation (金融逻辑与计算)**
- 0: no valid financial reasoning
- 1-3: wrong formula; wrong trend description
- 4-6: correct calc but shallow interpretation
- 7-8: computes derived metrics correctly
- 9-10: multi-step synthesis like earnings quality

**C. Data Accuracy (数据准确性)**
- 0: no relevant data or entirely fabricated data
- 1-4: fatal: any digit/date wrong
- 5-6: lazy approximation
- 7-8: exact match
- 9-10: precise formatted output

**D. Cross-Modal Verification (多模态互证)**
- 0: no cross-modal grounding
- 1-3: hallucinates alignment
- 7-8: aligns table/chart with text correctly
- 9-10: finds discrepancies

**E. Temporal Awareness (时序敏感度)**
- 0: no temporal information when it is required
- 1: time blind
- 5: vague timeline
- 10: pinpoint timing

---
### 2. Evaluation Context
User Query: {q}
Model Answer: {pred}
Ground Truth: {gold}
Conversation History: {ctx}

---
### 3. JSON Output
{{
  "Visual_Precision": 0-10,
  "Financial_Logic": 0-10,
  "Data_Accuracy": 0-10,
  "Cross_Modal_Verification": 0-10,
  "Temporal_Awareness": 0-10,
  "Comment": "Specific critique."
}}"""
# judge/MTQA/judge/session_judge.py: the level checklist, 0–10 per item
SESSION_JUDGE_TEMPLATE = """You are a senior financial multimodal evaluator.
Evaluate the complete dialogue at the SESSION level. Do not answer the task.

Task label: {level} ({name})
Dialogue:
{dialogue}

Score every checklist item from 0 to 10. Judge factual correctness, financial
validity, grounding in the supplied visual evidence, and consistency across
turns. For L4, citation checks assess whether claims are traceable to the
retrieved page/document; formatting alone must not override factual quality.

Return JSON only:
{{
  "Checklist_Scores": {{
    {checklist}
  }},
  "Overall_Score": 0-10,
  "Pass": true,
  "Critique": "brief evidence-based explanation"
}}

Overall_Score must be the arithmetic mean of the checklist scores."""
AGENT_TOOLS = ("FinQuery", "StockNews", "AnalysisLib", "NoticeSearch", "VisitWeb")
# judge/Agent/prompts.py agent_sys_prompt, restated in English for the offline replay: the five
# tools, one JSON object per round with Thought / VisualObservation / ActionTrace.
AGENT_PROMPT = """You are a financial multi-turn analysis agent. Plan calls to the fixed tools step by step and use the image to complete the task.
Question: {question}

Available tools (the system executes your ActionTrace and returns the results):
1. FinQuery: market prices, valuation metrics, trading statistics and fundamentals.
2. StockNews: real-time stock news search.
3. AnalysisLib: structured financial analysis.
4. NoticeSearch: company announcements, disclosures and filings.
5. VisitWeb: read the main text of a given web page URL.

Output exactly one JSON object per round:
{{"Thought": "high-level reasoning and next step", "VisualObservation": ["evidence from the image"], "ActionTrace": [{{"tool": "FinQuery", "query": "company, metric and period"}}]}}

Do not repeat calls that already succeeded. When the task is complete, output <FINISHED> and your final conclusion."""
AGENT_OBSERVATION = "Tool results (recorded):\n{results}\nContinue: further tool calls if needed, else <FINISHED> and the final conclusion."
AGENT_ROUNDS = 2  # offline: plan, then one round after the recorded results

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "finmtm-constrained-v1"  # bump whenever the texts below change: it is in the cache key
CONSTRAINED_INSTRUCTIONS = {
    SINGLE: "Answer with the letter of the single correct option.",
    MULTI: "Answer with the letters of all correct options, separated by ','.",
}
ANSWER_PREFIX = "Answer:"
_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[\.\)、:：．]\s*\S", re.MULTILINE)


# ---- loading ---------------------------------------------------------------------------------
KIND_FIELDS = {"messages": OBJECTIVE, "turns": DIALOGUE, "ActionTrace": AGENT, "reference_tool_calls": AGENT}


def load_questions(
    source: str | Path | None = None,
    limit: int | None = None,
    domains: Sequence[str] = (),
    question_types: Sequence[str] = (),
    notes: list[str] | None = None,
) -> list[Question]:
    """FinMTM items from JSONL files (a folder may hold all three kinds) or a hub id. `domains`
    filters the task (objective, dialogue, agent), `question_types` the item type (single,
    multi, L1–L4, agent). A record that cannot say its task (a malformed line, a record of no
    known kind) takes the task of its file (`_file_tasks`), so that it is scored as wrong there."""
    table = read_table(_local(str(source or HUB_ID)), HUB_SPLIT)
    if not table.records:
        raise ValueError(f"{', '.join(table.sources)}: no records (the data is empty)")
    if not set(KIND_FIELDS) & table.columns:
        raise ValueError(f"{', '.join(table.sources)}: not FinMTM data — no record has messages (objective), turns "
                         f"(session) or ActionTrace (agent) (have: {', '.join(sorted(table.columns)) or 'none'})")
    if notes is not None:
        notes.extend(skipped_note(table))
    file_tasks = _file_tasks(table.records)
    questions = []
    for index, raw in enumerate(table.records):
        if raw.error is not None:
            question = _broken(raw.origin, index, file_tasks.get(_file_of(raw.origin)), f"bad record: {raw.error}",
                               qid=raw.origin)
        else:
            question = record_to_question(raw.values, index, raw.origin, raw.root)
            if question.meta.get("task") is None:
                question = _broken(raw.origin, index, file_tasks.get(_file_of(raw.origin)), question.error or "",
                                   qid=question.id)
        if domains and question.meta.get("task") not in domains:
            continue
        if question_types and question.meta.get("question_type") not in question_types:
            continue
        questions.append(question)
        if limit is not None and len(questions) >= limit:
            break
    return questions


def _file_of(origin: str) -> str:
    return origin.rsplit(":", 1)[0] if ":" in origin else origin.split("[")[0]


def _file_tasks(raws: Sequence[Any]) -> dict[str, str]:
    """Each file's task: the one its readable records have (FinMTM files hold one kind each)."""
    tasks: dict[str, str] = {}
    for raw in raws:
        if raw.error is None:
            kind = next((task for name, task in KIND_FIELDS.items() if name in raw.values), None)
            if kind is not None:
                tasks.setdefault(_file_of(raw.origin), kind)
    return tasks


def _broken(origin: str, index: int, task: str | None, error: str, qid: str) -> Question:
    """A record that is an error before its kind is known, given its file's task (or one guessed
    from the file's path: MTQA/L1–L4 sessions, Agent, else objective) so that it is scored there."""
    path = Path(_file_of(origin))
    if task is None:
        name = str(path).upper()
        task = AGENT if "AGENT" in name else DIALOGUE if "MTQA" in name or _level({}, origin) else OBJECTIVE
    if task == OBJECTIVE:
        multi = path.stem.upper().startswith("MC")
        return Question(id=qid, benchmark=NAME, kind=MULTI if multi else SINGLE, text="", error=error,
                        meta={"task": OBJECTIVE, "level": None, "question_type": "multi" if multi else "single",
                              "gold_status": "unreadable"})
    level = _level({}, origin) if task == DIALOGUE else None
    return Question(id=qid, benchmark=NAME, kind=OPEN, text="", error=error,
                    meta={"task": task, "level": level, "question_type": level if task == DIALOGUE else AGENT,
                          "gold_status": "unreadable"})


def _local(source: str) -> str:
    """A hub id → its snapshot in the local Hugging Face cache (the set's JSONL files differ in
    schema, so they are read as files, not through `datasets`); a local path as it is."""
    if Path(source).exists():
        return source
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(source, repo_type="dataset", local_files_only=True)
    except Exception as err:  # noqa: BLE001 — not cached, offline, unknown id: one start-up line
        raise ValueError(f"--data {source}: not a local path and not in the local Hugging Face cache "
                         f"({type(err).__name__}); download it once (huggingface-cli download --repo-type dataset "
                         f"{source}) or pass the folder") from None


def record_to_question(record: Mapping[str, Any], index: int, origin: str = "", data_root: str = "") -> Question:
    """One JSONL record of any kind → Question; malformed → `Question.error`, never an exception.
    Relative image paths are read beside the file (or in image/), never climbing out of the data's
    folder `data_root`."""
    root = Path(_file_of(origin)).parent if origin else None
    if "messages" in record:
        return _objective(record, index, origin, root, data_root)
    if "turns" in record:
        return _dialogue(record, index, origin, root, data_root)
    if "ActionTrace" in record or "reference_tool_calls" in record:
        return _agent(record, index, root, data_root)
    qid = str(record.get("sample_id") or record.get("id") or index)
    return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta={"task": None},
                    error="bad record: neither an objective item (messages), a session (turns) nor an agent item "
                          "(ActionTrace)")


def _objective(record: Mapping[str, Any], index: int, origin: str, root: Path | None, data_root: str) -> Question:
    qid = str(record.get("id") or record.get("sample_id") or f"{Path(_file_of(origin)).stem}-{index}")
    multi_file = Path(_file_of(origin)).stem.upper().startswith("MC")
    meta = {"task": OBJECTIVE, "level": None, "question_type": "multi" if multi_file else "single",
            "gold_status": "unreadable"}
    unreadable = dict(id=qid, benchmark=NAME, kind=MULTI if multi_file else SINGLE, text="", meta=meta)
    try:
        text, urls = _message_parts(record["messages"])
        gold_raw, gold_list = _gold(record)
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return Question(error=f"bad record: {err}", **unreadable)
    options = _options_in(text)
    multi = len(gold_list) > 1 or multi_file
    kind = MULTI if multi else SINGLE
    meta.update(question_type="multi" if multi else "single",
                gold_status="answered" if any(g.strip() for g in gold_list) else "empty")
    fields = {"gold_raw": gold_raw, "message_text": text}
    base = dict(id=qid, benchmark=NAME, kind=kind, text=text, meta=meta, fields=fields,
                gold=canonical_gold(gold_list, gold_raw))
    if not options:
        return Question(error="bad record: no option lines (A. …) in the question text", **base)
    beyond = [g for g in gold_list if g.strip() and g.strip().upper() not in OPTION_LETTERS[:len(options)]]
    if beyond:
        return Question(options=options, error=f"bad record: gold {beyond[0]!r} is not one of the {len(options)} "
                                               f"options ({OPTION_LETTERS[0]}–{OPTION_LETTERS[len(options) - 1]}) "
                                               "in the question text", **base)
    try:
        images = tuple(_image(url, root, data_root) for url in urls)
    except Exception as err:  # noqa: BLE001 — a missing or undecodable image is this item's error
        return Question(options=options, error=f"bad record: {err}", **base)
    return Question(options=options, images=images, **base)


def _message_parts(messages: Any) -> tuple[str, list[str]]:
    """(text, image urls) of `messages[0].content`, as etest.py reads them; anything else is an error."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], Mapping):
        raise ValueError("messages must be a non-empty list of chat messages")
    parts = messages[0].get("content")
    if not isinstance(parts, list) or not all(isinstance(p, Mapping) for p in parts):
        raise ValueError("messages[0].content must be a list of {type, text | image_url} parts")
    texts = [p.get("text") for p in parts if p.get("type") == "text"]
    urls = [(p.get("image_url") or {}).get("url") if isinstance(p.get("image_url"), Mapping) else None
            for p in parts if p.get("type") == "image_url"]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("a text part of messages[0].content is not text")
    if not all(isinstance(u, str) and u.strip() for u in urls):
        raise ValueError("an image_url part of messages[0].content has no url")
    return "".join(texts), urls


def _gold(record: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(the gold JSON text, its option labels) from `choices[0].message.content[0].text`, read as
    etest.py `get_ground_truth` does — but a gold that cannot be read is this item's error, not an
    empty gold: no choices, not JSON, not an object with `answer`, labels that are not text. A
    well-formed empty gold (`{"answer": []}`, `""`, null) is returned empty (etest.py skips it)."""
    try:
        text = record["choices"][0]["message"]["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("no gold: choices[0].message.content[0].text is missing") from None
    if not isinstance(text, str):
        raise ValueError(f"gold {text!r} is not text")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"gold {text[:60]!r} is not JSON (expected {{\"answer\": …}})") from None
    if not isinstance(value, dict) or "answer" not in value:
        raise ValueError(f"gold {text[:60]!r} has no \"answer\" field")
    answer = value["answer"]
    labels = [] if answer is None else [answer] if isinstance(answer, str) else answer
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"gold answer {answer!r} is not an option label or a list of them")
    return text, labels


def canonical_gold(gold_list: Sequence[Any], gold_raw: str) -> str:
    """Ascending letters when every gold option is exactly one letter A–N (the usual case); else the
    raw gold JSON, which the scorer parses as the official code does (lower case, letters beyond N,
    padded strings keep their identity)."""
    items = [str(g) for g in gold_list]
    if items and all(len(g) == 1 and g in OPTION_LETTERS for g in items):
        return "".join(sorted(set(items)))
    return gold_raw if items else ""


def _options_in(text: str) -> tuple[str, ...]:
    """Option labels in the question text: lines starting 'A.' / 'B)' / 'C、' …, in order from A."""
    letters = [m.group(1) for m in _OPTION_LINE.finditer(text)]
    count = 0
    while count < len(OPTION_LETTERS) and OPTION_LETTERS[count] in letters:
        count += 1
    lines = {m.group(1): text[m.start():text.find("\n", m.start()) if "\n" in text[m.start():] else None].strip()
             for m in _OPTION_LINE.finditer(text)}
    return tuple(lines[OPTION_LETTERS[i]] for i in range(count))


def _image(url: Any, root: Path | None, data_root: str = "") -> bytes:
    text = str(url or "").strip()
    if text.startswith("data:"):
        return base64.b64decode(text.split(",", 1)[1])
    if text.startswith(("http://", "https://")):
        raise ValueError(f"image {text[:60]!r} is a URL; finbench reads no network: download it beside the data")
    if text and Path(text).is_absolute():
        candidates = [Path(text)]
    else:  # beside the file, in its image/, or in the hub layout's image/ one level up
        candidates = [local_file(text, base, data_root) for base in
                      ([root, root / "image", root.parent / "image"] if root else [])] if text else []
    for path in candidates:
        if path.is_file():
            return path.read_bytes()
    raise ValueError(f"image {text!r} not found (relative paths are read beside the JSONL file or in image/)")


def _images_of(record: Mapping[str, Any], root: Path | None, data_root: str = "") -> tuple[bytes, ...]:
    paths = record.get("image_paths")
    if paths is None:
        paths = record.get("image_path")
    paths = [paths] if isinstance(paths, str) else list(paths or [])
    return tuple(_image(p, root, data_root) for p in paths if p)


def _level(record: Mapping[str, Any], origin: str) -> str | None:
    for value in (record.get("task_type"), record.get("level"), Path(_file_of(origin)).stem):
        match = re.search(r"L([1-4])", str(value or "").upper())
        if match:
            return f"L{match.group(1)}"
    return None


def _question_text(value: Any, where: str) -> str:
    """A turn's or an agent item's question: text that is not blank (a JSON object would be asked
    as its Python repr, an empty turn run for nothing)."""
    if not isinstance(value, str):
        raise ValueError(f"{where} is {'missing' if value is None else 'a ' + type(value).__name__}, not text")
    if not value.strip():
        raise ValueError(f"{where} is empty")
    return value


def _dialogue(record: Mapping[str, Any], index: int, origin: str, root: Path | None, data_root: str) -> Question:
    qid = str(record.get("session_id") or record.get("sample_id") or f"session-{index}")
    level = _level(record, origin)
    meta = {"task": DIALOGUE, "level": level, "question_type": level, "gold_status": "answered"}
    try:
        if not isinstance(record["turns"], list) or not all(isinstance(t, Mapping) for t in record["turns"]):
            raise ValueError("turns must be a list of {turn_id, question, gold_answer} objects")
        turns = [{"turn_id": t.get("turn_id", n + 1), "question": _question_text(t.get("question"), f"turn {n + 1}'s question"),
                  "gold_answer": str(t.get("gold_answer") or "")} for n, t in enumerate(record["turns"])]
        if not turns:
            raise ValueError("a session needs at least one turn")
        if level is None:
            raise ValueError("no level L1–L4 (task_type, level or the file name)")
        return Question(id=qid, benchmark=NAME, kind=OPEN, text=turns[0]["question"], meta=meta,
                        images=_images_of(record, root, data_root), fields={"turns": turns})
    except Exception as err:  # noqa: BLE001
        return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta=meta, error=f"bad record: {err}")


def _agent(record: Mapping[str, Any], index: int, root: Path | None, data_root: str) -> Question:
    qid = str(record.get("sample_id") or record.get("id") or f"agent-{index}")
    meta = {"task": AGENT, "level": None, "question_type": AGENT, "gold_status": "answered"}
    try:
        turn = record.get("turn") if isinstance(record.get("turn"), Mapping) else {}
        question = record.get("question") if record.get("question") is not None else turn.get("question")
        question = _question_text(question, "the agent question")
        calls = record.get("ActionTrace", record.get("reference_tool_calls"))
        if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
            raise ValueError("ActionTrace must be a list of {tool, query} objects")
        fields = {"reference_calls": [dict(c) for c in calls],
                  "tool_results": record.get("ToolResults", record.get("reference_tool_results", [])),
                  "gold_answer": str(record.get("answer") or record.get("gold_answer")
                                     or record.get("reference_gold_answer") or "")}
        return Question(id=qid, benchmark=NAME, kind=OPEN, text=question, meta=meta,
                        images=_images_of(record, root, data_root), fields=fields)
    except Exception as err:  # noqa: BLE001
        return Question(id=qid, benchmark=NAME, kind=OPEN, text="", meta=meta, error=f"bad record: {err}")


# ---- prompts -----------------------------------------------------------------------------------
def request(question: Question, protocol: str) -> Request:
    """The one request a question makes. Sessions (dialogues, agents) are asked turn by turn under
    both protocols: system prompt, earlier turns as text only (question, reply after the first
    `</think>`), the current question with the images attached again; an agent item is the tool
    prompt, then the recorded tool results as the observation of round 2. Objective items: the
    item's own message (official) or our instruction with letter logits (constrained)."""
    task = question.meta.get("task")
    images = tuple(range(len(question.images)))
    n = len(images)
    if task == DIALOGUE:
        turns = tuple(Turn(ask=user_message(t["question"], n), recall=user_message(t["question"]))
                      for t in question.fields["turns"])
        return Session(prefix=(system_message(OPEN_ENDED_SYSTEM_PROMPT),), turns=turns, images=images,
                       max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, reply_after=THINK_CLOSE)
    if task == AGENT:
        plan = user_message(AGENT_PROMPT.format(question=question.text), n)
        results = json.dumps(question.fields.get("tool_results", []), ensure_ascii=False)
        observe = user_message(AGENT_OBSERVATION.format(results=results))
        return Session(prefix=(), turns=(Turn(ask=plan, recall=plan), Turn(ask=observe, recall=observe)),
                       images=images, max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, reply_after=THINK_CLOSE)
    if protocol == "official":
        return Generate(Prompt(messages=(user_message(question.text, n),), images=images),
                        max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    text = question.text.rstrip() + "\n" + CONSTRAINED_INSTRUCTIONS[question.kind]
    return Choose(Prompt(messages=(user_message(text, n),), images=images, answer_prefix=ANSWER_PREFIX),
                  n_options=len(question.options), multi=question.kind == MULTI)


def after_think(text: str) -> str:
    """The official client's reply: the text after the FIRST `</think>`, stripped."""
    return (text or "").split(THINK_CLOSE, 1)[-1].strip()


def extract_official(text: str) -> str:
    """The reply as the scorer must read it, or '' when it holds no answer: the official client
    keeps the text after the FIRST `</think>`, and a reply without '{' there cannot parse. The
    reply itself is kept whole: scoring/finmtm.py does the client's split and etest.py's parse
    exactly once (splitting here too would read `<think>a</think><think>b</think>{…}` wrongly)."""
    return (text or "").strip() if "{" in after_think(text) else ""


def answer(question: Question, text: str, protocol: str) -> str:
    task = question.meta.get("task")
    if task in (DIALOGUE, AGENT):
        return text  # the JSON list of per-turn replies, kept whole for the judge
    return extract_official(text)


# ---- judging -----------------------------------------------------------------------------------
def replies(prediction: Any) -> list[str]:
    """Per-turn replies (after the first `</think>`) of a session or agent prediction."""
    text = prediction.generated_text or prediction.answer or ""
    try:
        values = json.loads(text or "[]")
    except json.JSONDecodeError:
        values = None
    if not isinstance(values, list):  # a one-turn session cached before its text was a list
        values = [text] if text else []
    return [after_think(str(v)) for v in values]


def judge_requests(question: Question, prediction: Any) -> list[Request]:
    """Sessions: one turn-judge call per turn, then the session checklist call, each with the
    session's images first and then the prompt, as the official client sends them
    (judge/MTQA: `client.chat(image=image_paths, text=prompt)`, max_tokens 4096)."""
    if question.meta.get("task") != DIALOGUE:
        return []
    turns = question.fields["turns"]
    answers = replies(prediction) + [""] * len(turns)
    prompts = []
    for k, turn in enumerate(turns):
        context = "\n".join(f"T{i + 1}问：{turns[i]['question']}\nT{i + 1}答：{answers[i]}" for i in range(k))
        prompts.append(TURN_JUDGE_TEMPLATE.format(q=turn["question"], pred=answers[k], gold=turn["gold_answer"],
                                                  ctx=context))
    level = question.meta["level"]
    name, items = LEVEL_CHECKLISTS[level]
    dialogue = json.dumps([{"turn_id": t["turn_id"], "question": t["question"], "gold_answer": t["gold_answer"],
                            "model_answer": a} for t, a in zip(turns, answers)], ensure_ascii=False, indent=2)
    prompts.append(SESSION_JUDGE_TEMPLATE.format(level=level, name=name, dialogue=dialogue,
                                                 checklist=",\n    ".join(f'"{i}": 0-10' for i in items)))
    images = tuple(range(len(question.images)))
    return [Generate(Prompt((user_message(text, len(images)),), images), max_new_tokens=JUDGE_MAX_NEW_TOKENS)
            for text in prompts]


def read_judgement(question: Question, prediction: Any, outputs: Sequence[str]) -> tuple[float | None, dict]:
    """Per turn: the five dimensions clamped to 0–10 and averaged (a reply missing one scores the
    turn 0, as turn_judge.py does); session: the mean of the level's checklist items (0 when one
    is missing); final = (0.5·turn mean + 0.5·session) × 10 on the 0–100 scale."""
    turn_scores, capabilities = [], []
    for text in outputs[:-1]:
        parsed = parse_judge_json(text)
        if all(f in parsed for f in JUDGE_FIELDS):
            values = dict(zip(CAPABILITIES, (clamp(parsed[f], 0.0, 10.0) for f in JUDGE_FIELDS)))
            turn_scores.append(turn_capability_score(values))
            capabilities.append(values)
        else:
            turn_scores.append(0.0)
            capabilities.append({})
    session = parse_judge_json(outputs[-1]) if outputs else {}
    items = LEVEL_CHECKLISTS[question.meta["level"]][1]
    checklist = session.get("Checklist_Scores") if isinstance(session.get("Checklist_Scores"), Mapping) else {}
    session_score = (sum(clamp(checklist[i], 0.0, 10.0) for i in items) / len(items)
                     if all(i in checklist for i in items) else 0.0)
    turn_score = sum(turn_scores) / len(turn_scores) if turn_scores else 0.0
    final = dialogue_score(turn_score, session_score)
    return final, {"turn_scores": turn_scores, "turn_score": turn_score, "session_score": session_score,
                   "capabilities": capabilities}


def parse_judge_json(text: str) -> dict:
    """json_utils.safe_parse_json: strip a ``` fence and parse; else retry with curly quotes and
    single quotes turned into double quotes; {} on failure."""
    cleaned = str(text or "").strip()
    for prefix in ("```json", "```"):
        if cleaned.startswith(prefix):
            cleaned = cleaned[len(prefix):]
            break
    if cleaned.endswith("```"):
        cleaned = cleaned[:-3]
    for candidate in (cleaned, str(text or "").replace("“", '"').replace("”", '"').replace("'", '"')):
        try:
            value = json.loads(candidate)
            return value if isinstance(value, dict) else {}
        except json.JSONDecodeError:
            continue
    return {}


def rule_judgement(question: Question, prediction: Any) -> tuple[float | None, dict]:
    """Agent items: the predicted tool calls of every round against the reference ActionTrace."""
    if question.meta.get("task") != AGENT:
        return None, {}
    predicted = unique_calls([c for reply in replies(prediction) for c in tool_calls(reply)])
    reference = unique_calls(question.fields["reference_calls"])
    pairs = match_calls(predicted, reference)
    precision = len(pairs) / len(predicted) if predicted else 0.0
    recall = len(pairs) / len(reference) if reference else 0.0
    f2 = f_beta_score(precision, recall, 2.0)
    qt = tool_score(precision, recall)
    return qt, {"predicted_calls": predicted, "matched_pairs": pairs, "precision": precision,
                "recall": recall, "f2": f2, "tool_score": qt,
                       "emr": int(len(pairs) == len(predicted) == len(reference))}


def tool_calls(reply: str) -> list[dict]:
    """The ActionTrace of one agent reply: the first JSON object holding one; [] if none."""
    start = reply.find("{")
    decoder = json.JSONDecoder()
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(reply[start:])
            if isinstance(value, dict) and isinstance(value.get("ActionTrace"), list):
                return [c for c in value["ActionTrace"] if isinstance(c, Mapping)]
        except json.JSONDecodeError:
            pass
        start = reply.find("{", start + 1)
    return []


def unique_calls(calls: Sequence[Any]) -> list[Any]:
    """Exact duplicates removed, first occurrence kept (judge/Agent/utils.unique_tool_calls)."""
    seen, out = set(), []
    for call in calls:
        try:
            key = json.dumps(call, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        except TypeError:
            key = str(call)
        if key not in seen:
            seen.add(key)
            out.append(call)
    return out


def match_calls(predicted: Sequence[Mapping], reference: Sequence[Mapping]) -> list[dict[str, int]]:
    """One-to-one matches (each index used once) of predicted to reference calls with the same
    tool name, the reference with the most shared query words first. The official matcher is a
    semantic LLM judgement; this offline rule is stricter on the tool and looser on the query."""
    used: set[int] = set()
    pairs = []
    for i, call in enumerate(predicted):
        tool = str(call.get("tool", "")).strip().lower()
        words = set(str(call.get("query", "")).lower().split())
        best, best_overlap = None, -1
        for j, ref in enumerate(reference):
            if j in used or str(ref.get("tool", "")).strip().lower() != tool:
                continue
            overlap = len(words & set(str(ref.get("query", "")).lower().split()))
            if overlap > best_overlap:
                best, best_overlap = j, overlap
        if best is not None:
            used.add(best)
            pairs.append({"predicted_index": i, "reference_index": best})
    return pairs


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=scoring.SCORER,
    load=load_questions, request=request, answer=answer, rule_judgement=rule_judgement,
    judge_requests=judge_requests, read_judgement=read_judgement, forms=FORMS, protocols=PROTOCOLS, metrics=METRICS,
    rotate=options_not_rendered,  # objective items carry their options inside the question text
    leaderboard_breakdown="question_type",  # --domain filters tasks; the objective score breaks down by type
    demo=Demo(module="finbench.offline.finmtm_synthetic", sizes="FinMTM objective items per file (12)", self_judge=True,
              judge_max_new_tokens=48))
