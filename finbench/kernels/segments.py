"""Segment reductions: sums and counts of per-question values over integer group ids.

Every group-by in scoring is one of these: ids are dense integers 0..S-1 (see `factorize`), a sum
is one `index_add_` (or `bincount`) pass over all questions, and a mean is sum / count. A weighted
variant turns a batch of weight vectors (bootstrap counts, abstention masks) into a batch of
segment sums with one matrix product.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

MISSING_LABEL = "(missing)"  # the label of a missing group in breakdown tables


def factorize(values: Iterable[Any] | np.ndarray | pd.Series, sort: bool = True) -> tuple[torch.Tensor, list[Any]]:
    """Labels → (int64 ids, unique labels). Missing values (None/NaN) get id -1, as pandas'
    group-by drops them; `sort=True` orders ids like `DataFrame.groupby`. String columns go
    through Arrow's dictionary encoding (`dictionary_codes`), anything else through pandas."""
    if sort:
        encoded = dictionary_codes(values)
        if encoded is not None:
            return torch.from_numpy(encoded[0]), encoded[1]
    codes, uniques = pd.factorize(pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values,
                                  sort=sort, use_na_sentinel=True)
    return torch.from_numpy(np.asarray(codes, dtype=np.int64)), list(uniques)


def arrow_strings(values: Any) -> Any:
    """`values` as an Arrow (chunked) array of strings, or of dictionary-encoded strings (pandas
    categoricals, Parquet dictionary columns); None when they are not all strings/missing.
    Arrow-backed pandas strings (pandas ≥ 3's default `str`) are taken without a copy."""
    import pyarrow as pa

    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = values
    elif isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        categories = values.cat.categories
        if len(categories) and not pd.api.types.is_string_dtype(categories.dtype):
            return None
        try:
            arr = pa.DictionaryArray.from_arrays(pa.array(values.cat.codes.to_numpy(), mask=values.isna().to_numpy()),
                                                 pa.array(categories.to_numpy(dtype=object), type=pa.string()))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            return None
    elif isinstance(values, (pd.Series, np.ndarray)):
        if values.dtype != object and not pd.api.types.is_string_dtype(values.dtype):
            return None
        try:
            arr = pa.array(values, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            return None
    else:
        return None
    value_type = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
            or (pa.types.is_null(value_type) and len(arr) == 0)):
        return None
    return arr


def dictionary_codes(values: Any, n_threads: int | None = None) -> tuple[np.ndarray, list[str]] | None:
    """String labels → (int64 ids [N], sorted unique labels), missing → -1, exactly `factorize`'s
    result; None when `values` are not strings. See `dictionary_encode_chunks`."""
    arr = arrow_strings(values)
    if arr is None:
        return None
    chunks, labels, lookups = dictionary_encode_chunks(arr, n_threads)
    out = np.empty(len(arr), dtype=np.int64)
    start = 0
    for chunk, lookup in zip(chunks, lookups):
        out[start:start + len(chunk)] = lookup[chunk]
        start += len(chunk)
    return out, labels


