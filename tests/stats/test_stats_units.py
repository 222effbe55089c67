"""The hand-written, vectorised parts of the engine against scipy / brute-force loops."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from segbench.stats import StatsSettings, analyze
from segbench.stats.pairwise import holm, separability, wilcoxon_map
from segbench.stats.power import cases_needed, paired_t_power
from segbench.stats.ranking import kendall_tau_b, leave_one_out, rank_min
from segbench.stats.resampling import bootstrap_means, column_quantiles, intervals, jackknife_means, rng_for


@pytest.mark.parametrize("n_models", [2, 3, 7, 19])
def test_kendall_tau_b_matches_scipy(n_models: int) -> None:
    rng = np.random.default_rng(n_models)
    ranks = rng.integers(1, n_models + 1, size=(300, n_models))  # many ties
    reference = rng.integers(1, n_models + 1, size=n_models)
    reference[:2] = [1, 2]  # not constant
    got = kendall_tau_b(ranks, reference)
    for row, value in zip(ranks, got):
        expected = stats.kendalltau(row, reference).statistic
        assert (np.isnan(value) and np.isnan(expected)) or value == pytest.approx(expected, abs=1e-12)


def test_rank_min_matches_rankdata_with_ties() -> None:
    rng = np.random.default_rng(1)
    means = rng.integers(0, 5, size=(200, 9)).astype(float) / 4
    for higher in (True, False):
        got = rank_min(means, higher)
        expected = stats.rankdata(-means if higher else means, method="min", axis=1)
        np.testing.assert_array_equal(got, expected)


def test_bootstrap_means_equal_index_gather_and_group_means() -> None:
    """Overall and group means from the count products equal the means of the gathered resampled cases."""
    values = np.random.default_rng(2).normal(size=(4, 37))
    groups = [np.array([0, 3, 4, 10, 36]), np.arange(0, 37, 2), np.arange(1, 37, 2)]
    boot, group_boot = bootstrap_means(values, 50, np.random.default_rng(9), groups)
    idx = np.random.default_rng(9).integers(0, 37, size=(50, 37), dtype=np.int16)  # resample_counts: int16 draws for n < 2^15
    np.testing.assert_allclose(boot, values[:, idx].mean(axis=2).T, rtol=1e-12)
    plain, _ = bootstrap_means(values, 50, np.random.default_rng(9))
    np.testing.assert_allclose(plain, boot, rtol=1e-12)
    for k, g in enumerate(groups):
        for row, draw in enumerate(idx):
            chosen = draw[np.isin(draw, g)]
            if chosen.size:
                np.testing.assert_allclose(group_boot[row, k], values[:, chosen].mean(axis=1), rtol=1e-12)
            else:
                assert np.isnan(group_boot[row, k]).all()


def test_percentile_and_bca_agree_with_scipy_bootstrap() -> None:
    """Same method, independent resamples: CI ends agree to a few per cent of the CI width.

    BCa's upper end of this skewed sample sits at an extreme level, whose Monte Carlo error at 20,000
    resamples is about the tolerance; 100,000 keep both sides' error well below it.
    """
    x = np.random.default_rng(3).lognormal(size=60)
    boot, _ = bootstrap_means(x[None, :], 100_000, rng_for(0, "ci"))
    for method, scipy_method in (("percentile", "percentile"), ("bca", "BCa")):
        low, high = intervals(boot, x.mean()[None], jackknife_means(x[None, :]), np.array([0.05]), method)
        ref = stats.bootstrap((x,), np.mean, n_resamples=100_000, method=scipy_method, rng=1).confidence_interval
        width = ref.high - ref.low
        assert abs(low[0] - ref.low) < 0.05 * width and abs(high[0] - ref.high) < 0.05 * width


def test_holm_matches_loop() -> None:
    p = np.random.default_rng(4).uniform(0, 0.1, size=40)
    p[5] = p[6]  # a tie
    order = sorted(range(p.size), key=lambda i: p[i])
    expected, running = np.empty(p.size), 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (p.size - step) * p[i]))
        expected[i] = running
    np.testing.assert_allclose(holm(p), expected, rtol=1e-15)


@pytest.mark.parametrize("n_cases", [8, 30, 80])
def test_wilcoxon_map_matches_per_pair_calls_with_ties_and_zeros(n_cases: int) -> None:
    rng = np.random.default_rng(n_cases)
    values = np.round(rng.uniform(size=(5, n_cases)), 1)  # ties and zero differences
    values[3] = values[2]  # all differences zero: p = 1, never significant
    for higher in (True, False):
        got = wilcoxon_map(values, higher, 0.05)
        alternative = "greater" if higher else "less"
        for a in range(5):
            for b in range(5):
                if a == b or (a, b) in {(2, 3), (3, 2)}:
                    continue
                expected = stats.wilcoxon(values[a], values[b], alternative=alternative).pvalue
                assert got["p_value"][a, b] == pytest.approx(expected, rel=1e-12)
        assert got["p_value"][2, 3] == got["p_value"][3, 2] == 1.0
        assert not got["significant"][2, 3] and not got["significant"][3, 2]


def test_leave_one_out_matches_brute_force() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(size=(6, 25)) * 0.05 + np.linspace(0, 0.03, 6)[:, None]
    full = rank_min(values.mean(axis=1)[None], True)[0]
    winner, any_rank = leave_one_out(jackknife_means(values), full, True)
    brute = [rank_min(np.delete(values, i, axis=1).mean(axis=1)[None], True)[0] for i in range(25)]
    assert winner == np.mean([not np.array_equal(r == 1, full == 1) for r in brute])
    assert any_rank == np.mean([not np.array_equal(r, full) for r in brute])


def test_power_is_the_smallest_n_reaching_the_target() -> None:
    diffs = np.random.default_rng(6).normal(0.02, 0.1, size=200)
    got = cases_needed(diffs, 0.05, 0.8)
    n, d = got["n_required"], got["effect_size"]
    assert d == pytest.approx(abs(diffs.mean()) / diffs.std(ddof=1))
    assert paired_t_power(n, d, 0.05) >= 0.8 > paired_t_power(n - 1, d, 0.05)
    # the power function itself against a Monte Carlo paired t-test
    sims = np.random.default_rng(7).normal(d, 1.0, size=(4000, n))
    rejected = stats.ttest_1samp(sims, 0.0, axis=1).pvalue < 0.05
    assert abs(rejected.mean() - paired_t_power(n, d, 0.05)) < 0.03
    assert cases_needed(np.zeros(10), 0.05, 0.8)["n_required"] is None


def _rows(values: dict[str, list[float]], *, absent: set[str] = frozenset()) -> pd.DataFrame:
    records = []
    for model, vals in values.items():
        for i, v in enumerate(vals):
            case = f"c{i:02d}"
            records.append(
                {
                    "model": model,
                    "case_id": case,
                    "structure": "liver",
                    "reference_present": case not in absent,
                    "dice": np.nan if case in absent else v,
                    "meta.sex": "f" if i % 2 else "m",
                    "meta.age": 40.0 + i,
                }
            )
    return pd.DataFrame(records)


def test_shared_cases_absent_references_and_contamination() -> None:
    rng = np.random.default_rng(7)
    rows = _rows({m: list(rng.uniform(size=24) + k * 0.1) for k, m in enumerate("ABCD")}, absent={"c00"})
    rows = rows[~((rows["model"] == "B") & (rows["case_id"] == "c05"))]  # B never scored c05
    res = analyze(rows, metrics={"dice": True}, settings=StatsSettings(n_resamples=200), subgroup_fields=["sex", "age"], contaminated={"D": True})
    cell = res["structures"]["liver"]
    assert cell["n_absent"] == 1 and cell["n_unshared"] == 1 and cell["n_cases"] == 22
    assert "c05" not in cell["case_ids"] and "c00" not in cell["case_ids"]
    metric = cell["metrics"]["dice"]
    assert metric["models"]["D"]["contaminated"] and metric["models"]["D"]["mean"] is not None
    assert "D" not in metric["ranking"]["order"] and metric["ranking"]["order"][0] == "C"
    assert all("D" not in (p["a"], p["b"]) for p in metric["pairwise"]) and len(metric["pairwise"]) == 3
    assert "D" not in metric["significance"]["p_value"] and "D" not in metric["significance"]["co_winners"]
    assert metric["power"]["first"] == "C"
    assert set(metric["subgroups"]["age"]["groups"]) == {"<45.75", "45.75-<51.5", "51.5-<57.25", ">=57.25"}
    kw = metric["subgroups"]["sex"]["kruskal"]["A"]
    x = np.array(metric["per_case"]["A"])
    sex = np.array(cell["case_meta"]["sex"])
    assert kw["p_value"] == pytest.approx(stats.kruskal(x[sex == "f"], x[sex == "m"]).pvalue, rel=1e-12)


def test_cases_identical_to_the_reference_are_counted_per_model() -> None:
    """A case is identical to the reference when every scored structure has Dice exactly 1; an absent-absent structure
    (Dice 1 by the empty-mask rule) agrees, a structure predicted where the reference has none (worst case, Dice 0) does
    not. Every model gets its count, real or simulated; reanalyze carries it over (it needs rows the results lack)."""
    import json

    from segbench.stats import identical_to_reference, reanalyze, recompute

    rng = np.random.default_rng(3)
    records = []
    for model in ("copy_once", "never", "absent_agrees", "absent_predicted"):
        for i in range(12):
            for structure in ("kidney", "tumor"):
                dice, present = float(rng.uniform(0.5, 0.95)), True
                if model == "copy_once" and i == 4:
                    dice = 1.0  # both structures exactly as the reference
                if model == "never" and i == 4 and structure == "kidney":
                    dice = 1.0  # one structure only: not identical
                if i == 7 and structure == "tumor":
                    # no tumor in the reference: absent-absent is Dice 1, a tumor predicted there the worst case (Dice 0)
                    dice, present = (0.0 if model == "absent_predicted" else 1.0), False
                if model.startswith("absent") and i == 7 and structure == "kidney":
                    dice = 1.0
                records.append({"model": model, "case_id": f"c{i:02d}", "structure": structure, "reference_present": present, "dice": dice})
    rows = pd.DataFrame(records)
    res = analyze(rows, metrics={"dice": True}, settings=StatsSettings(n_resamples=50))
    counts = {m: e["identical_to_reference"] for m, e in res["models"].items()}
    assert counts == {
        "copy_once": {"cases": 1, "of": 12},
        "never": {"cases": 0, "of": 12},
        "absent_agrees": {"cases": 1, "of": 12},
        "absent_predicted": {"cases": 0, "of": 12},
    }
    assert identical_to_reference(rows) == counts  # the one function, as the calibration audit calls it
    assert identical_to_reference(rows, ["copy_once", "other"])["other"] == {"cases": 0, "of": 0}
    assert identical_to_reference(rows.drop(columns="dice").assign(iou=0.5), ["copy_once"]) == {"copy_once": None}
    # a NaN Dice (a published set not reporting one) is left out; a case without any Dice is not counted
    assert identical_to_reference(rows.assign(dice=rows["dice"].where(rows["case_id"] != "c04")))["copy_once"] == {"cases": 0, "of": 11}
    stored = json.loads(json.dumps(res, allow_nan=False, sort_keys=True))
    assert reanalyze(stored) == []
    assert recompute(stored)["models"] == res["models"]
    older = {**stored, "models": {m: {"contaminated": e["contaminated"]} for m, e in stored["models"].items()}}
    assert reanalyze(older) == []  # results written before the count still check


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.drop(columns="reference_present"), "reference_present"),
        (lambda r: r.assign(dice=r["dice"].astype(object).where(r.index != 3, "x")), "dice"),
        (lambda r: pd.concat([r, r.iloc[[4]]]), "duplicate row"),
        (lambda r: r.assign(dice=r["dice"].where(r.index != 5, np.nan)), "not a finite number"),
    ],
)
def test_analyze_rejects_bad_rows(mutate, message: str) -> None:
    rows = _rows({"A": [0.5] * 12, "B": [0.6] * 12})
    with pytest.raises(ValueError, match=message):
        analyze(mutate(rows), metrics={"dice": True}, settings=StatsSettings(n_resamples=10))


def test_settings_are_validated() -> None:
    for bad in ({"ci_method": "normal"}, {"confidence": 1.5}, {"n_resamples": 0}, {"multiple_comparison": "fdr"}):
        with pytest.raises(ValueError):
            StatsSettings(**bad)


def test_holm_separability_levels_and_stopping_rule() -> None:
    """Step k gets level 1 - alpha/(P - k + 1); after the first CI containing 0 nothing is separable."""
    rng = np.random.default_rng(10)
    shifts = np.array([0.5, 0.0, 0.3, 0.02, 0.4])  # clear, null, clear, weak, clear
    diff_boot = shifts + rng.normal(0, 0.1, size=(4000, 5))
    diff = diff_boot.mean(axis=0)
    holm_res = separability(diff_boot, diff, None, alpha=0.05, correction="holm", ci_method="percentile")
    order = np.argsort(holm_res["p_bootstrap"], kind="stable")
    steps = 0.05 / (5 - np.arange(5))
    stop = int(np.argmin(holm_res["separable"][order]))
    assert holm_res["separable"][order[:stop]].all() and not holm_res["separable"][order[stop:]].any()
    np.testing.assert_allclose(holm_res["ci_level"][order[: stop + 1]], 1 - steps[: stop + 1])
    np.testing.assert_allclose(holm_res["ci_level"][order[stop:]], 1 - steps[stop])
    assert set(np.flatnonzero(holm_res["separable"])) == {0, 2, 4}
    for k in range(5):
        excludes = holm_res["ci_low"][k] > 0 or holm_res["ci_high"][k] < 0
        assert excludes == holm_res["separable"][k]
        lo, hi = np.quantile(diff_boot[:, k], [(1 - holm_res["ci_level"][k]) / 2, (1 + holm_res["ci_level"][k]) / 2])
        assert (holm_res["ci_low"][k], holm_res["ci_high"][k]) == pytest.approx((lo, hi), rel=1e-12)
    bonf = separability(diff_boot, diff, None, alpha=0.05, correction="bonferroni", ci_method="percentile")
    np.testing.assert_allclose(bonf["ci_level"], 1 - 0.05 / 5)


@pytest.mark.parametrize("ci_method", ["percentile", "bca"])
@pytest.mark.parametrize("case", ["no_cases", "one_case", "two_cases", "constant", "one_model"])
def test_degenerate_inputs_give_none_not_errors(case: str, ci_method: str) -> None:
    import json
    import warnings

    from segbench.stats import reanalyze

    data = {
        "no_cases": ({"A": [0.5, 0.6], "B": [0.5, 0.7]}, {"c00", "c01"}),
        "one_case": ({"A": [0.5], "B": [0.6]}, set()),
        "two_cases": ({"A": [0.5, 0.6], "B": [0.6, 0.6]}, set()),
        "constant": ({"A": [0.5] * 12, "B": [0.5] * 12, "C": [0.5] * 12}, set()),
        "one_model": ({"A": [0.1, 0.5, 0.9]}, set()),
    }[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = analyze(
            _rows(data[0], absent=data[1]), metrics={"dice": False}, settings=StatsSettings(n_resamples=100, ci_method=ci_method), subgroup_fields=["sex"]
        )
    text = json.dumps(res, allow_nan=False, sort_keys=True)
    assert reanalyze(json.loads(text)) == []
    metric = res["structures"]["liver"]["metrics"]["dice"]
    if case == "no_cases":
        assert metric["models"]["A"]["mean"] is None and metric["ranking"] is None
    if case == "constant":
        assert metric["significance"]["co_winners"] == ["A", "B", "C"]
        assert metric["power"]["n_required"] is None


def test_column_quantiles_equal_numpy_in_the_tails_the_middle_and_with_nan() -> None:
    """Per-column levels equal np.quantile at any level, with ties; NaN (absent subgroup) is ignored."""
    rng = np.random.default_rng(21)
    boot = np.round(rng.normal(size=(1000, 6)), 2)  # ties
    boot[:40, 5] = np.nan
    boot[rng.permutation(1000)[:990], 4] = np.nan  # a nearly empty column
    boot[:, 3] = np.nan  # an empty column: NaN
    for probs in (
        (np.full(6, 0.025), np.full(6, 0.975)),
        (rng.uniform(0, 0.02, 6), rng.uniform(0.99, 1.0, 6)),
        (np.full(6, 0.5), rng.uniform(0, 1, 6)),
        (np.zeros(6), np.ones(6)),
    ):
        got = column_quantiles(boot, *probs)
        for level, values in zip(probs, got):
            want = [np.quantile(boot[~np.isnan(boot[:, j]), j], level[j]) if j != 3 else np.nan for j in range(6)]
            np.testing.assert_array_equal(values, want)
