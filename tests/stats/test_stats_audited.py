"""The audited rate of a leaderboard cell (``segbench.stats.audited``): population choice, nearest n, the 1.5-point flags,
settings that do not match the audit, missing tables, and the project's own audit tables read as compare reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from repo_paths import ROOT
from segbench.stats import AuditTables, BoardCell, StatsSettings, audited, population_data
from segbench.stats.audited import nearest_n

SETTINGS = StatsSettings().to_dict()  # skew_t CIs, the verdict's test: procedure meantest_holm
AUDIT = {"confidence": 0.95, "alpha": 0.05, "multiple_comparison": "holm"}


def _coverage(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["source", "structure", "metric", "n", "method", "rate", "mc_se"])


def _type1(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["source", "structure", "metric", "n", "procedure", "rate", "mc_se"])


@pytest.fixture
def tables() -> AuditTables:
    coverage = _coverage(
        [
            ("simulated", "tumor", "dice", 20, "skew_t", 0.929, 0.006),
            ("simulated", "tumor", "dice", 40, "skew_t", 0.938, 0.005),
            ("simulated", "tumor", "dice", 40, "percentile", 0.918, 0.006),
            ("simulated", "tumor", "nsd", 40, "skew_t", 0.909, 0.006),
            ("touchstone", "liver", "dice", 20, "skew_t", 0.870, 0.011),
            ("touchstone", "liver", "dice", 150, "skew_t", 0.954, 0.007),
            ("touchstone", "aorta", "dice", 20, "skew_t", 0.963, 0.006),
            ("touchstone", "aorta", "dice", 150, "skew_t", 0.958, 0.006),
            ("segauge", "kidney", "dice", 20, "skew_t", 0.905, 0.007),
            ("segauge", "kidney", "iou", 20, "skew_t", 0.900, 0.007),
        ]
    )
    type1 = _type1(
        [
            ("simulated", "tumor", "dice", 20, "meantest_holm", 0.030, 0.004),
            ("simulated", "tumor", "dice", 40, "meantest_holm", 0.037, 0.004),
            ("simulated", "tumor", "dice", 40, "separable_skew_t", 0.066, 0.006),
            ("simulated", "tumor", "nsd", 40, "meantest_holm", 0.070, 0.006),
            ("touchstone", "liver", "dice", 150, "meantest_holm", 0.012, 0.003),
            ("touchstone", "aorta", "dice", 150, "meantest_holm", 0.009, 0.003),
            ("segauge", "kidney", "dice", 20, "meantest_holm", 0.028, 0.004),
        ]
    )
    levels = pd.DataFrame(
        [("simulated", "tumor", "nsd", 40, "skew_t", 0.9868, False, 0.944, 0.004, 0.909, 1.32)],
        columns=["source", "structure", "metric", "n", "method", "level", "capped", "rate", "mc_se", "nominal_rate", "width_ratio"],
    )
    return AuditTables(coverage, type1, AUDIT, population_data("kits23", {"touchstone": "totalsegmentator", "segauge": "kits23"}), levels)


def cell(structure: str = "tumor", metric: str = "dice", n: int = 40, source: str | None = "simulated", data: str = "kits23", **settings) -> BoardCell:
    return BoardCell(source, data, structure, metric, n, {**SETTINGS, **settings})


def test_nearest_audited_n_and_its_ties() -> None:
    assert nearest_n([20, 40, 78, 150], 489) == 150 and nearest_n([20, 40, 78, 150], 60) == 78
    assert nearest_n([20, 40, 78, 150], 30) == 20 and nearest_n([20, 40, 78, 150], 59) == 40  # ties: the smaller n
    assert nearest_n([150, 20], 1) == 20
    with pytest.raises(ValueError, match="no audited n"):
        nearest_n([], 20)


def test_the_cells_own_population_at_the_nearest_n(tables: AuditTables) -> None:
    got = audited(tables, cell(n=33))
    assert got["reason"] is None
    assert got["coverage"] == {
        "population": "simulated/tumor",
        "source": "simulated",
        "structure": "tumor",
        "match": "exact",
        "candidates": 1,
        "n": 40,
        "n_board": 33,
        "rate": 0.938,
        "mc_se": 0.005,
        "method": "skew_t",
        "target": 0.95,
        "under_covers": False,
    }
    assert got["type1"]["rate"] == 0.037 and got["type1"]["procedure"] == "meantest_holm" and got["type1"]["n"] == 40
    assert got["type1"]["exceeds_alpha"] is False and got["type1"]["target"] == 0.05
    liver = audited(tables, cell("liver", n=394, source="touchstone", data="totalsegmentator"))
    assert (liver["coverage"]["population"], liver["coverage"]["n"], liver["coverage"]["rate"]) == ("touchstone/liver", 150, 0.954)
    assert liver["type1"]["rate"] == 0.012


def test_the_board_settings_pick_the_method_and_procedure(tables: AuditTables) -> None:
    got = audited(tables, cell(ci_method="percentile", pairwise_test="bootstrap_ci"))
    assert (got["coverage"]["method"], got["coverage"]["rate"]) == ("percentile", 0.918)
    assert got["type1"] is None and got["reason"] == "no audited population of dice on kits23"  # separable_percentile is not in the tables
    old = {k: v for k, v in SETTINGS.items() if k != "pairwise_test"}  # results from before the sign-flip test: the CI rule
    assert audited(tables, BoardCell("simulated", "kits23", "tumor", "dice", 40, old | {"ci_method": "skew_t"}))["type1"]["rate"] == 0.066


def test_a_structure_the_audit_lacks_reads_another_population_and_says_which(tables: AuditTables) -> None:
    mass = audited(tables, cell("kidney_and_mass", n=78))  # KiTS23: the simulated tumor population
    assert (mass["coverage"]["population"], mass["coverage"]["match"], mass["coverage"]["n"]) == ("simulated/tumor", "other_structure", 40)
    # an organ Touchstone's audit lacks: the least favourable of the set's audited organs at their nearest n
    spleen = audited(tables, cell("spleen", n=25, source="touchstone", data="totalsegmentator"))
    assert spleen["coverage"]["match"] == "other_structure"
    assert (spleen["coverage"]["population"], spleen["coverage"]["rate"], spleen["coverage"]["candidates"]) == ("touchstone/liver", 0.870, 2)
    assert (spleen["type1"]["population"], spleen["type1"]["rate"]) == ("touchstone/liver", 0.012)  # the highest type-I error
    # a metric the board's own set lacks: a population on the same data (segauge's real models on KiTS23)
    iou = audited(tables, cell("tumor", "iou", n=20))
    assert (iou["coverage"]["population"], iou["coverage"]["match"], iou["coverage"]["rate"]) == ("segauge/kidney", "same_data", 0.900)
    assert iou["type1"] is None and iou["reason"] == "no audited population of iou on kits23"
    # a published set on KiTS23 whose own population is missing: the same data
    other = audited(tables, cell("kidney", n=20, source="another_set", data="kits23"))
    assert other["coverage"]["match"] == "same_data" and other["coverage"]["population"] in {"simulated/tumor", "segauge/kidney"}
    assert other["coverage"]["rate"] == 0.905  # the least favourable of the two at n = 20 (0.929 and 0.905)


def test_data_the_audit_never_saw_is_not_audited(tables: AuditTables) -> None:
    got = audited(tables, cell("brain", n=50, source=None, data="brats"))
    assert got == {"coverage": None, "type1": None, "reason": "no audited population of dice on brats"}
    assert audited(tables, cell("tumor", "rq", n=40))["coverage"] is None  # a metric no population has


def test_flags_beyond_one_and_a_half_points(tables: AuditTables) -> None:
    assert audited(tables, cell(n=40))["coverage"]["under_covers"] is False  # 93.8: 1.2 points short
    assert audited(tables, cell(n=20))["coverage"]["under_covers"] is True  # 92.9: 2.1 points short
    nsd = audited(tables, cell(metric="nsd"))
    assert nsd["coverage"]["under_covers"] is True and nsd["type1"]["exceeds_alpha"] is True  # 7.0 %: 2 points over
    edge = AuditTables(
        _coverage([("simulated", "tumor", "dice", 40, "skew_t", 0.936, 0.005)]),
        _type1([("simulated", "tumor", "dice", 40, "meantest_holm", 0.064, 0.005)]),
        AUDIT,
        {"simulated": "kits23"},
    )
    assert audited(edge, cell())["coverage"]["under_covers"] is False and audited(edge, cell())["type1"]["exceeds_alpha"] is False
    assert audited(edge, cell(confidence=0.95, alpha=0.05))["coverage"]["target"] == 0.95


def test_other_settings_than_the_audit_are_not_audited(tables: AuditTables) -> None:
    got = audited(tables, cell(confidence=0.9))
    assert got["coverage"] is None and got["type1"] is not None and "the audit measured 95% CIs, this board's are 90%" in got["reason"]
    got = audited(tables, cell(multiple_comparison="bonferroni"))
    assert got["type1"] is None and got["coverage"] is not None and "holm, this board's at 0.05 with bonferroni" in got["reason"]


def test_missing_tables_give_none_and_bad_input_a_clear_error(tables: AuditTables) -> None:
    assert audited(None, cell()) is None
    with pytest.raises(ValueError, match=r"coverage lacks the columns \['mc_se'\]"):
        AuditTables(tables.coverage.drop(columns="mc_se"), tables.type1, AUDIT, tables.data)
    with pytest.raises(ValueError, match=r"type1.rate must be shares in \[0, 1\]"):
        AuditTables(tables.coverage, tables.type1.assign(rate=1.5), AUDIT, tables.data)
    with pytest.raises(ValueError, match="coverage has two rows"):
        AuditTables(pd.concat([tables.coverage, tables.coverage.head(1)]), tables.type1, AUDIT, tables.data)
    with pytest.raises(ValueError, match="settings lack 'alpha'"):
        AuditTables(tables.coverage, tables.type1, {"confidence": 0.95, "multiple_comparison": "holm"}, tables.data)
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        cell(n=0)
    with pytest.raises(ValueError, match="metric must be a non-empty string"):
        cell(metric="")
    with pytest.raises(ValueError, match=r"settings lack \['ci_method'\]"):
        BoardCell(None, "kits23", "tumor", "dice", 20, {"confidence": 0.95, "alpha": 0.05, "multiple_comparison": "holm"})


def test_compare_reads_the_projects_audit_tables(tmp_path: Path) -> None:
    """The audit tables as compare reads them: every Touchstone organ's cell its own organ's numbers, the KiTS23 ones the
    simulated tumor population's, a fresh project without calibration/results/ none (the field is null)."""
    from segbench import stats
    from segbench.config.params import load_params
    from segbench.stages import compare

    params = load_params(ROOT / "params.yaml")
    tables = compare.audit_tables(params, ROOT / "calibration" / "results")
    assert tables is not None and set(tables.data) >= {"simulated", "touchstone_totalsegmentator", "segauge_kits23_modal"}
    real = pd.read_csv(ROOT / "calibration" / "results" / "real_coverage.csv")
    settings = json.loads((ROOT / "calibration" / "results" / "audit.json").read_text(encoding="utf-8"))["stats"]
    method = settings["ci_method"]
    for organ in sorted(set(real.loc[real["source"] == "touchstone_totalsegmentator", "structure"])):
        analysis = {"settings": settings | {"ci_level": "nominal"}, "structures": {organ: {"n_cases": 300, "metrics": {"dice": {}}}}}
        block = stats.audited_board(tables, analysis, source="touchstone_totalsegmentator", data="totalsegmentator")
        entry = block["structures"][organ]["dice"]["coverage"]
        row = real[
            (real["source"] == "touchstone_totalsegmentator")
            & (real["structure"] == organ)
            & (real["metric"] == "dice")
            & (real["method"] == method)
            & (real["n"] == entry["n"])
        ].iloc[0]
        assert entry["match"] == "exact" and entry["rate"] == row["rate"] and entry["mc_se"] == row["mc_se"]
        assert entry["n"] == max(real.loc[(real["structure"] == organ), "n"])  # 300 cases: the largest n audited
    assert compare.board_population(params, "kits23") == ("simulated", "kits23")
    assert compare.board_population(params, "touchstone_totalsegmentator") == ("touchstone_totalsegmentator", "totalsegmentator")
    level = stats.level_provider(tables, source="simulated", data="kits23", settings=settings)("mass", "nsd", 78)
    levels = pd.read_csv(ROOT / "calibration" / "results" / "levels.csv")
    assert level == levels[(levels["metric"] == "nsd") & (levels["n"] == 78)]["level"].item()
    kits = stats.audited_board(
        tables,
        {"settings": settings, "structures": {"mass": {"n_cases": 78, "metrics": {"nsd": {"ci_confidence": level}}}}},
        source="simulated",
        data="kits23",
        lesions=stats.audited_lesions,
    )
    entry = kits["structures"]["mass"]["nsd"]["coverage"]
    assert entry["population"] == "simulated/tumor" and entry["level"] == level and kits["lesions"].startswith("not audited")
    assert compare.audit_tables(params, tmp_path / "nothing") is None
