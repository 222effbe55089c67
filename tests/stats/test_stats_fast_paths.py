"""The statistics engine's faster ways to the same numbers (issue #44): each against the plain computation it replaces.

- sign flips from the models' values (``factors``): one product of K columns differenced per pair, ties recomputed;
- the group means of the bootstrap cell by cell instead of through the masked design;
- PCG64's raw stream for the flips' 32-bit draws and for the bootstrap's 16-bit case draws;
- the flips' intervals 64 flips by 64 in a vectorised pass, the unusual blocks flip by flip;
- the pairs' bootstrap p-values counted from the models' resampled means, without their (B, P) differences;
- the common-case groups from the models' patterns packed into bytes instead of np.unique over rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from segbench.stats import pairwise, resampling
from segbench.stats.pairwise import pair_indices, sign_flips
from segbench.stats.resampling import bootstrap_means, rng_for


def _models(n: int, seed: int) -> np.ndarray:
    """Six SIMULATED models' scores on n cases, two identical and two equal but on three cases (the ties the
    pipeline's simulated models make), with scores near 0.9 (the rounding of their sums dwarfs their differences)."""
    rng = np.random.default_rng(seed)
    base = 0.9 + rng.normal(0, 0.03, n)
    values = np.stack([base + rng.normal(0, 0.01, n) for _ in range(6)])
    values[1] = values[0]  # identical on every case
    values[3] = values[2]
    values[3, :3] += 1e-4 * np.arange(1, 4)  # equal but on three cases
    return values


@pytest.mark.parametrize("n", [7, 60, 700])
def test_sign_flips_from_the_models_values_count_every_flip_as_the_differences_do(n: int) -> None:
    values = _models(n, n)
    a, b = pair_indices(len(values))
    diffs = values[a] - values[b]
    plain = sign_flips(diffs, 4000, rng_for(0, "flips"), 0.05)
    factored = sign_flips(diffs, 4000, rng_for(0, "flips"), 0.05, factors=(values, a, b))
    assert np.array_equal(plain.p, factored.p)  # every flip counted alike, ties included
    assert plain.p[(a == 0) & (b == 1)] == 1.0  # identical models: every flip ties
    for field in ("lowest", "highest"):
        assert np.allclose(getattr(plain, field), getattr(factored, field), rtol=1e-9, atol=1e-12)
    alpha = np.full(a.size, 0.05)
    low, high = factored.interval(alpha)
    assert np.array_equal((low > 0) | (high < 0), factored.p < 0.05)  # the interval still inverts the same test


def test_sign_flips_recompute_the_flips_whose_rounding_could_decide_a_tie() -> None:
    # two models equal on all but one case: half the flips tie exactly with the observed sum; differencing sums of
    # values near 0.9 over 700 cases rounds at 1e-13, above the tie slack, so without the recomputation they split
    values = _models(700, 1)[:2].copy()
    values[1, 0] += 1e-6
    a, b = np.array([0]), np.array([1])
    plain = sign_flips(values[a] - values[b], 4000, rng_for(0, "tie"), 0.05)
    factored = sign_flips(values[a] - values[b], 4000, rng_for(0, "tie"), 0.05, factors=(values, a, b))
    assert plain.p[0] == factored.p[0] == 1.0


@pytest.mark.parametrize(("n", "factored"), [(3, False), (3, True), (60, True), (700, True)])
def test_flip_intervals_vectorised_equal_flip_by_flip(n: int, factored: bool) -> None:
    # n = 3: flips of every case or none (infinite intervals) in most blocks; n = 700 and the near-identical models:
    # recomputed ties; the rest: the vectorised pass alone
    values = _models(n, n)
    a, b = pair_indices(len(values))
    diffs = values[a] - values[b]
    n_flips = 200
    signs = np.where(rng_for(0, "intervals").random((n_flips, n)) < 0.5, -1.0, 1.0)
    signs_sum, total = signs.sum(axis=1), diffs.sum(axis=1)
    slack = 1e-9 * np.abs(diffs).sum(axis=1) / n
    if factored:
        flipped, first, second = signs @ values.T, a, b
        bound = 2.0 * n * np.finfo(np.float64).eps * np.abs(values).sum(axis=1)[a] * 2
    else:
        flipped, first, second, bound = signs @ diffs.T, np.arange(a.size), np.full(a.size, -1), np.zeros(a.size)
    lows, highs, reach = np.empty((a.size, n_flips + 5)), np.empty((a.size, n_flips + 5)), np.zeros(a.size)
    pairwise._flip_intervals(flipped, first, second, bound, signs, diffs, signs_sum, total, n, slack, lows, highs, 5, reach)
    for p in range(a.size):
        low, high = np.empty(n_flips), np.empty(n_flips)
        count = pairwise._flip_intervals_exact(flipped, first[p], second[p], bound[p], signs, diffs[p], signs_sum, total[p], n, slack[p], low, high, 0, n_flips)
        assert count == reach[p]
        assert np.array_equal(low, lows[p, 5:]) and np.array_equal(high, highs[p, 5:])


