"""Requests as data: what a benchmark asks of a model for one question, under one protocol.

A benchmark turns each question into ONE request (`Benchmark.request`); the runner adds the run's
settings (system prompt, budgets, sampling, thinking: `runner/run_requests.py`), dispatches on the
request's type and keys the cache on the request itself (`runner/keys.py`), so nothing that can
change an answer stays out of the key. Four types, one per way of answering:

- `Choose`   — option letters read from the logits of one prefill (a set, for `multi`);
- `Number`   — greedy decoding inside a number grammar, at most `budget` tokens;
- `Generate` — free generation (the official protocols, open answers), `max_new_tokens` at most;
- `Session`  — free generation turn by turn, each turn seeing the model's earlier replies.

Identical requests (same prompt, images and settings) get one computation: FAMMA's grouped
official call, asked once for all the sub-questions of a main question, is simply the same
`Generate` request for each of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence, Union

from finbench.core.encodable import tokenizable

DEFAULT_NUMERIC_BUDGET = 12  # tokens of a constrained numerical answer (`--numeric-budget`)
IMAGE_ABLATIONS = ("blank", "noise", "none")  # `--image-ablation` modes (Prompt.ablated)
PROBES = ("none-of-the-above", "open-ended")  # `--probe` contamination probes (studies/probes.py)


@dataclass(frozen=True)
class Prompt:
    """What the model is shown: chat messages in the Hugging Face format whose image parts are
    `{"type": "image"}` placeholders, filled in order by the question's images named in `images`
    (indices into `Question.images`); the assistant turn starts with `answer_prefix`.
    `image_rule` names a benchmark's transform of the decoded images ("" = as decoded), e.g.
    FinMME's official JPEG re-encoding. `ablation` replaces every image shown (the image
    ablation study, runner/studies.py): "blank" (white, same size) or "noise" (seeded by the
    image), applied when rendering; "none" has no image parts left at all (`ablated`)."""

    messages: tuple[Mapping[str, Any], ...]
    images: tuple[int, ...] = ()
    answer_prefix: str = ""
    image_rule: str = ""
    ablation: str = ""

    def with_system(self, text: str) -> "Prompt":
        return replace(self, messages=(system_message(text), *self.messages))

    def ablated(self, mode: str) -> "Prompt":
        """The same prompt with its images ablated by `mode` (IMAGE_ABLATIONS); "none" removes
        the image parts from the messages and shows no image."""
        if mode not in IMAGE_ABLATIONS:
            raise ValueError(f"unknown image ablation {mode!r}; expected {', '.join(IMAGE_ABLATIONS)}")
        if mode != "none":
            return replace(self, ablation=mode)
        return replace(self.without_images(), ablation=mode)

    def without_images(self) -> "Prompt":
        """The same prompt with the image parts removed from its messages, showing no image."""
        messages = tuple({**m, "content": [p for p in m["content"] if p.get("type") != "image"]}
                         if isinstance(m.get("content"), list) else m for m in self.messages)
        return replace(self, messages=messages, images=())


@dataclass(frozen=True)
class Choose:
    """Pick one option (or, with `multi`, an ascending set) of `n_options` by their letters.
    `think_budget`: None = no thinking block; N = reason up to N tokens first (0: close at once).
    `rotation`: the options are shown cyclically rotated by this many positions (circular
    evaluation, runner/studies.py; the benchmark rendered them so); 0 = as published.
    `probe`: the contamination probe this asking is (PROBES, studies/probes.py; "" = none)."""

    prompt: Prompt
    n_options: int
    multi: bool = False
    think_budget: int | None = None
    rotation: int = 0
    sampling: tuple[tuple[str, Any], ...] = ()  # the thinking block sampled (--samples: studies/sampling.py)
    probe: str = ""


@dataclass(frozen=True)
class Number:
    """A number (sign, digits, one decimal point, optional %) in at most `budget` tokens."""

    prompt: Prompt
    budget: int = DEFAULT_NUMERIC_BUDGET
    think_budget: int | None = None
    sampling: tuple[tuple[str, Any], ...] = ()  # the thinking block sampled (--samples: studies/sampling.py)


@dataclass(frozen=True)
class Generate:
    """Free text, at most `max_new_tokens`; greedy unless `sampling` gives a temperature > 0
    (sorted (name, value) pairs: temperature, top_p, top_k). `probe`: the contamination probe
    this asking is (a choice item asked open-ended, studies/probes.py; "" = none)."""

    prompt: Prompt
    max_new_tokens: int
    sampling: tuple[tuple[str, Any], ...] = ()
    probe: str = ""


@dataclass(frozen=True)
class Turn:
    """One user turn of a session: `ask` is the message as sent at this turn, `recall` the same
    turn as later turns see it in their history (e.g. without its images)."""

    ask: Mapping[str, Any]
    recall: Mapping[str, Any]


@dataclass(frozen=True)
class Session:
    """Turns asked one after another. Turn k's prompt is `prefix`, then for every earlier turn its
    `recall` message and the model's reply (the text after the first `reply_after` marker when
    one is given, stripped), then turn k's `ask`; the question's `images` fill each turn's image
    placeholders. The generated text is the JSON list of the replies."""

    prefix: tuple[Mapping[str, Any], ...]
    turns: tuple[Turn, ...]
    max_new_tokens: int
    images: tuple[int, ...] = ()
    reply_after: str = ""
    sampling: tuple[tuple[str, Any], ...] = ()

    def turn_prompt(self, replies: Sequence[str]) -> Prompt:
        """The prompt of the turn after `replies`."""
        history: list[Mapping[str, Any]] = []
        for turn, reply in zip(self.turns, replies):
            history += [turn.recall, assistant_message(self.recalled(reply))]
        return Prompt(messages=(*self.prefix, *history, self.turns[len(replies)].ask), images=self.images)

    def recalled(self, reply: str) -> str:
        """A reply as the later turns' history shows it; what a tokenizer cannot take (a lone
        surrogate) as U+FFFD."""
        text = reply or ""
        if self.reply_after:
            text = text.split(self.reply_after, 1)[-1]
        return tokenizable(text.strip())


Request = Union[Choose, Number, Generate, Session]


def text_part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def image_part() -> dict[str, str]:
    return {"type": "image"}


def user_message(text: str, n_images: int = 0, images_first: bool = True) -> dict[str, Any]:
    """A user turn with `n_images` image placeholders before (or after) its text."""
    images = [image_part() for _ in range(n_images)]
    content = images + [text_part(text)] if images_first else [text_part(text)] + images
    return {"role": "user", "content": content}


def assistant_message(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [text_part(text)]}


def system_message(text: str) -> dict[str, Any]:
    return {"role": "system", "content": [text_part(text)]}


def is_generated(request: Request) -> bool:
    """Whether the answer is read from free text (by the benchmark's `answer` rule)."""
    return isinstance(request, (Generate, Session))
