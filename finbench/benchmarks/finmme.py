"""FinMME — Benchmarking Multi-Modal Reasoning in Finance (Luo et al., ACL 2025, arXiv 2505.24714).

11,099 chart questions over 18 knowledge domains: single choice, multiple choice and numerical.
Data: the Hugging Face set `luojunyu/FinMME` (split `train`), or local parquet/arrow/jsonl files
with the same fields. Official evaluator: luo-junyu/FinMME `eval.py` (commit bc37fdf).

Two protocols:
- `constrained` (finbench's default): our prompt below, then the answer is read from option-letter
  logits (single), greedy ascending letter sets (multi) or a number grammar (numerical).
- `official`: the evaluator's own instructions, image re-encoding, free generation at temperature
  0 and its extraction rule, byte for byte, so published numbers can be reproduced.
Scoring (FinScore = domain-normalised accuracy × (1 − P_H)) lives in `finbench.scoring`.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from finbench.benchmarks.base import OPEN_INSTRUCTION, Benchmark, Demo, as_decoded
from finbench.benchmarks.option_lists import parse_options
from finbench.benchmarks.recognise import requires_columns
from finbench.benchmarks.records import (RawRecord, as_text, local_file, missing_columns, open_table, readable_label,
                                         select, skipped_note)
from finbench.benchmarks.scorer import ScorerModule
from finbench.core.requests import Choose, Generate, Number, Prompt, Request, user_message
from finbench.core.types import MULTI, NUMERICAL, OPTION_LETTERS, SINGLE, Question

NAME = "finmme"
HUB_ID = "luojunyu/FinMME"
HUB_SPLIT = "train"
GROUP_COLUMNS = ("domain", "question_type", "kind", "asset_class", "chart_type", "cognitive_dimension")
DOMAIN_FIELD = "domain"  # the meta field --domain filters on (knowledge_domain)

QUESTION_TYPE_TO_KIND = {"single_choice": SINGLE, "multiple_choice": MULTI, "numerical": NUMERICAL}

# ---- official protocol (eval.py), byte for byte -------------------------------------------------
OFFICIAL_INSTRUCTIONS = {
    "single_choice": "Please answer this single choice question about the image. The caption of the image is {verified_caption}. The related sentences are {related_sentences}.\n Please answer the question directly. The answer MUST be of the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem (the single letter of the correct answer, A, B, C, D, etc.).",
    "multiple_choice": "Please answer this multiple choice question about the image. The caption of the image is {verified_caption}. The related sentences are {related_sentences}.\n Please answer the question directly. The answer MUST be of the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem (the letter(s) of the correct answer(s), split by ',').",
    "numerical": "Please answer this numerical question about the image. The unit of the answer is {unit}. The caption of the image is {verified_caption}. The related sentences are {related_sentences}.\n Please answer the question directly.  The answer MUST be of the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem (digit number only, without unit or any other text).",
}
OFFICIAL_ANSWER_PATTERN = re.compile(r"(?i)Answer\s*:\s*([^\s\n]+)")
OFFICIAL_MAX_NEW_TOKENS = 1280
OFFICIAL_IMAGE_MAX_SIDE = 1024
OFFICIAL_JPEG_QUALITY = 80

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "finmme-constrained-v1"  # bump whenever the template below changes: it is in the cache key
CONSTRAINED_TEMPLATE = (
    "Caption of the image: {verified_caption}\n"
    "Related sentences: {related_sentences}\n"
    "Question: {question}\n"
    "{choices}"
    "{instruction}"
)
CONSTRAINED_INSTRUCTIONS = {
    SINGLE: "Answer with the letter of the single correct option.",
    MULTI: "Answer with the letters of all correct options, separated by ','.",
    NUMERICAL: "Answer with a number only, in {unit}.",
}
ANSWER_PREFIX = "Answer:"


# ---- loading ---------------------------------------------------------------------------------
# Without these a FinMME file cannot be evaluated: one start-up line names the file and column.
REQUIRED_COLUMNS = ("question_text", "question_type", "answer", "image")
# Without these it runs, with a warning in results.json: a breakdown or a prompt field is missing.
# Without `knowledge_domain` every row is in domain "" (eval.py's `item.get('knowledge_domain', '')`),
# so F equals accuracy.
OPTIONAL_COLUMNS = ("knowledge_domain", "options", "unit", "tolerance", "verified_caption", "related_sentences",
                    "asset_class", "chart_type", "cognitive_dimension")
MISSING_COLUMN_NOTES = {
    "tolerance": " (numerical items judged with tolerance 0, as eval.py does)",
    "knowledge_domain": " (every question in domain '', as eval.py's item.get('knowledge_domain', '') makes it: "
                        "F equals accuracy)",
}
TEXT_FIELDS = ("question_text", "question_type", "unit", "verified_caption", "related_sentences")


def load_questions(
    source: str | Path | None = None,
    limit: int | None = None,
    domains: Sequence[str] = (),
    question_types: Sequence[str] = (),
    notes: list[str] | None = None,
) -> list[Question]:
    """Read FinMME records from a hub id (default `luojunyu/FinMME`) or local files (a folder may
    mix formats) and normalise them. Filters are applied before images are touched; `limit` keeps
    the first N that pass. Warnings (missing optional columns) are appended to `notes`."""
    table = open_table(source or HUB_ID, HUB_SPLIT, "FinMME", REQUIRED_COLUMNS)  # (notes in this order below)
    if notes is not None:
        notes.extend(f"column {name!r} is missing from the data: treated as empty" + MISSING_COLUMN_NOTES.get(name, "")
                     for name in missing_columns(table, OPTIONAL_COLUMNS))
        notes.extend(skipped_note(table))
    return [record_to_question(raw.values, index, raw.folder, raw.root) if raw.error is None else _unreadable(raw, index)
            for index, raw in select(table.records, _filter_labels, domains, question_types, limit, notes)]


def _filter_labels(raw: RawRecord) -> tuple[str | None, str | None]:
    """(knowledge_domain, question_type) as the filters read them (records.select)."""
    if raw.error is not None:
        return None, None
    return (readable_label(raw.values.get("knowledge_domain", "")),
            readable_label(raw.values.get("question_type")))


def _unreadable(raw: RawRecord, index: int) -> Question:
    return Question(id=raw.origin, benchmark=NAME, kind=SINGLE, text="", meta={"domain": None},
                    error=f"bad record: {raw.error}")


def record_to_question(record: Mapping[str, Any], index: int, folder: str = "", root: str = "") -> Question:
    """One raw record → Question. Anything malformed becomes `Question.error`, never an exception.
    A record whose knowledge_domain is None keeps None: eval.py's group-by leaves it out of F; a
    record without the field is in domain "", as eval.py's `item.get('knowledge_domain', '')`."""
    raw_id = record.get("id") if record.get("id") is not None else record.get("idx", index)
    qid = _text(raw_id, "id") if isinstance(raw_id, (bytes, bytearray)) else str(raw_id)
    domain = record.get("knowledge_domain", "")
    base = dict(id=qid, benchmark=NAME, text="", meta={"domain": None if domain is None else str(domain)})
    try:
        text = {name: _text(record.get(name), name) for name in TEXT_FIELDS}
        qtype = text["question_type"]
        meta = {
            "domain": None if domain is None else _text(domain, "knowledge_domain"),
            "question_type": qtype,
            **{name: _text(record.get(name), name) for name in ("asset_class", "chart_type", "cognitive_dimension")},
        }
        fields = {
            "verified_caption": text["verified_caption"],
            "related_sentences": text["related_sentences"],
            "raw_options": str(record.get("options", "")),  # eval.py puts str(options) in the prompt
            "raw_answer": str(record.get("answer") if record.get("answer") is not None else ""),
        }
        base.update(text=text["question_text"], meta=meta, fields=fields)
        kind = QUESTION_TYPE_TO_KIND.get(qtype)
        if kind is None:
            raise ValueError(f"unknown question_type {qtype!r} (expected {', '.join(QUESTION_TYPE_TO_KIND)})")
        if not text["question_text"].strip():
            raise ValueError("question_text is empty")
        images = _image_bytes(record.get("image"), folder, root)
        options = parse_options(record.get("options")) if kind != NUMERICAL else ()
        if kind != NUMERICAL and not options:
            raise ValueError("empty option list")
        gold = parse_gold(record.get("answer"), kind, len(options))
        tolerance = parse_tolerance(record) if kind == NUMERICAL else None
        return Question(kind=kind, options=options, gold=gold, images=images, tolerance=tolerance,
                        unit=text["unit"], **base)
    except Exception as err:  # noqa: BLE001 — any malformed field is a per-sample error
        kind = QUESTION_TYPE_TO_KIND.get(str(record.get("question_type") or ""), SINGLE)
        return Question(kind=kind, error=f"bad record: {err}", **base)


