"""The range rule of the models' intervals (docs/methodology.md#53-estimates-and-cis): no CI past its metric's range or
the per-case values it averages, on real published sets; the calibrated levels and reanalyze use the same rule."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from repo_paths import KITS_META, PUBLISHED
from segbench.published.segauge import read_segauge_results
from segbench.stats import StatsSettings, analyze, reanalyze
from segbench.stats.levels import coverage_by_level
from segbench.stats.ranges import range_violations
from segbench.stats.resampling import bounded_ends, intervals, jackknife_means, skew_t_bounds

KITS_SETS = ("kits23_seed.json", "kits23_modal.json")
KITS_METRICS = {"dice": True, "nsd": True, "hd95": False, "assd": False}
# a recall-like sample: 38 cases at 1, two misses; Hall's upper end at 95 % lies above 1
NEAR_ONE = np.concatenate([np.ones(38), [0.55, 0.8]])[None, :]


def _kits(name: str) -> pd.DataFrame:
    path = PUBLISHED / "segauge_benchmark" / name
    if not path.is_file():
        pytest.skip("data bundle not pulled")
    return read_segauge_results(path, KITS_META)


def test_range_rule_holds_skew_t_at_the_largest_value_and_names_the_end() -> None:
    estimate, jack, alpha = NEAR_ONE.mean(axis=1), jackknife_means(NEAR_ONE), np.array([0.05])
    unbounded = skew_t_bounds(estimate, jack, alpha, (np.array([-np.inf]), np.array([np.inf])))
    assert unbounded[1][0] > 1.0  # the sample is one the rule must act on
    low, high = skew_t_bounds(estimate, jack, alpha, (NEAR_ONE.min(axis=1), NEAR_ONE.max(axis=1)))
    assert high[0] == 1.0 and low[0] == unbounded[0][0]
    assert bounded_ends(low, high, estimate, NEAR_ONE.min(axis=1), NEAR_ONE.max(axis=1)) == ["high"]
    # without the values at hand (the pairs' differences), the range comes from the jackknife: the same up to rounding
    derived = intervals(np.zeros((1, 1)), estimate, jack, alpha, "skew_t")
    assert derived[1][0] == pytest.approx(1.0, abs=1e-12) and derived[0][0] == low[0]


def test_calibrated_levels_measure_the_bounded_interval() -> None:
    """levels.coverage_by_level's widths are those of the interval the board prints (upper end held at 1), not of
    Hall's unbounded one."""
    sample = np.stack([NEAR_ONE, NEAR_ONE[:, ::-1]])[:, :, None, :]  # (M=2, K=1, D=1, n)
    _, width = coverage_by_level(sample, np.full((2, 1), 0.98), np.array([0.95]))
    low, high = skew_t_bounds(NEAR_ONE.mean(axis=1), jackknife_means(NEAR_ONE), np.array([0.05]), (np.array([-np.inf]), np.array([np.inf])))
    assert high[0] > 1.0
    assert width[0, 0] == pytest.approx(1.0 - low[0], rel=1e-12)


@pytest.mark.parametrize("name", KITS_SETS)
@pytest.mark.parametrize("confidence", [0.95, 0.995])
def test_no_model_interval_leaves_its_ranges_on_published_kits23(name: str, confidence: float) -> None:
    """The seed's 10 cases per model give Hall's interval ends below 0 mm and above Dice 1 (11 of 16 at 95 %)."""
    res = analyze(_kits(name), metrics=KITS_METRICS, settings=StatsSettings(n_resamples=200, confidence=confidence))
    assert range_violations(res) == []
    for s in res["structures"].values():
        for cell in s["metrics"].values():
            for model, entry in cell["models"].items():
                values = cell["per_case"][model]
                ends = {"low": entry["ci_low"] == min(values), "high": entry["ci_high"] == max(values)}
                expected = "both" if all(ends.values()) else next((k for k, v in ends.items() if v), None)
                assert entry["ci_bounded"] == expected


