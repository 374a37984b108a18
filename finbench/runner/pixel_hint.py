"""A long run on a CPU says what `--max-pixels` would give. A 7B processor's default pixel budget
makes a chart a thousand image tokens or more, and on a CPU a question's cost grows with its
tokens: such a run can take hours with nothing telling the user why. Where the model's family takes
a pixel budget (`Capabilities.pixel_budget`), the first estimate of the time left that is long
brings one line: the image tokens per item now and under a smaller budget, as the model's own
processor counts them, and the time left that would make (the cost taken as proportional to the
prompt's tokens, text and image). Answers change with the pixels: it is a hint, never applied."""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Sequence

from finbench.runner.batching import Item
from finbench.runner.preprocess import image_size
from finbench.runner.progress import LONG_S  # the time left that asks for the hint

BUDGETS = (1_000_000, 500_000, 250_000, 125_000)  # the --max-pixels values considered, largest first
ITEMS_READ = 200  # the items whose image headers are read for the estimate
WORTH = 0.75  # a budget is named when it cuts the time left to at most this share


def pixel_hint(model: Any, device: Any, questions: Sequence[Any], items: Sequence[Item]) -> Callable[[float], str] | None:
    """`hint(seconds_left)` → the line ("" when no smaller budget would cut the time much), or None
    where no hint applies (not a CPU, a family without a pixel budget, no images)."""
    if getattr(device, "type", str(device)) != "cpu" or not model.capabilities.pixel_budget:
        return None
    sampled = list(items[:ITEMS_READ])
    sizes = [[size for size in map(_size, questions[item.index].images) if size] for item in sampled]
    if not any(sizes):
        return None
    total = sum(item.n_tokens for item in sampled)
    now = _image_tokens(model, sizes, None)

    def hint(seconds_left: float) -> str:
        for budget in BUDGETS:
            then = _image_tokens(model, sizes, budget)
            share = (total - now + then) / max(total, 1)
            if share <= WORTH and (seconds_left * share < LONG_S or budget == BUDGETS[-1]):
                return (f"hint: on the CPU this run needs about {_duration(seconds_left)} more, at "
                        f"{now / len(sampled):,.0f} image tokens per item; --max-pixels {budget} would make them "
                        f"about {then / len(sampled):,.0f} and the time left about {_duration(seconds_left * share)} "
                        "(the answers change with the pixels: a new run, cached apart)")
        return ""

    return hint


def _size(data: bytes) -> tuple[int, int] | None:
    with contextlib.suppress(Exception):  # a broken header is that sample's error when decoding
        return image_size(data)
    return None


def _image_tokens(model: Any, sizes: Sequence[Sequence[tuple[int, int]]], budget: int | None) -> int:
    """The items' image tokens under the processor, each image first scaled to at most `budget` pixels."""
    total = 0
    for width, height in (size for item in sizes for size in item):
        if budget is not None and width * height > budget:
            scale = math.sqrt(budget / (width * height))
            width, height = max(1, int(width * scale)), max(1, int(height * scale))
        with contextlib.suppress(ValueError):  # an image the processor refuses (an aspect over 200) is
            total += model.image_token_count(width, height)  # that sample's error, counted when it runs
    return total


def _duration(seconds: float) -> str:
    minutes = int(round(seconds / 60))
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
