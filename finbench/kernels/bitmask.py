"""Option sets as int64 bitmasks: letter i of an alphabet is bit i.

A set of option letters ("ACD") becomes one integer (0b1101), so set logic over every question is
a handful of elementwise integer ops: intersection `a & b`, difference `a & ~b`, subset
`(a & ~b) == 0`, size `popcount(a)`. Masks are non-negative and use bits 0..62 only (bit 63 is
the sign bit, kept clear so that right shifts stay logical).

Parsing strings is the one per-string step. It is vectorised with numpy over the strings' code
points: the strings become one fixed-width UCS-4 array, every code point is looked up in a
128-entry table (ASCII), and each row's bits are OR-reduced. Rows with non-ASCII characters take
an exact Python path, because `str.upper()` can map a non-ASCII character onto A–N
(e.g. 'ﬀ'.upper() == 'FF') and the official FinMME judge upper-cases before filtering.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

DEFAULT_ALPHABET = "ABCDEFGHIJKLMN"  # FinMME's official judge reads letters A–N
UNKNOWN_BIT = 62  # a selection that is no option letter at all (e.g. FinMTM's "A,C" string)

# Largest number of code points handled in one numpy block: bounds memory for long raw answers.
_BLOCK_CELLS = 1 << 22


def to_str_array(values: Iterable[Any] | np.ndarray) -> np.ndarray:
    """Values → numpy unicode array; None/NaN become '' and anything else goes through `str`
    (the official judges call `str()` on stored answers)."""
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.dtype.kind == "U":
        return arr
    arr = arr.astype(object, copy=False).ravel()
    missing = pd.isna(arr)
    if missing.any():
        arr = arr.copy()
        arr[missing] = ""
    return arr.astype(str) if len(arr) else np.zeros(0, dtype="<U1")


def _lookup_table(alphabet: str, casefold: bool) -> np.ndarray:
    table = np.zeros(128, dtype=np.int64)
    for bit, letter in enumerate(alphabet):
        table[ord(letter)] = 1 << bit
        if casefold and ord(letter.lower()) < 128:
            table[ord(letter.lower())] = 1 << bit
    return table


def _exact_mask(text: str, alphabet: str, casefold: bool) -> int:
    """The plain rule: bits of the alphabet letters present in `text` (upper-cased first)."""
    source = text.upper() if casefold else text
    mask = 0
    for bit, letter in enumerate(alphabet):
        if letter in source:
            mask |= 1 << bit
    return mask


def letters_to_mask(
    values: Iterable[Any] | np.ndarray,
    alphabet: str = DEFAULT_ALPHABET,
    casefold: bool = True,
) -> torch.Tensor:
    """Bitmask of the alphabet letters present anywhere in each string, order and repeats ignored.

    With `casefold=True` this is `{c for c in s.upper() if c in alphabet}` — the FinMME official
    judge's letter-set rule (`check_answer` in luo-junyu/FinMME eval.py). Returns int64 [N]."""
    if len(alphabet) > UNKNOWN_BIT:
        raise ValueError(f"alphabet of {len(alphabet)} letters does not fit in {UNKNOWN_BIT} bits")
    strings = to_str_array(values)
    n = len(strings)
    out = np.zeros(n, dtype=np.int64)
    width = strings.dtype.itemsize // 4
    if n == 0 or width == 0:
        return torch.from_numpy(out)
    codes = strings.view(np.uint32).reshape(n, width)  # padding code point is 0 → no bit
    table = _lookup_table(alphabet, casefold)
    rows = max(1, _BLOCK_CELLS // width)
    non_ascii = np.zeros(n, dtype=bool)
    for start in range(0, n, rows):
        block = codes[start:start + rows]
        high = block >= 128
        non_ascii[start:start + rows] = high.any(axis=1)
        out[start:start + rows] = np.bitwise_or.reduce(table[np.where(high, 0, block)], axis=1)
    for i in np.flatnonzero(non_ascii):  # rare: exact Python rule, see module docstring
        out[i] = _exact_mask(str(strings[i]), alphabet, casefold)
    return torch.from_numpy(out)


def masks_to_letters(masks: torch.Tensor | Sequence[int], alphabet: str = DEFAULT_ALPHABET) -> list[str]:
    """Inverse of `letters_to_mask` for display: ascending letters; the unknown bit shows as '?'."""
    values = masks.tolist() if isinstance(masks, torch.Tensor) else list(masks)
    letters = []
    for m in values:
        text = "".join(letter for bit, letter in enumerate(alphabet) if m >> bit & 1)
        letters.append(text + ("?" if m >> UNKNOWN_BIT & 1 else ""))
    return letters


def popcount(x: torch.Tensor) -> torch.Tensor:
    """Number of set bits of each non-negative int64 (SWAR bit counting; torch has no popcount).

    Every step keeps values far from overflow: after the 3rd line each byte holds its own count
    (≤ 8), and the byte sums are folded with shifts instead of a wrapping multiply."""
    x = x.to(torch.int64)
    x = x - ((x >> 1) & 0x5555555555555555)
    x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0F
    x = x + (x >> 8)
    x = x + (x >> 16)
    x = x + (x >> 32)
    return x & 0x7F


def intersection_size(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|A ∩ B| per row."""
    return popcount(a & b)


def difference_size(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|A \\ B| per row (e.g. selected options that are not gold)."""
    return popcount(a & ~b)


def is_subset(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A ⊆ B per row."""
    return (a & ~b) == 0


def is_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A = B per row."""
    return a == b


def single_bit_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the lowest set bit (-1 for an empty mask); for one-letter masks, the option index."""
    low = mask & -mask  # isolates the lowest set bit
    return torch.where(mask == 0, torch.full_like(mask, -1), popcount(low - 1))
