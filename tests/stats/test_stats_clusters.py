"""The clustered (two-stage) bootstrap: its count matrix, its boundary errors, SIMULATED coverage, Touchstone by institute."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from repo_paths import ROOT
from segbench.config.params import ConfigError, parse_params
from segbench.config.validation import compose_params
from segbench.stats import StatsSettings, analyze, reanalyze
from segbench.stats.clusters import MISSING, cluster_counts, cluster_indices, clustered_means
from segbench.stats.resampling import bootstrap_means, intervals

SIZES = [3, 7, 12, 20, 41]  # unequal cluster sizes


def _labels(sizes: list[int]) -> list[str]:
    return [f"site{c}" for c, size in enumerate(sizes) for _ in range(size)]


def test_counts_draw_whole_clusters_with_replacement_then_cases() -> None:
    clusters = cluster_indices(_labels(SIZES))
    assert [idx.size for idx in clusters] == SIZES
    counts = cluster_counts(clusters, sum(SIZES), 4000, np.random.default_rng(0))
    per_cluster = np.stack([counts[:, idx].sum(axis=1) for idx in clusters], axis=1)  # (B, C)
    times = per_cluster / np.array(SIZES)
    np.testing.assert_array_equal(times, np.round(times))  # each drawn copy brings exactly its cluster's size
    np.testing.assert_array_equal(times.sum(axis=1), len(SIZES))  # C clusters drawn per resample
    assert np.unique(counts.sum(axis=1)).size > 10  # resample sizes vary with the clusters drawn
    assert (times == 0).any() and (times >= 2).any()  # with replacement: clusters left out and repeated
    # within a drawn cluster its cases are resampled: some of its cases are missed, others repeated
    drawn_once = times[:, 4] == 1
    inside = counts[drawn_once][:, clusters[4]]
    assert (inside == 0).any(axis=1).mean() > 0.9 and (inside >= 2).any(axis=1).mean() > 0.9
    # each cluster is equally likely whatever its size: E[times] = 1
    np.testing.assert_allclose(times.mean(axis=0), 1.0, atol=0.05)
    # a resample's mean is over the cases it holds, however many
    values = np.random.default_rng(5).normal(size=(2, sum(SIZES)))
    np.testing.assert_allclose(
        clustered_means(values, clusters, 4000, np.random.default_rng(0)), (counts @ values.T) / counts.sum(axis=1, keepdims=True), rtol=1e-12
    )


def test_one_case_per_cluster_is_the_case_bootstrap() -> None:
    """Singleton clusters: stage 2 is void, so the two-stage means follow the case bootstrap's distribution."""
    values = np.random.default_rng(1).gamma(2.0, size=(3, 60))
    singletons = cluster_indices([f"c{i:02d}" for i in range(60)])
    cluster = clustered_means(values, singletons, 20_000, np.random.default_rng(2))
    case, _ = bootstrap_means(values, 20_000, np.random.default_rng(3))
    np.testing.assert_allclose(cluster.std(axis=0), case.std(axis=0), rtol=0.03)
    np.testing.assert_allclose(np.quantile(cluster, [0.025, 0.975], axis=0), np.quantile(case, [0.025, 0.975], axis=0), atol=0.25 * case.std(axis=0).max())


def test_simulated_coverage_needs_the_cluster_stage() -> None:
    """SIMULATED clustered scores (ICC 0.2): the two-stage 95 % CI holds the true mean about 95 % of the time, the case CI far less."""
    rng = np.random.default_rng(7)
    sizes = [5, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80]
    n_sets, mu = 300, 0.85
    effect = np.repeat(rng.normal(0.0, 0.05, size=(n_sets, len(sizes))), sizes, axis=1)
    values = mu + effect + rng.normal(0.0, 0.1, size=effect.shape)
    alpha = np.full(n_sets, 0.05)

    def covered(boot: np.ndarray) -> float:
        low, high = intervals(boot, values.mean(axis=1), None, alpha, "percentile")
        return float(((low <= mu) & (mu <= high)).mean())

    cluster = covered(clustered_means(values, cluster_indices(_labels(sizes)), 1000, rng))
    case = covered(bootstrap_means(values, 1000, rng)[0])
    assert cluster >= 0.87 and case <= 0.6, (cluster, case)


