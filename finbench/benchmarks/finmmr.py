"""FinMMR — Make Financial Numerical Reasoning More Multimodal, Comprehensive, and Challenging (Tang et al., ICCV 2025).

4,300 bilingual (English/Chinese) numerical-reasoning questions over 8,699 financial images
(tables, charts, statements; often several per question), three difficulty subsets (Easy, Medium,
Hard), each a validation and a test split. Data: the public repository addictedLL/FinMMR @ d8b12cc
(no hub set): its `data/<split>/<grade>_<split>.json` records, `images/`, and the official
prompts `data/<grade>_<split>_<cot|pot>_prompt.json`. Official evaluation: `evaluate/evaluate.py`
and `evaluate/utils/evaluation_utils.py` (restated in benchmarks/finmmr_rule.py), `inference/inference.py`.

Three protocols:
- `cot` / `pot`: the official chain-of-thought / program-of-thought prompts (system; user = the
  images, then the text), greedy; cot's answer extracted by `--judge` with the official prompt or
  by a rule (labelled so), pot's program run in the kernel jail of finbench/sandbox/; judged by the official get_acc.
- `constrained` (default): finbench's prompt, the number read by the numeric grammar decoder
  (after `--think-budget` reasoning where asked), judged by get_acc. No extractor, no code.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, Demo, Judgement, no_open_prompt, options_not_rendered
from finbench.benchmarks.finmmr_rule import get_acc, outcome_value, valid_extraction
from finbench.benchmarks.recognise import requires_columns
from finbench.benchmarks.records import DataError, RawRecord, as_text, read_table, select
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.judging import Judging
from finbench.core.requests import Generate, Number, Prompt, Request, system_message, user_message
from finbench.core.types import NUMERICAL, Prediction, Question
from finbench.sandbox import run_programs, storable

NAME = "finmmr"
HUB_ID = "addictedLL/FinMMR"  # a GitHub repository: FinMMR is read from local files only
DOMAIN_FIELD = "subfield"  # --domain filters subfields; --question-type filters difficulty (easy/medium/hard)
GROUP_COLUMNS = ("difficulty", "language", "source", "subfield", "image_type")  # = the scorer's (execution rate by)
PROTOCOL_NAMES = ("constrained", "cot", "pot")
REQUIRED_COLUMNS = ("question", "ground_truth")  # what makes a record a FinMMR question
FORMS = ("a FinMMR checkout (its data/test split), a data/<split>/ folder, or one <grade>_<split>.json; "
         "images from the nearest images/ folder above the JSON file",)
PROTOCOLS = ("cot (official chain of thought; answer by --judge with the official extraction prompt, or a rule)",
             "pot (official program of thought; solution() run in the sandbox)",
             "constrained (default: numeric grammar decoding)")
METRICS = "accuracy (get_acc, 0.2% relative tolerance) and execution rate, overall and by breakdown"

# ---- official texts (byte for byte: the published <grade>_<split>_<cot|pot>_prompt.json files) -----
COT_SYSTEM = ("You are a financial expert, you are supposed to answer the given question based on the provided image "
              "and context. You need to first think through the problem step by step, identifying the exact variables "
              "and values, and documenting each necessary step. Then you are required to conclude your response with "
              "the final answer in your last sentence as 'Therefore, the answer is {final answer}'. The final answer "
              "should be a numeric value.")
COT_PREFIX = "Let's think step by step to answer the given question.\n"
POT_EXAMPLE = ("```python\ndef solution():\n    # Define variables name and value\n    revenue = 600000\n"
               "    avg_account_receivable = 50000\n    \n    # Do math calculation to get the answer\n"
               "    receivables_turnover = revenue / avg_account_receivable\n    answer = 365 / receivables_turnover\n"
               "    \n    # return answer\n    return answer\n```\n")
POT_SYSTEM = ("You are a financial expert, you are supposed to generate a Python program to answer the given question "
              "based on the provided image and context. The returned value of the program is supposed to be the "
              "answer. Here is an example of the Python program:\n" + POT_EXAMPLE)
POT_PREFIX = ("Please generate a Python program to answer the given question based on the provided image and context. "
              "The format of the program should be the following:\n```python\ndef solution():\n"
              "    # Define variables name and value\n    \n    # Do math calculation to get the answer\n    \n"
              "    # return answer\n```\n\nContinue your output:\n```python\ndef solution():\n"
              "    # Define variables name and value\n")
CONTEXT_LEAD = "The following question context is provided for your reference."
OFFICIAL = {"cot": (COT_SYSTEM, COT_PREFIX), "pot": (POT_SYSTEM, POT_PREFIX)}
# extract_cot_answers: the answer-extraction model's prompt (temperature 0, max_tokens 8192)
EXTRACT_SYSTEM = ('Extract the final answer of the question as a numeric value from the given solution. If you cannot '
                  'extract an answer, return "None".\n\nYou should either return "None" or a numeric value without any '
                  'additional words.')
JUDGE_MAX_NEW_TOKENS = 8192
OFFICIAL_MAX_NEW_TOKENS = 4096  # the repository leaves it to each API's default; finbench's budget
RECORD_NAME = re.compile(r"(easy|medium|hard)_(validation|test)\.json")

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "finmmr-constrained-v1"  # bump whenever the template below changes
INSTRUCTION = "Answer with the final numeric value only, without units."
ANSWER_PREFIX = "Answer:"
ANSWER_IS = re.compile(r"the answer is", re.IGNORECASE)
NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?%?")


# ---- loading ---------------------------------------------------------------------------------
def record_files(source: str | Path) -> list[Path]:
    """The record files of `source`: a file; a checkout (its data/test split); or a folder's
    `<grade>_<split>.json` files (else every .json but the prompt files)."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"--data {source}: not found (FinMMR is read from local files: a checkout of {HUB_ID} "
                        "or its data/<split>/ JSON files)")
    if path.is_file():
        return [path]
    if (path / "data" / "test").is_dir():
        path = path / "data" / "test"
    files = sorted(p for p in path.rglob("*.json") if RECORD_NAME.fullmatch(p.name))
    files = files or sorted(p for p in path.rglob("*.json") if not p.name.endswith("_prompt.json"))
    if not files:
        raise DataError(f"--data {path}: not FinMMR data — no FinMMR JSON files in this folder")
    return files


