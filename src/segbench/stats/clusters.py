"""Clustered (hierarchical) bootstrap (docs/methodology.md#516-clustered-data): CIs when cases cluster by a metadata field.

Multi-centre test sets cluster by institute or scanner: cases of one hospital share protocol and
population, so they are not independent, and the case bootstrap (which treats them as such) gives
intervals that are too narrow when clusters differ. Convention of the two-stage resample here:

1. the clusters are drawn with replacement: C draws from the C clusters, each equally likely,
   whatever its size (a cluster drawn twice appears twice);
2. within every drawn copy of a cluster, its cases are drawn with replacement, as many as it has.

Cluster sizes vary, so a resample's case count varies; its mean is the mean over the cases it holds
(sum of counts x values / sum of counts). Both stages are one count matrix (B, n) per structure,
multiplied with the values by ``resampling.bootstrap_means``, shared by the structure's metrics and
models (paired). The second stage re-adds the within-cluster variance the first already carries, so
the intervals lean conservative, most where clusters differ little (Davison & Hinkley 1997, section
3.8); benchmarks/sim_cluster_coverage.py measures the coverage.

Cases without a value of the field form one cluster of their own, ``MISSING``. A field with a single
cluster over the dataset is refused (``case_clusters`` raises, naming the field): there is nothing to
resample between. A structure whose shared cases fall in a single cluster gets no clustered block (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import numba
import numpy as np
import pandas as pd

from .ranking import rank_min
from .resampling import bootstrap_means, intervals, rng_for
from .settings import StatsSettings

MISSING = "(missing)"


def case_clusters(rows: pd.DataFrame, field: str | None) -> dict[str, object] | None:
    """The cluster of every case, checked at the boundary: {"field", "labels": {case id: label}}; None without a field.

    ValueError naming the field when the rows lack ``meta.<field>``, a case has several values, or
    the dataset holds a single cluster.
    """
    if field is None:
        return None
    if not isinstance(field, str) or not field:
        raise ValueError(f"cluster_field must be a metadata field name, got {field!r}")
    column = f"meta.{field}"
    if column not in rows.columns:
        present = sorted(c.removeprefix("meta.") for c in rows.columns if c.startswith("meta."))
        raise ValueError(f"cluster_field {field!r}: the rows have no column {column!r} (metadata fields: {present})")
    per_case = rows.assign(case_id=rows["case_id"].astype(str)).groupby("case_id", sort=True)[column]
    several = per_case.nunique() > 1
    if several.any():
        raise ValueError(f"cluster_field {field!r}: case {several.index[several.to_numpy()][0]!r} has several values")
    labels = {case: MISSING if pd.isna(v) else str(v) for case, v in per_case.first().items()}
    distinct = sorted(set(labels.values()))
    if len(distinct) < 2:
        raise ValueError(f"cluster_field {field!r} has a single cluster {distinct[0] if distinct else None!r}: a clustered bootstrap needs at least two")
    return {"field": field, "labels": labels}


def cluster_indices(labels: list[str]) -> list[np.ndarray]:
    """Case indices of each cluster, clusters sorted by label."""
    codes, _ = pd.factorize(pd.Series(labels, dtype=object), sort=True)
    order = np.argsort(codes, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)


def cluster_counts(clusters: list[np.ndarray], n_cases: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n) case counts of B two-stage resamples: clusters with replacement, then cases within each copy.

    Stage 1 is one multinomial over the clusters per resample (multiplicities m, summing to C). Stage 2
    draws, for a cluster of n_c cases drawn m times, m * n_c of its cases uniformly with replacement
    (the same as m independent case resamples of it). All resamples' stage-2 draws are one vector of
    uniforms tallied in numba straight into the float64 matrix the products need, as ``resampling.resample_counts``
    does for the case bootstrap (faster than a multinomial per cluster, and than np.repeat + np.bincount; timed: benchmarks/README.md).
    """
    n_clusters = len(clusters)
    sizes = np.array([idx.size for idx in clusters], dtype=np.int64)
    times = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    counts = np.zeros((n_resamples, n_cases))
    _tally_clusters(times, sizes, start, np.concatenate(clusters), rng.random(int((times * sizes).sum())), counts)
    return counts


