"""Fit a rich table to the console's width without cutting a word.

Rich narrows a table that is too wide by shrinking its widest columns first, down through their
words ("FinSc ore", "model_ty pe" at 80 columns) while narrower columns keep room to spare. Here
each column keeps at least its longest word (a `no_wrap` column its longest cell) and only the
widest columns give way, down to a common cap, so rich then wraps every cell between words. Where
the words alone are wider than the console, the cell padding shrinks to one space after each cell,
then to none (the borders stay); where even that is too wide, rich's own narrowing is left to do
what it can.
"""

from __future__ import annotations

from typing import Any


TIGHTER = ((0, 1, 0, 0), (0, 0, 0, 0))  # the cell padding tried, in turn, where the words do not fit


def _span(console: Any, column: Any) -> tuple[int, int]:
    """(narrowest, widest) content width of a column: its longest word or cell, its longest line."""
    from rich.measure import Measurement

    options = console.options.update_width(10_000)
    found = [Measurement.get(console, options, console.render_str(cell, markup=False) if isinstance(cell, str)
                             else cell) for cell in (column.header, *column.cells)]
    low, high = max(m.minimum for m in found), max(m.maximum for m in found)
    low = max(high if column.no_wrap else low, column.min_width or 0)
    return low, max(low, high)


def _room(table: Any, width: int) -> int:
    """The console width left for the columns' content, after the borders and the padding."""
    _, right, _, left = table.padding
    borders = (len(table.columns) - 1 + (2 if table.show_edge else 0)) if table.box else 0
    edges = 0 if table.pad_edge else left + right
    return width - borders - (left + right) * len(table.columns) + edges


def word_room(console: Any, table: Any, tightest: bool = False) -> bool:
    """Whether `table` can fit `console`'s width with every word whole, at its own padding (at the
    tightest padding fit_words tries, with `tightest`)."""
    words = sum(low for low, _ in (_span(console, column) for column in table.columns))
    if not tightest:
        return words <= _room(table, console.width)
    padding, pad_edge = table.padding, table.pad_edge
    table.padding, table.pad_edge = TIGHTER[-1], False
    room = _room(table, console.width)
    table.padding, table.pad_edge = padding, pad_edge
    return words <= room


def fit_words(console: Any, table: Any) -> None:
    """Cap the widest columns of `table` so that it fits `console`'s width with no word cut."""
    spans = [_span(console, column) for column in table.columns]
    if not spans or sum(high for _, high in spans) <= _room(table, console.width):
        return
    for padding in TIGHTER:  # a word cut is worse than a cell touching its border
        if sum(low for low, _ in spans) <= _room(table, console.width):
            break
        table.padding, table.pad_edge = padding, False
    if sum(low for low, _ in spans) > _room(table, console.width):
        return
    room = _room(table, console.width)
    cap = max(high for _, high in spans)
    while sum(max(low, min(high, cap)) for low, high in spans) > room:
        cap -= 1
    for column, (low, high) in zip(table.columns, spans):
        if high > cap:
            column.max_width = max(low, cap)