def _filter_labels(raw: RawRecord) -> tuple[str | None, str | None]:
    """(subfield, difficulty) as the filters read them (records.select): --domain filters the
    subfield, --question-type the difficulty (easy, medium, hard)."""
    if raw.error is not None:
        return None, None
    grade = _label(raw.values.get("grade"))
    return _label(raw.values.get("subfield")), grade.lower() if grade else None


def load_questions(source: str | Path | None = None, limit: int | None = None, domains: Sequence[str] = (),
                   question_types: Sequence[str] = (), notes: list[str] | None = None) -> list[Question]:
    """FinMMR records → Questions, filtered, at most `limit` (records.select, before any image is
    read); a bad record becomes its error."""
    if source is None:
        raise DataError(f"FinMMR has no hub set: pass --data (a checkout of {HUB_ID} or its JSON files)")
    files, records = [], []
    for file in record_files(source):
        for raw in read_table(file, "").records:
            files.append(file)
            records.append(raw)
    prompts = functools.cache(_published_prompts)
    images = functools.cache(lambda file: next((d / "images" for d in file.parents if (d / "images").is_dir()), None))
    return [_unreadable(raw) if raw.error else record_to_question(raw, files[i], images(files[i]), prompts(files[i]))
            for i, raw in select(records, _filter_labels, domains, question_types, limit, notes)]


