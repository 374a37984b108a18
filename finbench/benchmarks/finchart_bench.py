"""FinChart-Bench — financial chart understanding over real financial charts (arXiv 2507.14823).

2,350 multiple-choice (A–D), 2,384 true/false and 2,285 numeric questions over 3,545 real financial
charts. Data: the public repository Tizzzzy/FinChart-Bench @ 07674bb (no hub set): `MC_data.json`,
`TF_data.json`, `QA_data.json` and the folders `MC_images/`, `TF_images/`, `QA_images/`; an item's
`image` `<chart>_qN.jpg` is the file `<chart>.jpg` (the README's script strips the last `_…`).
Official evaluation: the README's "How to test" script (its prompts, `p == gt` with the gold
lower-cased for MC/TF and `float(answer)` for QA); the answer format it asks for is
`Result = [[ label ]]`, whose reading the script leaves to the user (our rule: `extract_official`).

Two protocols:
- `constrained` (default): finbench's prompt; MC read from the four letters' logits, TF from the
  letters of (True, False), QA by the number grammar.
- `official`: the README's prompts byte for byte, free generation, `Result = [[ … ]]` read and
  compared as the README compares (scoring/finchart_bench.py; a 1 % tolerance variant beside it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, Demo
from finbench.benchmarks.recognise import requires_columns
from finbench.benchmarks.records import DataError, RawRecord, as_text, local_file, read_table, select
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.requests import Choose, Generate, Number, Prompt, Request, user_message
from finbench.core.types import NUMERICAL, SINGLE, Question

NAME = "finchart-bench"
HUB_ID = "Tizzzzy/FinChart-Bench"  # a GitHub repository: read from local files only
TASKS = ("MC", "TF", "QA")
DOMAIN_FIELD = "task"  # --domain and --question-type both select tasks (MC, TF, QA)
GROUP_COLUMNS = ("task",)
TASK_FILE = re.compile(r"(MC|TF|QA)_data\.json")
FORMS = ("a FinChart-Bench checkout (MC/TF/QA_data.json beside MC/TF/QA_images/), or one <task>_data.json",)

# ---- official protocol (README "How to test"), byte for byte -------------------------------------
OFFICIAL_PROMPTS = {
    "MC": "Question: {question}\nChoice: {choice}\nOutput correct label only in this format: 'Result = [[ label ]]'",
    "QA": "Question: {question}\nOutput correct answer only in this format: 'Result = [[ answer ]]'",
    "TF": "Question: {question}\nOutput true or false label only in this format: 'Result = [[ label ]]'",
}
# The README gives no budget (its model call is a TODO): finbench's, ample for a label or a number.
OFFICIAL_MAX_NEW_TOKENS = 512
RESULT = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)  # the bracketed part of 'Result = [[ label ]]'

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "finchart-bench-constrained-v1"  # bump whenever the texts below change: it is in the cache key
TF_OPTIONS = ("True", "False")
CONSTRAINED_TEXTS = {
    "MC": "Question: {question}\n{choices}Answer with the letter of the correct option.",
    "TF": "Statement: {question}\n{choices}Is the statement true or false? Answer with the letter of the correct option.",
    "QA": "Question: {question}\nAnswer with a number only, without units.",
}
ANSWER_PREFIX = "Answer:"


# ---- loading ---------------------------------------------------------------------------------
def task_files(source: str | Path) -> list[Path]:
    """The task files of `source`: one `<task>_data.json`, or those of a folder (MC, TF, QA order)."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"--data {source}: not found (FinChart-Bench is read from local files: a checkout of {HUB_ID})")
    if path.is_file():
        if not TASK_FILE.fullmatch(path.name):
            raise DataError(f"--data {path}: not a FinChart-Bench task file (MC_data.json, TF_data.json, QA_data.json)")
        return [path]
    files = [path / f"{task}_data.json" for task in TASKS if (path / f"{task}_data.json").is_file()]
    if not files:
        raise DataError(f"--data {path}: no MC_data.json, TF_data.json or QA_data.json in this folder")
    return files


def _task(raw: RawRecord) -> str:
    """The task of a record, from its file (`…/MC_data.json[3]`)."""
    return TASK_FILE.search(raw.origin).group(1)  # type: ignore[union-attr]


def _filter_labels(raw: RawRecord) -> tuple[str | None, str | None]:
    """(task, task): --domain and --question-type both select tasks (records.select)."""
    return _task(raw), _task(raw)


def load_questions(source: str | Path | None = None, limit: int | None = None, domains: Sequence[str] = (),
                   question_types: Sequence[str] = (), notes: list[str] | None = None) -> list[Question]:
    """FinChart-Bench records → Questions, filtered by task, at most `limit` (records.select, before
    any image is read); a bad record becomes its error."""
    if source is None:
        raise DataError(f"FinChart-Bench has no hub set: pass --data (a checkout of {HUB_ID})")
    records = [raw for file in task_files(source) for raw in read_table(file, "").records]
    return [record_to_question(raw) for _, raw in select(records, _filter_labels, domains, question_types, limit, notes)]


def chart_file(image: str) -> str:
    """The README's `name_part.rsplit('_', 1)[0] + ext`: `<chart>_q1.jpg` → `<chart>.jpg`."""
    stem, dot, ext = image.rpartition(".")
    if not dot:
        stem, ext = image, ""
    return stem.rsplit("_", 1)[0] + (f".{ext}" if dot else "")


