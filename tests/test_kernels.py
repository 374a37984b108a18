"""Kernels against plain-Python / pandas references: bitmasks, segment reductions, resampling."""

from __future__ import annotations

import math
import random
from functools import partial

import numpy as np
import pandas as pd
import pytest
import torch

from finbench.kernels import bootstrap, segments
from finbench.kernels.bitmask import (
    UNKNOWN_BIT,
    letters_to_mask,
    masks_to_letters,
    popcount,
    single_bit_index,
)

LETTERS = "ABCDEFGHIJKLMN"


def ref_mask(text, casefold=True) -> int:
    """The FinMME judge's letter set, as an int."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        text = ""
    source = str(text).upper() if casefold else str(text)
    return sum(1 << i for i, letter in enumerate(LETTERS) if letter in source)


def random_strings(rng: random.Random, n: int) -> list:
    pool = ["", "A", "A,C", "ac", "**B**", "$\\boxed{C}$", "ﬀ", "ı", "é", "ACD", "N", "O", "xyz", "Answer",
            "abcdefghijklmnop", "A C", None, float("nan"), 12, "Ｂ", "ß"]
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append(rng.choice(pool))
        else:
            k = rng.randint(0, 40)
            out.append("".join(rng.choice(LETTERS + LETTERS.lower() + "OPQZ ,;.-0123456789é") for _ in range(k)))
    return out


@pytest.mark.parametrize("casefold", [True, False])
def test_letters_to_mask_matches_reference(casefold):
    rng = random.Random(0)
    values = random_strings(rng, 3000)
    got = letters_to_mask(values, casefold=casefold).tolist()
    assert got == [ref_mask(v, casefold) for v in values]


def test_letters_to_mask_empty_segments_and_input_types():
    # empty strings between, before and after non-empty ones (np.bitwise_or.reduceat's edge cases)
    values = ["", "", "A" * 5, "", "b" * 40 + "N", "", "ﬀ", "zzz", "C,A", "", ""]
    expected = [ref_mask(v) for v in values]
    assert letters_to_mask(values).tolist() == expected
    assert letters_to_mask(pd.Series(values)).tolist() == expected  # Arrow-backed pandas strings
    assert letters_to_mask(np.array(values, dtype=object)).tolist() == expected
    assert letters_to_mask(pd.Series(values).iloc[2:5]).tolist() == expected[2:5]  # sliced buffers
    assert letters_to_mask(["B", 3, None]).tolist() == [ref_mask("B"), 0, 0]


def test_letters_to_mask_empty_and_edge():
    assert letters_to_mask([]).tolist() == []
    assert letters_to_mask(["", ""]).tolist() == [0, 0]
    # 'ﬀ'.upper() == 'FF' in Python, so the official rule sees an F
    assert letters_to_mask(["ﬀ"]).tolist() == [1 << LETTERS.index("F")]
    assert masks_to_letters(letters_to_mask(["DCA", "", "n"])) == ["ACD", "", "N"]
    assert masks_to_letters([1 << UNKNOWN_BIT | 1]) == ["A?"]


def test_popcount_and_set_ops():
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(0, 2**62, (5000,), generator=gen, dtype=torch.int64)
    b = torch.randint(0, 2**62, (5000,), generator=gen, dtype=torch.int64)
    a[:10] = torch.tensor([0, 1, 2, 3, 2**62, 2**63 - 1, 255, 256, 2**32, 2**32 - 1])
    assert popcount(a).tolist() == [bin(x).count("1") for x in a.tolist()]
    small = torch.randint(0, 2**16, (70_000,), generator=gen, dtype=torch.int64)  # table path
    assert popcount(small).tolist() == [bin(x).count("1") for x in small.tolist()]
    small_a, small_b = a & 0x3FFF, b & 0x3FFF  # set logic is plain integer ops on masks (scoring)
    sa = [{i for i in range(14) if x >> i & 1} for x in small_a.tolist()]
    sb = [{i for i in range(14) if x >> i & 1} for x in small_b.tolist()]
    assert popcount(small_a & small_b).tolist() == [len(x & y) for x, y in zip(sa, sb)]
    assert popcount(small_a & ~small_b).tolist() == [len(x - y) for x, y in zip(sa, sb)]
    masks = torch.tensor([0, 1, 2, 4, 1 << 13, 6])
    assert single_bit_index(masks).tolist() == [-1, 0, 1, 2, 13, 1]


def test_factorize_matches_groupby_order():
    values = ["b", "a", None, "c", "a", float("nan"), ""]
    ids, labels = segments.factorize(values)
    assert labels == ["", "a", "b", "c"]
    assert ids.tolist() == [2, 1, -1, 3, 1, -1, 0]


def test_segment_reductions_match_pandas():
    rng = np.random.default_rng(0)
    n, s = 1000, 7
    ids = rng.integers(0, s, n)
    ids[:3] = [-1, s, s + 2]  # out of range ids are dropped
    vals = rng.normal(size=(n, 3))
    frame = pd.DataFrame(vals, columns=list("xyz")).assign(g=ids)
    frame = frame[(frame.g >= 0) & (frame.g < s)]
    ref_sum = frame.groupby("g")[list("xyz")].sum().reindex(range(s), fill_value=0).to_numpy()
    t_ids, t_vals = torch.from_numpy(ids), torch.from_numpy(vals)
    assert np.allclose(segments.segment_sum(t_vals, t_ids, s).numpy(), ref_sum, atol=1e-12, rtol=0)


def test_joint_counts_matches_crosstab():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 5, 500), rng.integers(0, 4, 500)
    ref = pd.crosstab(a, b).reindex(index=range(5), columns=range(4), fill_value=0).to_numpy()
    assert segments.joint_counts(torch.from_numpy(a), torch.from_numpy(b), 5, 4).numpy().tolist() == ref.tolist()


@pytest.mark.parametrize("n", [0, 1, 7, 10_001, (1 << 20) + 3])
def test_parallel_chunk_sum_of_bincount_matches_bincount(n):
    codes = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n), dtype=torch.int64)
    count = partial(torch.bincount, minlength=256)
    assert torch.equal(segments.parallel_chunk_sum(count, codes), torch.bincount(codes, minlength=256))
    assert torch.equal(segments.parallel_chunk_sum(count, codes, n_threads=3), torch.bincount(codes, minlength=256))
    assert torch.equal(segments.parallel_chunk_sum(count, codes[1:]), torch.bincount(codes[1:], minlength=256))


def test_weighted_segment_sums_matches_loop():
    rng = np.random.default_rng(2)
    n, s, r = 60, 4, 5
    ids = rng.integers(0, s, n)
    vals = rng.normal(size=(n, 2))
    w = rng.integers(0, 3, (r, n)).astype(float)
    got = segments.weighted_segment_sums(torch.from_numpy(w), torch.from_numpy(vals), torch.from_numpy(ids), s)
    ref = np.zeros((r, s, 2))
    for i in range(r):
        for q in range(n):
            ref[i, ids[q]] += w[i, q] * vals[q]
    assert np.allclose(got.numpy(), ref, atol=1e-12)


def test_multi_column_counts_sums_one_pass():
    rng = np.random.default_rng(3)
    cols = [rng.integers(0, 3, 200), rng.integers(0, 5, 200)]
    vals = rng.random(200)
    counts, sums = segments.multi_column_counts_sums([torch.from_numpy(c) for c in cols], [3, 5],
                                                     torch.from_numpy(vals))
    for c, k, cnt, sm in zip(cols, [3, 5], counts, sums):
        ref = pd.Series(vals).groupby(c).agg(["size", "sum"]).reindex(range(k), fill_value=0)
        assert cnt.numpy().tolist() == ref["size"].tolist()
        assert np.allclose(sm.numpy(), ref["sum"].to_numpy(), atol=1e-12)


def test_resample_indices_seeded_and_chunk_invariant():
    g1, g2, g3 = (bootstrap.make_generator(7) for _ in range(3))
    full = torch.cat(list(bootstrap.resample_indices(50, 23, g1)))
    chunked = torch.cat(list(bootstrap.resample_indices(50, 23, g2, chunk_size=4)))
    assert full.shape == (23, 50) and torch.equal(full, chunked)
    assert int(full.min()) >= 0 and int(full.max()) < 50
    other = torch.cat(list(bootstrap.resample_indices(50, 23, bootstrap.make_generator(8))))
    assert not torch.equal(full, other)
    assert torch.equal(full, torch.cat(list(bootstrap.resample_indices(50, 23, g3, chunk_size=23))))


def test_indices_to_counts():
    idx = torch.tensor([[0, 0, 2, 3], [1, 1, 1, 1]])
    assert bootstrap.indices_to_counts(idx, 4).tolist() == [[2, 0, 1, 1], [0, 4, 0, 0]]


def test_multinomial_counts_exact_totals_and_moments():
    m = torch.tensor([5, 0, 20, 75])
    draws = bootstrap.multinomial_counts(m, 20000, bootstrap.make_generator(0))
    assert torch.all(draws.sum(1) == 100) and torch.all(draws[:, 1] == 0) and torch.all(draws >= 0)
    p = m.double() / 100
    assert torch.allclose(draws.mean(0), 100 * p, atol=0.15)
    assert torch.allclose(draws.var(0), 100 * p * (1 - p), rtol=0.05, atol=0.05)
    again = bootstrap.multinomial_counts(m, 20000, bootstrap.make_generator(0))
    assert torch.equal(draws, again)


def test_bootstrap_segment_sums_index_method_is_resampling():
    rng = np.random.default_rng(4)
    n, s, r = 40, 3, 9
    vals = torch.from_numpy(rng.normal(size=(n, 2)))
    ids = torch.from_numpy(rng.integers(0, s, n))
    got = bootstrap.bootstrap_segment_sums(vals, ids, s, r, seed=5, method="index", chunk_size=4)
    idx = torch.cat(list(bootstrap.resample_indices(n, r, bootstrap.make_generator(5), chunk_size=4)))
    for i in range(r):
        rows = idx[i].numpy()
        ref = pd.DataFrame(vals.numpy()[rows]).groupby(ids.numpy()[rows]).sum().reindex(range(s), fill_value=0)
        assert np.allclose(got[i].numpy(), ref.to_numpy(), atol=1e-12)


def test_multinomial_and_index_methods_agree_in_distribution():
    rng = np.random.default_rng(5)
    n = 300
    vals = torch.from_numpy((rng.random((n, 1)) < 0.3).astype(float))
    ids = torch.zeros(n, dtype=torch.int64)
    a = bootstrap.bootstrap_segment_sums(vals, ids, 1, 4000, seed=1, method="multinomial")[:, 0, 0] / n
    b = bootstrap.bootstrap_segment_sums(vals, ids, 1, 4000, seed=1, method="index")[:, 0, 0] / n
    assert abs(float(a.mean() - b.mean())) < 0.003
    assert abs(float(a.std() / b.std()) - 1) < 0.06


def test_compress_rows_multiplicities():
    vals = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    ids = torch.tensor([0, 1, 0, 0])
    unique, segs, counts = bootstrap.compress_rows(vals, ids)
    got = sorted(zip(segs.tolist(), map(tuple, unique.tolist()), counts.tolist()))
    assert got == [(0, (0.0, 1.0), 1), (0, (1.0, 0.0), 2), (1, (1.0, 0.0), 1)]


def test_percentile_ci_matches_numpy():
    x = torch.from_numpy(np.random.default_rng(6).normal(size=1001))
    low, high = bootstrap.percentile_ci(x, 0.9)
    assert low == pytest.approx(np.percentile(x.numpy(), 5), abs=1e-12)
    assert high == pytest.approx(np.percentile(x.numpy(), 95), abs=1e-12)
    with_nan = torch.cat([x, torch.tensor([math.nan])])
    assert bootstrap.percentile_ci(with_nan, 0.9) == (low, high)
    assert all(math.isnan(v) for v in bootstrap.percentile_ci(torch.tensor([math.nan]), 0.9))


def _python_factorize(values):
    """Brute force: sorted distinct non-missing labels, each row's position in them, -1 if missing."""
    present = sorted({v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))})
    where = {v: i for i, v in enumerate(present)}
    return [where.get(v, -1) if v is not None and not (isinstance(v, float) and math.isnan(v)) else -1
            for v in values], present


