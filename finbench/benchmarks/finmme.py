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

import ast
import io
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from finbench.types import MULTI, NUMERICAL, OPTION_LETTERS, SINGLE, ModelRequest, Question

NAME = "finmme"
HUB_ID = "luojunyu/FinMME"
HUB_SPLIT = "train"
SCORER = "finmme"
GROUP_COLUMNS = ("domain", "question_type", "asset_class", "chart_type", "cognitive_dimension")

QUESTION_TYPE_TO_KIND = {"single_choice": SINGLE, "multiple_choice": MULTI, "numerical": NUMERICAL}

# ---- official protocol (eval.py), byte for byte -------------------------------------------------
OFFICIAL_INSTRUCTIONS = {
    "single_choice": "Please answer this single choice question about the image. The caption of the image is {verified_caption}. The related sentences are {related_sentences}.\n Please answer the question directly. The answer MUST be of the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem (the single letter of the correct answer, A, B, C, D, etc.).",
    "multiple_choice": "Please answer this multiple choice question about the image. The caption of the image is {verified_caption}. The related sentences are {related_sentences}.\n Please answer the question directly. The answer MUST be of the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem (the letter(s) of the correct answer(s), split by ',').",
    "numerical": "Please answer this numerical question about the image. The unit of the answer is {unit}. The caption of the image is {verified_caption}. The related sentences are {related_sentences}.\n Please answer the question directly.  The answer MUST be of the following format: 'Answer: $ANSWER' (without quotes) where $ANSWER is the answer to the problem (digit number only, without unit or any other text).",
}
OFFICIAL_ANSWER_PATTERN = re.compile(r"(?i)Answer\s*:\s*([^\s\n]+)")
# eval.py strips these, in this order, from the extracted token before judging.
OFFICIAL_DEBRIS = ("**", ":", "$\\boxed{", "}$", "\\$", "$", "{", "\\boxed")
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
def load_questions(
    source: str | Path | None = None,
    limit: int | None = None,
    domains: Sequence[str] = (),
    question_types: Sequence[str] = (),
) -> list[Question]:
    """Read FinMME records from a hub id (default `luojunyu/FinMME`) or local files and normalise
    them. Filters are applied before images are touched; `limit` keeps the first N that pass."""
    table = _load_table(source or HUB_ID)
    questions: list[Question] = []
    for index, record in enumerate(table):
        if domains and str(record.get("knowledge_domain")) not in domains:
            continue
        if question_types and str(record.get("question_type")) not in question_types:
            continue
        questions.append(record_to_question(record, index))
        if limit is not None and len(questions) >= limit:
            break
    return questions


def _load_table(source: str | Path) -> Iterable[Mapping[str, Any]]:
    """A `datasets` table with images left as {bytes, path} structs (decoding is the runner's
    parallel job, and a corrupt image must become a per-sample error, not a load failure)."""
    path = Path(source)
    files = []
    if path.exists():
        files = sorted(str(p) for p in path.rglob("*") if p.suffix in _FORMATS) if path.is_dir() else [str(path)]
        if not files:
            raise FileNotFoundError(f"no parquet/arrow/jsonl/json files under {path}")
    try:
        import datasets
    except ImportError:  # e.g. a bare GPU image: plain parquet still works through pyarrow
        if files and all(f.endswith(".parquet") for f in files):
            import pyarrow.parquet as pq

            return [row for f in files for row in pq.read_table(f).to_pylist()]
        raise
    if files:
        table = datasets.load_dataset(_FORMATS[Path(files[0]).suffix], data_files=files, split="train")
    else:
        table = datasets.load_dataset(str(source), split=HUB_SPLIT)
    if "image" in table.column_names and isinstance(table.features.get("image"), datasets.Image):
        table = table.cast_column("image", datasets.Image(decode=False))
    return table


_FORMATS = {".parquet": "parquet", ".arrow": "arrow", ".jsonl": "json", ".json": "json"}


def record_to_question(record: Mapping[str, Any], index: int) -> Question:
    """One raw record → Question. Anything malformed becomes `Question.error`, never an exception."""
    qid = str(record.get("id") if record.get("id") is not None else record.get("idx", index))
    qtype = str(record.get("question_type") or "")
    meta = {
        "domain": str(record.get("knowledge_domain") or ""),
        "question_type": qtype,
        "asset_class": str(record.get("asset_class") or ""),
        "chart_type": str(record.get("chart_type") or ""),
        "cognitive_dimension": str(record.get("cognitive_dimension") or ""),
    }
    fields = {
        "verified_caption": str(record.get("verified_caption") or ""),
        "related_sentences": str(record.get("related_sentences") or ""),
        "raw_options": str(record.get("options", "")),  # eval.py puts str(options) in the prompt
        "raw_answer": str(record.get("answer") if record.get("answer") is not None else ""),
    }
    base = dict(id=qid, benchmark=NAME, text=str(record.get("question_text") or ""), meta=meta, fields=fields)
    try:
        kind = QUESTION_TYPE_TO_KIND.get(qtype)
        if kind is None:
            raise ValueError(f"unknown question_type {qtype!r}")
        images = _image_bytes(record.get("image"))
        options = parse_options(record.get("options")) if kind != NUMERICAL else ()
        if kind != NUMERICAL and not options:
            raise ValueError("empty option list")
        gold = parse_gold(record.get("answer"), kind, len(options))
        tolerance = _float_or_none(record.get("tolerance"))
        return Question(kind=kind, options=options, gold=gold, images=images, tolerance=tolerance,
                        unit=str(record.get("unit") or ""), **base)
    except Exception as err:  # noqa: BLE001 — any malformed field is a per-sample error
        kind = QUESTION_TYPE_TO_KIND.get(qtype, SINGLE)
        return Question(kind=kind, error=f"bad record: {err}", **base)


