"""The synthetic charts' toolkit: the data model (plan, chart, question), exact decimal arithmetic
and option building, matplotlib drawing and period labels. Shared by every synthetic set
(`finmme_synthetic.py` draws with it; FAMMA's and FinMTM's sets reuse its charts)."""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from finbench.offline.chart_themes import SeriesTheme

SINGLE, MULTIPLE, NUMERICAL = "single_choice", "multiple_choice", "numerical"
COMPREHENSIVE = "comprehensive perception"
FINE_GRAINED = "fine-grained perception"
REASONING = "cognition & reasoning"

LETTERS = "ABCDEFGHIJKLMN"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DPI = 64  # every integer pixel size divided by 64 is exact in binary, so images are exactly W×H
WIDTHS = (320, 384, 448, 512, 576, 640)
ASPECTS = (Fraction(3, 4), Fraction(9, 16), Fraction(1, 1), Fraction(2, 3))  # height / width

# ---------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What item i should look like; decided from the item index so every mix is covered."""

    question_type: str
    n_options: int
    n_gold: int  # multiple_choice only
    width: int
    height: int
    image_format: str  # "png" or "jpeg"

    @property
    def font_size(self) -> float:
        # Points at 64 dpi (8 pt = 7 px): small images get small text so labels do not collide.
        return 8 + 2.5 * (self.width - WIDTHS[0]) / (WIDTHS[-1] - WIDTHS[0])


@dataclass(frozen=True)
class ChartQuestion:
    question_type: str
    text: str
    options: tuple[str, ...]
    answer: str
    cognitive_dimension: str
    unit: str = ""
    tolerance: float | None = None
    asked: Mapping[str, Any] = field(default_factory=dict)  # parameters, for recomputation


@dataclass(frozen=True)
class Chart:
    chart_type: str
    knowledge_domain: str
    asset_class: str
    image: bytes
    caption: str
    context: str
    data: Mapping[str, Any]  # the plotted numbers, as strings of exact decimals
    questions: Mapping[str, ChartQuestion]  # question_type -> question


# ---------------------------------------------------------------------------------------------
# Exact numbers and option building
# ---------------------------------------------------------------------------------------------


def dec(x: float, places: int) -> Decimal:
    """A float drawn at random, fixed to the precision the chart will display."""
    return Decimal(f"{x:.{places}f}")


def rounded(x: Fraction | Decimal, places: int) -> Decimal:
    """Round half up, exactly (no binary floats), and never print '-0.0'."""
    x = Fraction(x)
    d = (Decimal(x.numerator) / Decimal(x.denominator)).quantize(
        Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP
    )
    return abs(d) if d == 0 else d


def pct_change(old: Decimal, new: Decimal) -> Fraction:
    return (Fraction(new) - Fraction(old)) / Fraction(old) * 100


def nice_threshold(low: Fraction, high: Fraction) -> Fraction:
    """The roundest number strictly between low and high (low < high), for 'above X' questions."""
    for p in range(6, -7, -1):
        for m in (5, 2, 1):
            step = Fraction(m) * Fraction(10) ** p
            t = (math.floor(low / step) + 1) * step
            if low < t < high:
                return t
    raise ValueError(f"no threshold between {low} and {high}")


def fmt_threshold(t: Fraction) -> str:
    for places in range(7):
        d = rounded(t, places)
        if Fraction(d) == t:
            return f"{d:,}"
    raise ValueError(t)


def choice(
    correct: Sequence[str], wrong: Sequence[str], order: Sequence[str] | None, rng: random.Random
) -> tuple[tuple[str, ...], str]:
    """Options and the gold letters. `order` lists the options in their natural order (e.g.
    chronological); without it the options are shuffled."""
    options = list(correct) + list(wrong)
    if len(set(options)) != len(options):
        raise ValueError(f"duplicate options {options}")
    if order is None:
        rng.shuffle(options)
    else:
        options.sort(key=list(order).index)
    answer = "".join(LETTERS[i] for i, o in enumerate(options) if o in correct)
    return tuple(options), answer


def split_by_threshold(
    labels: Sequence[str], values: Sequence[Fraction], plan: Plan, rng: random.Random
) -> tuple[list[str], list[str], Fraction]:
    """Pick `n_options` labels, of which the `n_gold` largest exceed a round threshold."""
    picked = rng.sample(range(len(labels)), plan.n_options)
    picked.sort(key=lambda i: values[i], reverse=True)
    k = plan.n_gold
    t = nice_threshold(values[picked[k]], values[picked[k - 1]])
    return [labels[i] for i in picked[:k]], [labels[i] for i in picked[k:]], t


