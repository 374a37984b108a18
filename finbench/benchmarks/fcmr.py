"""FCMR — Robust Evaluation of Financial Cross-Modal Multi-Hop Reasoning (Kim et al., ACL 2025, arXiv 2412.12567).

2,199 items (easy 757, medium 728, hard 714). Each item has a chart (PNG), a table (CSV) and a
10-K text chunk, and asks which of three statements are true; the gold is one of the eight sets
`none`, `1`, `2`, `3`, `1, 2`, `1, 3`, `2, 3`, `1, 2, 3`. Data: the public repository
HYU-NLP/FCMR @ 594775b (no hub set): `dataset/<grade>/<grade>_data.csv`, `chart_images/`,
`<grade>_test_table_modality/table_modality_<anchor_num>.csv` and
`<grade>_test_text_modality_chunk/anchor_table_test_<anchor_num>_text.txt`. The repository has no
prompt and no scoring script; the paper scores exact match of the set (scoring/fcmr.py).

Two protocols (the chart is the image; the table, as its CSV text, and the text chunk are text):
- `constrained` (default): the eight sets as ONE choice of eight options (A = none … H = 1, 2, 3),
  read from the letters' logits — one prefill, and exact-set scoring is letter equality.
- `official`: finbench's generation prompt (none is published) asking for the true statements'
  numbers after 'Answer:', read by `extract_official`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from finbench.benchmarks.base import Benchmark, Demo, no_open_prompt
from finbench.benchmarks.recognise import requires_columns
from finbench.benchmarks.records import DataError, RawRecord, as_text, local_file, read_csv, select
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.requests import Choose, Generate, Prompt, Request, user_message
from finbench.core.types import SINGLE, Question

NAME = "fcmr"
HUB_ID = "HYU-NLP/FCMR"  # a GitHub repository: read from local files only
GRADES = ("easy", "medium", "hard")
DOMAIN_FIELD = "chart_type"  # --domain filters chart types; --question-type filters difficulty (easy/medium/hard)
GROUP_COLUMNS = ("difficulty", "option_type", "modality_order_type", "chart_type")
DATA_FILE = re.compile(r"(easy|medium|hard)_data\.csv")
REQUIRED = ("anchor_num", "filename", "correct_answer", "option1", "option2", "option3")
FORMS = ("an FCMR checkout, its dataset/ folder, a dataset/<grade>/ folder, or one <grade>_data.csv beside its "
         "chart_images/, table and text folders",)
# The eight answer sets in the repository's spelling, in option order (A … H)
SETS = ("none", "1", "2", "3", "1, 2", "1, 3", "2, 3", "1, 2, 3")

# ---- prompts (finbench's: the repository publishes none) -----------------------------------------
PROMPT_VERSION = "fcmr-constrained-v1"  # bump whenever the texts below change: it is in the cache key
MATERIAL = "Table (CSV):\n{table}\n\nText:\n{text}\n\nStatements:\n1. {option1}\n2. {option2}\n3. {option3}\n\n"
QUESTION = "Using the chart, the table and the text together, which of the statements are true?\n"
CONSTRAINED_INSTRUCTION = "Answer with the letter of the correct option."
OFFICIAL_INSTRUCTION = ("Answer with the numbers of all true statements, separated by commas (for example: 1, 3), or "
                        "none if no statement is true. End with a line of the form 'Answer: …'.")
ANSWER_PREFIX = "Answer:"
OFFICIAL_MAX_NEW_TOKENS = 1024  # finbench's budget for a short reasoning and the answer line
# "Answer:" as models write it: any case, bold or italic markers before the colon ("**Answer**:"),
# an ASCII or a full-width colon
ANSWER_MARK = re.compile(r"answer[\s*_]*[:：]", re.IGNORECASE)
# a statement number standing alone: not part of a longer number ("13") nor of a decimal ("1.5",
# ".2"); a sentence's period after it ("Answer: 2.") ends the number, it does not make a decimal
STATEMENT = re.compile(r"(?<![\d.])[1-3](?!\d|\.\d)")
NONE_WORD = re.compile(r"\bnone\b", re.IGNORECASE)


# ---- loading ---------------------------------------------------------------------------------
def data_files(source: str | Path) -> list[Path]:
    """The `<grade>_data.csv` files of `source` (a file, a grade folder, dataset/ or a checkout)."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"--data {source}: not found (FCMR is read from local files: a checkout of {HUB_ID})")
    if path.is_file():
        if not DATA_FILE.fullmatch(path.name):
            raise DataError(f"--data {path}: not an FCMR data file (easy_data.csv, medium_data.csv, hard_data.csv)")
        return [path]
    found = {p.name: p for p in path.rglob("*_data.csv") if DATA_FILE.fullmatch(p.name)}
    files = [found[f"{grade}_data.csv"] for grade in GRADES if f"{grade}_data.csv" in found]
    if not files:
        raise DataError(f"--data {path}: no easy_data.csv, medium_data.csv or hard_data.csv under this folder")
    return files