def _image_bytes(image: Any) -> tuple[bytes, ...]:
    if image is None:
        raise ValueError("missing image")
    if isinstance(image, Mapping):
        if image.get("bytes"):
            return (bytes(image["bytes"]),)
        if image.get("path") and Path(image["path"]).exists():
            return (Path(image["path"]).read_bytes(),)
        raise ValueError("image has neither bytes nor a readable path")
    if isinstance(image, (bytes, bytearray)):
        return (bytes(image),)
    if hasattr(image, "save"):  # an already decoded PIL image
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return (buffer.getvalue(),)
    raise ValueError(f"unsupported image value of type {type(image).__name__}")


_LETTER_PREFIX = re.compile(r"^\s*\(?([A-N])[\.\):：]\s*")


def parse_options(raw: Any) -> tuple[str, ...]:
    """Options as published: a list, a JSON/python list literal in a string, or a letter→text
    dict. A leading "A." / "(A)" / "A:" is stripped when the letters run A, B, C… in order."""
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return ()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            raw = ast.literal_eval(text)  # raises ValueError/SyntaxError on garbage: a per-sample error
    if isinstance(raw, Mapping):
        keys = sorted(str(k).strip().upper() for k in raw)
        if keys != list(OPTION_LETTERS[: len(keys)]):
            raise ValueError(f"option keys {keys} are not A, B, C, ...")
        lookup = {str(k).strip().upper(): v for k, v in raw.items()}
        return tuple(str(lookup[k]).strip() for k in keys)
    if raw is None:
        return ()
    options = [str(o).strip() for o in raw]
    if len(options) > len(OPTION_LETTERS):
        raise ValueError(f"{len(options)} options; at most {len(OPTION_LETTERS)} are supported")
    prefixes = [_LETTER_PREFIX.match(o) for o in options]
    if options and all(m and m.group(1) == OPTION_LETTERS[i] for i, m in enumerate(prefixes)):
        options = [o[m.end():] for o, m in zip(options, prefixes)]
    return tuple(options)


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


def _float_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


# ---- prompts -----------------------------------------------------------------------------------
def build_request(question: Question, images: Sequence[Any], protocol: str) -> ModelRequest:
    """The chat request for one question. `images` are decoded PIL images, in question order."""
    if protocol == "official":
        qtype = question.meta["question_type"]
        text = OFFICIAL_INSTRUCTIONS[qtype].format(
            unit=question.unit, verified_caption=question.fields["verified_caption"],
            related_sentences=question.fields["related_sentences"])
        text += f"\nQuestion: {question.text}"
        if qtype != "numerical" and question.fields["raw_options"]:
            text += f"\nOptions: {question.fields['raw_options']}"
        content = [{"type": "text", "text": text}] + [{"type": "image"} for _ in images]
        return ModelRequest(messages=({"role": "user", "content": content},),
                            images=tuple(official_image(im) for im in images))
    choices = "".join(f"{letter}. {option}\n" for letter, option in zip(question.letters, question.options))
    text = CONSTRAINED_TEMPLATE.format(
        verified_caption=question.fields["verified_caption"],
        related_sentences=question.fields["related_sentences"],
        question=question.text, choices=choices,
        instruction=CONSTRAINED_INSTRUCTIONS[question.kind].format(unit=question.unit or "the unit asked"))
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    return ModelRequest(messages=({"role": "user", "content": content},), images=tuple(images),
                        answer_prefix=ANSWER_PREFIX)


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
    """eval.py's answer rule: the first whitespace-free token after the first 'Answer:'
    (case-insensitive), with markdown/LaTeX debris removed. Quirks kept on purpose:
    'Answer: A, C' → 'A,' (read as {A}); '**Answer:** B' → '' (wrong)."""
    if not text:
        return ""
    match = OFFICIAL_ANSWER_PATTERN.search(text)
    token = match.group(1) if match else ""
    for debris in OFFICIAL_DEBRIS:
        token = token.replace(debris, "")
    return token