_text = as_text  # a text field as str; bytes must be UTF-8


def parse_tolerance(record: Mapping[str, Any]) -> float:
    """A numerical item's absolute tolerance. A record without the field gets 0.0, as eval.py's
    `item.get('tolerance', 0.0)` does; a present value must be a finite number ≥ 0 (eval.py would
    judge NaN or negative always wrong and +inf always right, silently)."""
    if "tolerance" not in record:
        return 0.0
    raw = record["tolerance"]
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"tolerance {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"tolerance {raw!r} must be a finite number ≥ 0")
    return value


def _image_bytes(image: Any, folder: str = "", root: str = "") -> tuple[bytes, ...]:
    """The image as stored: bytes, a {bytes, path} struct, a file path (relative to the data
    file's folder, never climbing out of the data's folder `root`), or a decoded PIL image.
    Decoding is left to the runner (per sample)."""
    if image is None:
        raise ValueError("missing image")
    if isinstance(image, str):
        image = {"path": image}
    if isinstance(image, Mapping):
        if image.get("bytes"):
            return (bytes(image["bytes"]),)
        if image.get("path"):
            path = local_file(str(image["path"]), folder, root) if folder else Path(image["path"])
            if path.is_file():
                return (path.read_bytes(),)
            raise ValueError(f"image file {image['path']!r} does not exist")
        raise ValueError("image has neither bytes nor a path")
    if isinstance(image, (bytes, bytearray)):
        if not image:
            raise ValueError("image is empty (0 bytes)")
        return (bytes(image),)
    if hasattr(image, "save"):  # an already decoded PIL image
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return (buffer.getvalue(),)
    raise ValueError(f"unsupported image value of type {type(image).__name__}")


