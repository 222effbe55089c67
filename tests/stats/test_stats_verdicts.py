"""One verdict per cell (segbench.stats.verdicts): each code on data built to produce it, co-winners, and number text."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from segbench.base.formats import format_estimate, format_level
from segbench.stats import StatsSettings, analyze


def _cell(values: dict[str, np.ndarray], metric: str = "dice", higher: bool = True) -> dict:
    records = [
        {"model": m, "case_id": f"c{i:03d}", "structure": "tumor", "reference_present": True, metric: float(v)}
        for m, vals in values.items()
        for i, v in enumerate(vals)
    ]
    res = analyze(pd.DataFrame(records), metrics={metric: higher}, settings=StatsSettings(n_resamples=2000))
    return res["structures"]["tumor"]["metrics"][metric]


RNG = np.random.default_rng(3)
BASE = RNG.uniform(0.6, 0.9, 60)


def test_separable_when_both_tests_agree() -> None:
    v = _cell({"A": BASE + 0.05 + RNG.normal(0, 0.01, 60), "B": BASE})["verdict"]
    assert v["code"] == "separable" and (v["first"], v["second"]) == ("A", "B")
    assert v["co_winners"] == ["A"] and "B" in v["excluded"] and "A" in v["excluded"]["B"]
    assert v["text"].startswith("#1 A versus #2 B: A better than B: Δ = 0.05")


def test_aggregation_disagrees_names_both_models_and_the_direction_of_the_test() -> None:
    """B is better on 54 of 60 cases by a little; it fails 6 cases outright, so its mean is lower."""
    a = BASE.copy()
    b = BASE + 0.02
    b[:6] = 0.0
    cell = _cell({"A": a, "B": b})
    v = cell["verdict"]
    assert cell["ranking"]["order"] == ["A", "B"] and v["code"] == "aggregation_disagrees"
    pair = v["pairs"][0]
    assert pair["wilcoxon_favours"] == "B" and (pair["n_a_better"], pair["n_b_better"]) == (6, 54)
    assert "the mean favours A" in v["text"] and "per case B is better" in v["text"]
    assert "Wilcoxon-Holm: B better, p_adj" in v["text"]
    assert v["co_winners"] == ["A", "B"] and v["excluded"] == {}


def test_borderline_names_the_one_test_that_separates() -> None:
    """A is a little better on 59 cases and fails one: Wilcoxon-Holm separates, the mean's CI does not."""
    a = BASE + 0.01
    a[0] = BASE[0] - 0.55
    v = _cell({"A": a, "B": BASE})["verdict"]
    assert v["code"] == "borderline" and "only Wilcoxon-Holm separates them" in v["text"]
    assert v["co_winners"] == ["A", "B"]


def test_not_separable_and_every_p_value_has_a_direction() -> None:
    """The sentences leave the code's words to the views (no "not separable: not separable"), name no per-pair level
    (the cell's one ``intervals`` sentence does), and say which way Wilcoxon-Holm leans even where it is not
    significant."""
    v = _cell({"A": BASE + RNG.normal(0, 0.05, 60), "B": BASE + RNG.normal(0, 0.05, 60), "C": BASE - 0.2})["verdict"]
    assert v["code"] == "not_separable" and "separable" not in v["text"]
    assert v["co_winners"] == [v["first"], v["second"]] and list(v["excluded"]) == ["C"]
    assert v["intervals"] == (
        "Δ intervals: the sign-flip and bootstrap-t tests inverted, each at the Holm step level of its pair "
        "(verdicts family-wise at α 0.05; intervals not simultaneous)"
    )
    texts = [v["text"], *(p["text"] for p in v["pairs"]), *v["excluded"].values()]
    for text in texts:
        assert "CI" not in text and "neither better" not in text and not re.search(r"\d%", text), text
        for match in re.finditer(r"p_adj", text):
            assert re.search(r"(: \S+ better, |leans to \S+, not significant \()$", text[: match.start()]), text