def numeric_options(
    correct: Decimal, mistakes: Sequence[Fraction], places: int, n: int, suffix: str,
    rng: random.Random,
) -> tuple[tuple[str, ...], str]:
    """Numeric options in ascending order: the answer at a random rank among plausible mistakes
    and evenly spaced neighbours (nearest first), all distinct once formatted. The rank is drawn
    because ascending order would otherwise put the answer in the same place every time."""
    step = max(rounded(abs(Fraction(correct)) / 5, places), Decimal(1).scaleb(-places))
    wrong = [rounded(m, places) for m in mistakes]
    wrong += [correct + step * k for j in range(1, n) for k in (j, -j)]
    below = list(dict.fromkeys(w for w in wrong if w < correct))
    above = list(dict.fromkeys(w for w in wrong if w > correct))
    n_below = rng.randint(max(0, n - 1 - len(above)), min(n - 1, len(below)))
    values = sorted([correct] + below[:n_below] + above[: n - 1 - n_below])
    options = tuple(f"{v}{suffix}" for v in values)
    return options, LETTERS[values.index(correct)]


def distinct_values(
    rng: random.Random, draw: Callable[[random.Random], list[Decimal]]
) -> list[Decimal]:
    """Redraw until no two values coincide, so 'highest' and threshold questions are well posed."""
    while True:
        values = draw(rng)
        if len(set(values)) == len(values):
            return values


# ---------------------------------------------------------------------------------------------
# Drawing
# ---------------------------------------------------------------------------------------------


def new_axes(plan: Plan, title: str, suptitle: bool = False):  # -> tuple[Figure, Axes]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Figure + Agg canvas directly (not pyplot): no global figure registry, no GUI backend.
    fig = Figure(figsize=(plan.width / DPI, plan.height / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if suptitle:  # centred on the figure, for axes that do not span it (a pie with a legend)
        fig.suptitle(title, fontsize=plan.font_size + 1, y=1 - 6 / plan.height, va="top")
    else:
        ax.set_title(title, fontsize=plan.font_size + 1)
    ax.tick_params(labelsize=plan.font_size)
    return fig, ax


def set_margins(
    fig, plan: Plan, left: float, bottom: float, right: float = 8, top: float = 22
) -> None:
    """Fixed margins in pixels: tight_layout would cost more time than drawing the chart."""
    fig.subplots_adjust(left=left / plan.width, right=1 - right / plan.width,
                        bottom=bottom / plan.height, top=1 - top / plan.height)  # fmt: skip


def encode(fig, plan: Plan) -> bytes:
    """Render and encode with PIL: no timestamps or software tags, so bytes are reproducible."""
    from PIL import Image

    fig.canvas.draw()
    rgb = np.ascontiguousarray(np.asarray(fig.canvas.buffer_rgba())[..., :3])
    image = Image.fromarray(rgb)
    assert image.size == (plan.width, plan.height), image.size
    buf = io.BytesIO()
    if plan.image_format == "png":
        image.save(buf, format="PNG")
    else:
        image.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Period labels
# ---------------------------------------------------------------------------------------------


def period_labels(kind: str, n: int, rng: random.Random) -> list[str]:
    if kind == "years":
        start = rng.randint(2012, 2024 - n)
        return [str(start + i) for i in range(n)]
    if kind == "quarters":
        start = rng.randint(2018 * 4, 2023 * 4 - n)
        return [f"Q{(q % 4) + 1} {q // 4}" for q in range(start, start + n)]
    start = rng.randint(2015 * 12, 2023 * 12)
    return [f"{MONTHS[m % 12]} {m // 12}" for m in range(start, start + n)]


def trading_days(n: int, rng: random.Random) -> list[str]:
    day = date(2022, 1, 3) + timedelta(days=rng.randint(0, 700))
    labels = []
    while len(labels) < n:
        if day.weekday() < 5:
            labels.append(f"{MONTHS[day.month - 1]} {day.day}, {day.year}")
        day += timedelta(days=1)
    return labels


def random_walk(theme: SeriesTheme, n: int, rng: random.Random) -> list[Decimal]:
    x = rng.uniform(*theme.level)
    trend = rng.uniform(-0.5, 1.0) * theme.drift
    values = []
    for _ in range(n):
        values.append(dec(x, theme.places))
        x *= 1 + trend + rng.gauss(0, theme.drift)
    return values
