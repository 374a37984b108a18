"""Coverage of the clustered 95% intervals (scoring/clustered.py) in simulation: how often the
interval holds the true mean, with the normal quantile (the old interval) and with the t(G − 1)
quantile clipped to [0, 1] (the interval finbench prints), at G = 10, 15 and 50 clusters.

Each simulated benchmark draws G clusters (images, main questions) of `--size` questions; a
cluster's accuracy is Beta-distributed around the true mean (the questions of one image are
alike: intra-cluster correlation 1 / (a + b + 1)), each question right with its cluster's
probability. A benchmark script, not a timed test:

    python scripts/coverage_sim.py --reps 20000
"""

from __future__ import annotations

import argparse

import torch

from finbench.scoring.clustered import bounded_interval, clustered_se, t_quantile


def simulate(n_clusters: int, size: int, reps: int, mean: float, icc: float, seed: int) -> dict[str, float]:
    """Coverage of both intervals over `reps` simulated benchmarks (the SE of each by clustered_se)."""
    generator = torch.Generator().manual_seed(seed)
    concentration = 1 / icc - 1  # a + b
    beta = torch.distributions.Beta(torch.tensor(mean * concentration), torch.tensor((1 - mean) * concentration))
    torch.manual_seed(seed)
    p = beta.sample((reps, n_clusters)).to(torch.float64)  # [R, G]
    y = (torch.rand(reps, n_clusters, size, generator=generator, dtype=torch.float64) < p[..., None]).double()
    y = y.reshape(reps, n_clusters * size).T  # [N, R]: R metrics at once
    ids = torch.arange(n_clusters).repeat_interleave(size)
    se = clustered_se(y, ids, n_clusters)
    estimate = y.mean(0)
    z, t = t_quantile(0.975, float("inf")), t_quantile(0.975, n_clusters)
    normal = ((estimate - z * se <= mean) & (mean <= estimate + z * se)).double().mean()
    bounds = [bounded_interval(float(m), float(s), n_clusters, (0.0, 1.0)) for m, s in zip(estimate, se)]
    student = sum(1 for low, high in bounds if low is not None and low <= mean <= high) / reps
    return {"normal": float(normal), "t": student, "t_multiplier": t}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--size", type=int, default=5, help="questions per cluster")
    parser.add_argument("--mean", type=float, default=0.6, help="the true accuracy")
    parser.add_argument("--icc", type=float, default=0.3, help="intra-cluster correlation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"coverage of the 95% interval ({args.reps} simulated benchmarks each; {args.size} questions per cluster, "
          f"true accuracy {args.mean}, ICC {args.icc})")
    print(f"{'G':>4} {'normal z':>10} {'t(G-1), clipped':>16} {'t multiplier':>13}")
    for g in (10, 15, 50):
        found = simulate(g, args.size, args.reps, args.mean, args.icc, args.seed + g)
        print(f"{g:>4} {100 * found['normal']:>9.2f}% {100 * found['t']:>15.2f}% {found['t_multiplier']:>13.3f}")


if __name__ == "__main__":
    main()
