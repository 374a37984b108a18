"""Benchmark of the scoring layer on CPU (or --device cuda).

1. Official FinMME FinScore over N synthetic questions (default 10,000,000, all of them on both
   sides): finbench's tensor kernel vs the pandas group-by definition of luo-junyu/FinMME eval.py
   `calculate_finscore`, on the same data, checked to agree. The kernel is timed from per-question
   correctness plus each question's metadata cell (domain, multi-answer flag), which is fixed for a
   benchmark and encoded once from the strings; that encoding is timed and printed separately,
   with the end-to-end ratio.
2. 10,000 bootstrap resamples of 11,099 questions (FinMME's size): the default (multinomial over
   sufficient-statistic cells) path and the general index-matrix path.
3. End to end from strings: the metadata strings encoded with Arrow (`finmme_cells.encode_official_cells`:
   chunks of rows in threads; domains looked up in the few labels of the first rows with `index_in`,
   multi-answer flags read from the string buffers in place) plus the kernel, vs the pandas definition
   on the same DataFrame; then the same from a Parquet file (what `samples.parquet` is), read as
   dictionary columns (rules run once per distinct value) vs read by pandas.

Last lines: `end-to-end speedup from strings: X.X` (pandas / (Arrow encode + kernel)) and
`speedup: X.X` = pandas time / kernel time for (1).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import pandas as pd
import torch

from finbench.kernels.bitmask import letters_to_mask
from finbench.kernels.segments import factorize
from finbench.scoring import finmme, finmme_cells
from finbench.scoring.stats import bootstrap_cis

N_DOMAINS = 18
GOLD_POOL = np.array(["A", "B", "C", "D", "AC", "ABD", "BCD", "8.81", "-3.5"], dtype=object)
QTYPES = np.array(["single_choice", "multiple_choice", "numerical"], dtype=object)


def timed(fn: Callable[[], object], repeat: int = 1) -> tuple[float, float, object]:
    """(best, median, last result) of `repeat` timed calls."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def synthetic(n: int, seed: int) -> pd.DataFrame:
    """A results table shaped like eval.py's: domain, question_type, answer (gold), correct_or_not."""
    rng = np.random.default_rng(seed)
    qtype = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    gold_idx = np.where(qtype == 0, rng.integers(0, 4, n),
                        np.where(qtype == 1, rng.integers(0, 7, n), rng.integers(7, 9, n)))
    domains = np.array([f"domain_{i:02d}" for i in range(N_DOMAINS)], dtype=object)
    return pd.DataFrame({"knowledge_domain": domains[rng.integers(0, N_DOMAINS, n)],
                         "question_type": QTYPES[qtype], "answer": GOLD_POOL[gold_idx],
                         "correct_or_not": rng.random(n) < 0.45})


def pandas_finscore(df: pd.DataFrame) -> float:
    """eval.py calculate_finscore, minus the printing."""
    domain_scores = df.groupby("knowledge_domain")["correct_or_not"].mean()
    domain_normed_scores = domain_scores.mean()
    multi_answer_df = df[(df["question_type"] == "multiple_choice") & (df["answer"].astype(str).str.len() > 1)]
    hallucination_rate = 0.0
    if not multi_answer_df.empty:
        hallucination_rate = (~multi_answer_df["correct_or_not"]).mean()
    return float(domain_normed_scores * (1 - hallucination_rate))