def _published_prompts(file: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """{protocol: {question_id: (system_input, user_input)}} of the official prompt files beside
    the record file or one folder up (a checkout's data/); a prompt file that cannot be read is
    left out (the prompt is then rebuilt from the record, byte for byte the same)."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for protocol in OFFICIAL:
        for folder in (file.parent, file.parent.parent):
            candidate = folder / f"{file.stem}_{protocol}_prompt.json"
            try:
                items = json.loads(candidate.read_text(encoding="utf-8")) if candidate.is_file() else None
            except (OSError, ValueError):
                items = None
            if isinstance(items, list):
                out[protocol] = {str(i.get("question_id")): (i["system_input"], i["user_input"]) for i in items
                                 if isinstance(i, dict) and isinstance(i.get("system_input"), str)
                                 and isinstance(i.get("user_input"), str)}
                break
    return out


def _unreadable(raw: RawRecord) -> Question:
    return Question(id=raw.origin, benchmark=NAME, kind=NUMERICAL, text="", meta={"difficulty": None},
                    error=f"bad record: {raw.error}")


def _label(value: Any) -> str | None:
    try:
        return as_text(value, "").strip() or None
    except ValueError:
        return None


def _listed(value: Any, name: str) -> list[str]:
    """A list field as published: a JSON list, or the string of a Python list."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value) if value.strip().startswith("[") else [value]
        except (ValueError, SyntaxError):
            raise ValueError(f"{name} {value[:40]!r} is not a list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} is not a list of strings")
    return value


def record_to_question(raw: RawRecord, file: Path, images: Path | None,
                       prompts: Mapping[str, Mapping[str, tuple[str, str]]]) -> Question:
    """One record → Question; anything malformed becomes `Question.error`, never an exception."""
    record = raw.values
    qid = _label(record.get("question_id")) or raw.origin
    grade = (_label(record.get("grade")) or "").lower() or None
    try:
        image_type = ", ".join(_listed(record["img_type"], "img_type")) if record.get("img_type") else None
    except ValueError:
        image_type = None
    meta = {"difficulty": grade, "question_type": grade, "language": _label(record.get("language")),
            "source": _label(record.get("source")), "subfield": _label(record.get("subfield")), "image_type": image_type}
    split = RECORD_NAME.fullmatch(file.name).group(2) if RECORD_NAME.fullmatch(file.name) else \
        (qid.split("-")[1] if qid.count("-") >= 2 else None)
    base = dict(id=qid, benchmark=NAME, kind=NUMERICAL, text=_label(record.get("question")) or "", meta=meta)
    try:
        question, context = as_text(record.get("question"), "question"), as_text(record.get("context"), "context")
        if not question.strip():
            raise ValueError("question is empty")
        truth = record.get("ground_truth")
        if isinstance(truth, str) or not isinstance(truth, (int, float, bool)):
            raise ValueError(f"ground_truth {truth!r} is not a number (the official get_acc asserts one)")
        names = _listed(record.get("images", []), "images")
        data = tuple(_image(name, images) for name in names)
        published = {p: found[qid] for p, found in prompts.items() if qid in found}
        fields = {"context": context, "question_id": qid, "ground_truth": truth, "images": names,
                  "ground_images": _listed(record.get("ground_images", []), "ground_images"),
                  "published": published, "release": split}
        return Question(gold=str(truth), images=data, fields=fields, **base)
    except Exception as err:  # noqa: BLE001 — any malformed field is a per-sample error
        return Question(error=f"bad record: {err}", **base)


def _image(name: str, images: Path | None) -> bytes:
    """`./MultiFinance/images/NAME` → images/NAME of the nearest images/ folder above the JSON."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if images is None or base in ("", ".", ".."):
        raise ValueError(f"image {name!r} not found (no images/ folder above the JSON file)")
    path = images / base
    if not path.is_file():
        raise ValueError(f"image {name!r} not found in {images}")
    return path.read_bytes()


# ---- prompts -----------------------------------------------------------------------------------
def official_prompt(question: Question, protocol: str) -> tuple[str, str]:
    """(system_input, user_input) as published, or rebuilt from the record byte for byte."""
    if protocol in question.fields.get("published", {}):
        return tuple(question.fields["published"][protocol])  # type: ignore[return-value]
    system, prefix = OFFICIAL[protocol]
    context = question.fields.get("context", "")
    lead = f"{CONTEXT_LEAD}{context}\n\n" if context else ""
    return system, f"{lead}Question: {question.text}\n\n{prefix}"


def request(question: Question, protocol: str) -> Request:
    """inference.py's message for cot/pot (system; user = every image, then the text), or
    finbench's numeric prompt (the same images, context and question) for `constrained`."""
    images = tuple(range(len(question.images)))
    if protocol in OFFICIAL:
        system, user = official_prompt(question, protocol)
        return Generate(Prompt((system_message(system), user_message(user, len(images))), images),
                        max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    context = question.fields.get("context", "")
    text = (f"{context.strip()}\n\n" if context.strip() else "") + f"Question: {question.text}\n{INSTRUCTION}"
    return Number(Prompt((user_message(text, len(images)),), images, answer_prefix=ANSWER_PREFIX))


def rule_extraction(text: str) -> str:
    """finbench's rule standing in for the official judge extraction (labelled so): the first
    number after the last "the answer is", else the last number of the text ("" when none)."""
    found = list(ANSWER_IS.finditer(text or ""))
    after = NUMBER.search(text, found[-1].end()) if found else None
    numbers = NUMBER.findall(text or "")
    return (after.group(0) if after else numbers[-1] if numbers else "").rstrip(",")


def extract_program(output: str) -> str:
    """extract_pot_answers: the first ```python block, else the first ``` block, else the text
    with `def solution():` prepended when it lacks one (quirks kept: 'argparse' anywhere → no
    program; one unclosed ``` keeps the text before it)."""
    if not output or "argparse" in output:
        return ""
    blocks = re.findall(r"```python(.*?)```", output, re.DOTALL) or re.findall(r"```(.*?)```", output, re.DOTALL)
    if blocks:
        program = blocks[0].strip("\n")
    elif "def solution():" in output:
        program = output.strip()
    else:
        body = output.split("```")[0] if output.count("```") == 1 else output
        program = "def solution():\n" + ("" if len(output) > 4 and output[:4] == "    " else "    ") + body
    return program.strip("`").strip()


def answer(question: Question, text: str, protocol: str) -> str:
    """The answer judged: cot's extraction by the rule, pot's program (run when judging)."""
    return extract_program(text) if protocol == "pot" else rule_extraction(text)


# ---- judging -----------------------------------------------------------------------------------
def _verdict(text: str, question: Question, source: str) -> Judgement:
    ok = valid_extraction(text)
    acc = get_acc(text, question.fields["ground_truth"]) if ok else 0
    return float(acc), {"source": source, "extracted": text, "execution_rate": int(ok)}


def rule_judgements(questions: Sequence[Question], predictions: Sequence[Prediction], protocol: str,
                    unsafe_sandbox: bool = False) -> list[Judgement]:
    """Every answer's official verdict at once: pot programs run together, each in its own jail
    (`unsafe_sandbox`: without one where none can be built, --unsafe-sandbox; the verdict says so).
    The verdict reads a result's exact text; the stored text has a lone surrogate escaped."""
    if protocol != "pot":  # answers given without their text (score --predictions) were extracted elsewhere
        return [_verdict(p.answer, q, "number" if protocol == "constrained" else "rule" if p.generated_text
                         else "answer") for q, p in zip(questions, predictions)]

    out: list[Judgement] = []
    programs = [extract_program(p.generated_text or p.answer) for p in predictions]
    for question, outcome in zip(questions, run_programs(programs, unsafe=unsafe_sandbox)):
        info = {"source": "program", "execution_rate": int(outcome.ok),
                "extracted": storable(outcome.value) if outcome.ok else "",
                **({"sandbox": outcome.sandbox} if outcome.sandbox != "jail" else {})}
        if not outcome.ok:
            out.append((0.0, {**info, "reason": outcome.reason}))
            continue
        value = outcome_value(outcome.kind, outcome.value, outcome.first_kind)
        out.append((float(get_acc(value, question.fields["ground_truth"])), {**info, "result_type": outcome.kind}))
    return out


def judge_requests(question: Question, prediction: Prediction) -> list[Request]:
    """extract_cot_answers' call (text only, no image) for a cot answer; none for a program or a
    constrained number (decoded with a confidence: nothing to extract)."""
    if (prediction.confidence is not None or not prediction.generated_text
            or prediction.answer != rule_extraction(prediction.generated_text)):
        return []
    user = f"Question: {question.text}\nSolution: {prediction.generated_text}"
    return [Generate(Prompt((system_message(EXTRACT_SYSTEM), user_message(user))), max_new_tokens=JUDGE_MAX_NEW_TOKENS)]


def read_judgement(question: Question, prediction: Prediction, replies: Sequence[str]) -> Judgement:
    """eval_cot: a valid extraction (non-empty, no "none") is judged by get_acc. Quirk not kept:
    the official asks again once when the reply is not valid; a greedy judge would repeat itself."""
    return _verdict(replies[0], question, "judge") if replies else (None, {})


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, hub_set=False, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=ScorerModule("finbench.scoring.finmmr"),
    load=load_questions, request=request, answer=answer, rule_judgements=rule_judgements,
    judging=Judging(judge_requests, read_judgement), rotate=options_not_rendered, open_prompt=no_open_prompt, forms=FORMS,
    protocols=PROTOCOLS, protocol_names=PROTOCOL_NAMES, metrics=METRICS, program_protocols=("pot",),
    recognise=requires_columns("FinMMR", REQUIRED_COLUMNS, files=record_files),  # the files a run would read
    cluster_field="image",  # the image set: pages of one source document (4226-1..3.png), shared by its questions
    demo=Demo(module="finbench.offline.finmmr_synthetic", sizes="FinMMR items per difficulty (4)",
              self_judge=True, judge_max_new_tokens=8))
