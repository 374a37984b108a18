"""A small synthetic data set in FinMME's format, for offline demos and tests.

This is NOT FinMME. FinMME (ACL 2025) lives only on the Hugging Face hub (`luojunyu/FinMME`), and
finbench must run, demo and test without a network. So this module draws financial charts of made-up
numbers with matplotlib (bar, line, pie, candlestick and a rendered table), asks FinMME-style
questions about them and computes every gold answer exactly from the generated numbers.

The records carry FinMME's fields (`image`, `question_text`, `question_type`, `options`, `answer`,
`unit`, `tolerance`, `verified_caption`, `related_sentences`, `knowledge_domain`, plus `id`,
`asset_class`, `chart_type`, `cognitive_dimension`), and `write_parquet` stores them the way Hugging
Face `datasets` stores a data set with an Image feature (an `image` struct {bytes, path} and the
`huggingface` schema metadata), so `datasets.load_dataset("parquet", ...)` yields the same fields,
a decoded PIL image included, as the hub set.

Determinism: item `i` depends only on (seed, i), so a shorter set is a prefix of a longer one, and
the same seed gives a byte-identical parquet file (images are encoded by PIL without metadata,
matplotlib's rc settings are reset to its defaults while drawing, arithmetic is exact).

Each record from `generate_items` also has a private `_data` field (the chart's numbers and what
the question asked) so tests can recompute answers; `write_parquet` leaves it out.

    python -m finbench.offline.finmme_synthetic OUT.parquet [--n 72] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

SINGLE, MULTIPLE, NUMERICAL = "single_choice", "multiple_choice", "numerical"
COMPREHENSIVE = "comprehensive perception"
FINE_GRAINED = "fine-grained perception"
REASONING = "cognition & reasoning"

LETTERS = "ABCDEFGHIJKLMN"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DPI = 64  # every integer pixel size divided by 64 is exact in binary, so images are exactly W×H
WIDTHS = (320, 384, 448, 512, 576, 640)
ASPECTS = (Fraction(3, 4), Fraction(9, 16), Fraction(1, 1), Fraction(2, 3))  # height / width
COLUMNS = (
    "id", "image", "question_text", "question_type", "options", "answer", "unit", "tolerance",
    "verified_caption", "related_sentences", "knowledge_domain", "asset_class", "chart_type",
    "cognitive_dimension",
)  # fmt: skip


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
# Themes: what a chart is about (all entities are fictional; numbers are random)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesTheme:
    """A bar or line series: one metric over periods."""

    domain: str
    asset_class: str
    subject: str  # "Northwind Industries revenue"
    metric: str  # "revenue", as used in questions
    unit: str  # "million USD" or "%"
    periods: str  # "quarters" | "years" | "months"
    level: tuple[float, float]  # range of the first value
    drift: float  # typical relative move per period
    places: int
    context: str
    change: str = "pct"  # numerical question: "pct" (percentage change) or "diff" (difference)


@dataclass(frozen=True)
class ShareTheme:
    """A pie: composition of a whole."""

    domain: str
    asset_class: str
    subject: str  # "Evergreen Balanced Fund asset allocation"
    whole: str  # "portfolio"
    part: str  # "asset class"
    segments: tuple[str, ...]
    total: tuple[float, float]  # range of the whole's size, for the 'value of segment' question
    total_unit: str
    context: str


@dataclass(frozen=True)
class PriceTheme:
    """A candlestick chart of daily prices."""

    domain: str
    asset_class: str
    name: str
    level: tuple[float, float]
    daily_vol: float  # relative
    places: int
    unit: str
    context: str


@dataclass(frozen=True)
class Ratio:
    name: str
    numerator: int  # column index
    denominator: int
    as_percent: bool


@dataclass(frozen=True)
class TableTheme:
    domain: str
    asset_class: str
    subject: str
    entity: str  # "company"
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    unit: str
    draw_row: Callable[[random.Random], list[float]]
    ratio1: Ratio  # single choice and numerical questions
    ratio2: Ratio  # multiple choice question
    context: str


BAR_THEMES = (
    SeriesTheme(
        "Corporate Finance", "Equity", subject="Northwind Industries quarterly revenue",
        metric="revenue", unit="million USD", periods="quarters", level=(180, 420), drift=0.08,
        places=1, context="Northwind Industries is a fictional mid-cap manufacturer that reports "
        "revenue quarterly.",
    ),
    SeriesTheme(
        "Banking", "Equity", subject="Harbor Bank net interest income",
        metric="net interest income", unit="million USD", periods="years", level=(600, 1500),
        drift=0.10, places=1, context="Harbor Bank is a fictional regional lender; net interest "
        "income is its main revenue line.",
    ),
    SeriesTheme(
        "Real Estate", "Real Estate", subject="Lakeside County new home sales",
        metric="the number of new home sales", unit="thousand units", periods="years",
        level=(20, 60), drift=0.12, places=1, context="New home sales count completed sales of "
        "newly built homes in the fictional Lakeside County.",
    ),
    SeriesTheme(
        "Funds & Asset Management", "Multi-asset",
        subject="Evergreen Capital assets under management", metric="total AUM",
        unit="billion USD", periods="years", level=(40, 120), drift=0.10, places=1,
        context="Evergreen Capital is a fictional asset manager; AUM is measured at each year end.",
    ),
    SeriesTheme(
        "Macroeconomics", "Macro", subject="Aldoria merchandise exports",
        metric="the value of merchandise exports", unit="billion USD", periods="years",
        level=(150, 400), drift=0.07, places=1, context="Aldoria is a fictional open economy "
        "whose exports are dominated by manufactured goods.",
    ),
    SeriesTheme(
        "Commodities", "Commodities", subject="Copperline Mining copper output",
        metric="copper output", unit="thousand tonnes", periods="quarters", level=(80, 200),
        drift=0.09, places=1, context="Copperline Mining is a fictional producer operating two "
        "open-pit copper mines.",
    ),
)  # fmt: skip

LINE_THEMES = (
    SeriesTheme(
        "Bond Market", "Fixed Income", subject="Aldoria 10-year government bond yield",
        metric="the 10-year yield", unit="%", periods="months", level=(2.5, 4.5), drift=0.04,
        places=2, change="diff", context="Yields are month-end values of the fictional Aldorian "
        "10-year benchmark bond.",
    ),
    SeriesTheme(
        "Macroeconomics", "Macro", subject="Aldoria CPI inflation (year over year)",
        metric="CPI inflation", unit="%", periods="months", level=(2.0, 7.0), drift=0.06,
        places=1, change="diff", context="Inflation is the year-over-year change of Aldoria's "
        "consumer price index.",
    ),
    SeriesTheme(
        "Foreign Exchange", "Foreign Exchange", subject="ALD/USD exchange rate",
        metric="the ALD/USD rate", unit="USD per ALD", periods="months", level=(1.05, 1.35),
        drift=0.015, places=4, context="Rates are month-end fixings of the fictional Aldorian "
        "dollar against the US dollar.",
    ),
    SeriesTheme(
        "Commodities", "Commodities", subject="Gold spot price", metric="the gold price",
        unit="USD per ounce", periods="months", level=(1700, 2100), drift=0.03, places=0,
        context="Prices are illustrative month-end spot prices.",
    ),
    SeriesTheme(
        "Stock Market", "Equity", subject="Aldoria Composite Index", metric="the index",
        unit="points", periods="months", level=(3200, 4800), drift=0.04, places=0,
        context="The Aldoria Composite is a fictional capitalisation-weighted equity index.",
    ),
)  # fmt: skip

PIE_THEMES = (
    ShareTheme(
        "Funds & Asset Management", "Multi-asset",
        subject="Evergreen Balanced Fund asset allocation", whole="portfolio", part="asset class",
        segments=("Equities", "Government bonds", "Corporate bonds", "Real estate", "Commodities",
                  "Cash"),
        total=(2, 20), total_unit="billion USD", context="Evergreen Balanced Fund is a fictional "
        "multi-asset fund; weights are at quarter end.",
    ),
    ShareTheme(
        "Corporate Finance", "Equity", subject="Northwind Industries revenue by segment",
        whole="revenue", part="segment",
        segments=("Industrial", "Consumer", "Healthcare", "Energy", "Services", "Other"),
        total=(800, 2000), total_unit="million USD", context="Segment revenue is reported for "
        "the fictional Northwind Industries' last fiscal year.",
    ),
    ShareTheme(
        "Banking", "Fixed Income", subject="Harbor Bank loan portfolio by type",
        whole="loan portfolio", part="loan type",
        segments=("Residential mortgages", "Commercial real estate", "Corporate loans",
                  "Consumer loans", "Credit cards", "SME loans"),
        total=(20, 60), total_unit="billion USD",
        context="Shares are of gross loans of the fictional Harbor Bank at year end.",
    ),
    ShareTheme(
        "Foreign Exchange", "Foreign Exchange",
        subject="Aldoria central bank FX reserves by currency", whole="reserves", part="currency",
        segments=("USD", "EUR", "JPY", "GBP", "CNY", "Other"),
        total=(50, 300), total_unit="billion USD", context="Reserves are the fictional Aldorian "
        "central bank's foreign-currency holdings.",
    ),
    ShareTheme(
        "Insurance", "Equity", subject="Shieldline Insurance gross written premiums by line",
        whole="gross written premiums", part="business line",
        segments=("Motor", "Property", "Health", "Life", "Liability", "Marine"),
        total=(500, 3000), total_unit="million USD",
        context="Shieldline Insurance is a fictional multi-line insurer.",
    ),
)  # fmt: skip

PRICE_THEMES = (
    PriceTheme(
        "Stock Market", "Equity", name="NWND (Northwind Industries)", level=(40, 120),
        daily_vol=0.02, places=2, unit="USD",
        context="NWND is the fictional ticker of Northwind Industries' common stock.",
    ),
    PriceTheme(
        "Commodities", "Commodities", name="Aldoria crude oil futures", level=(65, 95),
        daily_vol=0.02, places=2, unit="USD per barrel",
        context="Prices are front-month futures settlements of a fictional crude grade.",
    ),
    PriceTheme(
        "Foreign Exchange", "Foreign Exchange", name="ALD/USD", level=(1.05, 1.35),
        daily_vol=0.005, places=4, unit="USD per ALD",
        context="ALD/USD quotes the fictional Aldorian dollar in US dollars.",
    ),
    PriceTheme(
        "Stock Market", "Equity", name="Aldoria Composite Index", level=(3200, 4800),
        daily_vol=0.01, places=1, unit="points",
        context="The Aldoria Composite is a fictional capitalisation-weighted equity index.",
    ),
)  # fmt: skip


def _company_row(rng: random.Random) -> list[float]:
    revenue = rng.uniform(800, 6000)
    equity = rng.uniform(300, 3000)
    return [revenue, revenue * rng.uniform(0.02, 0.18), equity * rng.uniform(0.3, 2.2), equity]


def _bank_row(rng: random.Random) -> list[float]:
    deposits = rng.uniform(20_000, 90_000)
    assets = deposits * rng.uniform(1.15, 1.5)
    return [deposits * rng.uniform(0.6, 1.1), deposits, assets * rng.uniform(0.004, 0.016), assets]


def _insurer_row(rng: random.Random) -> list[float]:
    premiums = rng.uniform(1_000, 9_000)
    return [premiums, premiums * rng.uniform(0.5, 0.85), premiums * rng.uniform(0.18, 0.35),
            premiums * rng.uniform(0.04, 0.12)]  # fmt: skip


def _reit_row(rng: random.Random) -> list[float]:
    value = rng.uniform(2_000, 15_000)
    noi = value * rng.uniform(0.04, 0.08)
    return [noi * rng.uniform(1.3, 1.6), noi, value, value * rng.uniform(0.25, 0.6)]


TABLE_THEMES = (
    TableTheme(
        "Corporate Finance", "Equity", subject="Selected financials of peer companies, FY2023",
        entity="company",
        rows=("Northwind", "Contoso", "Fabrikam", "Tailspin", "Litware", "Adatum"),
        columns=("Revenue", "Net income", "Total debt", "Equity"), unit="million USD",
        draw_row=_company_row, ratio1=Ratio("net profit margin", 1, 0, True),
        ratio2=Ratio("debt-to-equity ratio", 2, 3, False),
        context="All companies are fictional; net profit margin = net income / revenue.",
    ),
    TableTheme(
        "Banking", "Equity", subject="Balance sheet highlights of regional banks, 2023",
        entity="bank", rows=("Harbor", "Summit", "Riverside", "Keystone", "Pinecrest", "Bayview"),
        columns=("Loans", "Deposits", "Net income", "Total assets"), unit="million USD",
        draw_row=_bank_row, ratio1=Ratio("return on assets", 2, 3, True),
        ratio2=Ratio("loan-to-deposit ratio", 0, 1, True),
        context="All banks are fictional; return on assets = net income / total assets.",
    ),
    TableTheme(
        "Insurance", "Equity", subject="Underwriting results of insurers, 2023",
        entity="insurer",
        rows=("Shieldline", "Anchor", "Meridian", "Beacon", "Crestview", "Oakmont"),
        columns=("Premiums", "Claims", "Expenses", "Inv. income"), unit="million USD",
        draw_row=_insurer_row, ratio1=Ratio("loss ratio", 1, 0, True),
        ratio2=Ratio("expense ratio", 2, 0, True),
        context="All insurers are fictional; loss ratio = claims / premiums.",
    ),
    TableTheme(
        "Real Estate", "Real Estate", subject="Portfolio metrics of listed REITs, 2023",
        entity="REIT", rows=("Lakeside", "Granite", "Urbanis", "Cedar", "Harborview", "Stonegate"),
        columns=("Rental income", "NOI", "Property value", "Debt"), unit="million USD",
        draw_row=_reit_row, ratio1=Ratio("cap rate", 1, 2, True),
        ratio2=Ratio("loan-to-value ratio", 3, 2, True),
        context="All REITs are fictional; cap rate = net operating income / property value.",
    ),
)  # fmt: skip


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


# ---------------------------------------------------------------------------------------------
# Chart types: each returns the figure data, the drawn image and its questions
# ---------------------------------------------------------------------------------------------


def series_questions(
    theme: SeriesTheme, labels: list[str], values: list[Decimal], plan: Plan, rng: random.Random
) -> dict[str, ChartQuestion]:
    """Questions shared by bar and line charts of one series over periods."""
    exact = [Fraction(v) for v in values]
    noun = theme.periods[:-1]  # quarter / year / month
    unit_txt = "" if theme.unit in ("%", "points") else f" {theme.unit}"
    unit_sfx = "%" if theme.unit == "%" else unit_txt
    questions: dict[str, ChartQuestion] = {}

    # single choice: the extreme period (perception) or a change between two periods (reasoning)
    if rng.random() < 0.6:
        which = rng.choice(("highest", "lowest"))
        i = exact.index(max(exact) if which == "highest" else min(exact))
        others = rng.sample([l for j, l in enumerate(labels) if j != i], plan.n_options - 1)
        options, answer = choice([labels[i]], others, None, rng)
        questions[SINGLE] = ChartQuestion(
            SINGLE, f"In which {noun} was {theme.metric} the {which}?", options, answer,
            COMPREHENSIVE, asked={"template": "extreme", "which": which},
        )  # fmt: skip
    else:
        a, b = sorted(rng.sample(range(len(values)), 2))
        span = {"from": labels[a], "to": labels[b]}
        if theme.change == "pct":
            change = pct_change(values[a], values[b])
            wrong_base = (exact[b] - exact[a]) / exact[b] * 100  # divided by the later value
            options, answer = numeric_options(rounded(change, 1), [wrong_base, -change], 1,
                                              plan.n_options, "%", rng)  # fmt: skip
            text = (f"What was the percentage change in {theme.metric} from {labels[a]} to "
                    f"{labels[b]}?")  # fmt: skip
            asked = {"template": "pct_change", **span}
        else:  # a rate: the change is a difference in percentage points
            diff = exact[b] - exact[a]
            options, answer = numeric_options(rounded(diff, theme.places), [-diff], theme.places,
                                              plan.n_options, "", rng)  # fmt: skip
            text = (f"By how many percentage points did {theme.metric} change from {labels[a]} "
                    f"to {labels[b]}?")  # fmt: skip
            asked = {"template": "difference", **span}
        questions[SINGLE] = ChartQuestion(SINGLE, text, options, answer, REASONING, asked=asked)

    # multiple choice: periods above a round threshold (read the value labels)
    gold, wrong, t = split_by_threshold(labels, exact, plan, rng)
    options, answer = choice(gold, wrong, labels, rng)
    questions[MULTIPLE] = ChartQuestion(
        MULTIPLE, f"In which of the following {theme.periods} was {theme.metric} above "
        f"{fmt_threshold(t)}{unit_sfx}? Select all that apply.", options, answer, FINE_GRAINED,
        asked={"template": "above", "threshold": str(t)},
    )  # fmt: skip

    # numerical: percentage change, or a difference in the series' own unit
    a, b = sorted(rng.sample(range(len(values)), 2))
    if theme.change == "pct":
        change = rounded(pct_change(values[a], values[b]), 1)
        questions[NUMERICAL] = ChartQuestion(
            NUMERICAL, f"What was the percentage change in {theme.metric} from {labels[a]} to "
            f"{labels[b]}? Round to one decimal place.", (), str(change), REASONING, "%", 0.1,
            asked={"template": "pct_change", "from": labels[a], "to": labels[b]},
        )  # fmt: skip
    else:
        diff = values[b] - values[a]
        questions[NUMERICAL] = ChartQuestion(
            NUMERICAL, f"By how many percentage points did {theme.metric} change from "
            f"{labels[a]} to {labels[b]}? Use a negative number for a decline.", (),
            str(rounded(diff, theme.places)), REASONING, "percentage points",
            float(Decimal(1).scaleb(-theme.places)),
            asked={"template": "difference", "from": labels[a], "to": labels[b]},
        )  # fmt: skip
    return questions


def bar_chart(theme: SeriesTheme, plan: Plan, rng: random.Random) -> Chart:
    n = rng.randint(6, 8)
    labels = period_labels(theme.periods, n, rng)
    values = distinct_values(rng, lambda r: random_walk(theme, n, r))

    fig, ax = new_axes(plan, f"{theme.subject} ({theme.unit})")
    colour = rng.choice(("#4C72B0", "#55A868", "#8172B2", "#C44E52"))
    bars = ax.bar(range(n), [float(v) for v in values], color=colour)
    # Value labels make the exact numbers readable, as on most report charts.
    ax.bar_label(bars, labels=[f"{v:,}" for v in values], fontsize=plan.font_size - 1, padding=2)
    ax.set_xticks(range(n), labels, rotation=30 if plan.width < 480 else 0)
    ax.set_ylim(0, float(max(values)) * 1.18)
    ax.set_yticks([])  # the value labels carry the numbers, as on many report charts
    ax.spines[["top", "right", "left"]].set_visible(False)
    set_margins(fig, plan, left=8, bottom=38 if plan.width < 480 else 22)

    caption = (f"A bar chart of {theme.subject} in {theme.unit} for {n} {theme.periods} from "
               f"{labels[0]} to {labels[-1]}; each bar is labelled with its value.")  # fmt: skip
    return Chart("bar chart", theme.domain, theme.asset_class, encode(fig, plan), caption,
                 theme.context, {"labels": labels, "values": [str(v) for v in values]},
                 series_questions(theme, labels, values, plan, rng))  # fmt: skip


def line_chart(theme: SeriesTheme, plan: Plan, rng: random.Random) -> Chart:
    n = rng.randint(7, 10)
    labels = period_labels(theme.periods, n, rng)
    values = distinct_values(rng, lambda r: random_walk(theme, n, r))

    fig, ax = new_axes(plan, f"{theme.subject} ({theme.unit})")
    ys = [float(v) for v in values]
    colour = rng.choice(("#1f77b4", "#d62728", "#2ca02c"))
    ax.plot(range(n), ys, marker="o", markersize=3, color=colour)
    span = max(ys) - min(ys)
    for i, (y, v) in enumerate(zip(ys, values)):  # every point labelled, so values are exact
        ax.annotate(f"{v:,}", (i, y), textcoords="offset points", xytext=(0, 5), ha="center",
                    fontsize=plan.font_size - 1)  # fmt: skip
    ax.set_ylim(min(ys) - 0.15 * span, max(ys) + 0.25 * span)
    ax.set_xlim(-0.6, n - 0.4)  # room for the first and last value labels
    ax.set_xticks(range(n), labels, rotation=45, ha="right")
    ax.set_yticks([])  # every point is labelled
    ax.grid(axis="x", alpha=0.3)
    set_margins(fig, plan, left=12, bottom=46)

    caption = (f"A line chart of the {theme.subject} in {theme.unit}, monthly from {labels[0]} to "
               f"{labels[-1]}, with each point labelled with its value.")  # fmt: skip
    return Chart("line chart", theme.domain, theme.asset_class, encode(fig, plan), caption,
                 theme.context, {"labels": labels, "values": [str(v) for v in values]},
                 series_questions(theme, labels, values, plan, rng))  # fmt: skip


def pie_chart(theme: ShareTheme, plan: Plan, rng: random.Random) -> Chart:
    n = rng.randint(max(5, plan.n_options), 6)
    segments = rng.sample(theme.segments, n)

    def draw_shares(r: random.Random) -> list[Decimal]:
        # Shares in tenths of a percent that add up to exactly 100.0, none below 3%.
        cuts = sorted(r.sample(range(1, 1000 - 30 * n), n - 1))
        parts = [b - a + 30 for a, b in zip([0] + cuts, cuts + [1000 - 30 * n])]
        return [Decimal(p).scaleb(-1) for p in parts]

    shares = distinct_values(rng, draw_shares)
    order = sorted(range(n), key=lambda i: shares[i], reverse=True)
    segments, shares = [segments[i] for i in order], [shares[i] for i in order]  # largest first
    exact = [Fraction(s) for s in shares]

    fig, ax = new_axes(plan, theme.subject, suptitle=True)
    wedges, _ = ax.pie([float(s) for s in shares], startangle=90, counterclock=False,
                       wedgeprops={"linewidth": 0.8, "edgecolor": "white"})  # fmt: skip
    ax.legend(wedges, [f"{s}: {p}%" for s, p in zip(segments, shares)], loc="center left",
              bbox_to_anchor=(1.0, 0.5), fontsize=plan.font_size, frameon=False)  # fmt: skip
    ax.set_aspect("equal")
    ax.set_position((0.02, 0.04, 0.44, 1 - 30 / plan.height))  # legend on the right half
    image = encode(fig, plan)

    questions: dict[str, ChartQuestion] = {}
    rank = rng.choice((0, 0, 1, n - 1))  # largest, second largest or smallest
    which = {0: "the largest", 1: "the second-largest", n - 1: "the smallest"}[rank]
    others = rng.sample([s for s in segments if s != segments[rank]], plan.n_options - 1)
    options, answer = choice([segments[rank]], others, None, rng)
    questions[SINGLE] = ChartQuestion(
        SINGLE, f"Which {theme.part} accounts for {which} share of the {theme.whole}?", options,
        answer, COMPREHENSIVE if rank == 0 else FINE_GRAINED,
        asked={"template": "rank", "rank": rank},
    )  # fmt: skip

    gold, wrong, t = split_by_threshold(segments, exact, plan, rng)
    options, answer = choice(gold, wrong, None, rng)
    questions[MULTIPLE] = ChartQuestion(
        MULTIPLE, f"Which of the following {theme.part} categories each account for more than "
        f"{fmt_threshold(t)}% of the {theme.whole}? Select all that apply.", options, answer,
        FINE_GRAINED, asked={"template": "above", "threshold": str(t)},
    )  # fmt: skip

    if rng.random() < 0.5:
        a, b = rng.sample(segments, 2)
        combined = shares[segments.index(a)] + shares[segments.index(b)]
        questions[NUMERICAL] = ChartQuestion(
            NUMERICAL, f"What is the combined share of {a} and {b} in the {theme.whole}?", (),
            f"{combined}%", FINE_GRAINED, "%", 0.1, asked={"template": "combined", "parts": [a, b]},
        )  # fmt: skip
    else:
        part = rng.choice(segments)
        total = dec(rng.uniform(*theme.total), 1)
        value = rounded(Fraction(total) * Fraction(shares[segments.index(part)]) / 100, 2)
        questions[NUMERICAL] = ChartQuestion(
            NUMERICAL, f"If the total {theme.whole} is {total:,} {theme.total_unit}, what is the "
            f"value of {part} in {theme.total_unit}? Round to two decimal places.", (), str(value),
            REASONING, theme.total_unit, 0.01,
            asked={"template": "value_of", "part": part, "total": str(total)},
        )  # fmt: skip

    caption = (f"A pie chart of the {theme.subject} across {n} categories; the legend gives each "
               f"{theme.part}'s share of the {theme.whole} in percent, largest first.")  # fmt: skip
    return Chart("pie chart", theme.domain, theme.asset_class, image, caption, theme.context,
                 {"labels": segments, "shares": [str(s) for s in shares]}, questions)  # fmt: skip


def candlestick_chart(theme: PriceTheme, plan: Plan, rng: random.Random) -> Chart:
    n = rng.randint(10, 12)
    labels = trading_days(n, rng)
    n_up = rng.randint(5, n - 5)  # at least five of each, so any 'select all' split is possible
    up = [True] * n_up + [False] * (n - n_up)
    rng.shuffle(up)
    q = Decimal(1).scaleb(-theme.places)  # one tick
    price = rng.uniform(*theme.level)
    o, h, l, c = [], [], [], []
    for i in range(n):
        move = price * max(abs(rng.gauss(0, theme.daily_vol)), theme.daily_vol / 3)
        op = dec(price * (1 + rng.gauss(0, theme.daily_vol / 4)), theme.places)
        cl = dec(float(op) + (move if up[i] else -move), theme.places)
        if cl == op:
            cl = op + (q if up[i] else -q)
        wick = float(op) * theme.daily_vol
        o.append(op)
        c.append(cl)
        h.append(dec(float(max(op, cl)) + abs(rng.gauss(0, wick / 2)), theme.places))
        l.append(dec(float(min(op, cl)) - abs(rng.gauss(0, wick / 2)), theme.places))
        price = float(cl)
    # The single-choice question asks for the highest high or lowest low: widen that wick so the
    # extreme stands out by at least 6% of the chart's range and can be seen without a ruler.
    which = rng.choice(("highest", "lowest"))
    margin = dec((float(max(h)) - float(min(l))) * 0.06, theme.places) + q
    if which == "highest":
        i = h.index(max(h))
        h[i] = max(h[i], max(h[:i] + h[i + 1:]) + margin)
    else:
        i = l.index(min(l))
        l[i] = min(l[i], min(l[:i] + l[i + 1:]) - margin)

    fig, ax = new_axes(plan, f"{theme.name}, daily ({theme.unit})")
    colours = ["#26a69a" if c[x] > o[x] else "#ef5350" for x in range(n)]  # green up, red down
    ax.vlines(range(n), [float(x) for x in l], [float(x) for x in h], colors=colours, linewidth=1)
    bottoms = [float(min(o[x], c[x])) for x in range(n)]
    heights = [float(abs(c[x] - o[x])) for x in range(n)]
    ax.bar(range(n), heights, bottom=bottoms, width=0.6, color=colours, edgecolor=colours)
    short = [d.rsplit(",", 1)[0] for d in labels]  # "Mar 4": the axis shows the year once
    first, last = labels[0][-4:], labels[-1][-4:]
    years = first if first == last else f"{first}–{last}"
    ax.set_xticks(range(n), short, rotation=45, ha="right")
    ax.set_xlabel(years, fontsize=plan.font_size)
    ax.grid(axis="y", alpha=0.3)
    set_margins(fig, plan, left=48, bottom=56)
    image = encode(fig, plan)

    questions: dict[str, ChartQuestion] = {}
    extreme = "high" if which == "highest" else "low"
    others = rng.sample([d for j, d in enumerate(short) if j != i], plan.n_options - 1)
    options, answer = choice([short[i]], others, None, rng)
    questions[SINGLE] = ChartQuestion(
        SINGLE, f"On which day did {theme.name} reach its {which} intraday price ({extreme}) in "
        "the period shown?", options, answer, FINE_GRAINED,
        asked={"template": "extreme_wick", "which": which},
    )  # fmt: skip

    bearish = [d for j, d in enumerate(short) if not up[j]]
    bullish = [d for j, d in enumerate(short) if up[j]]
    k = plan.n_gold
    gold, wrong = rng.sample(bearish, k), rng.sample(bullish, plan.n_options - k)
    options, answer = choice(gold, wrong, short, rng)
    questions[MULTIPLE] = ChartQuestion(
        MULTIPLE, f"On which of the following days did {theme.name} close below its opening "
        "price? Select all that apply.", options, answer, FINE_GRAINED,
        asked={"template": "bearish"},
    )  # fmt: skip

    questions[NUMERICAL] = ChartQuestion(
        NUMERICAL, f"On how many of the {n} trading days shown did {theme.name} close above its "
        "opening price?", (), str(n_up), FINE_GRAINED, "days", 0.5, asked={"template": "count_up"},
    )  # fmt: skip

    caption = (f"A daily candlestick chart of {theme.name} in {theme.unit} over {n} trading days "
               f"from {labels[0]} to {labels[-1]}; green candles closed above their open and red "
               "candles below it, wicks mark the daily high and low.")  # fmt: skip
    data = {"labels": short, "open": [str(x) for x in o], "high": [str(x) for x in h],
            "low": [str(x) for x in l], "close": [str(x) for x in c]}  # fmt: skip
    return Chart("candlestick chart", theme.domain, theme.asset_class, image, caption,
                 theme.context, data, questions)  # fmt: skip


def ratio_of(row: Sequence[Decimal], ratio: Ratio) -> Fraction:
    value = Fraction(row[ratio.numerator]) / Fraction(row[ratio.denominator])
    return value * 100 if ratio.as_percent else value


def table_chart(theme: TableTheme, plan: Plan, rng: random.Random) -> Chart:
    n = rng.randint(max(5, plan.n_options), 6)
    rows = rng.sample(theme.rows, n)

    def draw_cells(r: random.Random) -> list[list[Decimal]]:
        return [[dec(x, 1) for x in theme.draw_row(r)] for _ in rows]

    while True:  # both ratios distinct across rows, so 'highest' and thresholds are well posed
        cells = draw_cells(rng)
        r1 = [ratio_of(row, theme.ratio1) for row in cells]
        r2 = [ratio_of(row, theme.ratio2) for row in cells]
        if len(set(r1)) == n and len(set(r2)) == n:
            break

    fig, ax = new_axes(plan, f"{theme.subject} ({theme.unit})")
    ax.axis("off")
    # The entity is a first column rather than a row label, which would fall outside the axes.
    header = [theme.entity[0].upper() + theme.entity[1:], *theme.columns]
    text = [[name] + [f"{v:,}" for v in row] for name, row in zip(rows, cells)]
    table = ax.table(cellText=text, colLabels=header, loc="center", cellLoc="right")
    table.auto_set_font_size(False)
    table.set_fontsize(plan.font_size)
    table.scale(1, 1.3)
    set_margins(fig, plan, left=4, bottom=4, right=4)
    image = encode(fig, plan)

    questions: dict[str, ChartQuestion] = {}
    which = rng.choice(("highest", "lowest"))
    i = r1.index(max(r1) if which == "highest" else min(r1))
    others = rng.sample([r for j, r in enumerate(rows) if j != i], plan.n_options - 1)
    options, answer = choice([rows[i]], others, None, rng)
    questions[SINGLE] = ChartQuestion(
        SINGLE, f"Which {theme.entity} has the {which} {theme.ratio1.name}?", options, answer,
        REASONING, asked={"template": "extreme_ratio", "which": which},
    )  # fmt: skip

    gold, wrong, t = split_by_threshold(rows, r2, plan, rng)
    options, answer = choice(gold, wrong, rows, rng)
    cols = theme.columns
    shown = f"{fmt_threshold(t)}%" if theme.ratio2.as_percent else f"{fmt_threshold(t)}x"
    questions[MULTIPLE] = ChartQuestion(
        MULTIPLE, f"Which of the following {theme.entity}s have a {theme.ratio2.name} "
        f"({cols[theme.ratio2.numerator]} / {cols[theme.ratio2.denominator]}) above {shown}? "
        "Select all that apply.", options, answer, REASONING,
        asked={"template": "ratio_above", "threshold": str(t)},
    )  # fmt: skip

    j = rng.randrange(n)
    value = rounded(r1[j], 2)
    questions[NUMERICAL] = ChartQuestion(
        NUMERICAL, f"What is the {theme.ratio1.name} of {rows[j]} "
        f"({cols[theme.ratio1.numerator]} / {cols[theme.ratio1.denominator]}), in percent? "
        "Round to two decimal places.", (), f"{value}%", REASONING, "%", 0.01,
        asked={"template": "ratio", "row": rows[j]},
    )  # fmt: skip

    caption = (f"A table titled '{theme.subject}' in {theme.unit}: {n} {theme.entity}s "
               f"({', '.join(rows)}) by {', '.join(cols)}.")  # fmt: skip
    data = {
        "rows": rows,
        "columns": list(cols),
        "cells": [[str(v) for v in r] for r in cells],
        "ratio1": [theme.ratio1.numerator, theme.ratio1.denominator, theme.ratio1.as_percent],
        "ratio2": [theme.ratio2.numerator, theme.ratio2.denominator, theme.ratio2.as_percent],
    }
    return Chart("table", theme.domain, theme.asset_class, image, caption, theme.context, data,
                 questions)  # fmt: skip


CHART_KINDS: tuple[tuple[Callable[..., Chart], tuple[Any, ...]], ...] = (
    (bar_chart, BAR_THEMES),
    (line_chart, LINE_THEMES),
    (pie_chart, PIE_THEMES),
    (candlestick_chart, PRICE_THEMES),
    (table_chart, TABLE_THEMES),
)


# ---------------------------------------------------------------------------------------------
# The data set
# ---------------------------------------------------------------------------------------------


def plan_item(i: int, rng: random.Random) -> Plan:
    # Types cycle single, multiple, single, numerical (50/25/25); with five chart kinds the
    # cycles are coprime, so every chart kind gets every question type.
    qtype = (SINGLE, MULTIPLE, SINGLE, NUMERICAL)[i % 4]
    n_options = rng.choices((4, 5, 6), weights=(7, 2, 1))[0]
    # Most multi-answer items have 2+ gold letters; every fifth has exactly one, as in FinMME.
    n_gold = 1 if (i // 4) % 5 == 2 else rng.randint(2, n_options - 1)
    width = rng.choice(WIDTHS)
    height = int(width * rng.choice(ASPECTS))
    image_format = "jpeg" if i % 7 == 3 else "png"  # a few JPEGs, as loaders must accept both
    return Plan(qtype, n_options, n_gold, width, height, image_format)


def make_item(i: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"finmme-synthetic/{seed}/{i}")  # str seeds hash with SHA-512: stable
    plan = plan_item(i, rng)
    draw, themes = CHART_KINDS[i % len(CHART_KINDS)]
    theme = themes[(i // len(CHART_KINDS)) % len(themes)]
    chart = draw(theme, plan, rng)
    q = chart.questions[plan.question_type]
    item_id = f"synth-{seed}-{i:04d}"
    suffix = "jpg" if plan.image_format == "jpeg" else "png"
    return {
        "id": item_id,
        "image": {"bytes": chart.image, "path": f"{item_id}.{suffix}"},
        "question_text": q.text,
        "question_type": q.question_type,
        "options": list(q.options),
        "answer": q.answer,
        "unit": q.unit,
        "tolerance": q.tolerance,
        "verified_caption": chart.caption,
        "related_sentences": chart.context,
        "knowledge_domain": chart.knowledge_domain,
        "asset_class": chart.asset_class,
        "chart_type": chart.chart_type,
        "cognitive_dimension": q.cognitive_dimension,
        "_data": {"figure": dict(chart.data), "asked": dict(q.asked)},
    }


def synthetic_chart(i: int, seed: int, tag: str) -> Chart:
    """Chart i of another synthetic set (`tag` names it: FAMMA's and FinMTM's demo data), drawn
    as `make_item` draws FinMME's, with a question of every type; call it inside `charts_context`."""
    rng = random.Random(f"{tag}/{seed}/{i}")
    plan = plan_item(i, rng)
    draw, themes = CHART_KINDS[i % len(CHART_KINDS)]
    return draw(themes[(i // len(CHART_KINDS)) % len(themes)], plan, rng)


@contextlib.contextmanager
def charts_context() -> Iterator[None]:
    """matplotlib's defaults, whatever the user's matplotlibrc says, while charts are drawn."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        yield


def generate_items(n_items: int = 72, seed: int = 0) -> list[dict[str, Any]]:
    """`n_items` FinMME-format records; item i depends only on (seed, i)."""
    import matplotlib

    # A user's matplotlibrc or style must not change the images (or their bytes).
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        return [make_item(i, seed) for i in range(n_items)]


def arrow_schema():  # -> pyarrow.Schema
    import pyarrow as pa

    string = pa.string()
    fields = [
        ("id", string), ("image", pa.struct([("bytes", pa.binary()), ("path", string)])),
        ("question_text", string), ("question_type", string), ("options", pa.list_(string)),
        ("answer", string), ("unit", string), ("tolerance", pa.float64()),
        ("verified_caption", string), ("related_sentences", string), ("knowledge_domain", string),
        ("asset_class", string), ("chart_type", string), ("cognitive_dimension", string),
    ]  # fmt: skip
    # The metadata `datasets` writes, so load_dataset decodes `image` as an Image feature.
    # "Sequence" (not "List") is what both datasets 3.x and newer versions read.
    features: dict[str, Any] = {name: {"dtype": "string", "_type": "Value"} for name, _ in fields}
    features["image"] = {"_type": "Image"}
    features["options"] = {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"}
    features["tolerance"] = {"dtype": "float64", "_type": "Value"}
    meta = {"huggingface": json.dumps({"info": {"features": features}})}
    return pa.schema(fields, metadata=meta)


def write_parquet(path: str | Path, n_items: int = 72, seed: int = 0) -> Path:
    """Write the synthetic set as one parquet file with FinMME's columns; returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = generate_items(n_items, seed)
    table = pa.Table.from_pylist([{k: item[k] for k in COLUMNS} for item in items],
                                 schema=arrow_schema())  # fmt: skip
    pq.write_table(table, path)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output .parquet path")
    parser.add_argument("--n", type=int, default=72, help="number of items (default 72)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write_parquet(args.out, args.n, args.seed)
    print(f"wrote {args.n} items to {path}")


if __name__ == "__main__":
    main()


def demo_data(folder: str | Path, n_items: int | None = None) -> tuple[Path, bool]:
    """`finbench demo`'s FinMME data: FOLDER/finmme-synthetic-N.parquet (72 items), written once."""
    n = n_items or 72
    path = Path(folder) / f"finmme-synthetic-{n}.parquet"
    if path.exists():
        return path, False
    return write_parquet(path, n_items=n), True