def record_to_question(raw: RawRecord) -> Question:
    """One record → Question; anything malformed becomes `Question.error`, never an exception."""
    task = _task(raw)
    kind = NUMERICAL if task == "QA" else SINGLE
    if raw.error is not None:
        return Question(id=raw.origin, benchmark=NAME, kind=kind, text="", meta={"task": task, "question_type": task},
                        error=f"bad record: {raw.error}")
    record = raw.values
    image = record.get("image") if isinstance(record.get("image"), str) else ""
    meta = {"task": task, "question_type": task, "chart": chart_file(image) if image else ""}
    base = dict(id=f"{task}/{image or raw.origin}", benchmark=NAME, kind=kind)
    text = record.get("question") if isinstance(record.get("question"), str) else ""
    try:
        if not text.strip():
            raise ValueError("question is empty (or not text)")
        if not image:
            raise ValueError(f"image {record.get('image')!r} is not a file name")
        options, gold, official = _gold(task, record)
        path = local_file(f"{task}_images/{chart_file(image)}", raw.root, raw.root)
        if not path.is_file():
            raise ValueError(f"image {image!r}: {task}_images/{chart_file(image)} does not exist")
        fields = {"choice": str(record.get("choices")) if task == "MC" else ""}  # the README puts str(dict) in its prompt
        return Question(text=text, options=options, gold=gold, images=(path.read_bytes(),), fields=fields,
                        meta={**meta, "official_answer": official}, **base)
    except Exception as err:  # noqa: BLE001 — any malformed field is a per-sample error
        return Question(text=text, meta=meta, error=f"bad record: {err}", **base)


def _gold(task: str, record: Mapping[str, Any]) -> tuple[tuple[str, ...], str, str]:
    """(options, gold as finbench reads it, the README's gold). MC: the letter; two published items
    give the option's text instead ("3Q'14"), read as that option's letter (the README compares the
    text itself: only a model writing `[[ 3Q'14 ]]` is right there). TF: A (True) or B (False).
    QA: the number as published (the README's `float(answer)`)."""
    answer = record.get("answer")
    if task == "QA":
        if isinstance(answer, bool) or answer is None:
            raise ValueError(f"answer {answer!r} is not a number")
        float(answer)  # the README's float(item["answer"]); raises on an unparseable gold
        return (), str(answer), str(answer)
    if not isinstance(answer, str):
        raise ValueError(f"answer {answer!r} is not text")
    if task == "TF":
        if answer not in TF_OPTIONS:
            raise ValueError(f"answer {answer!r} is neither True nor False")
        return TF_OPTIONS, "AB"[TF_OPTIONS.index(answer)], answer.lower()
    choices = record.get("choices")
    if not isinstance(choices, Mapping) or sorted(choices) != ["A", "B", "C", "D"]:
        raise ValueError(f"choices {str(choices)[:60]!r} are not a dict of A, B, C, D")
    options = tuple(as_text(choices[k], "choices") for k in "ABCD")
    if len(answer) == 1 and answer.upper() in "ABCD":  # "b" too: the README lower-cases the gold
        return options, answer.upper(), answer.lower()
    named = [letter for letter, text in zip("ABCD", options) if text.strip() == answer.strip()]
    if len(named) != 1:
        raise ValueError(f"answer {answer!r} is neither a letter A–D nor one option's text")
    return options, named[0], answer.lower()


# ---- prompts -----------------------------------------------------------------------------------
def official_text(question: Question) -> str:
    """The README's prompt for the question's task."""
    task = question.meta["task"]
    return OFFICIAL_PROMPTS[task].format(question=question.text, choice=question.fields.get("choice", ""))


def request(question: Question, protocol: str) -> Request:
    """The one request a question makes: the chart first, then the text (the README's model call is
    a TODO; the chart-then-question order is finbench's, the same under both protocols)."""
    task = question.meta["task"]
    if protocol == "official":
        return Generate(Prompt((user_message(official_text(question), 1),), (0,)), max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    choices = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    text = CONSTRAINED_TEXTS[task].format(question=question.text, choices=choices)
    prompt = Prompt((user_message(text, 1),), (0,), answer_prefix=ANSWER_PREFIX)
    return Number(prompt) if task == "QA" else Choose(prompt, n_options=len(question.options))


def extract_official(text: str) -> str:
    """The answer of 'Result = [[ label ]]', as finbench reads it (the README leaves reading to the
    user): the inside of the LAST `[[ … ]]` of the text, with or without the `Result =` before it,
    stripped of surrounding spaces; "" when there is none (judged wrong). The last, because a model
    that repeats the instruction's 'Result = [[ label ]]' before answering answers after it."""
    found = RESULT.findall(text or "")
    return found[-1].strip() if found else ""


def answer(question: Question, text: str, protocol: str) -> str:
    """The answer read from generated text: `extract_official`."""
    return extract_official(text)


def reply_form(text: str) -> bool:
    """A reply in the README's form (it holds a `[[ … ]]`), not a label already read from one ("False")."""
    return RESULT.search(text or "") is not None


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, hub_set=False, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS,
    scorer=ScorerModule("finbench.scoring.finchart_bench"), load=load_questions, request=request, answer=answer,
    reply_form=reply_form,
    forms=FORMS, protocols=("constrained (default: MC and TF letters from the logits, QA by the number grammar)",
                            "official (the README's prompts; 'Result = [[ … ]]' compared as the README compares)"),
    metrics="accuracy per task (MC, TF, QA) and overall, the README's comparison; QA also within 1 % "
                         "(beside the exact rule, never instead)",
    cluster_field="chart",  # about two questions per chart: a chart's questions are not independent
    answer_type_field="task", files=task_files,
    recognise=requires_columns("FinChart-Bench", ("image", "question", "answer"), files=task_files),
    leaderboard_metrics=("mc_accuracy", "tf_accuracy", "qa_accuracy", "qa_accuracy_tolerance"),
    demo=Demo(module="finbench.offline.finchart_bench_synthetic", sizes="FinChart-Bench items per task (6)"))
