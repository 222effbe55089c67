"""SIMULATED coverage of the 95 % CI of a mean: case bootstrap versus the two-stage cluster bootstrap.

Each SIMULATED data set has C clusters of unequal sizes; case j of cluster c scores
mu + u_c + e_cj with u_c ~ N(0, sigma_b^2) (the between-cluster effect, e.g. a hospital's protocol)
and e_cj ~ N(0, sigma_w^2). The true mean mu is known, so the share of R data sets whose CI holds
it is the coverage. Both intervals are segbench's own (resampling.bootstrap_means with case counts,
clusters.clustered_means with two-stage counts; percentile CIs). For reference a third column
resamples the clusters only (stage 1, cases kept whole), which segbench does not use.

Vectorised: the R data sets of a setting are the rows of one value matrix, resampled in blocks of
``BLOCK`` data sets, each block with fresh resamples. Monte-Carlo error: sqrt(p (1 - p) / R).

Usage: PYTHONPATH=src python benchmarks/sim_cluster_coverage.py > benchmarks/results_sim_cluster_coverage.txt
"""

from __future__ import annotations

import time

import numpy as np

from segbench.stats.clusters import cluster_indices, clustered_means
from segbench.stats.resampling import bootstrap_means, intervals

R = 1000  # simulated data sets per setting
B = 2000  # bootstrap resamples per data set
BLOCK = 100  # data sets sharing one resample matrix
MU, SIGMA_W, CONFIDENCE = 0.85, 0.10, 0.95
SIZES_12 = [5, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80]
SIZES_20 = [4, 5, 6, 8, 10, 10, 12, 14, 15, 16, 18, 20, 22, 25, 28, 30, 35, 40, 45, 50]
SIZES_TOUCHSTONE = [585, 45, 44, 25, 17, 15, 5, 3, 2, 1, 1]  # institutes of Touchstone's 743 scans (missing as one)
SETTINGS = [  # (label, cluster sizes, sigma_b)
    ("12 clusters, sigma_b 0", SIZES_12, 0.0),
    ("12 clusters, sigma_b 0.01", SIZES_12, 0.01),
    ("12 clusters, sigma_b 0.03", SIZES_12, 0.03),
    ("12 clusters, sigma_b 0.05", SIZES_12, 0.05),
    ("20 clusters, sigma_b 0", SIZES_20, 0.0),
    ("20 clusters, sigma_b 0.03", SIZES_20, 0.03),
    ("Touchstone sizes, sigma_b 0", SIZES_TOUCHSTONE, 0.0),
    ("Touchstone sizes, sigma_b 0.03", SIZES_TOUCHSTONE, 0.03),
]


def simulate(sizes: list[int], sigma_b: float, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """R SIMULATED data sets (R, n) of one cluster structure, and each case's cluster label."""
    labels = [f"c{c:02d}" for c, size in enumerate(sizes) for _ in range(size)]
    effect = rng.normal(0.0, sigma_b, size=(R, len(sizes)))
    values = MU + np.repeat(effect, sizes, axis=1) + rng.normal(0.0, SIGMA_W, size=(R, sum(sizes)))
    return values, labels


def stage_one_means(values: np.ndarray, clusters: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Reference only: clusters drawn with replacement, each drawn cluster's cases kept as they are."""
    n_clusters = len(clusters)
    times = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=B)
    counts = np.zeros((B, values.shape[1]))
    for c, idx in enumerate(clusters):
        counts[:, idx] = times[:, c][:, None]
    return (counts @ values.T) / counts.sum(axis=1, keepdims=True)


def coverage(boot: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether each data set's percentile CI holds MU, and its width."""
    low, high = intervals(boot, values.mean(axis=1), None, np.full(values.shape[0], 1.0 - CONFIDENCE), "percentile")
    return (low <= MU) & (MU <= high), high - low


def main() -> None:
    rng = np.random.default_rng(20)
    print("SIMULATED data: coverage of the 95 % percentile CI of the mean (true mean known)")
    print(f"R = {R} data sets per setting, B = {B} resamples, sigma_w = {SIGMA_W}, Monte-Carlo SE = sqrt(p(1-p)/R)")
    print("ICC = sigma_b^2 / (sigma_b^2 + sigma_w^2); width ratio = mean CI width / case-bootstrap mean CI width\n")
    header = f"{'setting (SIMULATED)':32} {'n':>4} {'ICC':>6} | {'case boot':>13} | {'two-stage cluster':>17} {'width':>6} | {'stage 1 only':>13} {'width':>6}"
    print(header)
    print("-" * len(header))
    start = time.perf_counter()
    for label, sizes, sigma_b in SETTINGS:
        values, labels = simulate(sizes, sigma_b, rng)
        clusters = cluster_indices(labels)
        hits = {"case": [], "cluster": [], "stage1": []}
        widths = {"case": [], "cluster": [], "stage1": []}
        for first in range(0, R, BLOCK):
            block = values[first : first + BLOCK]
            boots = {
                "case": bootstrap_means(block, B, rng)[0],
                "cluster": clustered_means(block, clusters, B, rng),
                "stage1": stage_one_means(block, clusters, rng),
            }
            for name, boot in boots.items():
                hit, width = coverage(boot, block)
                hits[name].append(hit)
                widths[name].append(width)
        p = {name: np.concatenate(h).mean() for name, h in hits.items()}
        w = {name: np.concatenate(x).mean() for name, x in widths.items()}
        icc = sigma_b**2 / (sigma_b**2 + SIGMA_W**2)

        def cell(name: str) -> str:
            return f"{p[name]:.3f} ± {np.sqrt(p[name] * (1 - p[name]) / R):.3f}"

        print(
            f"{label:32} {sum(sizes):4d} {icc:6.3f} | {cell('case'):>13} | {cell('cluster'):>17} {w['cluster'] / w['case']:6.2f} | "
            f"{cell('stage1'):>13} {w['stage1'] / w['case']:6.2f}"
        )
    print(f"\n{time.perf_counter() - start:.1f} s for {len(SETTINGS)} settings x {R} data sets x 3 bootstraps of {B} resamples")


if __name__ == "__main__":
    main()
