"""Implementation sensitivity: the leaderboard under another metric definition or missing-value policy, beside the baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from segbench.stats import StatsSettings, analyze, sensitivity
from segbench.stats.sensitivity import apply_missing_policy

METRICS = {"dice": True, "hd95": False}
SETTINGS = StatsSettings(n_resamples=500, scheme_resamples=100)
N_CASES = 40


def _rows(means: dict[str, float], profile: str = "segauge", seed: int = 0) -> pd.DataFrame:
    """Per-case dice around each model's mean (hd95 falls as dice rises), one structure, a shared case difficulty."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 0.03, N_CASES)
    frames = []
    for model, mean in means.items():
        dice = np.clip(mean + difficulty + rng.normal(0, 0.01, N_CASES), 0, 1)
        frames.append(
            pd.DataFrame(
                {
                    "model": model,
                    "case_id": [f"case_{i:03d}" for i in range(N_CASES)],
                    "structure": "kidney",
                    "reference_present": True,
                    "dice": dice,
                    "hd95": 20 * (1 - dice),
                    "worst_case": False,
                    "metric_profile": profile,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _run(rows: pd.DataFrame, profile_rows: pd.DataFrame) -> dict:
    baseline = analyze(rows, metrics=METRICS, settings=SETTINGS)
    return sensitivity(baseline, rows, profile_rows, baseline_profile="segauge", metrics=METRICS, settings=SETTINGS)


def test_a_profile_that_swaps_the_top_two_is_reported_as_a_flip_with_a_new_number_one() -> None:
    rows = _rows({"A": 0.90, "B": 0.85, "C": 0.70})
    other = _rows({"A": 0.85, "B": 0.90, "C": 0.70}, profile="deepmind")
    result = _run(rows, other)
    variant = result["profiles"]["variants"]["deepmind"]
    assert result["profiles"]["baseline"] == "segauge" and variant["run"]
    cell = variant["cells"]["kidney"]["dice"]
    assert cell["flipped_pairs"] == [["A", "B"]]
    assert cell["top"] == {"baseline": ["A"], "variant": ["B"]} and cell["top_changed"]
    assert cell["kendall_tau"] == pytest.approx(1 / 3)  # 3 models, 1 of 3 pairs discordant
    assert cell["co_winners"] == {"baseline": ["A"], "variant": ["B"]} and cell["co_winners_changed"]
    assert ["A", "B"] in cell["verdicts_changed"] and ["B", "A"] in cell["verdicts_changed"]
    assert variant["summary"]["n_top_changed"] == 2 and variant["summary"]["n_flipped_pairs"] == 2  # dice and hd95 alike


def test_the_same_scores_under_another_profile_change_nothing() -> None:
    rows = _rows({"A": 0.90, "B": 0.85, "C": 0.70})
    variant = _run(rows, rows.assign(metric_profile="deepmind"))["profiles"]["variants"]["deepmind"]
    assert variant["summary"] | {"n_cells": 2} == {
        "n_cells": 2,
        "n_cells_with_flips": 0,
        "n_flipped_pairs": 0,
        "n_top_changed": 0,
        "n_co_winners_changed": 0,
        "n_verdicts_changed": 0,
        "kendall_tau_min": 1.0,
    }


def test_a_profile_not_scored_for_every_model_is_not_run_and_says_which() -> None:
    rows = _rows({"A": 0.90, "B": 0.85, "C": 0.70})
    other = _rows({"A": 0.85, "B": 0.90}, profile="deepmind")
    assert _run(rows, other)["profiles"]["variants"]["deepmind"] == {"run": False, "reason": "not scored for C"}


def test_missing_value_policies_drop_or_zero_the_failed_rows() -> None:
    rows = _rows({"A": 0.90, "B": 0.85, "C": 0.70})
    failed = (rows["model"] == "A") & rows["case_id"].isin([f"case_{i:03d}" for i in range(12)])
    rows.loc[failed, ["dice", "hd95", "worst_case"]] = [0.0, 300.0, True]
    dropped = apply_missing_policy(rows, "drop_failed", METRICS)
    assert len(dropped) == len(rows) - 12 and not dropped["worst_case"].any()
    zeroed = apply_missing_policy(rows, "zero", METRICS)
    assert (zeroed.loc[failed, ["dice", "hd95"]] == 0).all().all() and zeroed.loc[~failed].equals(rows.loc[~failed])
    with pytest.raises(ValueError, match="unknown missing-value policy 'nan'"):
        apply_missing_policy(rows, "nan", METRICS)

    policies = _run(rows, pd.DataFrame())["missing_policy"]
    assert policies["n_failed_rows"] == 12 and policies["baseline"] == "worst_case"
    # worst case: A's 12 failures put it last on both metrics; dropped: A (best on the cases left) is #1 again;
    # zero: A's failed cases get a perfect 0 mm, so A wins hd95 while still last on dice
    drop, zero = policies["variants"]["drop_failed"]["cells"]["kidney"], policies["variants"]["zero"]["cells"]["kidney"]
    assert drop["dice"]["top"] == {"baseline": ["B"], "variant": ["A"]} and drop["hd95"]["top_changed"]
    assert not zero["dice"]["top_changed"] and zero["hd95"]["top"] == {"baseline": ["B"], "variant": ["A"]}


def test_policies_are_not_run_without_failed_rows() -> None:
    rows = _rows({"A": 0.90, "B": 0.85})
    assert _run(rows, pd.DataFrame())["missing_policy"]["variants"]["zero"] == {"run": False, "reason": "no failed case (no row flagged worst_case)"}


def test_dropping_every_row_is_reported_not_run() -> None:
    """A model that failed every case (the only model here): dropping its failures leaves nothing, which is said."""
    rows = _rows({"A": 0.9}).assign(worst_case=True, dice=0.0)
    policies = _run(rows, pd.DataFrame())["missing_policy"]["variants"]
    assert policies["drop_failed"] == {"run": False, "reason": "every row is a failed case: nothing is left to compare"}
    assert policies["zero"]["run"] and policies["zero"]["summary"]["n_flipped_pairs"] == 0  # one model: nothing to flip


def test_dropping_a_model_that_failed_every_case_compares_the_others() -> None:
    """The pipeline passes every model's contamination flag: a policy that drops a model's rows (it failed every case)
    analyses the models left, and their order beside the baseline's is compared, not an error about the flags."""
    rows = _rows({"A": 0.90, "B": 0.85, "C": 0.70})
    rows.loc[rows["model"] == "A", ["dice", "hd95", "worst_case"]] = [0.0, 300.0, True]
    flags = {"A": False, "B": False, "C": True}
    baseline = analyze(rows, metrics=METRICS, settings=SETTINGS, contaminated=flags)
    result = sensitivity(baseline, rows, pd.DataFrame(), baseline_profile="segauge", metrics=METRICS, settings=SETTINGS, contaminated=flags)
    drop = result["missing_policy"]["variants"]["drop_failed"]
    assert drop["run"] and drop["cells"]["kidney"]["dice"]["top"] == {"baseline": ["B"], "variant": ["B"]}
    assert drop["summary"]["n_flipped_pairs"] == 0 and result["missing_policy"]["variants"]["zero"]["run"]
