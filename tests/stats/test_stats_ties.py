"""Ties in the ranking (docs/methodology.md#54-ranking-stability): models equal on every case share every rank, P(rank 1)
and rank interval, and the results name them; means an ulp apart (summation order) are a tie in every resample."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repo_paths import KITS_META, PUBLISHED
from segbench.published.segauge import read_segauge_results
from segbench.stats import StatsSettings, analyze
from segbench.stats.ranking import identical_groups, rank_min

MODAL = PUBLISHED / "segauge_benchmark" / "kits23_modal.json"


def _straddling_pair() -> tuple[float, float]:
    """Two adjacent floats on either side of a 10-decimal boundary of np.round (where rounding splits a tie)."""
    a = 0.9634050734 + 0.5e-10
    for _ in range(64):
        b = float(np.nextafter(a, 1.0))
        if np.round(a, 10) != np.round(b, 10):
            return a, b
        a = float(np.nextafter(a, 0.0))
    raise AssertionError("no rounding boundary found")


@pytest.mark.parametrize("higher", [True, False])
def test_means_an_ulp_apart_tie_across_a_rounding_boundary(higher: bool) -> None:
    a, b = _straddling_pair()
    means = np.array([[a, b, 0.5 if higher else 2.0], [b, a, 0.9]])
    ranks = rank_min(means, higher)
    assert ranks[0].tolist() == [1, 1, 3] and ranks[1].tolist() == ([1, 1, 3] if higher else [2, 2, 1])


def test_identical_groups_in_rank_order() -> None:
    values = np.array([[0.9, 0.8], [0.7, 0.6], [0.9, 0.8], [0.7, 0.6], [0.7, 0.61]])
    assert identical_groups(values, ["a", "b", "c", "d", "e"]) == [["a", "c"], ["b", "d"]]
    assert identical_groups(values[:2], ["a", "b"]) == []


def test_identical_models_share_ranks_p_rank1_and_rank_interval_on_real_kits23() -> None:
    """Two copies of each published KiTS23 model (segauge's modal set): every copy pair is tied in every resample."""
    if not MODAL.is_file():
        pytest.skip("data bundle not pulled")
    rows = read_segauge_results(MODAL, KITS_META)
    copies = rows.assign(model=rows["model"] + " (copy)")
    models = sorted(rows["model"].unique())
    res = analyze(pd.concat([rows, copies], ignore_index=True), metrics={"dice": True, "nsd": True, "hd95": False}, settings=StatsSettings(n_resamples=2000))
    for s in res["structures"].values():
        for cell in s["metrics"].values():
            r = cell["ranking"]
            assert sorted(map(sorted, r["identical"])) == [sorted([m, f"{m} (copy)"]) for m in models]
            for m in models:
                c = f"{m} (copy)"
                assert r["rank"][m] == r["rank"][c]
                assert r["p_rank1"][m] == r["p_rank1"][c] and r["rank_interval"][m] == r["rank_interval"][c]
                assert list(r["rank_frequency"][m]) == list(r["rank_frequency"][c])
            first = r["order"][0]
            assert r["p_rank1"][first] > 0 and r["rank"][r["order"][1]] == 1  # the leader and its copy both lead