def test_pair_bootstrap_p_values_equal_those_of_the_differences() -> None:
    boot = np.round(np.random.default_rng(3).normal(0.9, 0.01, (2000, 6)), 2)  # rounded: exact ties (difference 0)
    boot[:, 5] = boot[:, 4]
    a, b = pair_indices(6)
    assert np.array_equal(pairwise.pair_bootstrap_p_values(boot, a, b), pairwise.bootstrap_p_values(boot[:, a] - boot[:, b]))
    assert np.array_equal(pairwise.pair_bootstrap_p_values(boot[:, ::-1], a, b), pairwise.bootstrap_p_values(boot[:, ::-1][:, a] - boot[:, ::-1][:, b]))


def test_common_case_groups_equal_those_of_unique_rows() -> None:
    def plain(observed: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        masks, group_of = np.unique(observed[a] & observed[b], axis=0, return_inverse=True)
        return [(np.flatnonzero(group_of.reshape(-1) == g), np.flatnonzero(mask)) for g, mask in enumerate(masks)]

    rng = np.random.default_rng(4)
    for n_cases in (1, 8, 13, 743):
        observed = rng.random((7, n_cases)) < 0.9
        observed[2] = observed[1]
        observed[5] = True
        for a, b in (pair_indices(7), np.nonzero(~np.eye(7, dtype=bool))):
            got, want = pairwise.common_case_groups(observed, a, b), plain(observed, a, b)
            assert len(got) == len(want)
            assert all(np.array_equal(x, y) for g, w in zip(got, want) for x, y in zip(g, w))


def test_uint32_draws_are_numpys() -> None:
    for shapes in ([(4000, 500)] * 3 + [(123, 501)], [(3, 7), (4, 7), (3, 7), (2, 8)]):
        plain, fast = rng_for(1, "draws"), rng_for(1, "draws")
        for shape in shapes:
            assert np.array_equal(plain.integers(0, 2**32, size=shape, dtype=np.uint32), pairwise._uint32_draws(fast, *shape))


@pytest.mark.parametrize("n", [2, 7, 100, 4912, 30000])
def test_case_draws_are_numpys_and_leave_the_generator_as_numpy_does(n: int) -> None:
    plain, fast = rng_for(2, "cases", str(n)), rng_for(2, "cases", str(n))
    for step, size in enumerate([3, 1, 407, 2, 5]):
        assert np.array_equal(plain.integers(0, n, size=(size, n), dtype=np.int16), resampling._case_draws(n, size, fast))
        assert plain.bit_generator.state == fast.bit_generator.state
        for rng in (plain, fast):  # leave a half of a 32-bit draw, or not, before the next draws
            rng.integers(0, 2**32, step % 2 + 1, dtype=np.uint32)


def test_group_means_cell_by_cell_equal_the_masked_design(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    n = 400
    values = rng.random((5, n))
    fields = [rng.integers(0, k, n) for k in (2, 3, 4)]
    groups = [np.flatnonzero(f == level) for f in fields for level in range(f.max() + 1)]
    groups.append(np.arange(5))  # a group of 5 cases: some resamples hold none of them (NaN)
    monkeypatch.setattr(resampling, "CELL_MIN_CASES", 10**9)
    masked, masked_groups = bootstrap_means(values, 3000, rng_for(0, "cells"), groups)
    monkeypatch.setattr(resampling, "CELL_MIN_CASES", 1)
    by_cell, cell_groups = bootstrap_means(values, 3000, rng_for(0, "cells"), groups)
    assert np.allclose(masked, by_cell, rtol=1e-13, atol=0)  # the same resamples, summed in another order
    assert np.array_equal(np.isnan(masked_groups), np.isnan(cell_groups)) and np.isnan(cell_groups).any()
    assert np.allclose(masked_groups, cell_groups, rtol=1e-13, atol=0, equal_nan=True)
    assert not np.array_equal(masked_groups, bootstrap_means(values, 3000, rng_for(1, "cells"), groups)[1], equal_nan=True)


@pytest.mark.parametrize("cell_min_cases", [1, 10**9])
def test_overall_means_do_not_depend_on_the_groups(monkeypatch: pytest.MonkeyPatch, cell_min_cases: int) -> None:
    """A leaderboard's resampled means are the same bits with or without subgroup fields (a wider product may add in
    another order, and exact ties between models on a resample would then split differently)."""
    rng = np.random.default_rng(4)
    values = rng.random((7, 300))
    groups = [np.flatnonzero(rng.integers(0, 3, 300) == level) for level in range(3)]
    monkeypatch.setattr(resampling, "CELL_MIN_CASES", cell_min_cases)
    alone = bootstrap_means(values, 2000, rng_for(0, "overall"))[0]
    assert np.array_equal(alone, bootstrap_means(values, 2000, rng_for(0, "overall"), groups)[0])