def parse_gold(raw: Any, kind: str, n_options: int) -> str:
    """Canonical gold: ascending letters for choice items ("ACD" from "ACD", "A,C,D", "['A','C']"),
    a plain number string for numerical items ("8.81%" → "8.81")."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        raise ValueError("missing answer")
    text = str(raw).strip()
    if kind == NUMERICAL:
        number = "".join(c for c in text if c.isdigit() or c in ".-")
        float(number)  # raises on an unparseable gold
        return number
    letters = sorted(set(re.findall(r"[A-N]", text.upper())))
    if not letters:
        raise ValueError(f"no option letter in answer {text!r}")
    if any(OPTION_LETTERS.index(c) >= n_options for c in letters):
        raise ValueError(f"answer {text!r} names an option beyond the {n_options} given")
    if kind == SINGLE and len(letters) != 1:
        raise ValueError(f"single-choice answer {text!r} has {len(letters)} letters")
    return "".join(letters)


# ---- prompts -----------------------------------------------------------------------------------
OFFICIAL_IMAGE_RULE = "finmme-official"  # eval.py's re-encoding of every image (`official_image`)


def request(question: Question, protocol: str) -> Request:
    """The one request a question makes under `protocol`."""
    images = tuple(range(len(question.images)))
    if protocol == "official":
        qtype = question.meta["question_type"]
        text = OFFICIAL_INSTRUCTIONS[qtype].format(
            unit=question.unit, verified_caption=question.fields["verified_caption"],
            related_sentences=question.fields["related_sentences"])
        text += f"\nQuestion: {question.text}"
        if qtype != "numerical" and question.fields["raw_options"]:
            text += f"\nOptions: {question.fields['raw_options']}"
        prompt = Prompt(messages=(user_message(text, len(images), images_first=False),), images=images,
                        image_rule=OFFICIAL_IMAGE_RULE)
        return Generate(prompt, max_new_tokens=OFFICIAL_MAX_NEW_TOKENS)
    choices = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    text = CONSTRAINED_TEMPLATE.format(
        verified_caption=question.fields["verified_caption"],
        related_sentences=question.fields["related_sentences"],
        question=question.text, choices=choices,
        instruction=CONSTRAINED_INSTRUCTIONS[question.kind].format(unit=question.unit or "the unit asked"))
    prompt = Prompt(messages=(user_message(text, len(images)),), images=images, answer_prefix=ANSWER_PREFIX)
    if question.kind == NUMERICAL:
        return Number(prompt)
    return Choose(prompt, n_options=len(question.options), multi=question.kind == MULTI)


def open_prompt(question: Question) -> Prompt:
    """The constrained prompt without its options, answered in free text (the open-ended probe)."""
    images = tuple(range(len(question.images)))
    text = CONSTRAINED_TEMPLATE.format(verified_caption=question.fields.get("verified_caption", ""),
                                       related_sentences=question.fields.get("related_sentences", ""),
                                       question=question.text, choices="", instruction=OPEN_INSTRUCTION)
    return Prompt(messages=(user_message(text, len(images)),), images=images, answer_prefix=ANSWER_PREFIX)


def prepare_images(rule: str, images: Sequence[Any]) -> list[Any]:
    """The decoded images as a prompt's `image_rule` asks: eval.py's JPEG path, or as they are."""
    if rule == OFFICIAL_IMAGE_RULE:
        return [official_image(image) for image in images]
    return as_decoded(rule, images)


def official_image(image: Any) -> Any:
    """eval.py's image path: flatten transparency onto white, shrink to fit 1024×1024 (LANCZOS),
    re-encode as JPEG quality 80 — the model sees the JPEG artefacts, so we do too."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "P"):
        background = Image.new("RGB", image.size, (255, 255, 255))
        if image.mode == "P":
            image = image.convert("RGBA")
        background.paste(image, mask=image.split()[-1] if image.mode == "RGBA" else None)
        image = background
    if image.size[0] > OFFICIAL_IMAGE_MAX_SIDE or image.size[1] > OFFICIAL_IMAGE_MAX_SIDE:
        image = image.copy()
        image.thumbnail((OFFICIAL_IMAGE_MAX_SIDE, OFFICIAL_IMAGE_MAX_SIDE), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    if image.mode not in ("RGB", "L", "CMYK"):  # eval.py would crash on these; we convert instead
        image = image.convert("RGB")
    image.save(buffer, format="JPEG", quality=OFFICIAL_JPEG_QUALITY, optimize=True)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def extract_official(text: str) -> str:
    """eval.py's `extract_result`: the first whitespace-free token after the first 'Answer:'
    (case-insensitive), as is. eval.py then normalises it ONCE (removes `**`, `:`, `$`, `\\boxed{`,
    braces) when judging; finbench's scorer does that same single pass, so it is not done here.
    Quirks kept on purpose: 'Answer: A, C' → 'A,' (read as {A}); '**Answer:** B' → '**' (judged
    as empty: wrong)."""
    if not text:
        return ""
    match = OFFICIAL_ANSWER_PATTERN.search(text)
    return match.group(1) if match else ""


def answer(question: Question, text: str, protocol: str) -> str:
    """The answer read from generated text (the official protocol's): `extract_official`."""
    return extract_official(text)


def reply_form(text: str) -> bool:
    """A reply eval.py reads (it holds "Answer:"), not a token it already read from one ("A,C")."""
    return OFFICIAL_ANSWER_PATTERN.search(text or "") is not None


BENCHMARK = Benchmark(
    name=NAME, title=__doc__.splitlines()[0], hub_id=HUB_ID, domain_field=DOMAIN_FIELD, prompt_version=PROMPT_VERSION,
    official_max_new_tokens=OFFICIAL_MAX_NEW_TOKENS, group_columns=GROUP_COLUMNS, scorer=ScorerModule("finbench.scoring.finmme"),
    load=load_questions, request=request, answer=answer, reply_form=reply_form, prepare_images=prepare_images,
    open_prompt=open_prompt,
    recognise=requires_columns("FinMME", REQUIRED_COLUMNS),
    cluster_field="image",  # several questions are asked of one chart; the records carry no image id: its bytes' digest
    metrics="FinScore = F × (1 − P_H) (official eval.py); F, P_H, accuracy; by domain, question type, asset class, "
            "chart type, cognitive dimension; paper variant via `finbench score --variant paper`",
    demo=Demo(module="finbench.offline.finmme_synthetic", sizes="FinMME items (72)", in_home=True,
              short_generation=False))