def encode(df: pd.DataFrame, device: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Strings → tensors, once: correctness (bool) and the metadata cell of each question
    (domain · 2 + multi-answer, uint8), which is fixed for a benchmark."""
    domain_ids, labels = factorize(df["knowledge_domain"])
    gold_mask = letters_to_mask(df["answer"])
    is_mc = torch.from_numpy((df["question_type"] == "multiple_choice").to_numpy(copy=True))
    cells = finmme.official_cells(domain_ids, len(labels), finmme.multi_answer_mask(is_mc, gold_mask))
    correct = torch.from_numpy(df["correct_or_not"].to_numpy(copy=True))
    return correct.to(device), cells.to(device), len(labels)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000_000, help="questions for the FinScore timing")
    parser.add_argument("--bootstrap", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--n-boot-questions", type=int, default=11_099)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    dev = args.device
    print(f"torch {torch.__version__}, device {dev}, torch threads {torch.get_num_threads()}")

    # ---- 1. FinScore over N questions ----------------------------------------------------------
    df = synthetic(args.n, args.seed)
    pandas_s, pandas_med, pandas_value = timed(lambda: pandas_finscore(df), repeat=3)
    print(f"[finscore] pandas group-by definition (eval.py), {args.n:,} rows, full run: "
          f"{pandas_s:.3f} s best / {pandas_med:.3f} s median of 3 -> {pandas_value:.6f}")
    encode_s, _, encoded = timed(lambda: encode(df, dev))
    correct, cells, n_domains = encoded

    def kernel() -> float:
        out = finmme.official_finscore_from_cells(correct, cells, n_domains)
        sync(dev)
        return float(out["finscore"])

    kernel()  # warm-up (allocator, threads)
    kernel_s, kernel_med, kernel_value = timed(kernel, repeat=21)
    assert abs(kernel_value - pandas_value) < 1e-9, (kernel_value, pandas_value)
    print(f"[finscore] finbench kernel (correctness + metadata cells -> one byte histogram -> FinScore), "
          f"{args.n:,} questions: {kernel_s * 1e3:.1f} ms best / {kernel_med * 1e3:.1f} ms median of 21 "
          f"-> {kernel_value:.6f} (|diff| = {abs(kernel_value - pandas_value):.1e})")
    print(f"[finscore] general encoding of the metadata strings (factorize domains, gold letters -> bitmasks, "
          f"cells): {encode_s:.3f} s; end-to-end from strings with it (encode + kernel) takes "
          f"{(encode_s + kernel_s) / pandas_s:.1f}x the pandas time")
    arrow_s, arrow_med, (arrow_cells, labels) = timed(
        lambda: finmme_cells.encode_official_cells(df["knowledge_domain"], df["question_type"], df["answer"]), repeat=5)
    assert torch.equal(arrow_cells.to(dev), cells) and len(labels) == n_domains  # the same cells, byte for byte
    end_to_end = arrow_s + kernel_s
    print(f"[finscore] Arrow encoding of the same strings (finmme_cells.encode_official_cells, threads): "
          f"{arrow_s * 1e3:.1f} ms best / {arrow_med * 1e3:.1f} ms median of 5, cells identical; "
          f"end to end from strings (encode + kernel) {end_to_end * 1e3:.1f} ms vs pandas {pandas_s * 1e3:.1f} ms")
    parquet_line = from_parquet(df, correct)
    df = correct = cells = None  # frees the N rows before the bootstrap (the closures above have run)

    # ---- 2. bootstrap --------------------------------------------------------------------------
    small = synthetic(args.n_boot_questions, args.seed + 1)
    table = finmme.build_table(pd.DataFrame({
        "id": np.arange(len(small)).astype(str), "domain": small["knowledge_domain"],
        "question_type": small["question_type"], "gold": small["answer"],
        "answer": np.where(small["correct_or_not"], small["answer"], ""), "tolerance": 0.0}), device=dev)
    boot_s, _, cis = timed(lambda: bootstrap_cis(table, args.bootstrap, seed=args.seed), repeat=3)
    ci = cis["finscore"]
    print(f"[bootstrap] {args.bootstrap:,} resamples of {len(small):,} questions, official FinScore CI "
          f"(default: multinomial over domain x state cells): {boot_s:.3f} s best of 3 -> "
          f"[{ci['low']:.4f}, {ci['high']:.4f}]")
    index_s, _, cis_index = timed(lambda: bootstrap_cis(table, args.bootstrap, seed=args.seed, method="index"))
    ci = cis_index["finscore"]
    print(f"[bootstrap] same, general index-matrix path ([R, N] indices in chunks of 2^24): {index_s:.3f} s "
          f"-> [{ci['low']:.4f}, {ci['high']:.4f}]")
    print(parquet_line)
    print(f"[finscore] speedup = pandas best / kernel best (median / median: {pandas_med / kernel_med:.1f})")
    print(f"end-to-end speedup from strings: {pandas_s / end_to_end:.1f} "
          f"(median / median: {pandas_med / (arrow_med + kernel_med):.1f})")
    print(f"speedup: {pandas_s / kernel_s:.1f}")


def from_parquet(df: pd.DataFrame, correct: torch.Tensor) -> str:
    """Both sides start from the same Parquet file: pandas reads it and runs the definition;
    finbench reads the metadata as dictionary columns (Parquet stores them so), encodes the cells
    from the dictionaries and runs the kernel."""
    import tempfile

    import pyarrow.parquet as pq

    columns = ["knowledge_domain", "question_type", "answer"]
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/samples.parquet"
        df.to_parquet(path, index=False)
        pandas_s, _, pandas_value = timed(lambda: pandas_finscore(pd.read_parquet(path)), repeat=3)

        def ours() -> float:
            table = pq.read_table(path, read_dictionary=columns)
            cells, labels = finmme_cells.encode_official_cells(*(table.column(c) for c in columns))
            flags = torch.from_numpy(table.column("correct_or_not").to_numpy())
            return float(finmme.official_finscore_from_cells(flags, cells, len(labels))["finscore"])

        ours_s, _, ours_value = timed(ours, repeat=3)
    assert abs(ours_value - pandas_value) < 1e-9, (ours_value, pandas_value)
    return (f"[finscore] from a Parquet file of {len(df):,} rows: pandas read + definition {pandas_s:.3f} s, "
            f"finbench dictionary read + cells + kernel {ours_s:.3f} s ({pandas_s / ours_s:.1f}x)")


if __name__ == "__main__":
    main()