def test_distances_carry_their_unit_and_lower_is_better() -> None:
    v = _cell({"A": BASE * 10, "B": BASE * 10 + 2 + RNG.normal(0, 0.1, 60)}, metric="hd95", higher=False)["verdict"]
    assert v["code"] == "separable" and v["first"] == "A"
    assert re.search(r"Δ = -2\.\d\d \[-2\.\d\d, -[12]\.\d\d\] mm \(A − B", v["text"]), v["text"]


@pytest.mark.parametrize(
    ("value", "low", "high", "metric", "higher", "text"),
    [
        (-0.004, -0.0061, -0.0004, "dice", True, "-0.0040 [-0.0061, -0.0004]"),  # excludes 0: never printed touching it
        (0.0123, 0.00002, 0.03, "nsd", True, "0.01230 [0.00002, 0.03000]"),
        (0.002, -0.0004, 0.004, "dice", True, "0.0020 [-0.0004, 0.0040]"),  # a bound near 0 is not printed as 0
        (0.5, 0.0, 0.9, "dice", True, "0.500 [0.000, 0.900]"),  # a bound that is 0 is
        (-0.000166604, -0.000416546, 1.67e-13, "hd95", False, "-0.0002 [-0.0004, 0.0000] mm"),  # and one at 0 within ties
        (-5.703278, -15.955651, 5.7e-9, "lesion_hd95", False, "-5.70 [-15.96, 0.00] mm"),  # (was 0.00000001)
        (0.0087868, -8.79e-12, 0.025641, "recall", True, "0.009 [0.000, 0.026]"),
        (0.00001, -0.00002, 0.00004, "nsd", True, "0.00001 [-0.00002, 0.00004]"),  # nor a narrow interval as a point
        (-0.0, -0.0, 0.0, "dice", True, "0.000 [0.000, 0.000]"),  # no '-0.000'
        (-0.0135, -0.0186, -0.0092, "assd", False, "-0.013 [-0.019, -0.009] mm"),  # nor the estimate like a bound
        (6.94, 0.57, 14.97, "lesion_hd95", False, "6.94 [0.57, 14.97] mm"),  # lesion-wise distances carry the unit too
        (0.963, 0.941, 0.98, "lesion_dice", True, "0.963 [0.941, 0.980]"),
        (-175.05, -257.9, -101.46, "assd", False, "-175.05 [-257.90, -101.46] mm"),
        (12.3, None, None, "hd95", False, "12.30 mm"),
        (0.0, -np.inf, np.inf, "dice", True, "0.000"),  # unbounded (too few cases): stored as None
        (0.01, 0.002, np.inf, "dice", True, "0.010"),
        (None, None, None, "dice", True, "–"),
    ],
)
def test_format_estimate(value: float | None, low: float | None, high: float | None, metric: str, higher: bool, text: str) -> None:
    assert format_estimate(value, low, high, metric, higher) == text


def test_level_labels_never_round_to_100_percent():
    assert [format_level(x) for x in (0.95, 0.9705, 0.975, 0.9953, 0.99996, 0.99995, 0.9999999, 1.0)] == [
        "95%",
        "97.05%",
        "97.5%",
        "99.53%",
        "99.996%",
        "99.995%",
        "99.99999%",
        "100%",
    ]


def test_too_few_cases_print_the_difference_alone_as_they_store_no_interval() -> None:
    """With three cases the sign-flip test rejects nothing at the family's level: the interval is unbounded, stored as
    None, and the verdict's sentence prints the difference alone, not '[-inf, inf]' beside a null in the results."""
    cell = _cell({"A": BASE[:3] + 0.1, "B": BASE[:3]})
    pair = cell["verdict"]["pairs"][0]
    assert cell["pairwise"][0]["ci_low"] is None and pair["ci_low"] is None and pair["ci_high"] is None
    assert "inf" not in cell["verdict"]["text"] and "Δ = 0.100 (A − B)" in cell["verdict"]["text"], cell["verdict"]["text"]
