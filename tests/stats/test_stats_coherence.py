"""Every pair's verdict and its printed interval agree: "separable" exactly when the Δ interval excludes 0.

On the real published sets (Touchstone: 19 models, pairwise-complete alignment, clustered by institute; the segauge
KiTS23 GPU run: 20 cases, 3 models), read by the project's readers and analysed with the default settings, and on
``segbench reanalyze``'s check, which CI runs over every results file of the default run.
"""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from repo_paths import KITS_META, PUBLISHED
from segbench.published.segauge import read_segauge_results
from segbench.stats import StatsSettings, analyze, reanalyze
from segbench.stats.verdicts import incoherent_pairs

MODAL = PUBLISHED / "segauge_benchmark" / "kits23_modal.json"
KITS_METRICS = {"dice": True, "nsd": True, "hd95": False, "assd": False}


@pytest.fixture(scope="module")
def modal() -> dict:
    return analyze(read_segauge_results(MODAL, KITS_META), metrics=KITS_METRICS, settings=StatsSettings())


def _pairs(analysis: dict) -> list[tuple[str, dict, str]]:
    """(place, pair, key of its verdict) for every pair an analysis stores."""
    out = []
    for structure, block in analysis["structures"].items():
        for metric, cell in block["metrics"].items():
            where = f"{structure}/{metric}"
            out += [(f"{where}/pairwise", p, "separable") for p in cell["pairwise"]]
            out += [(f"{where}/alignment", p, "separable") for p in (cell["alignment"] or {}).get("pairwise") or []]
            out += [(f"{where}/clustered", p, "separable") for p in (cell["clustered"] or {}).get("pairwise") or []]
            out += [(f"{where}/verdict", p, "mean_separable") for p in (cell["verdict"] or {}).get("pairs") or []]
    return out


def _assert_coherent(analysis: dict) -> int:
    pairs = _pairs(analysis)
    for where, pair, key in pairs:
        low, high = pair["ci_low"], pair["ci_high"]
        assert low is not None and high is not None and low <= pair["mean_diff"] <= high, (where, pair)
        assert bool(pair[key]) == (low > 0 or high < 0), (where, pair["a"], pair["b"], pair[key], low, high)
    assert incoherent_pairs(analysis) == []
    return len(pairs)


def test_touchstone_every_pair_separable_iff_its_interval_excludes_zero(touchstone_rows: pd.DataFrame) -> None:
    """9 organs x 2 metrics: 171 pairs under each case alignment and the clustered bootstrap, 18 adjacent pairs' verdicts."""
    results = analyze(touchstone_rows, metrics={"dice": True, "nsd": True}, settings=StatsSettings(), cluster_field="institute")
    assert _assert_coherent(results) == 9 * 2 * (3 * 171 + 18)
    tested = [p for where, p, _ in _pairs(results) if where.endswith(("/pairwise", "/alignment"))]
    assert all(p["separable"] == (p["p_adjusted"] < 0.05) for p in tested)  # Holm's step-down on the test's p-values
    separable = sum(p["separable"] for _, p, key in _pairs(results) if key == "separable")
    assert 0 < separable < 9 * 2 * 3 * 171  # both kinds of pair are checked
    assert all(
        cell["verdict"]["intervals"] == "Δ intervals: the sign-flip and bootstrap-t tests inverted, each at the Holm step level of its pair "
        "(verdicts family-wise at α 0.05; intervals not simultaneous)"
        for block in results["structures"].values()
        for cell in block["metrics"].values()
    )


def test_segauge_modal_every_pair_separable_iff_its_interval_excludes_zero(modal: dict) -> None:
    assert _assert_coherent(modal) == 4 * (3 + 2)


@pytest.mark.parametrize("ci_method", ["percentile", "bca", "skew_t"])
def test_bootstrap_ci_verdicts_agree_with_their_intervals(ci_method: str) -> None:
    """Under ``pairwise_test: bootstrap_ci`` the CI decides: Holm's step-down keeps every pair's CI on the side of 0 its
    verdict says, also for methods whose CIs do not order the pairs as the bootstrap p-values do (BCa here)."""
    results = analyze(read_segauge_results(MODAL, KITS_META), metrics=KITS_METRICS, settings=StatsSettings(pairwise_test="bootstrap_ci", ci_method=ci_method))
    assert _assert_coherent(results) == 4 * (3 + 2)
    assert results["structures"]["kidney"]["metrics"]["nsd"]["verdict"]["intervals"] == (
        f"Δ intervals: paired bootstrap {ci_method} CIs, each at the Holm step level of its pair (verdicts family-wise at α 0.05; intervals not simultaneous)"
    )


def test_segauge_modal_kidney_nsd_moose_versus_totalsegmentator(modal: dict) -> None:
    """The cell of issue #41 that printed "separable" beside Δ = 0.010 [-0.011, 0.018]: its verdict and its interval
    come from the one test, at its Holm step (97.5 %: another pair of the three was separated first). On these 20
    cases the sign flips alone separated the pair (Δ = 0.0099 [0.0001, 0.0188]); the studentized bootstrap does not,
    so the board's test (both must reject) does not, and its interval, the union of the two, holds 0."""
    verdict = modal["structures"]["kidney"]["metrics"]["nsd"]["verdict"]
    head = verdict["pairs"][0]
    assert (head["a"], head["b"]) == ("MOOSE", "TotalSegmentator")
    assert not head["mean_separable"] and head["ci_low"] < 0 < head["ci_high"] and head["ci_level"] == pytest.approx(0.975)
    pair = modal["structures"]["kidney"]["metrics"]["nsd"]["pairwise"][0]
    assert pair["p_sign_flip"] < 0.025 <= pair["p_bootstrap_t"] and pair["p_test"] == pair["p_bootstrap_t"]
    assert verdict["text"].startswith("#1 MOOSE versus #2 TotalSegmentator: ")


def test_reanalyze_names_a_pair_whose_verdict_contradicts_its_interval(modal: dict) -> None:
    stored = json.loads(json.dumps(modal))
    assert reanalyze(stored) == []
    tampered = copy.deepcopy(stored)
    pair = tampered["structures"]["kidney"]["metrics"]["nsd"]["pairwise"][0]
    pair["separable"] = True  # the print: separable beside an interval through 0
    expected = (
        f"/structures/kidney/metrics/nsd/pairwise {pair['a']} vs {pair['b']}: separable True beside the interval [{pair['ci_low']!r}, {pair['ci_high']!r}]"
    )
    assert incoherent_pairs(tampered) == [expected]
    assert expected in reanalyze(tampered)