def test_bootstrap_ci_pair_intervals_stay_inside_the_differences() -> None:
    """Under pairwise_test=bootstrap_ci the Δ intervals decide; skew_t's are held inside the per-case differences."""
    res = analyze(_kits("kits23_seed.json"), metrics=KITS_METRICS, settings=StatsSettings(n_resamples=200, pairwise_test="bootstrap_ci"))
    checked = 0
    for s in res["structures"].values():
        for cell in s["metrics"].values():
            for pair in cell["pairwise"]:
                diff = np.subtract(cell["per_case"][pair["a"]], cell["per_case"][pair["b"]])
                assert diff.min() - 1e-12 <= pair["ci_low"] <= pair["ci_high"] <= diff.max() + 1e-12
                checked += 1
    assert checked


def test_reanalyze_fails_on_an_interval_outside_its_range() -> None:
    res = json.loads(json.dumps(analyze(_kits("kits23_modal.json"), metrics={"dice": True}, settings=StatsSettings(n_resamples=200))))
    assert reanalyze(res) == []
    entry = res["structures"]["kidney"]["metrics"]["dice"]["models"]["MOOSE"]
    entry["ci_high"] = 1.002
    problems = reanalyze(res)
    assert any("kidney/dice/MOOSE: CI" in p and "leaves the metric's range [0.0, 1.0]" in p for p in problems)
    assert any("kidney/dice/MOOSE: CI" in p and "leaves its per-case values' range" in p for p in problems)


def test_cluster_intervals_stay_inside_the_per_case_values() -> None:
    """The cluster CIs (docs/methodology.md#516-clustered-data) hold at the per-case range too, not at the range of the
    leave-one-cluster-out pseudo-values (which their few clusters make wider or narrower)."""
    res = analyze(_kits("kits23_seed.json"), metrics=KITS_METRICS, settings=StatsSettings(n_resamples=200), cluster_field="age_band")
    checked = 0
    for s in res["structures"].values():
        for cell in s["metrics"].values():
            for model, e in cell["clustered"]["models"].items():
                values = cell["per_case"][model]
                assert min(values) <= e["ci_low"] <= e["ci_high"] <= max(values)
            for pair in cell["clustered"]["pairwise"]:
                diff = np.subtract(cell["per_case"][pair["a"]], cell["per_case"][pair["b"]])
                assert diff.min() <= pair["ci_low"] <= pair["ci_high"] <= diff.max()
                checked += 1
    assert checked


def test_a_column_without_jackknife_rows_keeps_its_point_interval() -> None:
    """A pair with a single common case (pairwise-complete alignment) has an all-NaN jackknife column: no range, and the
    interval is the point, not [inf, -inf]."""
    jack = np.array([[np.nan, 0.5], [np.nan, 0.7]])
    low, high = intervals(np.zeros((1, 2)), np.array([0.3, 0.6]), jack, np.array([0.05, 0.05]), "skew_t")
    assert low[0] == high[0] == 0.3
    assert 0.5 <= low[1] < 0.6 < high[1] <= 0.7


def test_an_area_under_the_interactive_curve_is_not_held_to_one() -> None:
    """DSC_AUC and NSD_AUC add a score per step (0 to 4 over the protocol's five steps): only their per-case values
    bound their CIs, and a CI above 1 inside those values is no violation; a share above 1 is."""
    values = [2.2, 2.9, 3.4, 3.1, 2.6]
    cell = {"higher_is_better": True, "per_case": {"m": values}, "models": {"m": {"ci_low": 2.4, "ci_high": 3.2}}}
    results = {"structures": {"tumor": {"metrics": {"DSC_AUC": cell, "dsc": json.loads(json.dumps(cell))}}}}
    assert range_violations(results) == ["tumor/dsc/m: CI [2.4, 3.2] leaves the metric's range [0.0, 1.0]"]
