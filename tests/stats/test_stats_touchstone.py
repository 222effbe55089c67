"""Acceptance tests of the statistics engine on the real Touchstone scores (19 models, 743 CTs, 9 organs)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from repo_paths import TOUCHSTONE
from segbench.stats import StatsSettings, analyze, reanalyze

METRICS = {"dice": True, "nsd": True}
FILES = {"dice": "dsc.csv", "nsd": "nsd.csv"}


@pytest.fixture(scope="module")
def touchstone_analysis(touchstone_rows: pd.DataFrame) -> dict:
    return analyze(touchstone_rows, metrics=METRICS, settings=StatsSettings(n_resamples=400), subgroup_fields=["gender", "manufacturer", "age_band"])


def _csvs(metric: str) -> dict[str, pd.DataFrame]:
    return {d.name: pd.read_csv(d / FILES[metric], index_col="name") for d in sorted(TOUCHSTONE.iterdir()) if d.is_dir()}


@pytest.mark.parametrize("metric", METRICS)
def test_means_and_sds_equal_direct_csv_computation(touchstone_analysis: dict, metric: str) -> None:
    """Per organ and model, mean and SD over the shared cases equal pandas on the raw CSVs (4 decimals).

    Verified facts about the files this test relies on: 17 models score all 743 scans, two
    (nnU-Net_STU-Net_H, nnU-Net_STU-Net_L) only 656; on those 656 the empty cells (organ absent) are
    identical in every model and in dsc.csv and nsd.csv. So the shared cases (docs/methodology.md#52-shared-cases) are the 656 common
    scans minus the organ's empty cells, and for the 17 complete models the shared-case mean is NOT the
    plain per-column mean of their CSV; the direct computation below restricts to the common scans.
    """
    tables = _csvs(metric)
    common = sorted(set.intersection(*(set(t.index) for t in tables.values())))
    assert len(common) == 656 and {len(t) for t in tables.values()} == {656, 743}
    empty = {m: t.loc[common].isna() for m, t in tables.items()}
    first = next(iter(empty.values()))
    assert all(e.equals(first) for e in empty.values())
    plain_differs = False
    for organ in first.columns:
        cell = touchstone_analysis["structures"][organ]
        present = [c for c in common if not first.at[c, organ]]
        assert cell["case_ids"] == present
        assert cell["n_absent"] == int(first[organ].sum()) + sum(
            1 for c in set().union(*(t.index for t in tables.values())) - set(common) if any(pd.isna(t.at[c, organ]) for t in tables.values() if c in t.index)
        )
        for model, table in tables.items():
            got = cell["metrics"][metric]["models"][model]
            column = table.loc[present, organ]
            assert got["n"] == column.notna().sum() == len(present)
            assert round(got["mean"], 4) == round(column.mean(skipna=True), 4)
            assert round(got["sd"], 4) == round(column.std(skipna=True), 4)
            plain_differs |= round(table[organ].mean(skipna=True), 4) != round(got["mean"], 4)
    assert plain_differs  # the plain per-column means of the 743-scan files are not the shared-case numbers


def _holm(p: list[float]) -> list[float]:
    """Textbook Holm adjustment, written as a loop (independent of the engine's vectorised version)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (m - step) * p[i]))
        out[i] = running
    return out


def test_significance_map_equals_direct_wilcoxon_loop(touchstone_analysis: dict) -> None:
    """Every cell of every organ/metric map equals scipy.stats.wilcoxon per ordered pair + Holm."""
    for organ, cell in touchstone_analysis["structures"].items():
        for metric, res in cell["metrics"].items():
            per_case = res["per_case"]
            models = res["ranking"]["order"]
            pairs = [(a, b) for a in models for b in models if a != b]
            p = []
            for a, b in pairs:
                x, y = np.array(per_case[a]), np.array(per_case[b])
                p.append(1.0 if np.all(x == y) else float(stats.wilcoxon(x, y, alternative="greater").pvalue))
            _assert_map_equals_loop(res["significance"], models, pairs, p, _holm(p), (organ, metric))


def _assert_map_equals_loop(sig: dict, models: list[str], pairs: list[tuple[str, str]], p: list[float], adjusted: list[float], where: tuple[str, str]) -> None:
    """A significance map equals the loop's raw and Holm-adjusted p-values, verdicts and co-winners."""
    for (a, b), raw, adj in zip(pairs, p, adjusted):
        assert sig["p_value"][a][b] == pytest.approx(raw, rel=1e-12, abs=1e-300), (*where, a, b)
        assert sig["p_adjusted"][a][b] == pytest.approx(adj, rel=1e-12, abs=1e-300), (*where, a, b)
        assert sig["significant"][a][b] == (adj < 0.05), (*where, a, b)
    beaten = {b for (a, b), adj in zip(pairs, adjusted) if adj < 0.05}
    assert sig["co_winners"] == [m for m in models if m not in beaten]


def _direct_pairwise_complete(metric: str, organ: str, models: list[str]) -> tuple[list[tuple[str, str]], list[float], list[float]]:
    """Touchstone's protocol as a plain loop on the raw CSVs: each ordered pair on the scans both score, then Holm."""
    tables = _csvs(metric)
    pairs = [(a, b) for a in models for b in models if a != b]
    p = []
    for a, b in pairs:
        both = pd.concat([tables[a][organ], tables[b][organ]], axis=1, join="inner").dropna()
        x, y = both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy()
        p.append(1.0 if np.all(x == y) else float(stats.wilcoxon(x, y, alternative="greater").pvalue))
    return pairs, p, _holm(p)


def test_pairwise_complete_alignment_equals_touchstone_loop(touchstone_analysis: dict) -> None:
    """Touchstone's own protocol (docs/methodology.md#513-case-alignment): p-values, verdicts and co-winners of all 18 cells.

    The shared-case analysis stays the primary one here; the alignment block carries Touchstone's
    protocol and names the cells where the choice changes the co-winners (5 of 18 on these files).
    """
    changed = []
    for organ, cell in touchstone_analysis["structures"].items():
        for metric, res in cell["metrics"].items():
            models = res["ranking"]["order"]
            pairs, p, adjusted = _direct_pairwise_complete(metric, organ, models)
            alignment = res["alignment"]
            assert alignment["protocol"] == "pairwise_complete"
            sig = alignment["significance"]
            _assert_map_equals_loop(sig, models, pairs, p, adjusted, (organ, metric))
            assert alignment["changes"]["co_winners"] == (sig["co_winners"] != res["significance"]["co_winners"])
            if alignment["changes"]["co_winners"]:
                changed.append((organ, metric))
    assert len(changed) == 5 and ("kidney_left", "dice") in changed and ("kidney_right", "nsd") in changed


def test_pairs_on_the_shared_cases_get_one_test_under_both_alignments(touchstone_analysis: dict) -> None:
    """A pair whose common cases are the shared ones is one test under both protocols: the same sign-flip p-value (not
    another draw of it), so `changes` lists only what the case sets (and Holm over the other pairs) change."""
    on_shared = 0
    for organ, cell in touchstone_analysis["structures"].items():
        for metric, res in cell["metrics"].items():
            shared = {(p["a"], p["b"]): p for p in res["pairwise"]}
            for pair in res["alignment"]["pairwise"]:
                if pair["n_cases"] == cell["n_cases"]:
                    on_shared += 1
                    assert pair["p_test"] == shared[pair["a"], pair["b"]]["p_test"], (organ, metric, pair["a"], pair["b"])
    assert on_shared == 18 * 35  # per cell the 2 x 17 pairs of a 656-scan model with a full one, and the two together


def test_case_alignment_setting_makes_touchstone_protocol_primary(touchstone_rows: pd.DataFrame) -> None:
    rows = touchstone_rows[touchstone_rows["structure"] == "kidney_left"]
    settings = StatsSettings(n_resamples=200, case_alignment="pairwise_complete")
    res = analyze(rows, metrics={"dice": True}, settings=settings)["structures"]["kidney_left"]["metrics"]["dice"]
    models = res["ranking"]["order"]
    _, _, adjusted = _direct_pairwise_complete("dice", "kidney_left", models)
    assert [res["significance"]["p_adjusted"][a][b] for a in models for b in models if a != b] == pytest.approx(adjusted, rel=1e-12)
    assert res["alignment"]["protocol"] == "shared" and res["alignment"]["changes"]["co_winners"]
    partial = {"nnU-Net_STU-Net_H", "nnU-Net_STU-Net_L"}  # the two models reporting 656 of the 743 scans
    n_cases = {(p["a"] in partial or p["b"] in partial, p["n_cases"]) for p in res["pairwise"]}
    assert len(n_cases) == 2 and min(n_cases)[1] > max(n_cases)[1]  # pairs with a 656-scan model use fewer cases
    with pytest.raises(ValueError, match="case_alignment"):
        StatsSettings(case_alignment="complete")


def test_runs_are_byte_identical_and_seed_moves_only_resampling_numbers(touchstone_rows: pd.DataFrame) -> None:
    rows = touchstone_rows[touchstone_rows["structure"].isin(["liver", "pancreas"])]
    kwargs = dict(metrics=METRICS, subgroup_fields=["gender", "age_band"], contaminated={"MONAI_SegVol": True})
    first = json.dumps(analyze(rows, settings=StatsSettings(n_resamples=300), **kwargs), sort_keys=True)
    second = json.dumps(analyze(rows, settings=StatsSettings(n_resamples=300), **kwargs), sort_keys=True)
    assert first == second
    other = analyze(rows, settings=StatsSettings(n_resamples=300, seed=1), **kwargs)
    changed = _leaf_differences(json.loads(first), other, ())
    resampling_keys = {
        "ci_low",
        "ci_high",
        "ci_level",
        "p_bootstrap",
        "separable",
        "p_test",
        "p_adjusted",
        "p_rank1",
        "p_sign_flip",
        "p_bootstrap_t",
        "mean_rank",
        "median_rank",
        "rank_interval",
        "rank_frequency",
        "kendall_tau",
        "kendall_tau_median",
        "seed",
        "verdict",
    }  # the verdict reads the sign-flip test (docs/methodology.md#57-verdicts)
    touched = {key for path in changed for key in path if key in resampling_keys}
    assert touched >= {"p_test", "p_rank1", "kendall_tau", "seed"}  # the default skew_t CI reads no resample
    untouched = [path for path in changed if not resampling_keys.intersection(path)]
    assert untouched == []


def _leaf_differences(a: object, b: object, path: tuple) -> list[tuple]:
    """Key paths of the leaves where two results trees differ (a dict with other keys differs at its own path)."""
    if isinstance(a, dict):
        if set(a) != set(b):
            return [path]
        return [p for k in a for p in _leaf_differences(a[k], b[k], (*path, k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for x, y in zip(a, b) for p in _leaf_differences(x, y, path)]
    return [path] if a != b else []


def test_reanalyze_rederives_everything_and_reports_tampering(touchstone_analysis: dict) -> None:
    stored = json.loads(json.dumps(touchstone_analysis))
    assert reanalyze(stored) == []
    stored["structures"]["liver"]["metrics"]["dice"]["per_case"]["MONAI_UNETR"][0] += 0.5
    diffs = reanalyze(stored)
    assert diffs and diffs[0].startswith("/structures/liver/metrics/dice/")
    assert any("/models/MONAI_UNETR/mean" in d for d in diffs)
