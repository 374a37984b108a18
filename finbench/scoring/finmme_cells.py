"""FinMME metadata strings → official FinScore cells, fast: the Arrow path behind
`scripts/bench_scoring.py`'s end-to-end figure (10M rows of strings encoded in ~70 ms on 2 cores).

`encode_official_cells` returns exactly `finmme.official_cells(factorize(domains),
finmme.multi_answer_mask(question_types == "multiple_choice", letters_to_mask(gold)))`; the tests
compare the two byte for byte (and fuzz them). `finbench score` does not need it (a run has ~11k
rows, scored by `finmme.build_table` in milliseconds); it serves callers that score millions of rows
from string columns (pyarrow arrays, pandas columns, Parquet dictionary columns).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd
import torch

from finbench.core.types import OPTION_LETTERS
from finbench.kernels.bitmask import letters_to_mask, popcount, to_str_array
from finbench.kernels.segments import (PARALLEL_MIN_ELEMENTS, arrow_strings, dictionary_encode_chunks, factorize,
                                       probe_labels)
from finbench.scoring.finmme import KIND_TO_QUESTION_TYPE, MAX_CELL_DOMAINS, multi_answer_mask, official_cells


def encode_official_cells(domains: Any, question_types: Any, gold: Any,
                          n_threads: int | None = None) -> tuple[torch.Tensor, list[Any]]:
    """Metadata strings → (cells uint8 [N], domain labels), exactly
    `official_cells(factorize(domains), multi_answer_mask(question_types == "multiple_choice",
    letters_to_mask(gold)))`, with Arrow doing the string work:
    - plain string columns (`_encode_plain_cells`): chunks of rows in threads; per chunk the
      domains are looked up in the sorted labels of the first rows (Arrow `index_in`) straight
      into the cell bytes, and the multi-answer flags are read from the raw Arrow buffers
      (`_multi_answer_rows`);
    - dictionary-encoded columns (categoricals, Parquet dictionary columns), or a domain first
      seen after the probed rows: domains dictionary-encoded per chunk, then one lookup per row
      (sorted domain id · 2); flags by `_multi_answer_flags`, once per distinct value.
    Columns that are not all strings (numbers, an all-null or all-NaN column, Arrow arrays of
    another type) take the general path on their Python values, with None/NaN read as missing:
    no letters, no domain, never the text 'None' or 'nan'."""
    import pyarrow as pa

    arrays = [arrow_strings(v) for v in (domains, question_types, gold)]
    if any(a is None for a in arrays):
        domains, question_types, gold = (_python_values(v) for v in (domains, question_types, gold))
        domain_ids, labels = factorize(domains)
        is_mc = torch.from_numpy((question_types == "multiple_choice").to_numpy(dtype=bool, copy=True))
        multi = multi_answer_mask(is_mc, letters_to_mask(to_str_array(gold)))
        return official_cells(domain_ids, len(labels), multi), labels
    domain_arr, type_arr, gold_arr = (a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays)
    n = len(domain_arr)
    threads = n_threads or torch.get_num_threads()
    if n and not any(pa.types.is_dictionary(a.type) for a in (domain_arr, type_arr, gold_arr)):
        encoded = _encode_plain_cells(domain_arr, type_arr, gold_arr, threads)
        if encoded is not None:
            return encoded
    step = -(-n // threads) if threads > 1 and n >= PARALLEL_MIN_ELEMENTS else max(n, 1)
    with ThreadPoolExecutor(max(1, threads)) as pool:  # multi-answer flags and domains at the same time
        parts = pool.map(lambda start: _multi_answer_flags(type_arr.slice(start, step), gold_arr.slice(start, step)),
                         range(0, n, step))
        chunks, labels, lookups = dictionary_encode_chunks(domain_arr, n_threads)
        multi = np.concatenate([np.zeros(0, dtype=np.uint8), *parts])
    n_domains = len(labels)
    if n_domains > MAX_CELL_DOMAINS:
        raise ValueError(f"at most {MAX_CELL_DOMAINS} domains in the byte-cell kernel")
    cells = np.empty(n, dtype=np.uint8)
    start = 0
    for chunk, lookup in zip(chunks, lookups):  # missing domain (-1) → slot n_domains
        table = (np.where(lookup < 0, n_domains, lookup) * 2).astype(np.uint8)
        np.add(table[chunk], multi[start:start + len(chunk)], out=cells[start:start + len(chunk)])
        start += len(chunk)
    return torch.from_numpy(cells), labels


def _python_values(values: Any) -> pd.Series:
    """A column of any form (Arrow array, pandas, numpy, list) as a pandas object Series of
    Python values, None where a value is missing (an Arrow null or a float NaN)."""
    import pyarrow as pa

    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_pylist()
    series = pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values.astype(object)
    return series.where(series.notna(), None).reset_index(drop=True)


CELL_CHUNK_ROWS = 1 << 18  # rows per work item (fewer, larger calls; the flags stay in cache)
MULTIPLE_CHOICE = KIND_TO_QUESTION_TYPE["multi"]


def _encode_plain_cells(domain_arr: Any, type_arr: Any, gold_arr: Any,
                        threads: int) -> tuple[torch.Tensor, list[Any]] | None:
    """`encode_official_cells` for plain (not dictionary-encoded) Arrow string columns, by chunks
    of rows:
    - domain part: cell = 2 · (id of the domain among the sorted labels of the first rows,
      `probe_labels` + Arrow `index_in`), a missing domain → slot n_domains;
    - flags part: + 1 on the rows `_multi_answer_rows` finds (read from the Arrow buffers).
    With threads (Arrow and numpy release the GIL) the two parts are separate work items, see
    `_CellJobs`. None when some row holds a domain the first rows lack (the caller then takes
    the general path)."""
    n = len(domain_arr)
    jobs = _CellJobs(domain_arr, _StringBuffers(type_arr), _StringBuffers(gold_arr), threads)
    if not jobs.parallel:
        jobs.set_labels(probe_labels(domain_arr))
        for chunk in range(len(jobs.starts)):
            jobs.run("domain", chunk)
            if jobs.failed:
                return None
            jobs.run("flags", chunk)
    else:
        flag_workers = max(1, round(threads * 0.4))  # the flags part is ~40% of the work
        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(jobs.worker, "flags" if i < flag_workers else "domain") for i in range(threads)]
            try:  # the labels are probed while the workers start on the flags
                jobs.set_labels(probe_labels(domain_arr))
            except BaseException:
                jobs.failed = True  # stops the workers, none waits for labels
                jobs.labels_ready.set()
                raise
            for future in futures:
                future.result()
    if jobs.failed:
        return None
    assert n == 0 or jobs.finished == len(jobs.starts)
    return torch.from_numpy(jobs.cells), jobs.labels.to_pylist()


class _CellJobs:
    """Work items of `_encode_plain_cells`: a domain part and a flags part per chunk of rows.
    Workers prefer one kind and take the other when theirs runs out: a worker in Arrow's hash
    lookups (compute-bound) beside one in the flags' scattered byte reads (memory-bound) slow
    each other down less than two of the same kind. A chunk's flags are added to its cells by
    whichever worker finishes the chunk's second part."""

    def __init__(self, domain_arr: Any, types: _StringBuffers, golds: _StringBuffers, threads: int) -> None:
        import threading
        from collections import deque

        n = len(domain_arr)
        self.parallel = threads > 1 and n >= PARALLEL_MIN_ELEMENTS
        step = min(CELL_CHUNK_ROWS, -(-n // threads)) if self.parallel else CELL_CHUNK_ROWS
        self.starts = list(range(0, n, step))
        self.stops = self.starts[1:] + [n]
        self.domain_arr, self.types, self.golds = domain_arr, types, golds
        self.cells = np.empty(n, dtype=np.uint8)
        self.queues = {"domain": deque(range(len(self.starts))), "flags": deque(range(len(self.starts)))}
        self.rows: list[np.ndarray | None] = [None] * len(self.starts)
        self.parts = [0] * len(self.starts)
        self.finished = 0
        self.failed = False
        self.labels: Any = None
        self.lock = threading.Lock()
        self.labels_ready = threading.Event()

    def set_labels(self, labels: Any) -> None:
        if len(labels) > MAX_CELL_DOMAINS:
            raise ValueError(f"at most {MAX_CELL_DOMAINS} domains in the byte-cell kernel")
        self.labels = labels
        self.labels_ready.set()

    def worker(self, prefer: str) -> None:
        order = (prefer, "flags" if prefer == "domain" else "domain")
        while not self.failed:
            with self.lock:  # flags until the labels are there (they are probed meanwhile)
                kind = next((k for k in order if self.queues[k]
                             and (k == "flags" or self.labels_ready.is_set() or not self.queues["flags"])), None)
                if kind is None:
                    return
                chunk = self.queues[kind].popleft()
            if kind == "domain":
                self.labels_ready.wait()
                if self.failed:
                    return
            self.run(kind, chunk)

    def run(self, kind: str, chunk: int) -> None:
        import pyarrow.compute as pc

        start, stop = self.starts[chunk], self.stops[chunk]
        if kind == "flags":
            self.rows[chunk] = _multi_answer_rows(self.types, self.golds, start, stop)
        else:
            domains = self.domain_arr.slice(start, stop - start)
            codes = pc.index_in(domains, value_set=self.labels)
            if codes.null_count != domains.null_count:  # a label beyond the probed rows
                self.failed = True
                return
            if codes.null_count:
                codes = codes.fill_null(len(self.labels))
            np.multiply(codes.to_numpy(zero_copy_only=False), 2, out=self.cells[start:stop], casting="unsafe")
        with self.lock:
            self.parts[chunk] += 1
            complete = self.parts[chunk] == 2
        if complete:
            self.cells[start:stop][self.rows[chunk]] += 1
            self.rows[chunk] = None
            with self.lock:
                self.finished += 1


class _StringBuffers:
    """numpy views of an Arrow (large_)string array's buffers, for reading rows' bytes in place:
    offsets [n+1] (into `data`), the data bytes, the validity bitmap, and windows of 8 and 16
    bytes starting at every byte (`words8[p]` = bytes p..p+7 as a little-endian uint64)."""

    def __init__(self, arr: Any) -> None:
        import pyarrow as pa

        offset_type = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        validity, offsets, data = arr.buffers()[:3]
        self.array = arr
        self.offsets = np.frombuffer(offsets, dtype=offset_type)[arr.offset:arr.offset + len(arr) + 1]
        self.data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        self.size = self.data.size
        self.validity = np.frombuffer(validity, dtype=np.uint8) if arr.null_count and validity is not None else None
        self.bit_offset = arr.offset
        self.words8 = self._windows("<u8", 8)
        self.words16 = self._windows("V16", 16)

    def _windows(self, dtype: str, width: int) -> np.ndarray | None:
        if self.size < width:
            return None
        return np.ndarray(shape=(self.size - width + 1,), dtype=dtype, buffer=self.data, strides=(1,))

    def valid(self, rows: np.ndarray) -> np.ndarray:
        """Validity of the given rows (absolute row numbers of the array)."""
        if self.validity is None:
            return np.ones(len(rows), dtype=bool)
        bits = rows + self.bit_offset
        return ((self.validity[bits >> 3] >> (bits & 7)) & 1).astype(bool)

    def equals(self, starts: np.ndarray, pattern: bytes) -> np.ndarray:
        """data[starts[i] : starts[i] + len(pattern)] == pattern (bool [len(starts)]) for ascending
        starts of rows len(pattern) ≤ 16 bytes long: one 16-byte window per row, compared as two
        masked words. Windows that would run past the end of the data are compared byte by byte."""
        width = len(pattern)
        words = np.frombuffer(pattern.ljust(16, b"\0"), dtype="<u8")
        masks = np.frombuffer(b"\xff" * width + b"\0" * (16 - width), dtype="<u8")
        last = self.size - 16
        near_end = len(starts) and starts[-1] > last  # starts ascend: only the last rows can be
        if self.words16 is None:
            window = np.zeros((len(starts), 2), dtype=np.uint64)
        else:
            window = self.words16[np.minimum(starts, last) if near_end else starts].view("<u8").reshape(-1, 2)
        same = window[:, 0] == words[0] if width >= 8 else (window[:, 0] & masks[0]) == words[0]
        same &= (window[:, 1] & masks[1]) == words[1]
        if near_end:  # the rows in the last 16 bytes of the data, byte by byte
            for i in np.flatnonzero(starts > last):
                same[i] = self.data[starts[i]:starts[i] + width].tobytes() == pattern
        return same


NON_ASCII_BIT = 1 << 15


def _letter_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tables for reading a gold of up to 8 bytes from one little-endian uint64 word:
    - pair bits: the letters A–N (case-folded as `letters_to_mask` does for ASCII) in a pair of
      bytes read as a uint16; bit 15 (NON_ASCII_BIT) marks a non-ASCII byte;
    - keep / force, indexed by min(byte length, 9): the mask keeping the word's first bytes, and
      NON_ASCII_BIT for a gold longer than 8 bytes (it is not all in the word);
    - verdict, indexed by the OR of the pair bits: 0 = at most one letter, 1 = more than one,
      2 = decide with `letters_to_mask` itself (non-ASCII or long)."""
    byte = np.zeros(256, dtype=np.uint16)
    for bit, letter in enumerate(OPTION_LETTERS):
        byte[ord(letter)] = byte[ord(letter.lower())] = 1 << bit
    byte[128:] = NON_ASCII_BIT
    pair = np.arange(1 << 16)
    keep = np.array([(1 << (8 * k)) - 1 for k in range(9)] + [(1 << 64) - 1], dtype=np.uint64)
    force = np.array([0] * 9 + [NON_ASCII_BIT], dtype=np.uint16)
    letters = pair & (NON_ASCII_BIT - 1)
    verdict = np.where(pair >= NON_ASCII_BIT, 2, (letters & (letters - 1)) != 0).astype(np.uint8)
    return byte[pair & 0xFF] | byte[pair >> 8], keep, force, verdict


PAIR_LETTERS, KEEP_BYTES, FORCE_EXACT, VERDICT = _letter_tables()
MULTIPLE_CHOICE_BYTES = MULTIPLE_CHOICE.encode()


def _multi_answer_rows(types: _StringBuffers, golds: _StringBuffers, start: int, stop: int) -> np.ndarray:
    """Rows (relative to `start`) of [start, stop) whose question type is exactly
    "multiple_choice" and whose gold holds more than one distinct letter A–N after upper-casing
    (`popcount(letters_to_mask(gold)) > 1`), read from the Arrow buffers in place:
    - candidates: type 15 bytes long and gold at least 2 bytes long (one byte is at most one
      letter), from the offsets alone;
    - type bytes compared to "multiple_choice" (`_StringBuffers.equals`);
    - gold of up to 8 ASCII bytes: its letter bits from one 8-byte word, two bytes per table
      lookup; any other gold (longer, non-ASCII, at the very end of the data) takes
      `letters_to_mask` itself. Missing types or golds are never multi-answer."""
    import pyarrow as pa

    type_offsets = types.offsets[start:stop + 1]
    gold_offsets = golds.offsets[start:stop + 1]
    gold_len = gold_offsets[1:] - gold_offsets[:-1]
    candidate = type_offsets[1:] - type_offsets[:-1] == len(MULTIPLE_CHOICE_BYTES)
    candidate &= gold_len > 1
    rows = np.flatnonzero(candidate)
    if types.validity is not None:
        rows = rows[types.valid(rows + start)]
    if golds.validity is not None:
        rows = rows[golds.valid(rows + start)]
    if not rows.size:
        return rows
    rows = rows[types.equals(type_offsets[rows], MULTIPLE_CHOICE_BYTES)]
    size = np.minimum(gold_len[rows], 9)
    begin = gold_offsets[rows]
    last = golds.size - 8
    near_end = len(begin) and begin[-1] > last  # offsets ascend: only the last rows can be
    if golds.words8 is None:
        words = np.zeros(len(rows), dtype=np.uint64)
    else:
        words = golds.words8[np.minimum(begin, last) if near_end else begin]
    words &= KEEP_BYTES[size]
    pairs = words.view(np.uint16).reshape(-1, 4)
    bits = PAIR_LETTERS[pairs[:, 0]] | PAIR_LETTERS[pairs[:, 1]]
    wide = np.flatnonzero(size > 4)
    if wide.size:
        bits[wide] |= PAIR_LETTERS[pairs[wide, 2]] | PAIR_LETTERS[pairs[wide, 3]] | FORCE_EXACT[size[wide]]
    verdict = VERDICT[bits]
    if near_end:
        verdict[begin > last] = 2
    exact = np.flatnonzero(verdict == 2)
    if exact.size:
        verdict[exact] = _has_two_letters(golds.array.take(pa.array(rows[exact] + start)))
    return rows[verdict == 1]


def _multi_answer_flags(types: Any, gold: Any) -> np.ndarray:
    """uint8 [n]: question type "multiple_choice" and more than one gold letter. Only rows whose
    gold is longer than one byte can hold two letters; the letter rule runs once per distinct
    gold string of those rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def is_mc(values: Any) -> Any:
        return pc.fill_null(pc.equal(values, "multiple_choice"), False)

    if pa.types.is_dictionary(gold.type) or pa.types.is_dictionary(types.type):
        return (_per_value(types, is_mc) & _per_value(gold, _has_two_letters)).astype(np.uint8)
    candidates = pc.and_(is_mc(types), pc.fill_null(pc.greater(pc.binary_length(gold), 1), False))
    out = np.zeros(len(gold), dtype=np.uint8)
    rows = np.flatnonzero(candidates.to_numpy(zero_copy_only=False))
    if rows.size:
        out[rows] = _has_two_letters(pc.filter(gold, candidates))
    return out


def _has_two_letters(values: Any) -> np.ndarray:
    """popcount(letters_to_mask(gold)) > 1 per value, evaluated once per distinct string."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(values)
    per_value = (popcount(letters_to_mask(encoded.dictionary.to_numpy(zero_copy_only=False))) > 1).numpy()
    codes = encoded.indices.fill_null(len(per_value)).to_numpy(zero_copy_only=False)
    return np.append(per_value, False)[codes]


def _per_value(arr: Any, fn: Any) -> np.ndarray:
    """fn (Arrow strings → bool per value) per row; on a dictionary array it runs on the
    dictionary only. Missing rows are False."""
    import pyarrow as pa

    def as_bool(result: Any) -> np.ndarray:
        return np.asarray(result.to_numpy(zero_copy_only=False) if isinstance(result, (pa.Array, pa.ChunkedArray))
                          else result, dtype=bool)

    if pa.types.is_dictionary(arr.type):
        per_value = np.append(as_bool(fn(arr.dictionary)), False)
        codes = arr.indices.fill_null(len(arr.dictionary)) if arr.null_count else arr.indices
        return per_value[codes.to_numpy(zero_copy_only=False)]
    return as_bool(fn(arr))
