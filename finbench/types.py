"""The shared vocabulary of finbench: what a question, a model request, a prediction and a run are.

Benchmarks produce `Question`s, the runner turns them into `ModelRequest`s for a model adapter,
and writes one `Prediction` per question. Everything here is a frozen dataclass so that values
can be hashed into cache keys and passed between threads without surprises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# Option letters as FinMME's official judge reads them (A–N); a question has at most 14 options.
OPTION_LETTERS = "ABCDEFGHIJKLMN"

# Question kinds the runner knows how to decode. A benchmark maps its own types onto these.
SINGLE = "single"  # exactly one option letter
MULTI = "multi"  # a non-empty set of option letters
NUMERICAL = "numerical"  # a number, judged with a tolerance
OPEN = "open"  # free text, judged by rules or a judge model
KINDS = (SINGLE, MULTI, NUMERICAL, OPEN)

PROTOCOLS = ("constrained", "official")


def option_letters(n_options: int) -> str:
    """The letters naming `n_options` options, in order."""
    if not 0 <= n_options <= len(OPTION_LETTERS):
        raise ValueError(f"{n_options} options; finbench supports at most {len(OPTION_LETTERS)}")
    return OPTION_LETTERS[:n_options]


@dataclass(frozen=True)
class Question:
    """One benchmark item, normalised. `gold` is canonical: ascending letters for choice items
    ("B", "ACD"), a number string for numerical items, free text for open items.

    `meta` holds the grouping columns scores are broken down by (domain, question_type, ...);
    `fields` holds benchmark-specific prompt material (caption, raw options string, ...).
    A record that could not be read still becomes a Question, with `error` set, so that it is
    stored and counted instead of disappearing."""

    id: str
    benchmark: str
    kind: str
    text: str
    options: tuple[str, ...] = ()
    gold: str = ""
    images: tuple[bytes, ...] = ()
    tolerance: float | None = None
    unit: str = ""
    meta: Mapping[str, str] = field(default_factory=dict, hash=False)
    fields: Mapping[str, Any] = field(default_factory=dict, hash=False)
    error: str | None = None

    @property
    def letters(self) -> str:
        return option_letters(len(self.options))


@dataclass(frozen=True)
class ModelRequest:
    """What a model adapter sees: chat messages in the Hugging Face format (image parts are
    `{"type": "image"}` placeholders, filled in order from `images`), and a text the assistant
    turn starts with (e.g. "Answer:") so the next token is the answer."""

    messages: tuple[Mapping[str, Any], ...]
    images: tuple[Any, ...]  # PIL images, decoded and RGB
    answer_prefix: str = ""


@dataclass(frozen=True)
class Prediction:
    """The model's answer to one question, in the same canonical form as `Question.gold`."""

    id: str
    answer: str
    option_logprobs: tuple[float, ...] = ()  # log-probs over the options at the first answer step
    step_logprobs: tuple[tuple[float, ...], ...] = ()  # multi: each step's distribution
    generated_text: str = ""
    n_generated_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """Everything a `finbench run` was asked to do."""

    model: str
    benchmark: str = "finmme"
    data: str | None = None
    protocol: str = "constrained"
    limit: int | None = None
    domains: tuple[str, ...] = ()
    question_types: tuple[str, ...] = ()
    batch_size: int | None = 8  # None = auto
    token_budget: int = 16384  # max total tokens (text + image) per batch
    workers: int = 2  # preprocessing threads
    dtype: str = "auto"
    device: str = "auto"
    quant: str = "none"
    max_new_tokens: int = 1280  # official protocol generation budget
    numeric_budget: int = 12  # tokens for a constrained numerical answer
    max_pixels: int | None = None
    device_preprocess: bool = False  # resize/normalise/patchify images on the model's device
    out: str = "runs/latest"
    cache: str | None = None  # SQLite path; default <out>/cache.sqlite
    seed: int = 0
    bootstrap: int = 1000  # resamples for the confidence intervals in results.json (0 = none)