def _rows(institutes: dict[str, object], n_models: int = 3) -> pd.DataFrame:
    """Per-case rows of two organs; the kidney is scored only in site A's cases."""
    rng = np.random.default_rng(4)
    frames = []
    for m in range(n_models):
        for organ in ("liver", "kidney"):
            cases = [c for c, site in institutes.items() if organ == "liver" or site == "A"]
            frames.append(
                pd.DataFrame(
                    {
                        "model": f"model_{m}",
                        "case_id": cases,
                        "structure": organ,
                        "reference_present": True,
                        "dice": np.clip(0.8 + 0.02 * m + rng.normal(0, 0.05, len(cases)), 0, 1),
                    }
                )
            )
    rows = pd.concat(frames, ignore_index=True)
    rows["meta.institute"] = rows["case_id"].map(institutes)
    return rows


SITES = {f"case_{i:03d}": ("A" if i < 20 else "B" if i < 32 else "C" if i < 38 else None) for i in range(40)}


def test_analysis_block_missing_values_and_single_cluster_structure() -> None:
    settings = StatsSettings(n_resamples=300)
    results = analyze(_rows(SITES), metrics={"dice": True}, settings=settings, cluster_field="institute")
    assert results["clusters"]["field"] == "institute"
    block = results["structures"]["liver"]["metrics"]["dice"]["clustered"]
    assert block["field"] == "institute" and block["n_clusters"] == 4
    assert block["cluster_sizes"] == {MISSING: 2, "A": 20, "B": 12, "C": 6}  # missing values: one cluster of their own
    cell = results["structures"]["liver"]["metrics"]["dice"]
    for model, entry in block["models"].items():
        assert entry["case_ci_low"] == cell["models"][model]["ci_low"]
        assert entry["width_ratio"] == pytest.approx((entry["ci_high"] - entry["ci_low"]) / (entry["case_ci_high"] - entry["case_ci_low"]))
    assert sum(p["cluster"] for p in block["p_rank1"].values()) >= 1.0
    assert [(p["a"], p["b"]) for p in block["pairwise"]] == [(p["a"], p["b"]) for p in cell["pairwise"]]
    assert results["structures"]["kidney"]["metrics"]["dice"]["clustered"] is None  # its cases are all site A
    assert reanalyze(json.loads(json.dumps(results))) == []
    assert analyze(_rows(SITES), metrics={"dice": True}, settings=settings)["clusters"] is None


@pytest.mark.parametrize(
    ("field", "sites", "message"),
    [
        ("hospital", SITES, "cluster_field 'hospital': the rows have no column 'meta.hospital'"),
        ("institute", dict.fromkeys(SITES, "A"), "cluster_field 'institute' has a single cluster 'A'"),
    ],
)
def test_bad_field_or_single_cluster_is_refused_by_name(field: str, sites: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        analyze(_rows(sites), metrics={"dice": True}, settings=StatsSettings(n_resamples=50), cluster_field=field)


def test_config_cluster_field_must_be_a_field_name() -> None:
    root = ROOT
    raw = compose_params(root / "conf")
    assert parse_params(raw, root).published_set("touchstone_totalsegmentator").cluster_field == "institute"
    raw["published"]["touchstone_totalsegmentator"]["cluster_field"] = ["institute"]
    with pytest.raises(ConfigError, match="published set 'touchstone_totalsegmentator': cluster_field must be a metadata field name"):
        parse_params(raw, root)


def test_touchstone_by_institute_is_wider_than_the_case_bootstrap(touchstone_rows: pd.DataFrame) -> None:
    rows = touchstone_rows[touchstone_rows["structure"].isin(["liver", "pancreas"])]
    results = analyze(rows, metrics={"dice": True, "nsd": True}, settings=StatsSettings(n_resamples=500), cluster_field="institute")
    for organ in ("liver", "pancreas"):
        for metric in ("dice", "nsd"):
            block = results["structures"][organ]["metrics"][metric]["clustered"]
            assert block["n_clusters"] >= 9
            ratios = [e["width_ratio"] for e in block["models"].values()]
            assert len(ratios) == 19 and np.median(ratios) > 1.2
            assert len(block["pairwise"]) == 19 * 18 // 2
