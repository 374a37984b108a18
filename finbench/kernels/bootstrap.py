"""Seeded, batched bootstrap resampling of questions, and percentile confidence intervals.

Every statistic finbench reports is a function of segment sums of per-question values
(`values` [N, C] summed within `segments`, e.g. domains). A bootstrap resample draws N questions
with replacement; all that matters to such a statistic is how many times each question was drawn.
Two exact ways to get those sums for R resamples:

- `index`: draw the resample index matrix [R, N] in chunks (torch.Generator), turn each row into
  per-question draw counts with one `bincount`, and multiply by the segment design matrix.
  General; cost O(R·N).
- `multinomial`: questions with identical (segment, values) rows are interchangeable, so group
  them into K distinct rows with multiplicities m_k. Resampling N questions uniformly is then
  exactly a Multinomial(N, m/N) draw over the K rows, sampled as a chain of conditional binomials
  (count_k ~ Binomial(N − Σ_{j<k} count_j, m_k / Σ_{j≥k} m_j)). Same distribution as `index`, cost
  O(R·K); K is tiny for 0/1 correctness (≤ 4 per domain), which makes 10,000 resamples of the
  whole benchmark take milliseconds.

`auto` uses `multinomial` when K ≤ `max_cells`, else `index`. Both are reproducible for a given
seed and device (CPU and CUDA generators produce different streams).
"""

from __future__ import annotations

from typing import Iterator

import torch

from finbench.kernels.segments import weighted_segment_sums

# Elements of one index chunk: 2^24 int64 indices = 128 MiB, so 10,000 × 11,099 never sits in memory.
DEFAULT_CHUNK_ELEMENTS = 1 << 24
DEFAULT_MAX_CELLS = 1024
METHODS = ("auto", "multinomial", "index")


def make_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch.Generator on `device`, seeded."""
    generator = torch.Generator(device=torch.device(device))
    generator.manual_seed(int(seed))
    return generator


def resample_indices(n: int, n_resamples: int, generator: torch.Generator,
                     chunk_size: int | None = None) -> Iterator[torch.Tensor]:
    """Yield the bootstrap index matrix [R, n] in row chunks [r, n] (int64, values 0..n-1).
    Consumes `generator` in row order, so chunking does not change the draws."""
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_CHUNK_ELEMENTS // max(n, 1))
    for start in range(0, n_resamples, chunk_size):
        rows = min(chunk_size, n_resamples - start)
        yield torch.randint(0, n, (rows, n), generator=generator, device=generator.device)


def indices_to_counts(indices: torch.Tensor, n: int) -> torch.Tensor:
    """[r, N] resample indices → [r, n] draw counts per question (one bincount for all rows)."""
    rows = indices.shape[0]
    offsets = torch.arange(rows, device=indices.device, dtype=torch.int64)[:, None] * n
    return torch.bincount((indices + offsets).view(-1), minlength=rows * n).view(rows, n)


def multinomial_counts(multiplicities: torch.Tensor, n_resamples: int,
                       generator: torch.Generator) -> torch.Tensor:
    """[R, K] draw counts of K groups of interchangeable questions (sizes `multiplicities`, total N)
    when N questions are drawn uniformly with replacement: an exact multinomial via binomials."""
    m = multiplicities.to(torch.float64).to(generator.device)
    k = m.shape[0]
    out = torch.zeros(n_resamples, k, dtype=torch.float64, device=generator.device)
    remaining = torch.full((n_resamples,), float(m.sum()), dtype=torch.float64, device=generator.device)
    left = float(m.sum())  # questions not yet assigned a group, in the population
    for j in range(k - 1):
        p = float(m[j]) / left if left > 0 else 0.0
        draw = torch.binomial(remaining, torch.full_like(remaining, min(max(p, 0.0), 1.0)), generator=generator)
        out[:, j] = draw
        remaining = remaining - draw
        left -= float(m[j])
    if k:
        out[:, k - 1] = remaining
    return out


def compress_rows(values: torch.Tensor, segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct (segment, values) rows: (unique values [K, C], their segments [K], multiplicities [K])."""
    values = values.to(torch.float64)
    if values.dim() == 1:
        values = values[:, None]
    keyed = torch.cat([segments.to(torch.float64)[:, None], values], dim=1)
    # One int64 key per row (mixed radix over per-column codes) makes this a 1-D unique, much
    # cheaper than torch.unique(dim=0); too many distinct values per column → the 2-D fallback.
    key = torch.zeros(keyed.shape[0], dtype=torch.int64, device=keyed.device)
    radix = 1
    for column in keyed.T:
        _, codes = torch.unique(column, return_inverse=True)
        size = int(codes.max()) + 1 if codes.numel() else 1
        if radix * size >= 2**62:
            unique, counts = torch.unique(keyed, dim=0, return_counts=True)
            return unique[:, 1:], unique[:, 0].to(torch.int64), counts
        key = key * size + codes
        radix *= size
    _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
    positions = torch.arange(keyed.shape[0], device=keyed.device)
    first = torch.full((counts.numel(),), keyed.shape[0], dtype=torch.int64, device=keyed.device)
    first = first.scatter_reduce(0, inverse, positions, reduce="amin")  # a representative row per key
    unique = keyed[first]
    return unique[:, 1:], unique[:, 0].to(torch.int64), counts


