"""The CIs of #29 (docs/methodology.md#53-estimates-and-cis) and the sign-flip test behind "separable" (#55) against
direct formulas, exact enumeration and loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from segbench.stats import StatsSettings
from segbench.stats.pairwise import holm, separability, sign_flip_tail_bound, sign_flips
from segbench.stats.resampling import bootstrap_means, intervals, jackknife_means, rng_for, skew_t_bounds, studentized_bounds


def _hall(x: np.ndarray, alpha: float) -> tuple[float, float]:
    """Hall's (1992) interval written out from the sample: moment skewness, s / sqrt(n), Student's t with n - 1 df."""
    n = x.size
    gamma = stats.skew(x)
    a, se, q = gamma / (6 * np.sqrt(n)), x.std(ddof=1) / np.sqrt(n), stats.t.ppf(1 - alpha / 2, n - 1)
    # h(T) = T + 2a T^2 + 4/3 a^2 T^3 + a, solved numerically for h(T) = +-q
    roots = [min((r.real for r in np.roots([4 / 3 * a**2, 2 * a, 1, a - target]) if abs(r.imag) < 1e-9), key=abs) for target in (q, -q)]
    return x.mean() - se * roots[0], x.mean() - se * roots[1]


def test_skew_t_is_hall_interval_and_t_without_skew() -> None:
    rng = np.random.default_rng(0)
    x = rng.exponential(size=(5, 25))
    alpha = np.array([0.05, 0.05, 0.01, 0.1, 0.05])
    low, high = skew_t_bounds(x.mean(axis=1), jackknife_means(x), alpha)
    for k in range(5):
        assert (low[k], high[k]) == pytest.approx(_hall(x[k], alpha[k]), rel=1e-9)
    symmetric = np.concatenate([x[:1], 2 * x[:1].mean() - x[:1]], axis=1)  # skewness exactly 0
    low, high = intervals(np.zeros((1, 1)), symmetric.mean(axis=1), jackknife_means(symmetric), np.array([0.05]), "skew_t")
    t_low, t_high = stats.t.interval(0.95, symmetric.shape[1] - 1, symmetric.mean(), stats.sem(symmetric[0]))
    assert (low[0], high[0]) == pytest.approx((t_low, t_high), rel=1e-9)
    constant = np.full((1, 10), 0.7)
    assert intervals(np.zeros((1, 1)), constant.mean(axis=1), jackknife_means(constant), np.array([0.05]), "skew_t") == (
        pytest.approx([0.7]),
        pytest.approx([0.7]),
    )


def test_skew_t_skips_cases_a_column_lacks() -> None:
    """Pairwise-complete alignment pads a pair's jackknife with NaN rows: the interval is that of its own cases."""
    x = np.random.default_rng(1).gamma(2.0, size=30)
    jack = np.full((40, 1), np.nan)
    jack[5:35, 0] = jackknife_means(x[None, :])[:, 0]
    assert skew_t_bounds(x.mean()[None], jack, np.array([0.05])) == pytest.approx(_hall(x, 0.05), rel=1e-9)


def test_skew_t_covers_a_skewed_mean_better_than_t() -> None:
    """Exponential samples of 20: the t interval misses the mean about 8 % of the time, mostly below; Hall's about 5.5 %."""
    x = np.random.default_rng(2).exponential(size=(20_000, 20))
    level = np.full(x.shape[0], 0.05)
    low, high = skew_t_bounds(x.mean(axis=1), jackknife_means(x), level)
    t_low, t_high = stats.t.interval(0.95, 19, x.mean(axis=1), stats.sem(x, axis=1))
    assert 0.935 <= np.mean((low <= 1) & (high >= 1)) <= 0.955
    assert np.mean((t_low <= 1) & (t_high >= 1)) < 0.925


@pytest.mark.parametrize("scale", ["none", "logit", "log"])
def test_studentized_matches_a_loop_over_resamples(scale: str) -> None:
    x = np.random.default_rng(3).beta(8, 1, size=(2, 30))
    moments, _ = bootstrap_means(np.concatenate([x, x**2]), 400, rng_for(0, "t"))
    low, high = studentized_bounds(moments[:, :2], moments[:, 2:], x.mean(axis=1), (x**2).mean(axis=1), 30, 0.05, scale)
    boot_means, boot_sd = moments[:, :2], np.sqrt(np.maximum(moments[:, 2:] - moments[:, :2] ** 2, 0) * 30 / 29)
    for k in range(2):
        m, se = x[k].mean(), x[k].std(ddof=1) / np.sqrt(30)
        f, df = {
            "none": (lambda v: v, lambda v: 1.0),
            "logit": (lambda v: stats.logistic.ppf(v * 29 / 30 + 0.5 / 30), lambda v: (29 / 30) / ((v * 29 / 30 + 0.5 / 30) * (1 - (v * 29 / 30 + 0.5 / 30)))),
            "log": (np.log, lambda v: 1 / v),
        }[scale]
        t = [(f(b) - f(m)) / (s / np.sqrt(30) * df(b)) for b, s in zip(boot_means[:, k], boot_sd[:, k])]
        q_low, q_high = np.quantile(t, [0.025, 0.975])
        inverse = {"none": lambda y: y, "logit": lambda y: (stats.logistic.cdf(y) - 0.5 / 30) * 30 / 29, "log": np.exp}[scale]
        assert (low[k], high[k]) == pytest.approx((inverse(f(m) - se * df(m) * q_high), inverse(f(m) - se * df(m) * q_low)), rel=1e-9)


