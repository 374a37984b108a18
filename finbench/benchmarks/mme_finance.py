"""MME-Finance — A Multimodal Finance Benchmark for Expert-level Understanding and Reasoning (Gan et al., ACM MM 2025, arXiv 2411.03314).

1,171 English and 1,103 Chinese open-ended questions over financial images (candlestick and
technical-indicator charts, tables, documents, screenshots, photos), 11 task categories, plus
MME-Finance-Binary (Chinese yes/no items). Data: the hub set `hithink-ai/MME-Finance` or local
copies in the official VLMEvalKit layout (`MMfin.tsv`, `MMfin_CN.tsv`, `MMfin_Binary.tsv`, images
under `images/<name>/`), or jsonl/parquet files with the same fields. Official evaluation:
HiThink-Research/MME-Finance @ 70f146b, the authors' VLMEvalKit fork (vlmeval/dataset/image_vqa.py
MMfin, MMfin_CN, MMfin_Binary; vlmeval/dataset/utils/mmfin.py).

Two protocols:
- `official`: the fork's answer prompt (images, then the text), free generation; open answers
  are scored 0–5 by a judge model that SEES THE IMAGE (`--judge`, a local VLM), ×20 per category;
  binary answers by exact match, accuracy and F1.
- `constrained`: binary items from the option-letter logits of one prefill (是/否 as options A/B);
  open items as in `official` (they can only be generated and judged).
The official prompt texts are byte for byte in `mme_finance_texts.json` (extracted verbatim from
the files above). The multi-turn MME-Finance-MT set (MMDU-style judging) is not supported yet.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, Demo
from finbench.benchmarks.records import RawRecord, read_table
from finbench.requests import Choose, Generate, Prompt, Request, user_message
from finbench.scoring import mme_finance as scoring
from finbench.types import OPEN, SINGLE, Prediction, Question

NAME = "mme-finance"
HUB_ID = "hithink-ai/MME-Finance"
HUB_SPLIT = "train"
DOMAIN_FIELD = "task_category"  # --domain filters task categories (OCR, Image Caption, …)
GROUP_COLUMNS = ("task_category", "image_type", "image_style", "language", "question_type")
FORMS = ("VLMEvalKit TSV (MMfin.tsv, MMfin_CN.tsv, MMfin_Binary.tsv; images/<name>/ or base64)",
         "jsonl/parquet with the same fields")
PROTOCOLS = ("official (answer prompt, judge with the image, binary exact match)",
             "constrained (binary items from letter logits; open items generated)")
METRICS = ("open: judge score 0–5 ×20, overall and by task category, image type, image style (needs --judge, "
           "a VLM to show it the image); binary: accuracy and F1 (positive 是)")

# ---- official texts (mme_finance_texts.json: the fork's string constants, verbatim) ----------------
TEXTS = json.loads((Path(__file__).with_name("mme_finance_texts.json")).read_text(encoding="utf-8"))
LANGUAGES = ("en", "zh")
OFFICIAL_MAX_NEW_TOKENS = 2048  # the fork's Qwen2-VL chat default (vlmeval/vlm/qwen2_vl/model.py)
JUDGE_MAX_NEW_TOKENS = 3  # MMfin.evaluate: build_judge(max_tokens=3)
JUDGE_SCALE = 20  # MMfin_acc: mean score (0–5) × 20
BINARY_ANSWERS = {"是": "zh", "否": "zh", "yes": "en", "no": "en"}
BINARY_OPTIONS = {"zh": ("是", "否"), "en": ("Yes", "No")}  # the first is the positive class (F1)
BINARY_STRIP = "。"  # MMfin_Binary.evaluate strips only this from prediction and answer

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "mme-finance-constrained-v1"  # bump whenever the binary template below changes
BINARY_INSTRUCTION = "Answer with the letter of the single correct option."
ANSWER_PREFIX = "Answer:"


# ---- loading ---------------------------------------------------------------------------------
def load_questions(source: str | Path | None = None, limit: int | None = None, domains: Sequence[str] = (),
                   question_types: Sequence[str] = (), notes: list[str] | None = None) -> list[Question]:
    """MME-Finance records from local TSV/jsonl/parquet files (a folder may hold the three sets)
    or the hub → Questions. `domains` filters task categories, `question_types` open / binary."""
    records = _records(Path(source) if source is not None and Path(source).exists() else source)
    if not records:
        raise ValueError(f"{source or HUB_ID}: no MME-Finance records (the data is empty)")
    questions = []
    for index, raw in enumerate(records):
        question = _unreadable(raw) if raw.error is not None else record_to_question(raw.values, index, raw)
        if raw.error is None:
            if domains and question.meta.get("task_category") not in domains:
                continue
            if question_types and question.meta.get("question_type") not in question_types:
                continue
        questions.append(question)
        if limit is not None and len(questions) >= limit:
            break
    return questions


def _records(source: Any) -> list[RawRecord]:
    """Raw records: TSV files read here (VLMEvalKit's format, all fields text), anything else by
    records.read_table; each record knows its file, for its split and its images."""
    if source is None or not isinstance(source, Path):
        return read_table(str(source or HUB_ID), HUB_SPLIT).records
    files = sorted(source.rglob("*.tsv")) if source.is_dir() else ([source] if source.suffix == ".tsv" else [])
    records = [r for f in files for r in _read_tsv(f)]
    others = source.is_dir() and any(p.suffix in (".jsonl", ".json", ".parquet", ".arrow") for p in source.rglob("*"))
    if others or (not source.is_dir() and source.suffix != ".tsv"):
        table = read_table(source, HUB_SPLIT)
        records += [r for r in table.records if not r.origin.endswith(".json")]
    return records


def _read_tsv(path: Path) -> list[RawRecord]:
    import pandas as pd

    try:
        frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=3, encoding="utf-8")
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError) as err:
        raise ValueError(f"--data {path}: not a readable TSV ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    return [RawRecord(f"{path}[{n}]", dict(row), folder=str(path.parent)) for n, row in enumerate(frame.to_dict("records"))]


def _unreadable(raw: RawRecord) -> Question:
    return Question(id=raw.origin, benchmark=NAME, kind=OPEN, text="", meta={"task_category": None},
                    error=f"bad record: {raw.error}")


def _set_of(origin: str) -> str:
    """The official set a record comes from, by its file name (MMfin, MMfin_CN, MMfin_Binary)."""
    stem = Path(origin.split("[")[0].split(":")[0]).stem
    return stem if stem.lower().startswith("mmfin") else ""


def record_to_question(record: Mapping[str, Any], index: int, raw: RawRecord | None = None) -> Question:
    """One record → Question; anything malformed becomes `Question.error`, never an exception."""
    origin = raw.origin if raw is not None else ""
    official_set = _set_of(origin)
    qid = f"{official_set or 'mmfin'}-{_text(record.get('index', index))}"
    answer = _text(record.get("answer"))
    binary = official_set.lower().endswith("binary") or answer.strip(BINARY_STRIP).strip().lower() in BINARY_ANSWERS
    language = _language(record, official_set, answer)
    meta = {"task_category": _label(record.get("task_category")), "image_type": _label(record.get("image_type")),
            "image_style": _label(record.get("image_style")), "language": language,
            "question_type": "binary" if binary else "open", "set": official_set or None}
    base = dict(id=qid, benchmark=NAME, text=_text(record.get("question")), meta=meta)
    try:
        if not base["text"].strip():
            raise ValueError("question is empty")
        images = _images(record, raw.folder if raw is not None else "", official_set)
        if not images:
            raise ValueError("no image (neither an image nor an image_path field)")
        fields = {"answer": answer, "background": _text(record.get("background")), "language": language}
        if binary:
            gold = answer.strip(BINARY_STRIP).strip()
            if gold.lower() not in BINARY_ANSWERS:
                raise ValueError(f"binary answer {answer!r} is not one of {', '.join(sorted(BINARY_ANSWERS))}")
            options = BINARY_OPTIONS[BINARY_ANSWERS[gold.lower()]]
            letter = "A" if gold.lower() in ("是", "yes") else "B"
            return Question(kind=SINGLE, options=options, gold=letter, images=images, fields=fields, **base)
        if not answer.strip():
            raise ValueError("answer is empty")
        return Question(kind=OPEN, gold=answer, images=images, fields=fields, **base)
    except Exception as err:  # noqa: BLE001 — any malformed field is a per-sample error
        return Question(kind=SINGLE if binary else OPEN, error=f"bad record: {err}", **base)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return str(value)


def _label(value: Any) -> str | None:
    text = _text(value).strip()
    return text or None


def _language(record: Mapping[str, Any], official_set: str, answer: str) -> str:
    declared = _text(record.get("language")).strip().lower()
    if declared in ("zh", "cn", "chinese"):
        return "zh"
    if declared in ("en", "english"):
        return "en"
    if official_set.upper().endswith(("_CN", "BINARY")):
        return "zh"
    return "zh" if re.search(r"[\u4e00-\u9fff]", _text(record.get("question")) + answer) else "en"


def _images(record: Mapping[str, Any], folder: str, official_set: str) -> tuple[bytes, ...]:
    """The item's images: VLMEvalKit's base64 `image` field, or `image_path` (one path or a list
    literal) read beside the data file or under images/<set>/ as the fork's LMUData layout has it."""
    encoded = _text(record.get("image")).strip()
    if encoded and len(encoded) > 64:
        try:
            return (base64.b64decode(encoded, validate=True),)
        except (binascii.Error, ValueError):
            raise ValueError("image field is not base64") from None
    paths = _path_list(record.get("image_path"))
    out = []
    root = Path(folder) if folder else Path(".")
    for path in paths:
        if ".." in Path(path).parts:
            raise ValueError(f"image path {path!r} climbs out of the data folder")
        candidates = [root / path, root / "images" / (official_set or "MMfin") / path, root / "images" / path]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise ValueError(f"image file {path!r} not found (read beside the data file or under images/)")
        out.append(found.read_bytes())
    return tuple(out)


def _path_list(value: Any) -> list[str]:
    text = _text(value).strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            items = ast.literal_eval(text)
            return [str(p) for p in items]
        except (ValueError, SyntaxError):
            raise ValueError(f"image_path {text[:40]!r} is neither a path nor a list of paths") from None
    return [text]


# ---- prompts -----------------------------------------------------------------------------------
def official_text(question: Question) -> str:
    """MMfin / MMfin_CN build_prompt's text. Quirk kept: the fork writes "/n" (slash, n), not a
    newline, between the parts; the background follows the requirements with no separator."""
    texts = TEXTS[question.fields["language"]]["answer"]
    text = texts["intro"] + texts["question_lead"] + question.text + texts["requirements_lead"]
    text += texts["format"].get(question.meta.get("task_category") or "", "")
    if question.fields.get("background"):
        text += texts["background_lead"] + question.fields["background"]
    return text


def request(question: Question, protocol: str) -> Request:
    """The one request a question makes: open items generated with the official prompt (images
    first, as the fork's messages put them); binary items the dataset's bare question (official)
    or the question with lettered options read from logits (constrained)."""
    images = tuple(range(len(question.images)))
    if question.kind == OPEN:
        return Generate(Prompt((user_message(official_text(question), len(images)),), images),
                        max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    if protocol == "official":  # ImageBaseDataset.build_prompt: the images, then the question
        return Generate(Prompt((user_message(question.text, len(images)),), images),
                        max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    choices = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    text = f"{question.text.rstrip()}\n{choices}{BINARY_INSTRUCTION}"
    return Choose(Prompt((user_message(text, len(images)),), images, answer_prefix=ANSWER_PREFIX), n_options=2)


def answer(question: Question, text: str, protocol: str) -> str:
    """Generated text as the fork stores it: the prediction whole (binary items are compared after
    stripping only "。", open ones go to the judge as they are)."""
    return text


# ---- judging -----------------------------------------------------------------------------------
def judge_prompt_text(question: Question, prediction_text: str) -> str:
    """build_mmfin_gpt4_prompt (English) / _cn (Chinese): intro, the category's scoring rule, the
    category's answer requirements, the score table with two worked examples, then this item's
    row "question | ground truth | prediction | " (the truth's <AND>/<OR> padded with spaces)."""
    judge = TEXTS[question.fields["language"]]["judge"]
    category = question.meta.get("task_category") or ""
    text = judge["intro"] + judge["rules"].get(category, "") + judge["format_lead"] + judge["format"].get(category, "")
    text += judge["table"] + "".join(examples.get(category, "") for examples in judge["examples"])
    truth = question.gold.replace("<AND>", " <AND> ").replace("<OR>", " <OR> ")
    return text + "\n" + " | ".join([question.text, truth, prediction_text, ""])


def judge_requests(question: Question, prediction: Prediction) -> list[Request]:
    """MMfin_auxeval's judge call: the prompt text, then the item's image (the judge sees it)."""
    if question.kind != OPEN or not question.gold:
        return []
    images = tuple(range(len(question.images)))
    text = judge_prompt_text(question, prediction.answer)
    return [Generate(Prompt((user_message(text, len(images), images_first=False),), images),
                     max_new_tokens=JUDGE_MAX_NEW_TOKENS)]


def judge_score(reply: str) -> int | None:
    """int_cvt: the reply as an integer, else the last integer in 0..5 in it; None when neither
    gives a score in 0..5. Quirk: the fork then retries up to 5 times with temperature i·0.5 and
    scores 0 after the last; finbench asks greedily once, so an unparseable reply scores 0."""
    try:
        score = int(reply)
    except ValueError:
        found = [int(m) for m in re.findall(r"[-+]?\d+", reply)]
        in_range = [s for s in found if 0 <= s <= 5]
        score = in_range[-1] if in_range else None
    return score if score is not None and 0 <= score <= 5 else None


def read_judgement(question: Question, prediction: Prediction, replies: Sequence[str]) -> tuple[float | None, dict]:
    """The judge's 0–5 score of an open answer (0 when the reply has none)."""
    if not replies:
        return None, {}
    score = judge_score(replies[0])
    return float(score if score is not None else 0), {"score": score, "parsed": score is not None}


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=scoring.SCORER,
    load=load_questions, request=request, answer=answer, judge_requests=judge_requests,
    read_judgement=read_judgement, forms=FORMS, protocols=PROTOCOLS, metrics=METRICS,
    demo=Demo(module="finbench.offline.mme_finance_synthetic", sizes="MME-Finance open questions per language (8)",
              self_judge=True))
