"""The shared vocabulary of finbench: what a question, a model request and a prediction are.

Benchmarks produce `Question`s and, for each, one request (`finbench/core/requests.py`); the runner
renders requests as `ModelRequest`s for a model adapter and writes one `Prediction` per question.
Everything here is a frozen dataclass so that values can be hashed into cache keys and passed
between threads without surprises. What a run is asked to do (`RunConfig` and its specs) is the
run's configuration: finbench/config/specs.py.
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
DEFAULT_PROTOCOL = PROTOCOLS[0]  # finbench's own prompts, answers read from the logits (`--protocol`)
DEFAULT_BENCHMARK = "finmme"  # what a run that names no benchmark evaluates (the registry hands it on)
RESULTS_FILE = "results.json"  # a run folder's results, beside samples.parquet
# option values checked at start-up before torch is imported (runner/startup.py `validate`); the
# modules that act on them (models/quant.py, models/loading.py, runner/defaults.py) use these
QUANT_CHOICES = ("none", "8bit", "4bit", "int8wo", "int4wo", "fp8")
DTYPE_NAMES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")  # and auto
AUTO = "auto"  # --batch-size auto: start at 64 rows, halve on out-of-memory (runner/loop.py)


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
    """What a model adapter renders: chat messages in the Hugging Face format (image parts are
    `{"type": "image"}` placeholders, filled in order from `images`), and a text the assistant
    turn starts with (e.g. "Answer:") so the next token is the answer. With `thinking`, the prompt
    ends inside an open thinking block instead (the answer prefix comes after the block closes:
    runner/thinking.py). `text`: the prompt as the adapter's `prompt_text` rendered it, when the
    runner has rendered it already (it is not rendered again); `prefilled` False: the prepared batch
    is not prefilled as it is (free generation, or a thinking step that rebuilds it first), so the
    adapter prepares nothing only a prefill uses."""

    messages: tuple[Mapping[str, Any], ...]
    images: tuple[Any, ...]  # PIL images, decoded and RGB
    answer_prefix: str = ""
    thinking: bool = False
    text: str = ""
    prefilled: bool = True
    n_options: int = 0  # a choice's options (the first n letters): a served model asks the server for them


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
    # probability of the answer as decoded: the chosen option's (single), the product of the
    # chosen steps' (multi, numerical); None when the protocol has none (official, open)
    confidence: float | None = None
    reasoning_text: str = ""  # the thinking block's content (thinking runs)
    reasoning_tokens: int = 0  # tokens generated inside the thinking block, never above the budget
    budget_cut: bool = False  # the thinking budget ran out before the model closed the block
    prompt: str = ""  # the rendered prompt the model saw (or "sha256:<hex>" with --no-log-prompts)
    # what answering cost (runner/loop.py `row_costs`), kept with the sample in the cache; None: not
    # counted (rows cached before these existed, a batch whose accounting failed)
    prompt_tokens: int | None = None  # real tokens prefilled for this row, image placeholders included
    image_tokens: int | None = None  # of those, image placeholder tokens
    generated_tokens: int | None = None  # tokens decoded: reasoning + answer (0 for a scored choice)

