"""challengeR parity of the ranking schemes and the consensus, on a fixture with ties whose values are derived by hand.

The definitions are challengeR's documented ones (docs/methodology.md#514-ranking-schemes): aggregate-then-rank,
rank-then-aggregate (mean of per-case 'min' ranks), test-then-rank (one-sided paired Wilcoxon, normal
approximation with continuity correction, no adjustment, a win when p <= alpha; score = share of the
others beaten), consensus = mean over tasks of the ranks with ties given their average rank.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import ndtr

from segbench.stats import StatsSettings, analyze, schemes
from segbench.stats.resampling import resample_counts

# C and D are identical (all differences zero: never a win); A - C = 0.1 + 0.001 i > 0, distinct;
# B = A + alt with |alt| = 0.011 + 0.002 i distinct, + for even i, - for odd i.
IDX = np.arange(10)
C = 0.5 + 0.01 * IDX
A = C + 0.1 + 0.001 * IDX
ALT = np.where(IDX % 2 == 0, 1.0, -1.0) * (0.011 + 0.002 * IDX)
B = A + ALT
DICE = {"A": A, "B": B, "C": C, "D": C.copy()}
NSD = {**DICE, "B": A + 0.05}  # B best on nsd


def _rows() -> pd.DataFrame:
    return pd.DataFrame(
        [{"model": m, "case_id": f"case_{i}", "structure": "organ", "reference_present": True, "dice": DICE[m][i], "nsd": NSD[m][i]} for m in DICE for i in IDX]
    )


@pytest.fixture(scope="module")
def schemes_analysis() -> dict:
    return analyze(_rows(), metrics={"dice": True, "nsd": True}, settings=StatsSettings(n_resamples=200, scheme_resamples=300))


def _p_one_sided(t_plus: float, m: int) -> float:
    """Wilcoxon signed-rank, normal approximation with continuity correction (R's exact = FALSE), no ties or zeros."""
    mean, sd = m * (m + 1) / 4, math.sqrt(m * (m + 1) * (2 * m + 1) / 24)
    return float(ndtr(-(t_plus - mean - 0.5) / sd))


def test_schemes_equal_hand_derived_challenger_values(schemes_analysis: dict) -> None:
    sc = schemes_analysis["structures"]["organ"]["metrics"]["dice"]["schemes"]
    # aggregate-then-rank: mean(B) = mean(A) + sum(ALT)/10 = mean(A) - 0.001; C, D tied
    assert sc["ranks"]["mean"] == {"A": 1, "B": 2, "C": 3, "D": 3}
    # medians: A 0.6 + 0.011 * 4.5 = 0.6495, B (0.637 + 0.652) / 2 = 0.6445
    assert sc["scores"]["median"]["A"] == pytest.approx(0.6495) and sc["scores"]["median"]["B"] == pytest.approx(0.6445)
    assert sc["ranks"]["median"] == {"A": 1, "B": 2, "C": 3, "D": 3}
    # rank-then-aggregate: per case B 1 / A 2 (even i) or A 1 / B 2 (odd i); C, D tied at min rank 3
    assert sc["scores"]["rank_then_aggregate"] == {"A": 1.5, "B": 1.5, "C": 3.0, "D": 3.0}
    assert sc["ranks"]["rank_then_aggregate"] == {"A": 1, "B": 1, "C": 3, "D": 3}
    # test-then-rank: A, B beat C, D (T+ = 55 of m = 10, p = 0.0030); A vs B: T+ 30 / 25, p 0.42 / 0.62; C vs D all zero
    assert _p_one_sided(55, 10) < 0.05 < _p_one_sided(30, 10) < _p_one_sided(25, 10)
    assert sc["scores"]["test_then_rank"] == {"A": 2 / 3, "B": 2 / 3, "C": 0.0, "D": 0.0}
    assert sc["ranks"]["test_then_rank"] == {"A": 1, "B": 1, "C": 3, "D": 3}
    # Kendall tau-b of (1, 2, 3, 3) and (1, 1, 3, 3): 4 concordant pairs / sqrt((6 - 1)(6 - 2))
    assert sc["kendall_tau"]["mean"]["rank_then_aggregate"] == pytest.approx(4 / math.sqrt(20))
    assert sc["kendall_tau"]["mean"]["median"] == 1.0
    assert sc["stability"]["mean"]["p_rank1"]["C"] == 0.0 and sc["stability"]["test_then_rank"]["p_rank1"]["C"] == 0.0


def test_consensus_is_the_mean_of_average_tie_ranks(schemes_analysis: dict) -> None:
    # dice ranks (1, 2, 3, 3) -> average ties (1, 2, 3.5, 3.5); nsd (B first) (2, 1, 3.5, 3.5)
    con = schemes_analysis["consensus"]
    assert con["tasks"] == ["organ/dice", "organ/nsd"]
    assert con["mean_rank"] == {"A": 1.5, "B": 1.5, "C": 3.5, "D": 3.5}
    assert con["rank"] == {"A": 1, "B": 1, "C": 3, "D": 3} and con["order"] == ["A", "B", "C", "D"]
    assert con["p_rank1"]["C"] == 0.0 and sum(con["rank_frequency"]["A"]) == con["n_resamples"] == 300


def test_resampled_medians_equal_numpy_on_the_drawn_cases() -> None:
    values = np.stack([A, B, C])
    counts = resample_counts(10, 50, np.random.default_rng(1))
    got = schemes.resampled_scores(values, True, 0.05, counts)
    for r in range(50):
        drawn = np.repeat(values, counts[r].astype(int), axis=1)
        assert got["median"][r] == pytest.approx(np.median(drawn, axis=1), abs=0)
        assert got["mean"][r] == pytest.approx(drawn.mean(axis=1), rel=1e-12)


def test_test_then_rank_uses_the_continuity_corrected_normal_approximation() -> None:
    # A over C: T+ = 55 of m = 10 gives p = 0.00296 with R's continuity correction, 0.00253 without
    assert _p_one_sided(55, 10) > 0.0027 > float(ndtr(-(55 - 27.5) / math.sqrt(96.25)))
    values = np.stack([A, C])
    assert schemes.test_then_rank_scores(values, True, 0.0027).tolist() == [0.0, 0.0]
    assert schemes.test_then_rank_scores(values, True, 0.0030).tolist() == [1.0, 0.0]


def test_signed_rank_statistic_equals_scipy_with_ties_and_zeros() -> None:
    """Both directions of every pair from one call equal scipy's continuity-corrected normal approximation."""
    rng = np.random.default_rng(3)
    values = np.round(rng.normal(0.8, 0.05, (6, 80)), 2)  # 2 decimals: many tied |d| and zero differences
    values[5] = values[4]  # one pair with only zero differences
    a, b = np.triu_indices(6, k=1)
    centred, sd, m = schemes.signed_rank_z(values[a] - values[b])
    for p, (i, j) in enumerate(zip(a, b)):
        if m[p] == 0:
            assert (i, j) == (4, 5)
            continue
        for s, (x, y) in ((1.0, (i, j)), (-1.0, (j, i))):
            want = stats.wilcoxon(values[x], values[y], alternative="greater", method="approx", correction=True).pvalue
            assert float(ndtr(-(s * centred[p] - 0.5) / sd[p])) == pytest.approx(want, rel=1e-10)


def test_windowed_resampled_medians_equal_numpy_at_scale() -> None:
    values = np.round(np.random.default_rng(4).random((3, 3000)), 3)
    counts = resample_counts(3000, 40, np.random.default_rng(5))
    got = schemes.resampled_scores(values, True, 0.05, counts)["median"]
    for r in range(40):
        assert got[r] == pytest.approx(np.median(np.repeat(values, counts[r].astype(int), axis=1), axis=1), abs=0)


def test_resampled_test_then_rank_equals_the_scores_of_the_drawn_cases() -> None:
    """Brute force: every resample materialised with np.repeat and scored by test_then_rank_scores."""
    rng = np.random.default_rng(11)
    values = np.round(rng.normal(0.8, 0.04, (5, 30)), 2)  # 2 decimals: tied |d| and zero differences
    values[4] = values[3]  # a pair with only zero differences: never a win
    values[0, :20] = values[1, :20]  # zeros in a pair with a clear difference elsewhere
    values[0, 20:] += 0.05
    counts = resample_counts(30, 200, np.random.default_rng(12))
    a, b = np.triu_indices(5, k=1)
    centred, sd, m = schemes.resampled_signed_rank_z(values[a] - values[b], counts)
    for r, c in enumerate(counts):
        drawn = np.repeat(values, c.astype(int), axis=1)
        want_c, want_sd, want_m = schemes.signed_rank_z(drawn[a] - drawn[b])
        np.testing.assert_array_equal(m[r], want_m)
        np.testing.assert_allclose(centred[r], want_c, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(sd[r], want_sd, rtol=1e-12)
    for higher, alpha in ((True, 0.05), (False, 0.2)):
        got = schemes.resampled_test_then_rank(values, higher, alpha, counts)
        want = np.stack([schemes.test_then_rank_scores(np.repeat(values, c.astype(int), axis=1), higher, alpha) for c in counts])
        assert np.unique(want, axis=0).shape[0] > 5  # the resamples do change the scores
        np.testing.assert_array_equal(got, want)
