"""Audit-calibrated CI levels (``segbench.stats.levels``): the level search, the cross-fitted coverage on a population
whose thin tail a sample misses, the analysis computing its CIs at a given level (and ``reanalyze`` reproducing it), and
the board reading the level and its out-of-sample coverage from the audit's table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from segbench.stats import AuditTables, BoardCell, StatsSettings, analyze, audited, level_provider, reanalyze, recompute
from segbench.stats.levels import calibrated_level, coverage_by_level, level_grid, level_rows, population_truth, sample_draws


def test_level_search_interpolates_never_goes_below_the_target_and_caps() -> None:
    grid = level_grid(0.95)
    assert grid[0] == pytest.approx(0.95) and grid[-1] == pytest.approx(0.999) and np.all(np.diff(grid) > 0)
    coverage = np.array([0.90, 0.92, 0.94, 0.96, 0.97, 0.98, 0.99, 0.99, 0.99, 0.995, 0.999])
    level, capped = calibrated_level(coverage, grid, 0.95)
    assert not capped and level == pytest.approx(0.97 + 0.5 * (0.975 - 0.97))  # halfway between 94 % and 96 %
    assert calibrated_level(np.full(grid.size, 0.97), grid, 0.95) == (pytest.approx(0.95), False)  # already covers: no narrowing
    assert calibrated_level(np.full(grid.size, 0.80), grid, 0.95) == (pytest.approx(0.999), True)


def _thin_tailed(n_cases: int = 400, seed: int = 3) -> np.ndarray:
    """(1 metric, 3 models, N) NSD-like scores: most cases near 1, a few far below (deficits lognormal, sigma 1.6); the
    first two models equal in distribution, the third worse."""
    rng = np.random.default_rng(seed)
    deficits = np.exp(rng.normal(-6.0, 1.6, size=(3, n_cases)))
    deficits[2] *= 1.5
    return np.clip(1.0 - deficits, 0.0, 1.0)[None]


def test_calibrated_level_covers_out_of_sample_where_the_nominal_one_misses() -> None:
    values = _thin_tailed()
    (row,) = level_rows(values, [0, 1], ["nsd"], n=40, draws=600, confidence=0.95, rng=np.random.default_rng(0))
    assert row["nominal_rate"] < 0.93, row  # the sample misses the tail: skew_t at 95 % under-covers
    assert row["level"] > 0.96 and not row["capped"] and row["width_ratio"] > 1.0
    # the calibrated rule, measured on halves it did not see (1,200 samples: MC SE about 0.7 points)
    assert 0.925 <= row["rate"] <= 0.975 and row["rate"] > row["nominal_rate"] + 0.02 and 0 < row["mc_se"] < 0.01, row
    assert row["level_halves_min"] <= row["level_halves_max"]
    # the coverage function agrees with a direct count at the chosen level
    sample = sample_draws(values, [0, 1], 40, 400, np.random.default_rng(1))
    covered, _ = coverage_by_level(sample, population_truth(values, [0, 1]), np.array([0.95, row["level"]]))
    assert covered[0, 1] > covered[0, 0] + 0.02


def test_equal_models_are_dealt_per_case() -> None:
    values = np.stack([np.zeros(50), np.ones(50), np.full(50, 5.0)])[None]
    sample = sample_draws(values, [0, 1], 30, 200, np.random.default_rng(2))
    assert sample.shape == (1, 3, 200, 30)
    assert np.array_equal(sample[0, 0] + sample[0, 1], np.ones((200, 30))) and 0.4 < sample[0, 0].mean() < 0.6
    assert np.all(sample[0, 2] == 5.0)
    assert np.array_equal(population_truth(values, [0, 1])[0], [0.5, 0.5, 5.0])


def _rows(n: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    out = []
    for model, shift in (("a", 0.0), ("b", 0.02)):
        for case in range(n):
            out.append(
                {
                    "model": model,
                    "case_id": f"c{case:02d}",
                    "structure": "tumor",
                    "reference_present": True,
                    "prediction_missing": False,
                    "worst_case": False,
                    "dice": float(np.clip(0.9 - shift + rng.normal(0, 0.05), 0, 1)),
                }
            )
    return pd.DataFrame(out)


def test_the_analysis_computes_its_cis_at_the_given_level_and_reanalyze_reproduces_them() -> None:
    settings = StatsSettings(n_resamples=200)
    nominal = analyze(_rows(), metrics={"dice": True}, settings=settings)
    calibrated = analyze(_rows(), metrics={"dice": True}, settings=settings, ci_levels=lambda structure, metric, n: 0.99)
    cell, cell_nominal = (r["structures"]["tumor"]["metrics"]["dice"] for r in (calibrated, nominal))
    assert cell["ci_confidence"] == 0.99 and cell_nominal["ci_confidence"] == 0.95
    for model in ("a", "b"):
        wide, narrow = cell["models"][model], cell_nominal["models"][model]
        assert wide["ci_low"] < narrow["ci_low"] < narrow["ci_high"] < wide["ci_high"]
    assert cell["pairwise"] == cell_nominal["pairwise"]  # the verdict's test does not read the level
    assert reanalyze(calibrated) == []
    again = recompute(calibrated, ci_method="percentile")  # another CI rule: its nominal level, not the stored one
    assert again["structures"]["tumor"]["metrics"]["dice"]["ci_confidence"] == 0.95
    assert recompute(nominal, ci_levels=lambda structure, metric, n: 0.99) == calibrated  # new levels, e.g. a rerun audit's


def _tables(levels: list[tuple]) -> AuditTables:
    key = ["source", "structure", "metric", "n"]
    coverage = pd.DataFrame([("simulated", "tumor", "nsd", 40, "skew_t", 0.905, 0.006)], columns=[*key, "method", "rate", "mc_se"])
    type1 = pd.DataFrame([("simulated", "tumor", "nsd", 40, "signflip_holm", 0.048, 0.005)], columns=[*key, "procedure", "rate", "mc_se"])
    frame = pd.DataFrame(levels, columns=[*key, "method", "level", "capped", "rate", "mc_se", "nominal_rate", "width_ratio"])
    return AuditTables(coverage, type1, {"confidence": 0.95, "alpha": 0.05, "multiple_comparison": "holm"}, {"simulated": "kits23"}, frame)


def test_the_board_reads_the_calibrated_level_and_its_out_of_sample_coverage() -> None:
    tables = _tables([("simulated", "tumor", "nsd", 40, "skew_t", 0.9868, False, 0.944, 0.004, 0.905, 1.32)])
    settings = StatsSettings().to_dict()
    level = level_provider(tables, source="simulated", data="kits23", settings=settings)
    assert level("mass", "nsd", 45) == 0.9868 and level("tumor", "dice", 45) == 0.95  # dice: no calibrated row
    assert level_provider(tables, source="simulated", data="kits23", settings=settings | {"ci_level": "nominal"})("tumor", "nsd", 45) == 0.95
    at_level = audited(tables, BoardCell("simulated", "kits23", "tumor", "nsd", 45, settings, 0.9868))["coverage"]
    assert at_level["level"] == 0.9868 and at_level["rate"] == 0.944 and not at_level["under_covers"]
    at_nominal = audited(tables, BoardCell("simulated", "kits23", "tumor", "nsd", 45, settings | {"ci_level": "nominal"}, 0.95))["coverage"]
    assert "level" not in at_nominal and at_nominal["rate"] == 0.905 and at_nominal["under_covers"]
    elsewhere = audited(tables, BoardCell("simulated", "kits23", "tumor", "nsd", 45, settings, 0.97))
    assert elsewhere["coverage"] is None and "did not calibrate" in elsewhere["reason"]
    with pytest.raises(ValueError, match="levels lacks the columns"):
        AuditTables(tables.coverage, tables.type1, tables.settings, tables.data, tables.levels.drop(columns=["level"]))
