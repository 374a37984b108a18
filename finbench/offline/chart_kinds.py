"""The synthetic chart kinds — bar, line, pie, candlestick, table: each draws its figure from a
theme and returns the image, its numbers and a question of every FinMME type, answers computed
exactly."""

from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, Sequence

from finbench.offline.chart_themes import (BAR_THEMES, LINE_THEMES, PIE_THEMES, PRICE_THEMES, PriceTheme, Ratio,
                                           SeriesTheme, ShareTheme, TABLE_THEMES, TableTheme)
from finbench.offline.charts import (COMPREHENSIVE, Chart, ChartQuestion, FINE_GRAINED, MULTIPLE, NUMERICAL, Plan,
                                     REASONING, SINGLE, choice, dec, distinct_values, encode, fmt_threshold, new_axes,
                                     numeric_options, pct_change, period_labels, random_walk, rounded, set_margins,
                                     split_by_threshold, trading_days)

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