def _grade(raw: RawRecord) -> str:
    return DATA_FILE.search(raw.origin).group(1)  # type: ignore[union-attr]


def _filter_labels(raw: RawRecord) -> tuple[str | None, str | None]:
    """(chart_type, difficulty) as the filters read them (records.select)."""
    chart = raw.values.get("chart_type") if raw.error is None else None
    return (chart if isinstance(chart, str) else None), _grade(raw)


def load_questions(source: str | Path | None = None, limit: int | None = None, domains: Sequence[str] = (),
                   question_types: Sequence[str] = (), notes: list[str] | None = None) -> list[Question]:
    """FCMR rows → Questions, filtered, at most `limit` (records.select, before any file of an item
    is read); a bad row becomes its error."""
    if source is None:
        raise DataError(f"FCMR has no hub set: pass --data (a checkout of {HUB_ID})")
    records = []
    for file in data_files(source):
        rows = read_csv(file)
        readable = [r for r in rows if r.error is None]
        missing = [c for c in REQUIRED if readable and c not in readable[0].values]
        if missing:
            raise DataError(f"{file}: not FCMR data — missing column(s) {', '.join(missing)}")
        records += rows
    return [record_to_question(raw) for _, raw in select(records, _filter_labels, domains, question_types, limit, notes)]


def parse_set(text: str) -> str:
    """A published `correct_answer` as one of SETS ("1,3" and " 1, 3 " read as "1, 3")."""
    found = sorted(set(STATEMENT.findall(text)))
    canonical = ", ".join(found) if found else text.strip().lower()
    if canonical not in SETS or (found and re.sub(r"[\s,1-3]", "", text)):
        raise ValueError(f"correct_answer {text!r} is not one of {', '.join(SETS)}")
    return canonical


def record_to_question(raw: RawRecord) -> Question:
    """One row → Question with the chart as its image and the table and text in `fields`;
    anything malformed (a missing file, a set that is not one of the eight) is `Question.error`."""
    grade = _grade(raw)
    if raw.error is not None:
        return Question(id=raw.origin, benchmark=NAME, kind=SINGLE, text="", meta={"difficulty": grade},
                        error=f"bad record: {raw.error}")
    row = raw.values
    anchor = str(row.get("anchor_num", "")).strip()
    meta = {"difficulty": grade, "question_type": grade,
            **{name: str(row.get(name, "")) or None for name in GROUP_COLUMNS[1:]}}
    base = dict(id=f"{grade}/{anchor or raw.origin}", benchmark=NAME, kind=SINGLE, meta=meta, options=SETS)
    try:
        statements = {f"option{k}": as_text(row.get(f"option{k}"), f"option{k}") for k in (1, 2, 3)}
        if not all(s.strip() for s in statements.values()):
            raise ValueError("a statement (option1–option3) is empty")
        if not anchor.isdigit():
            raise ValueError(f"anchor_num {anchor!r} is not a number")
        gold = parse_set(str(row.get("correct_answer", "")))
        folder = Path(raw.folder)
        chart = _read(folder, f"chart_images/{row.get('filename', '')}", raw.root)
        table = _read(folder, f"{grade}_test_table_modality/table_modality_{anchor}.csv", raw.root)
        text = _read(folder, f"{grade}_test_text_modality_chunk/anchor_table_test_{anchor}_text.txt", raw.root)
        fields = {**statements, "table": as_text(table, "table"), "text": as_text(text, "text")}
        return Question(text=QUESTION.strip(), gold="ABCDEFGH"[SETS.index(gold)], images=(chart,), fields=fields,
                        **base)
    except Exception as err:  # noqa: BLE001 — any malformed field or missing file is a per-sample error
        return Question(text="", error=f"bad record: {err}", **base)