def dictionary_encode_chunks(arr: Any, n_threads: int | None = None
                             ) -> tuple[list[np.ndarray], list[str], list[np.ndarray]]:
    """An Arrow string array → (per row chunk: dictionary indices [n] with missing = len(lookup)-1,
    sorted unique labels, per chunk: lookup [d+1] from its indices to label ids, -1 last).

    Arrow hashes each chunk of rows (one per thread; Arrow releases the GIL) into a small
    dictionary; the dictionaries are merged and sorted (a few entries), so a row's label id is
    one table lookup, `lookup[indices]`. Already dictionary-encoded input (categoricals, Parquet
    dictionary columns) skips the hashing."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    if not pa.types.is_dictionary(arr.type):
        threads = n_threads or torch.get_num_threads()
        if threads > 1 and len(arr) >= PARALLEL_MIN_ELEMENTS:
            step = -(-len(arr) // threads)
            chunks = [arr.slice(start, step) for start in range(0, len(arr), step)]
        probed = _probe_labels(chunks, threads)
        if probed is not None:
            return probed
        with ThreadPoolExecutor(max(1, min(threads, len(chunks)))) as pool:
            chunks = list(pool.map(pc.dictionary_encode, chunks))
    dictionaries = [c.dictionary.cast(pa.large_string()) for c in chunks]
    labels = pc.unique(pa.chunked_array(dictionaries, type=pa.large_string())) if dictionaries \
        else pa.array([], pa.large_string())
    labels = labels.take(pc.sort_indices(labels))  # UTF-8 byte order = code-point order = Python's
    lookups, indices = [], []
    for chunk, dictionary in zip(chunks, dictionaries):
        lookups.append(np.append(pc.index_in(dictionary, value_set=labels).to_numpy(zero_copy_only=False)
                                 .astype(np.int64), -1))
        codes = chunk.indices.fill_null(len(dictionary)) if chunk.null_count else chunk.indices
        indices.append(codes.to_numpy(zero_copy_only=False))
    return indices, labels.to_pylist(), lookups


PROBE_ROWS = 1 << 16  # rows whose distinct labels are taken first; a grouping column has few


def probe_labels(arr: Any) -> Any:
    """Sorted distinct non-missing labels of the first PROBE_ROWS rows of an Arrow string array
    (large_string; UTF-8 byte order = code-point order = Python's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    labels = pc.drop_null(pc.unique(arr.slice(0, PROBE_ROWS))).cast(pa.large_string())
    return labels.take(pc.sort_indices(labels))


def _probe_labels(chunks: list[Any], threads: int) -> tuple[list[np.ndarray], list[str], list[np.ndarray]] | None:
    """`dictionary_encode_chunks` for a column with few labels: the labels of the first rows,
    sorted, then every row looked up in that small set (`index_in`: a probe into a tiny hash
    table, ~2× faster than growing a dictionary per chunk). None when some row holds a label the
    first rows lack: the caller then takes the general path."""
    import pyarrow.compute as pc

    labels = probe_labels(chunks[0])
    with ThreadPoolExecutor(max(1, min(threads, len(chunks)))) as pool:
        codes = list(pool.map(lambda chunk: pc.index_in(chunk, value_set=labels), chunks))
    if any(code.null_count != chunk.null_count for code, chunk in zip(codes, chunks)):
        return None  # a label beyond the probed rows
    missing = len(labels)
    indices = [(code.fill_null(missing) if code.null_count else code).to_numpy(zero_copy_only=False) for code in codes]
    lookup = np.append(np.arange(missing, dtype=np.int64), -1)
    return indices, labels.to_pylist(), [lookup] * len(chunks)


def segment_sum(values: torch.Tensor, ids: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Σ values per segment: [N] → [S] or [N, C] → [S, C] (float64). Ids outside 0..S-1 are dropped."""
    ids = ids.to(torch.int64)
    values = values.to(torch.float64)
    keep = (ids >= 0) & (ids < n_segments)
    if not bool(keep.all()):
        ids, values = ids[keep], values[keep]
    out = torch.zeros((n_segments,) + tuple(values.shape[1:]), dtype=torch.float64, device=values.device)
    return out.index_add_(0, ids, values)


def joint_counts(a: torch.Tensor, b: torch.Tensor, n_a: int, n_b: int) -> torch.Tensor:
    """Contingency table [n_a, n_b] of two small non-negative integer codes in ONE bincount pass
    (codes packed as a * n_b + b). Used where per-question values are categorical: the table is
    then the whole sufficient statistic (e.g. domain × {multi-answer, correct})."""
    packed = a.to(torch.int64) * n_b + b.to(torch.int64)
    return torch.bincount(packed, minlength=n_a * n_b).view(n_a, n_b)


PARALLEL_MIN_ELEMENTS = 1 << 20


def parallel_chunk_sum(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor,
                       n_threads: int | None = None) -> torch.Tensor:
    """Σ over chunks of fn(chunk of each tensor): split the tensors along dim 0 into one chunk per
    intra-op thread and run fn on the chunks at the same time (torch ops release the GIL). For
    reductions that are serial loops on CPU, like `bincount`, and whose chunk results add up."""
    threads = n_threads or torch.get_num_threads()
    if tensors[0].is_cuda or threads <= 1 or tensors[0].shape[0] < PARALLEL_MIN_ELEMENTS:
        return fn(*tensors)
    chunks = zip(*(t.chunk(threads) for t in tensors))
    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(lambda args: fn(*args), chunks))
    return torch.stack(parts).sum(0)


def segment_design(values: torch.Tensor, ids: torch.Tensor, n_segments: int) -> torch.Tensor:
    """[N, S*C] matrix whose row n holds values[n] in the block of segment ids[n] (zeros elsewhere):
    weights [R, N] @ design gives R batches of segment sums at once."""
    values = values.to(torch.float64)
    if values.dim() == 1:
        values = values[:, None]
    n, c = values.shape
    design = torch.zeros(n, n_segments, c, dtype=torch.float64, device=values.device)
    keep = (ids >= 0) & (ids < n_segments)
    rows = torch.arange(n, device=values.device)[keep]
    design[rows, ids[keep].to(torch.int64)] = values[keep]
    return design.view(n, n_segments * c)


def weighted_segment_sums(weights: torch.Tensor, values: torch.Tensor, ids: torch.Tensor,
                          n_segments: int) -> torch.Tensor:
    """For each weight vector w (rows of [R, N]): Σ_n w[n]·values[n] per segment → [R, S, C].
    Weights may be resample counts (bootstrap) or 0/1 masks (abstention thresholds)."""
    c = 1 if values.dim() == 1 else values.shape[1]
    design = segment_design(values, ids, n_segments)
    return (weights.to(torch.float64) @ design).view(weights.shape[0], n_segments, c)


def multi_column_counts_sums(codes: Sequence[torch.Tensor], sizes: Sequence[int],
                             values: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Counts and sums of `values` ([N] or [N, C]) per group for several grouping columns in one
    pass: each column's ids are offset into one shared id space, concatenated, and reduced once.
    Ids must be in 0..size-1 (map missing labels to their own id first)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    all_ids = torch.cat([c.to(torch.int64) + int(o) for c, o in zip(codes, offsets[:-1])])
    values = values.to(torch.float64)
    all_values = values.repeat((len(codes),) + (1,) * (values.dim() - 1))
    total = int(offsets[-1])
    counts = torch.bincount(all_ids, minlength=total).to(torch.float64)
    sums = torch.zeros((total,) + tuple(values.shape[1:]), dtype=torch.float64, device=values.device)
    sums.index_add_(0, all_ids, all_values)
    bounds = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    return [counts[a:b] for a, b in bounds], [sums[a:b] for a, b in bounds]
