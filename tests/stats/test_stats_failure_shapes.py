"""The separable verdict when models fail differently (docs/methodology.md#520-failure-shapes): the studentized bootstrap
test and its inversion, the two tests together, their error rate on equal-mean populations of steady and
better-but-failing models, and each cell's honest limit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from segbench.stats import analyze
from segbench.stats.bootstrap_t import studentized_bootstrap
from segbench.stats.limits import cell_limit
from segbench.stats.pairwise import MeanTest, mean_test, pair_indices, separability
from segbench.stats.resampling import bootstrap_means, rng_for
from segbench.stats.settings import StatsSettings
from segbench.stats.shapes import PROCEDURES, audit_shape, centred_pairs, failure_shapes, graded


def _skewed(rng: np.random.Generator, n: int) -> np.ndarray:
    """(3, n) differences: one skewed with rare large failures, one with ties and zeros, one constant nonzero."""
    failures = np.where(rng.random(n) < 0.1, -rng.uniform(0.5, 1.0, n), rng.normal(0.05, 0.02, n))
    ties = rng.choice([0.0, 0.0, 0.01, -0.01, 0.02], n)
    return np.stack([failures, ties, np.full(n, 0.003)])


@pytest.mark.parametrize("n", [2, 5, 12, 40])
def test_the_studentized_test_and_its_interval_are_one_statement(n: int) -> None:
    """p(0) < alpha exactly when the inverted interval excludes 0, at every Holm level, for skewed differences, ties,
    constant differences; the interval holds the mean difference."""
    checked = 0
    for trial in range(20):
        rng = rng_for(trial, "shapes-identity", str(n))
        diffs = _skewed(rng, n)
        test = studentized_bootstrap(diffs, 999, rng, 0.05)
        for alpha in 0.05 / np.arange(1, 7):
            low, high = test.interval(np.full(3, alpha))
            assert ((test.p < alpha) == ((low > 0) | (high < 0))).all(), (trial, alpha, test.p, low, high)
            assert ((low <= diffs.mean(axis=1)) & (diffs.mean(axis=1) <= high)).all()
            checked += 3
    assert checked == 20 * 6 * 3


def test_a_constant_difference_is_separable_and_no_difference_is_not() -> None:
    diffs = np.stack([np.full(30, 0.01), np.zeros(30)])
    test = studentized_bootstrap(diffs, 999, np.random.default_rng(0), 0.05)
    assert test.p[0] < 0.01 and test.p[1] == 1.0
    low, high = test.interval(np.full(2, 0.05))
    assert low[0] > 0 and low[1] <= 0 <= high[1]


def test_the_factored_sums_give_the_same_test() -> None:
    """The first product from the models' values (K columns) gives the same p-values as from the differences."""
    rng = np.random.default_rng(3)
    values = rng.normal(0.8, 0.05, (5, 60))
    a, b = pair_indices(5)
    plain = studentized_bootstrap(values[a] - values[b], 2000, np.random.default_rng(1), 0.05)
    factored = studentized_bootstrap(values[a] - values[b], 2000, np.random.default_rng(1), 0.05, factors=(values, a, b))
    assert np.array_equal(plain.p, factored.p)
    np.testing.assert_allclose(plain.largest, factored.largest, rtol=1e-9)