def test_studentized_logit_keeps_a_mean_of_one_finite() -> None:
    x = np.ones((1, 20))
    x[0, 3] = 0.6
    moments, _ = bootstrap_means(np.concatenate([x, x**2]), 500, rng_for(0, "ones"))
    low, high = studentized_bounds(moments[:, :1], moments[:, 1:], x.mean(axis=1), (x**2).mean(axis=1), 20, 0.05, "logit")
    assert 0.0 <= low[0] < x.mean() <= high[0] <= 1.0
    with pytest.raises(ValueError, match="scale must be one of"):
        studentized_bounds(moments[:, :1], moments[:, 1:], x.mean(axis=1), (x**2).mean(axis=1), 20, 0.05, "probit")


def test_sign_flip_test_matches_exact_enumeration() -> None:
    """n = 10: all 1024 sign vectors give the exact p; 20,000 random flips agree within their Monte-Carlo error."""
    rng = np.random.default_rng(4)
    diffs = np.stack([rng.normal(0.4, 1, 10), rng.normal(0, 1, 10), rng.standard_t(2, 10)])
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=10)))
    exact = (np.abs(signs @ diffs.T) >= np.abs(diffs.sum(axis=1)) - 1e-12).mean(axis=0)
    got = sign_flips(diffs, 20_000, rng_for(0, "flips"), 0.05).p
    assert (np.abs(got - exact) <= 4 * np.sqrt(exact * (1 - exact) / 20_000) + 1e-4).all(), (got, exact)
    assert sign_flips(np.zeros((1, 12)), 99, rng_for(0, "zeros"), 0.05).p[0] == 1.0  # no difference: every flip ties


def test_sign_flip_tail_bound_is_above_the_exact_p_value() -> None:
    """Pinelis's bound never undercuts the exact p (all 4096 sign vectors of n = 12), even for one-signed or heavy-tailed
    differences; it is what p falls back to where no random flip reaches the observed sum."""
    rng = np.random.default_rng(7)
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=12)))
    for _ in range(200):
        diffs = np.stack([rng.standard_t(1.2, 12) + rng.normal(0, 2), np.abs(rng.normal(size=12)), rng.exponential(1, 12) * rng.choice([-1, 1], 12) + 1])
        exact = (np.abs(signs @ diffs.T) >= np.abs(diffs.sum(axis=1)) - 1e-12).mean(axis=0)
        assert (sign_flip_tail_bound(diffs) >= exact).all()


def test_sign_flip_test_goes_below_their_monte_carlo_floor() -> None:
    """A clear difference over 200 cases: no flip of 199 reaches it, and p is the tail bound (far below 1/200), so Holm
    over 171 pairs (a Touchstone organ's 19 models) can still separate it; a difference within the flips keeps its
    Monte-Carlo p."""
    rng = np.random.default_rng(8)
    diffs = np.stack([rng.normal(0.5, 1.0, 200), rng.normal(0.05, 1.0, 200)])
    p = sign_flips(diffs, 199, rng_for(0, "floor"), 0.05).p
    np.testing.assert_allclose(p[0], sign_flip_tail_bound(diffs[:1])[0])
    assert p[0] < 0.05 / 171
    assert p[1] >= 1 / 200 and p[1] == round(p[1] * 200) / 200  # a count of flips


def test_sign_flip_holm_keeps_its_level_on_exchangeable_pairs() -> None:
    """Symmetric, heavy-tailed paired differences (the audit's exchanged equal models): the family-wise rate of three
    true nulls under Holm is at most alpha, within two Monte-Carlo SEs (5.3 % of 2000 families, SE 0.5 points)."""
    rng = np.random.default_rng(5)
    rejected = [(holm(sign_flips(rng.standard_t(1.5, size=(3, 20)), 400, rng, 0.05).p) < 0.05).any() for _ in range(2000)]
    assert np.mean(rejected) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 2000)


