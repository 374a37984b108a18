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
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import Benchmark, Demo
from finbench.benchmarks.recognise import requires_columns
from finbench.benchmarks.records import DataError, RawRecord, as_text, local_file, open_table, select
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.judging import Judging
from finbench.core.requests import Choose, Generate, Prompt, Request, user_message
from finbench.core.types import OPEN, SINGLE, Prediction, Question

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
IMAGE_REFERENCE_MAX = 64  # a shorter `image` field is another row's index (VLMEvalKit)
PANDAS_NA = frozenset(("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                       "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"))  # pandas' default na_values
REQUIRED_COLUMNS = ("question", "answer")  # in every data file, with `image` or `image_path`

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "mme-finance-constrained-v1"  # bump whenever the binary template below changes
BINARY_INSTRUCTION = "Answer with the letter of the single correct option."
ANSWER_PREFIX = "Answer:"


# ---- loading ---------------------------------------------------------------------------------
def load_questions(source: str | Path | None = None, limit: int | None = None, domains: Sequence[str] = (),
                   question_types: Sequence[str] = (), notes: list[str] | None = None) -> list[Question]:
    """MME-Finance records from local TSV/jsonl/parquet files (a folder may hold the three sets)
    or the hub → Questions. `domains` filters task categories, `question_types` open / binary;
    both are applied before any image is read."""
    table = open_table(source or HUB_ID, HUB_SPLIT, "MME-Finance", notes=notes)
    _refuse_other_data(table.records)
    shared = _images_by_index(table.records)
    return [_unreadable(raw) if raw.error is not None else record_to_question(raw.values, index, raw, shared)
            for index, raw in select(table.records, _filter_labels, domains, question_types, limit, notes)]


def _filter_labels(raw: RawRecord) -> tuple[str | None, str | None]:
    """(task category, open / binary) as the filters read them (records.select)."""
    return (None, None) if raw.error is not None else _labels(raw.values, _set_of(raw.origin))


def _refuse_other_data(records: Sequence[RawRecord]) -> None:
    """Every data file must hold MME-Finance's columns (question, answer, an image or image_path),
    as each official set does: a file without them (another benchmark's, e.g. FinMTM's objective
    or dialogue files) is refused with one start-up line, not run as a file of broken records."""
    columns: dict[str, set[str]] = {}
    for raw in records:
        columns.setdefault(_file_of(raw.origin), set()).update(raw.values)
    for file, have in columns.items():
        missing = [c for c in REQUIRED_COLUMNS if c not in have] + \
            ([] if have & {"image", "image_path"} else ["image or image_path"])
        if have and missing:
            raise DataError(f"{file}: not MME-Finance data — missing required column(s) {', '.join(missing)} "
                            f"(have: {', '.join(sorted(have))})")


def _file_of(origin: str) -> str:
    return origin.rsplit("[", 1)[0].rsplit(":", 1)[0]


def _images_by_index(records: Sequence[RawRecord]) -> dict[tuple[str, str], str]:
    """VLMEvalKit's TSVs store an image once: a row whose `image` field is short (≤ 64 characters)
    names the `index` of the row that holds it (ImageBaseDataset). {(file, index): image}."""
    return {(_file_of(r.origin), _readable(r.values.get("index"))): image for r in records if r.error is None
            and len(image := _readable(r.values.get("image")).strip()) > IMAGE_REFERENCE_MAX}


def _unreadable(raw: RawRecord) -> Question:
    return Question(id=raw.origin, benchmark=NAME, kind=OPEN, text="", meta={"task_category": None},
                    error=f"bad record: {raw.error}")


def _set_of(origin: str) -> str:
    """The official set a record comes from, by its file name (MMfin, MMfin_CN, MMfin_Binary)."""
    stem = Path(_file_of(origin)).stem
    return stem if stem.lower().startswith("mmfin") else ""


def _labels(record: Mapping[str, Any], official_set: str) -> tuple[str | None, str]:
    """(task category, "binary" or "open"). An official set decides by itself (MMfin and MMfin_CN
    are judged whatever the answer, even a bare Yes); without one, a yes/no answer is binary."""
    if official_set:
        binary = official_set.lower().endswith("binary")
    else:
        binary = _readable(record.get("answer")).strip(BINARY_STRIP).strip().lower() in BINARY_ANSWERS
    return _label(record.get("task_category")), "binary" if binary else "open"


def _readable(value: Any) -> str:
    """A field as text, "" when it is not (record_to_question names the bad field)."""
    try:
        return as_text(value, "")
    except ValueError:
        return ""


def record_to_question(record: Mapping[str, Any], index: int, raw: RawRecord | None = None,
                       shared: Mapping[tuple[str, str], str] | None = None) -> Question:
    """One record → Question; anything malformed becomes `Question.error`, never an exception."""
    origin = raw.origin if raw is not None else ""
    official_set = _set_of(origin)
    category, question_type = _labels(record, official_set)
    binary = question_type == "binary"
    meta = {"task_category": category, "image_type": _label(record.get("image_type")),
            "image_style": _label(record.get("image_style")),
            "language": _language(record, official_set, _readable(record.get("question")) + _readable(record.get("answer"))),
            "question_type": question_type, "set": official_set or None}
    base = dict(id=f"{official_set or 'mmfin'}-{_label(record.get('index')) or index}", benchmark=NAME,
                text=_readable(record.get("question")), meta=meta)
    language = meta["language"]
    try:
        text, answer = as_text(record.get("question"), "question"), as_text(record.get("answer"), "answer")
        if not text.strip():
            raise ValueError("question is empty")
        images = _images(record, raw, official_set, shared or {})
        if not images:
            raise ValueError("no image (neither an image nor an image_path field)")
        fields = {"answer": answer, "background": as_text(record.get("background"), "background"), "language": language}
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


def _label(value: Any) -> str | None:
    return _readable(value).strip() or None


def _language(record: Mapping[str, Any], official_set: str, texts: str) -> str:
    """The prompts' language. An official set decides by itself, as the fork's classes do (MMfin
    English, MMfin_CN and MMfin_Binary Chinese: an English question naming a Chinese company stays
    English); other data by its `language` field, else by whether its text holds Chinese."""
    if official_set:
        return "zh" if official_set.upper().endswith(("_CN", "BINARY")) else "en"
    declared = _label(record.get("language")) or ""
    if declared.lower() in ("zh", "cn", "chinese"):
        return "zh"
    if declared.lower() in ("en", "english"):
        return "en"
    return "zh" if re.search(r"[\u4e00-\u9fff]", texts) else "en"


def _images(record: Mapping[str, Any], raw: RawRecord | None, official_set: str,
            shared: Mapping[tuple[str, str], str]) -> tuple[bytes, ...]:
    """The item's images: VLMEvalKit's base64 `image` field (one image, a list literal of them, or
    the index of the row that holds it), or `image_path` (one path or a list literal) read beside
    the data file or under images/<set>/ as the fork's LMUData layout has it."""
    encoded = as_text(record.get("image"), "image").strip()
    if 0 < len(encoded) <= IMAGE_REFERENCE_MAX:
        key = (_file_of(raw.origin) if raw is not None else "", encoded)
        if key not in shared:
            raise ValueError(f"image field {encoded!r} names no row of this file that holds an image")
        encoded = shared[key]
    if encoded:
        try:
            return tuple(base64.b64decode(item, validate=True) for item in _listed(encoded, "image", "base64 image"))
        except (binascii.Error, ValueError):
            raise ValueError("image field is not base64 (nor a list of base64 images)") from None
    folder, root = (raw.folder, raw.root) if raw is not None else ("", "")
    bases = [Path(folder or "."), Path(folder or ".") / "images" / (official_set or "MMfin"), Path(folder or ".") / "images"]
    out = []
    for path in _listed(as_text(record.get("image_path"), "image_path").strip(), "image_path", "path"):
        found = next((c for c in (local_file(path, base, root or folder) for base in bases) if c.is_file()), None)
        if found is None:
            raise ValueError(f"image file {path!r} not found (read beside the data file or under images/)")
        out.append(found.read_bytes())
    return tuple(out)


def _listed(text: str, name: str, noun: str) -> list[str]:
    """One value, or a Python list literal of them (VLMEvalKit's toliststr)."""
    if not text:
        return []
    if text.startswith("["):
        try:
            return [str(item) for item in ast.literal_eval(text)]
        except (ValueError, SyntaxError, TypeError):
            raise ValueError(f"{name} {text[:40]!r} is neither a {noun} nor a list of {noun}s") from None
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
    return text + "\n" + " | ".join([question.text, truth, as_pandas_reads(prediction_text), ""])


def as_pandas_reads(prediction: str) -> str:
    """The prediction as the fork's judge prompt shows it: it reads the predictions back from its
    .xlsx with pandas (`pd.read_excel`), whose default missing-value strings become NaN, printed
    `str(nan)` = "nan" — an empty reply, or one that is exactly "N/A", "None", "null", …"""
    return "nan" if prediction in PANDAS_NA else prediction


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
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=ScorerModule("finbench.scoring.mme_finance"),
    load=load_questions, request=request, answer=answer, judging=Judging(judge_requests, read_judgement),
    forms=FORMS, protocols=PROTOCOLS, metrics=METRICS,
    # VLMEvalKit keys every row by `index` (ImageBaseDataset): without it, records with a question, an answer
    # and an image (FinChart-Bench's, say) are not MME-Finance data
    recognise=requires_columns("MME-Finance", (*REQUIRED_COLUMNS, "index"), any_of=("image", "image_path"),
                               per_file=True),
    leaderboard_metrics=("binary_accuracy",),  # beside the judge score ×20: the binary set's own headline
    cluster_field="image",  # MME-Finance asks several questions of one image (records share image files)
    language_field="language",  # "zh" or "en" (`_language`): a probe's "None of the above" in the item's language
    demo=Demo(module="finbench.offline.mme_finance_synthetic", sizes="MME-Finance open questions per language (8)",
              self_judge=True))