@pytest.mark.parametrize("form", ["object", "str", "category", "arrow", "chunked"])
def test_dictionary_codes_equal_brute_force(form):
    import pyarrow as pa

    rng = random.Random(3)
    pool = ["b", "a", "", "B", "é", "domain_10", "domain_2", "ﬀ", "z" * 40, None, math.nan]
    values = [rng.choice(pool) for _ in range(3000)]
    expected_ids, expected_labels = _python_factorize(values)
    series = pd.Series(values, dtype=object)
    given = {"object": series, "str": series.astype("str").where(series.notna(), None),
             "category": series.astype("category"), "arrow": pa.array(series, from_pandas=True),
             "chunked": pa.chunked_array([pa.array(series[:1000], from_pandas=True),
                                          pa.array(series[1000:], from_pandas=True)])}[form]
    ids, labels = segments.dictionary_codes(given, n_threads=2)
    assert ids.tolist() == expected_ids and labels == expected_labels
    # factorize takes the Arrow path for string columns and must give pandas' own answer
    ids, labels = segments.factorize(series)
    codes, uniques = pd.factorize(series, sort=True)
    assert ids.tolist() == codes.tolist() == expected_ids and labels == list(uniques)


def test_dictionary_codes_threads_and_chunks_agree(monkeypatch):
    monkeypatch.setattr(segments, "PARALLEL_MIN_ELEMENTS", 10)  # force several row chunks
    values = pd.Series(np.array(["c", "a", None, "b"], dtype=object)[np.random.default_rng(0).integers(0, 4, 1001)])
    one, labels_one = segments.dictionary_codes(values, n_threads=1)
    three, labels_three = segments.dictionary_codes(values, n_threads=3)
    assert np.array_equal(one, three) and labels_one == labels_three == ["a", "b", "c"]
    assert one.tolist() == _python_factorize(list(values))[0]