def test_the_board_s_studentized_test_runs_on_the_structure_s_own_resamples() -> None:
    """The verdict's studentized half shares the means' case resamples (drawn once per structure): each pair's
    p_bootstrap_t equals a plain loop of T* over the resamples the structure's bootstrap of the means draws, the pair
    oriented as the board ranks it (the better model first, here not the first by name), for both metrics."""
    rng = np.random.default_rng(7)
    n, models = 40, ["m_a", "m_b", "m_c"]
    skill = {"m_a": 0.78, "m_b": 0.88, "m_c": 0.83}  # rank order b, c, a
    difficulty = rng.normal(0, 0.05, n)
    dice = {m: np.clip(skill[m] + difficulty + rng.normal(0, 0.03, n), 0, 1) for m in models}
    dice["m_b"][[3, 17]] = 0.2  # the leader fails now and then: skewed differences
    rows = pd.DataFrame(
        [
            {"model": m, "case_id": f"case_{i:02d}", "structure": "liver", "reference_present": True, "dice": d, "nsd": d - 0.02 + rng.normal(0, 0.01)}
            for m in models
            for i, d in enumerate(dice[m])
        ]
    )
    settings = StatsSettings(n_resamples=999)
    cell_of = analyze(rows, metrics={"dice": True, "nsd": True}, settings=settings)["structures"]["liver"]["metrics"]
    wide = {metric: rows.pivot(index="model", columns="case_id", values=metric).loc[models].to_numpy() for metric in ("dice", "nsd")}
    drawn: list[np.ndarray] = []
    bootstrap_means(np.concatenate(list(wide.values())), 999, rng_for(settings.seed, "liver"), on_chunk=lambda counts, sums: drawn.append(counts.copy()))
    counts = np.concatenate(drawn)
    for metric, values in wide.items():
        pairs = cell_of[metric]["pairwise"]
        assert [(p["a"], p["b"]) for p in pairs] == [("m_b", "m_c"), ("m_b", "m_a"), ("m_c", "m_a")]
        for pair in pairs:
            d = values[models.index(pair["a"])] - values[models.index(pair["b"])]
            e = d - d.mean()
            t = d.mean() / (d.std(ddof=1) / np.sqrt(n))
            mean_star = counts @ e / n
            t_star = mean_star / np.sqrt(np.maximum(counts @ e**2 - n * mean_star**2, 0) / (n - 1) / n)
            p = min(1.0, 2 * (1 + min((t_star >= t).sum(), (t_star <= t).sum())) / 1000)
            assert pair["p_bootstrap_t"] == pytest.approx(p, abs=2 / 1000), (metric, pair)


def test_both_tests_together_reject_only_where_both_do_and_invert_to_the_union() -> None:
    rng = np.random.default_rng(4)
    values = rng.normal(0.8, 0.05, (4, 50))
    values[0] += np.where(rng.random(50) < 0.1, -0.5, 0.06)  # better on most cases, fails on a few
    a, b = pair_indices(4)
    test = mean_test(values, a, b, "sign_flip_bootstrap_t", 2000, 0.05, np.random.default_rng(1), np.random.default_rng(2))
    assert isinstance(test, MeanTest)
    assert np.array_equal(test.p, np.maximum(test.flips.p, test.studentized.p))
    for alpha in (0.05, 0.01):
        low, high = test.interval(np.full(a.size, alpha))
        (f_low, f_high), (t_low, t_high) = test.flips.interval(np.full(a.size, alpha)), test.studentized.interval(np.full(a.size, alpha))
        assert np.array_equal(low, np.minimum(f_low, t_low)) and np.array_equal(high, np.maximum(f_high, t_high))
        assert ((test.p < alpha) == ((low > 0) | (high < 0))).all()
    sep = separability(None, values[a].mean(1) - values[b].mean(1), None, alpha=0.05, correction="holm", ci_method="skew_t", test=test, p_boot=np.zeros(a.size))
    assert np.array_equal(sep["separable"], (sep["ci_low"] > 0) | (sep["ci_high"] < 0))
    assert np.array_equal(sep["p_sign_flip"], test.flips.p) and np.array_equal(sep["p_bootstrap_t"], test.studentized.p)
    alone = mean_test(values, a, b, "sign_flip", 2000, 0.05, np.random.default_rng(1), np.random.default_rng(2))
    assert np.array_equal(alone.p, test.flips.p)  # the same flips: the new test only ever removes rejections


def test_the_synthetic_shapes_have_equal_means_and_the_failures_they_claim() -> None:
    shapes = {s.name: s for s in failure_shapes(0)}
    assert set(shapes) == {"dice_rare_failures", "nsd_rare_failures", "hd95_rare_failures", "hd95_heavy_tails", "hd95_exchangeable"}
    for shape in shapes.values():
        means = shape.values.mean(axis=1)
        np.testing.assert_allclose(means, means[0], rtol=1e-12)
    dice = shapes["dice_rare_failures"].values
    assert abs((dice[2:] == 0).mean() - 0.08) < 0.01 and (dice[:2] == 0).mean() < 0.001
    hd95 = shapes["hd95_rare_failures"].values
    assert abs((hd95[2:] == 100.0).mean() - 0.03) < 0.005 and (hd95[:2] >= 100.0).mean() == 0.0
    assert shapes["dice_rare_failures"].skewness > 1.5 and shapes["hd95_rare_failures"].skewness < -3
    power = graded(shapes["dice_rare_failures"], 0.3)
    assert power.values[0].mean() > power.values[1].mean()