def test_separability_decides_by_the_test_and_keeps_holm_levels() -> None:
    """Three pairs, a clear, a null and a moderate difference: Holm's step levels by p-value, the stopping level for the
    rest, Bonferroni at alpha / 3; each pair's interval is the test's inversion at its level and excludes 0 exactly
    when the pair is separable."""
    rng = np.random.default_rng(6)
    noise = rng.normal(0.0, 1.0, size=(3, 40))
    diffs = noise - noise.mean(axis=1, keepdims=True) + np.array([[0.8], [0.05], [0.45]])  # means exactly 0.8, 0.05, 0.45
    flips = sign_flips(diffs, 2000, rng_for(0, "holm"), 0.05)
    diff_boot = diffs.mean(axis=1) + rng.normal(0, 0.1, size=(2000, 3))
    order = np.argsort(flips.p)
    assert order.tolist() == [0, 2, 1] and flips.p[0] < 0.05 / 3 and flips.p[2] < 0.05 / 2 and flips.p[1] > 0.05
    out = separability(diff_boot, diffs.mean(axis=1), None, alpha=0.05, correction="holm", ci_method="percentile", test=flips)
    assert out["separable"].tolist() == [True, False, True]
    np.testing.assert_allclose(out["ci_level"], [1 - 0.05 / 3, 1 - 0.05, 1 - 0.05 / 2])
    np.testing.assert_allclose(out["p_adjusted"], holm(flips.p))
    low, high = flips.interval(1.0 - out["ci_level"])
    np.testing.assert_array_equal(out["ci_low"], low)
    np.testing.assert_array_equal(out["ci_high"], high)
    assert ((out["ci_low"] > 0) | (out["ci_high"] < 0)).tolist() == out["separable"].tolist()
    out = separability(diff_boot, diffs.mean(axis=1), None, alpha=0.05, correction="bonferroni", ci_method="percentile", test=flips)
    np.testing.assert_allclose(out["ci_level"], 1 - 0.05 / 3)
    assert out["separable"].tolist() == (flips.p < 0.05 / 3).tolist() == ((out["ci_low"] > 0) | (out["ci_high"] < 0)).tolist()


def test_sign_flip_interval_is_the_set_the_test_accepts() -> None:
    """The interval is {δ : p(δ) >= alpha}, p(δ) the test of 'mean difference = δ' on the same flips (the same stream
    drawn again, run on d - δ): checked on a grid across both ends, for a count-decided level and for one below
    1 / (B + 1), where the tail bound decides beyond the flips."""
    rng = np.random.default_rng(11)
    diffs = np.stack([rng.normal(0.3, 1.0, 15), rng.standard_t(2, 15), np.round(rng.normal(0.2, 0.5, 15), 1)])
    for n_flips, alpha in ((999, 0.05), (999, 0.01), (99, 0.002)):
        flips = sign_flips(diffs, n_flips, rng_for(0, "grid"), alpha)
        low, high = flips.interval(np.full(3, alpha))
        assert np.isfinite(low).all() and np.isfinite(high).all() and (low < diffs.mean(axis=1)).all()
        for r in range(3):
            width = high[r] - low[r]
            for delta in np.concatenate(
                [
                    np.linspace(low[r] - width, high[r] + width, 60),
                    [low[r] - 1e-6 * width, low[r] + 1e-6 * width, high[r] - 1e-6 * width, high[r] + 1e-6 * width],
                ]
            ):
                p = sign_flips(diffs[r : r + 1] - delta, n_flips, rng_for(0, "grid"), alpha).p[0]
                assert (p >= alpha) == (low[r] <= delta <= high[r]), (n_flips, alpha, r, delta, p, low[r], high[r])


def test_sign_flip_interval_excludes_zero_exactly_when_p_is_below_alpha() -> None:
    """The identity behind "separable iff the interval excludes 0", over random data, rounded data with ties, pairs
    with all-zero and one-signed differences, small and large n, and every Holm step level of 6 pairs."""
    rng = np.random.default_rng(12)
    checked = 0
    for trial in range(60):
        n = int(rng.choice([3, 5, 8, 20, 60]))
        diffs = np.stack(
            [
                rng.normal(rng.normal(0, 0.5), 1.0, n),
                np.round(rng.normal(0.1, 0.3, n), 1),
                np.zeros(n),
                np.abs(rng.normal(1.0, 0.2, n)),
                rng.standard_t(1.5, n) + 0.5,
                np.where(rng.random(n) < 0.5, 0.0, 0.01),
            ]
        )
        n_flips = int(rng.choice([19, 99, 999]))
        flips = sign_flips(diffs, n_flips, rng_for(trial, "identity"), 0.05)
        for alpha in 0.05 / np.arange(1, 7):
            low, high = flips.interval(np.full(6, alpha))
            assert ((flips.p < alpha) == ((low > 0) | (high < 0))).all(), (trial, n, n_flips, alpha, flips.p, low, high)
            checked += 6
        low, high = flips.interval(np.full(6, 0.05))
        assert flips.p[2] == 1.0 and low[2] <= 0.0 <= high[2]  # no difference: never separable
    assert checked == 60 * 6 * 6


def test_pairwise_test_setting_is_validated() -> None:
    assert StatsSettings().pairwise_test == "sign_flip_bootstrap_t" and StatsSettings().ci_method == "skew_t"
    with pytest.raises(ValueError, match="pairwise_test must be one of"):
        StatsSettings(pairwise_test="t_test")