@numba.njit(cache=True, nogil=True)
def _tally_clusters(
    times: np.ndarray,
    sizes: np.ndarray,
    start: np.ndarray,
    members: np.ndarray,
    uniform: np.ndarray,
    counts: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """counts[r, case] += 1 for every stage-2 draw: resample r draws times[r, c] x sizes[c] cases of cluster c, each
    the member floor(u x size) of the cluster for the next uniform u (resamples, then clusters, in order)."""
    k = 0
    for r in range(times.shape[0]):
        row = counts[r]
        for c in range(times.shape[1]):
            size = sizes[c]
            for _ in range(times[r, c] * size):
                row[members[start[c] + int(uniform[k] * size)]] += 1.0
                k += 1


def cluster_jackknife(values: np.ndarray, clusters: list[np.ndarray]) -> np.ndarray:
    """Leave-one-cluster-out means (C, K) of ``values`` (K, n): BCa's acceleration, skew_t's SE and skewness, at the resampled level."""
    sums = np.stack([values[:, idx].sum(axis=1) for idx in clusters])
    sizes = np.array([idx.size for idx in clusters], dtype=np.float64)
    return (sums.sum(axis=0) - sums) / (sizes.sum() - sizes)[:, None]


def clustered_means(values: np.ndarray, clusters: list[np.ndarray], n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means (B, K) of ``values`` (K, n) over B two-stage resamples (paired across the K rows)."""
    draw = partial(cluster_counts, clusters, values.shape[1])
    return bootstrap_means(values, n_resamples, rng, draw=draw)[0]


def add_clustered(
    cells: Mapping[str, dict],
    values: Mapping[str, np.ndarray],
    models: list[str],
    case_ids: list[str],
    structure: str,
    clusters: Mapping[str, Any] | None,
    settings: StatsSettings,
) -> None:
    """Put each metric's "clustered" block (None without a cluster field or with one cluster here) into ``cells``.

    ``cells``: the structure's results per metric (case-bootstrap CIs, ranking and pairwise already in);
    ``values``: metric -> (K, n) shared-case values of ``models``. One two-stage resample matrix per
    structure, seeded from (seed, structure, "clusters"), serves every metric and model.
    """
    labels = None if clusters is None else [clusters["labels"][c] for c in case_ids]
    groups = cluster_indices(labels) if labels else []
    if len(groups) < 2:
        for cell in cells.values():
            cell["clustered"] = None
        return
    stacked = np.concatenate([values[m] for m in cells])
    boot = clustered_means(stacked, groups, settings.n_resamples, rng_for(settings.seed, structure, "clusters"))
    jack = cluster_jackknife(stacked, groups)
    k = len(models)
    for i, cell in enumerate(cells.values()):
        cols = slice(i * k, (i + 1) * k)
        cell["clustered"] = _block(cell, models, stacked[cols], boot[:, cols], jack[:, cols], settings)
        cell["clustered"].update(
            field=clusters["field"],  # type: ignore[index]  # set: two groups or more
            n_clusters=len(groups),
            cluster_sizes={labels[g[0]]: g.size for g in groups},  # type: ignore[index]  # as above
        )


def _block(cell: dict, models: list[str], values: np.ndarray, boot: np.ndarray, jack: np.ndarray, settings: StatsSettings) -> dict:
    """Cluster-bootstrap mean CIs, P(rank 1) and pairwise CIs of one metric, beside the case bootstrap's."""
    means = values.mean(axis=1)
    alpha = np.full(len(models), 1.0 - settings.confidence)
    low, high = intervals(boot, means, jack, alpha, settings.ci_method, span=(values.min(axis=1), values.max(axis=1)))  # range rule: per case
    out: dict[str, Any] = {
        "case_set": "shared",
        "models": {
            m: {
                "mean": means[k],
                "ci_low": low[k],
                "ci_high": high[k],
                "case_ci_low": e["ci_low"],
                "case_ci_high": e["ci_high"],
                "width_ratio": _ratio(high[k] - low[k], e["ci_high"], e["ci_low"]),
            }
            for k, (m, e) in enumerate((m, cell["models"][m]) for m in models)
        },
        "p_rank1": None,
        "pairwise": [],
    }
    if cell["ranking"] is None:
        return out
    order = cell["ranking"]["order"]
    at = {m: k for k, m in enumerate(models)}
    ranked = [at[m] for m in order]
    p_rank1 = (rank_min(boot[:, ranked], cell["higher_is_better"]) == 1).mean(axis=0)
    out["p_rank1"] = {m: {"cluster": p, "case": cell["ranking"]["p_rank1"][m]} for m, p in zip(order, p_rank1)}
    shared = cell["alignment"]["pairwise"] if (cell["alignment"] or {}).get("protocol") == "shared" else cell["pairwise"]
    if shared:
        a = np.array([at[p["a"]] for p in shared])
        b = np.array([at[p["b"]] for p in shared])
        level = np.array([p["ci_level"] for p in shared], dtype=np.float64)
        # column-major: the per-column sort reads contiguous memory; skew_t reads no resample (resampling.intervals)
        diff = np.subtract(boot[:, a], boot[:, b], order="F") if settings.ci_method != "skew_t" else np.empty((0, a.size))
        case_diff = values[a] - values[b]
        d_low, d_high = intervals(
            diff, means[a] - means[b], jack[:, a] - jack[:, b], 1.0 - level, settings.ci_method, span=(case_diff.min(axis=1), case_diff.max(axis=1))
        )
        out["pairwise"] = [
            {
                "a": p["a"],
                "b": p["b"],
                "mean_diff": means[a[j]] - means[b[j]],
                "ci_level": p["ci_level"],
                "ci_low": d_low[j],
                "ci_high": d_high[j],
                "case_ci_low": p["ci_low"],
                "case_ci_high": p["ci_high"],
                "width_ratio": _ratio(d_high[j] - d_low[j], p["ci_high"], p["ci_low"]),
                "separable": bool(d_low[j] > 0 or d_high[j] < 0),
                "case_separable": p["separable"],
            }
            for j, p in enumerate(shared)
        ]
    return out


def _ratio(width: float, case_high: float | None, case_low: float | None) -> float | None:
    """Cluster CI width over case CI width; None where the case CI has no width."""
    if case_high is None or case_low is None or not case_high > case_low:
        return None
    return float(width / (case_high - case_low))


def verdict_changes(structures: Mapping[str, dict]) -> dict:
    """What resampling clusters instead of cases changes on the first screen (docs/methodology.md#516-clustered-data):
    the cells (``"<structure> <metric>"``) whose #1-versus-#2 pair the two bootstraps separate differently, and those
    whose co-winner set (#1 and every model not separable from it) differs, among the ``n_cells`` ranked cells with
    a clustered block. Both decisions compare like with like: the case decision of the pair (``case_separable``) with
    the cluster bootstrap's CI at the same level (``separable``). ``unit``: the unit the board's verdicts assume."""
    first_second, co_winners, n_cells = [], [], 0
    for structure, block in sorted(structures.items()):
        for metric, cell in sorted(block["metrics"].items()):
            c = cell.get("clustered")
            order = (cell.get("ranking") or {}).get("order") or []
            if not c or len(order) < 2 or not c["pairwise"]:
                continue
            n_cells += 1
            with_first = {(p["b"] if p["a"] == order[0] else p["a"]): p for p in c["pairwise"] if order[0] in (p["a"], p["b"])}
            head = with_first[order[1]]
            if head["separable"] != head["case_separable"]:
                first_second.append(f"{structure} {metric}")
            if {m for m, p in with_first.items() if not p["separable"]} != {m for m, p in with_first.items() if not p["case_separable"]}:
                co_winners.append(f"{structure} {metric}")
    return {"unit": "case", "n_cells": n_cells, "first_second": first_second, "co_winners": co_winners}