def test_a_real_pair_centred_keeps_its_shape_and_loses_its_difference() -> None:
    rng = np.random.default_rng(5)
    values = np.stack([rng.normal(0.9, 0.02, 200), np.where(rng.random(200) < 0.05, 0.0, rng.normal(0.92, 0.02, 200))])
    (shape,) = centred_pairs("set organ dice", "dice", True, ("m1", "m2"), values, [(0, 1)])
    assert abs(shape.values[0].mean() - shape.values[1].mean()) < 1e-12
    assert np.allclose(np.diff(shape.values[0]), np.diff(values[0]))  # a shift: the same per-case shape


@pytest.fixture(scope="module")
def settings() -> StatsSettings:
    return StatsSettings(n_resamples=1000)


@pytest.mark.parametrize(("name", "n", "draws"), [("dice_rare_failures", 50, 400), ("dice_rare_failures", 100, 300), ("hd95_exchangeable", 20, 300)])
def test_the_new_test_keeps_its_family_wise_rate_where_the_old_one_does_not(name: str, n: int, draws: int, settings: StatsSettings) -> None:
    """Four equal-mean models, two steady and two better-but-failing (Dice 0 on 8 % of cases): the family-wise rate
    of a separable pair over the six pairs stays within 5 % + 2 SE under the new test (n = 50, 100) while the sign
    flips alone exceed it at n = 50; exchangeable models stay within it under both."""
    shape = {s.name: s for s in failure_shapes(0)}[name]
    rows = {r["procedure"]: r for r in audit_shape(shape, n, draws, settings.n_resamples, 0, settings)["type1"]}
    new, old = rows["sign_flip_bootstrap_t"], rows["sign_flip"]
    assert new["rate"] <= 0.05 + 2 * max(new["mc_se"], np.sqrt(0.05 * 0.95 / draws)), new
    assert new["rate"] <= old["rate"]  # the new test rejects only where the old one does too
    if name.startswith("dice") and n == 50:
        assert old["rate"] > 0.05 + 2 * old["mc_se"], old


def test_hd95_s_excess_is_the_samples_where_a_failing_model_never_fails(settings: StatsSettings) -> None:
    """HD95 at 100 mm on 3 % of cases, n = 100: a failing model shows no failure in about 5 % of samples of 100 (0.97^100),
    and then it is better on every case, which any test with power must call separable. The audit splits the rate: where
    every failing model failed at least once, the new test keeps 5 % + 2 SE; the rest is the share where one never did.
    A population without failures has nothing unseen."""
    shapes = {s.name: s for s in failure_shapes(0)}
    draws = 300
    rows = {r["procedure"]: r for r in audit_shape(shapes["hd95_rare_failures"], 100, draws, settings.n_resamples, 0, settings)["type1"]}
    new = rows["sign_flip_bootstrap_t"]
    assert 0.03 < new["unseen_share"] < 0.16, new
    assert new["rate_seen"] <= 0.05 + 2 * max(new["mc_se_seen"], np.sqrt(0.05 * 0.95 / draws)), new
    assert new["rate"] <= new["unseen_share"] + (1 - new["unseen_share"]) * new["rate_seen"] + 1e-12
    assert rows["sign_flip"]["rate_seen"] > new["rate_seen"]  # the old test errs where the failures are in view, too
    control = audit_shape(shapes["hd95_exchangeable"], 20, 50, settings.n_resamples, 0, settings)["type1"][-1]
    assert control["unseen_share"] == 0.0 and control["rate_seen"] == control["rate"]


def _table(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["shape", "kind", "metric", "n", "procedure", "rate", "mc_se", "skewness"])