def _read(folder: Path, name: str, root: str) -> bytes:
    path = local_file(name, folder, root)
    if not path.is_file():
        raise ValueError(f"{name} does not exist")
    return path.read_bytes()


# ---- prompts -----------------------------------------------------------------------------------
def material(question: Question) -> str:
    """The table (its CSV text as published), the text chunk and the three statements."""
    return MATERIAL.format(table=question.fields["table"].strip(), text=question.fields["text"].strip(),
                           **{f"option{k}": question.fields[f"option{k}"] for k in (1, 2, 3)})


def request(question: Question, protocol: str) -> Request:
    """The chart first, then the material: eight set options read from logits (`constrained`), or
    free generation ending in 'Answer: …' (`official`)."""
    if protocol == "official":
        text = material(question) + QUESTION + OFFICIAL_INSTRUCTION
        return Generate(Prompt((user_message(text, 1),), (0,)), max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    choices = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    text = material(question) + QUESTION + choices + CONSTRAINED_INSTRUCTION
    return Choose(Prompt((user_message(text, 1),), (0,), answer_prefix=ANSWER_PREFIX), n_options=len(question.options))


def extract_official(text: str) -> str:
    """The set a generated answer names, one of SETS, or "" (unreadable: wrong). Read from the rest
    of the line after the LAST 'Answer:' of the reply (any case, bold markers around it, an ASCII
    or a full-width colon; "Answer: 1 (final answer: 3)" reads 3), else from the last non-empty
    line: the statement numbers 1–3 standing alone in it ("1, 3", "1 and 3", "[1,3]", "2." at a
    sentence's end; not "1.5" or "13"); none of them and the word "none" → "none"."""
    text = text or ""
    marks = list(ANSWER_MARK.finditer(text))
    if marks:
        tail = text[marks[-1].end():].lstrip().split("\n", 1)[0]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        tail = lines[-1] if lines else ""
    numbers = sorted(set(STATEMENT.findall(tail)))
    if numbers:
        return ", ".join(numbers)
    return "none" if NONE_WORD.search(tail) else ""


def answer(question: Question, text: str, protocol: str) -> str:
    """The set read from generated text: `extract_official`."""
    return extract_official(text)


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, hub_set=False, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=ScorerModule("finbench.scoring.fcmr"),
    load=load_questions, request=request, answer=answer, open_prompt=no_open_prompt, forms=FORMS, files=data_files,
    recognise=requires_columns("FCMR", REQUIRED, files=data_files),
    leaderboard_metrics=("statement_accuracy",), leaderboard_breakdown="difficulty",
    protocols=("constrained (default: the eight answer sets as one choice, from the letters' logits)",
               "official (finbench's generation prompt; the set after the last 'Answer:')"),
    metrics="exact-set accuracy (the paper's), per-statement accuracy beside it; by difficulty, option type, "
            "modality order and chart type",
    demo=Demo(module="finbench.offline.fcmr_synthetic", sizes="FCMR items per difficulty (4)"))
