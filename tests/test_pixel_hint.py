"""A long run on a CPU says what --max-pixels would give (issue 55, item 10): the hint comes once,
the first time the estimated time left is long (a fake clock: the bound is the estimate, never
this machine's seconds), and its numbers are the processor's own token counts under the smaller
budget, checked against the rule restated; a run that is short, on a GPU, or of a family without a
pixel budget gets none."""

from __future__ import annotations

import io
import math
import types

from rich.console import Console

from finbench.runner.batching import Item


class Clock:
    """perf_counter that moves `step` seconds at each reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def _said(monkeypatch, step: float, hint) -> list[str]:
    from finbench.runner import progress

    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=Clock(step).perf_counter))
    console = Console(file=io.StringIO(), force_terminal=False, width=300)
    with progress.progress(True, 100, console, hint=hint) as advance:
        for _ in range(100):
            advance(1)
    return console.file.getvalue().splitlines()


def test_the_hint_comes_once_when_the_time_left_is_long_and_never_when_it_is_short(monkeypatch):
    asked: list[float] = []

    def hint(left: float) -> str:
        asked.append(left)
        return "hint: smaller images"

    from finbench.runner.progress import LONG_S

    slow = _said(monkeypatch, 60.0, hint)  # a minute per reading: 5 done after minutes, hours left
    assert slow.count("hint: smaller images") == 1 and len(asked) == 1 and asked[0] >= LONG_S, slow
    asked.clear()
    fast = _said(monkeypatch, 0.01, hint)
    assert not asked and "hint: smaller images" not in fast


class StubQwen:
    """A pixel-budget family's processor restated: one token per 28×28 patch, at most 1,000,000 pixels."""

    capabilities = types.SimpleNamespace(pixel_budget=True)

    def image_token_count(self, width: int, height: int) -> int:
        if width * height > 1_000_000:
            scale = math.sqrt(1_000_000 / (width * height))
            width, height = int(width * scale), int(height * scale)
        return math.ceil(width / 28) * math.ceil(height / 28)


def _png(width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_hint_names_a_budget_with_the_processors_counts_under_it():
    from finbench.runner.pixel_hint import pixel_hint

    questions = [types.SimpleNamespace(images=(_png(1400, 1000),)) for _ in range(4)]
    model = StubQwen()
    now = model.image_token_count(1400, 1000)  # 50 × 36 = 1,800 per item
    items = [Item(i, "single", now + 200) for i in range(4)]  # 200 text tokens beside the image
    hint = pixel_hint(model, types.SimpleNamespace(type="cpu"), questions, items)
    line = hint(4 * 3600.0)  # four hours left: even the smallest budget leaves more than LONG_S
    scale = math.sqrt(125_000 / (1400 * 1000))
    then = math.ceil(int(1400 * scale) / 28) * math.ceil(int(1000 * scale) / 28)
    left = 4 * 3600.0 * (200 + then) / (200 + now)
    assert f"at {now:,} image tokens per item; --max-pixels 125000 would make them about {then:,}" in line, line
    assert f"the time left about {int(round(left / 60)) // 60} h" in line or f"about {int(round(left / 60))} min" in line
    # an hour left: the largest budget that brings it under LONG_S is named
    short = hint(3600.0)
    chosen = next(b for b in (1_000_000, 500_000, 250_000, 125_000)
                  if 3600 * (200 + _tokens(model, b)) / (200 + now) < 600 or b == 125_000)
    assert f"--max-pixels {chosen} " in short, short


def _tokens(model: StubQwen, budget: int) -> int:
    scale = min(1.0, math.sqrt(budget / (1400 * 1000)))
    return model.image_token_count(int(1400 * scale), int(1000 * scale))


def test_no_hint_off_the_cpu_without_a_pixel_budget_or_where_no_budget_would_cut(tiny_model, questions):
    from finbench.runner.pixel_hint import pixel_hint

    items = [Item(i, "single", 100) for i in range(4)]
    gpu = types.SimpleNamespace(type="cuda")
    assert pixel_hint(StubQwen(), gpu, questions, items) is None
    no_budget = types.SimpleNamespace(capabilities=types.SimpleNamespace(pixel_budget=False))
    assert pixel_hint(no_budget, types.SimpleNamespace(type="cpu"), questions, items) is None
    # the tiny model's processor keeps its images small already: no budget considered would cut them
    hint = pixel_hint(tiny_model, tiny_model.device, questions, items)
    assert hint is not None and hint(10 * 3600.0) == ""


class Refusing(StubQwen):
    """The real processor's rule on extreme shapes: smart_resize raises for an aspect ratio over 200."""

    def image_token_count(self, width: int, height: int) -> int:
        if max(width, height) / min(width, height) > 200:
            raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(width, height) / min(width, height)}")
        return super().image_token_count(width, height)


def test_an_image_the_processor_refuses_leaves_the_hint_to_the_others_and_the_run_running():
    # such an image is that sample's error when it runs; counting it for the hint stopped the whole
    # run before its first batch (the bad-input corpus' aspect-500 image)
    from finbench.runner.pixel_hint import pixel_hint

    questions = [types.SimpleNamespace(images=(_png(1000, 2),)), types.SimpleNamespace(images=(_png(1400, 1000),))]
    model = Refusing()
    items = [Item(0, "single", 300), Item(1, "single", 2000)]
    hint = pixel_hint(model, types.SimpleNamespace(type="cpu"), questions, items)
    counted = model.image_token_count(1400, 1000)  # the refused image counts 0
    assert f"at {counted / 2:,.0f} image tokens per item" in hint(4 * 3600.0)