#: a failure-shape table as the audit writes it: a rare-failure shape failing at n = 20, holding from n = 50; a
#: skewed real pair failing at n = 20 and 50
SHAPE_TABLE = _table(
    [
        ("dice_rare_failures", "synthetic", "dice", 20, "sign_flip_bootstrap_t", 0.37, 0.015, 2.9),
        ("dice_rare_failures", "synthetic", "dice", 50, "sign_flip_bootstrap_t", 0.05, 0.007, 2.9),
        ("dice_rare_failures", "synthetic", "dice", 100, "sign_flip_bootstrap_t", 0.01, 0.003, 2.9),
        ("hd95_exchangeable", "synthetic", "hd95", 20, "sign_flip_bootstrap_t", 0.03, 0.005, -0.1),
        ("liver dice", "real", "dice", 20, "sign_flip_bootstrap_t", 0.02, 0.008, 0.1),
        ("liver dice", "real", "dice", 50, "sign_flip_bootstrap_t", 0.03, 0.01, 0.1),
        ("spleen dice", "real", "dice", 50, "sign_flip_bootstrap_t", 0.12, 0.02, -6.0),
        ("spleen dice", "real", "dice", 100, "sign_flip_bootstrap_t", 0.04, 0.01, -6.0),
    ]
)


def test_a_leader_without_failures_on_20_cases_is_told_what_20_cases_cannot_show() -> None:
    """The leader never fails on these 20 cases and the runner-up is steady: the differences are not skewed, yet a
    failure rate up to 15 % could go unseen, and the audited rare-failure population errs at n = 20: the cell says so."""
    rng = np.random.default_rng(6)
    leader, runner_up = rng.normal(0.93, 0.01, 20), rng.normal(0.90, 0.01, 20)
    limit = cell_limit(leader, runner_up, "dice", True, SHAPE_TABLE, "sign_flip_bootstrap_t", 0.05)
    assert limit is not None and limit["code"] == "failures_unseen" and limit["n"] == 20 and limit["n_board"] == 20
    assert "15%" in limit["text"] and "dice_rare_failures" in limit["text"] and "37%" in limit["text"]
    # the same pair on 100 cases: within what the audit verified
    leader, runner_up = rng.normal(0.93, 0.01, 100), rng.normal(0.90, 0.01, 100)
    assert cell_limit(leader, runner_up, "dice", True, SHAPE_TABLE, "sign_flip_bootstrap_t", 0.05) is None


def test_the_limit_says_how_much_of_the_rate_no_test_could_avoid() -> None:
    """Where the audit split a rare-failure rate (samples in which a failing model never failed), the cell's sentence
    gives both parts."""
    table = SHAPE_TABLE.assign(unseen_share=np.where(SHAPE_TABLE["shape"] == "dice_rare_failures", 0.30, 0.0), rate_seen=SHAPE_TABLE["rate"] / 4)
    rng = np.random.default_rng(6)
    limit = cell_limit(rng.normal(0.93, 0.01, 20), rng.normal(0.90, 0.01, 20), "dice", True, table, "sign_flip_bootstrap_t", 0.05)
    assert limit is not None and "in 30% of samples a failing model never failed" in limit["text"] and "9.2%" in limit["text"]


def test_a_skewed_pair_reads_the_population_nearest_its_shape() -> None:
    rng = np.random.default_rng(7)
    second = rng.normal(0.9, 0.01, 50)
    first = np.where(np.arange(50) < 2, 0.0, second + 0.03)  # better on most cases, two failures: strongly skewed
    limit = cell_limit(first, second, "dice", True, SHAPE_TABLE, "sign_flip_bootstrap_t", 0.05)
    assert limit is not None and limit["code"] == "skewed" and limit["population"] == "spleen dice" and limit["rate"] == 0.12
    # another metric of the same direction reads the synthetic shapes; a board without the audit has no limit
    assert cell_limit(first, second, "nsd", True, SHAPE_TABLE, "sign_flip_bootstrap_t", 0.05) is None
    assert cell_limit(first, second, "dice", True, None, "sign_flip_bootstrap_t", 0.05) is None


def test_the_shape_audit_compares_the_old_test_with_the_board_s_own() -> None:
    assert PROCEDURES == ("sign_flip", "sign_flip_bootstrap_t") and PROCEDURES[-1] == StatsSettings().pairwise_test