def test_dictionary_codes_refuse_what_is_not_strings():
    assert segments.dictionary_codes(pd.Series([3, 1, 2])) is None
    assert segments.dictionary_codes(pd.Series(["a", 1], dtype=object)) is None  # mixed: pandas decides
    assert segments.dictionary_codes(pd.Series([1.5, None]).astype("category")) is None
    assert segments.dictionary_codes([1, 2]) is None
    ids, labels = segments.factorize(pd.Series(["a", 1, "a"], dtype=object))  # pandas path still works
    assert ids.tolist() == [1, 0, 1] or ids.tolist() == [0, 1, 0]


@pytest.mark.parametrize("late_label", [False, True])
def test_probed_labels_fall_back_when_a_label_appears_after_the_probe(monkeypatch, late_label):
    """The fast path probes the first rows' labels; a label first seen later must still get its
    own id (the general path), and both must equal pandas' factorize."""
    import pyarrow as pa

    monkeypatch.setattr(segments, "PROBE_ROWS", 16)
    rng = np.random.default_rng(3)
    values = rng.choice(["Bonds", "Banking", None], size=4000).astype(object)
    if late_label:
        values[3000] = "Aardvark"  # sorts first: every id after the probe shifts
    codes, labels = segments.dictionary_codes(pa.array(values, type=pa.large_string()), n_threads=2)
    ref_codes, ref_labels = pd.factorize(pd.Series(values, dtype=object), sort=True, use_na_sentinel=True)
    assert labels == list(ref_labels) and codes.tolist() == ref_codes.tolist()