def bootstrap_segment_sums(values: torch.Tensor, segments: torch.Tensor, n_segments: int, n_resamples: int,
                           seed: int = 0, method: str = "auto", chunk_size: int | None = None,
                           max_cells: int = DEFAULT_MAX_CELLS) -> torch.Tensor:
    """Segment sums [R, S, C] of `values` ([N, C]) for R bootstrap resamples of the N questions.
    `segments` [N] are ids in 0..S-1 (ids outside are resampled but fall in no segment)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    values = values.to(torch.float64)
    if values.dim() == 1:
        values = values[:, None]
    n = values.shape[0]
    generator = make_generator(seed, values.device)
    if n == 0 or n_resamples <= 0:
        return torch.zeros(max(n_resamples, 0), n_segments, values.shape[1], dtype=torch.float64)
    if method in ("auto", "multinomial"):
        unique, unique_segments, counts = compress_rows(values, segments)
        if method == "multinomial" or unique.shape[0] <= max_cells:
            draws = multinomial_counts(counts, n_resamples, generator)
            return weighted_segment_sums(draws, unique, unique_segments, n_segments)
    parts = [weighted_segment_sums(indices_to_counts(idx, n), values, segments, n_segments)
             for idx in resample_indices(n, n_resamples, generator, chunk_size)]
    return torch.cat(parts)


def cluster_bootstrap_segment_sums(values: torch.Tensor, segments: torch.Tensor, n_segments: int,
                                   clusters: torch.Tensor, n_clusters: int, n_resamples: int, seed: int = 0,
                                   chunk_size: int | None = None) -> torch.Tensor:
    """Segment sums [R, S, C] for R resamples that draw the G clusters with replacement (`clusters`
    [N]: dense ids 0..G-1): a question counts as often as its cluster was drawn — the bootstrap of
    questions that are not independent (sub-questions of one main question, questions of one image)."""
    values = values.to(torch.float64)
    if values.dim() == 1:
        values = values[:, None]
    n = values.shape[0]
    generator = make_generator(seed, values.device)
    if n == 0 or n_resamples <= 0 or n_clusters <= 0:
        return torch.zeros(max(n_resamples, 0), n_segments, values.shape[1], dtype=torch.float64)
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_CHUNK_ELEMENTS // max(n, n_clusters))
    clusters = clusters.to(values.device)
    parts = []
    for draws in resample_indices(n_clusters, n_resamples, generator, chunk_size):
        weights = indices_to_counts(draws, n_clusters)[:, clusters]  # [r, N]: each question's cluster's draws
        parts.append(weighted_segment_sums(weights.to(torch.float64), values, segments, n_segments))
    return torch.cat(parts)


def percentile_ci(samples: torch.Tensor, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval (linear interpolation, as numpy.percentile); NaN samples are
    ignored (a resample where the statistic is undefined)."""
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    samples = samples.to(torch.float64).flatten()
    if samples.numel() == 0 or bool(torch.isnan(samples).all()):
        return float("nan"), float("nan")
    alpha = (1.0 - level) / 2.0
    q = torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64, device=samples.device)
    low, high = torch.nanquantile(samples, q).tolist()
    return low, high
