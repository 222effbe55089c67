"""Published-score readers: real files, and malformed copies that must fail naming file, row and column."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from repo_paths import KITS_META, SEGAUGE_KITS, TOUCHSTONE
from segbench.published.readers import read_touchstone
from segbench.published.segauge import read_segauge_results
from segbench.stats import StatsSettings, analyze


def test_read_touchstone_real(touchstone_rows: pd.DataFrame) -> None:
    rows = touchstone_rows
    assert rows["model"].nunique() == 19 and rows["structure"].nunique() == 9
    assert rows["case_id"].nunique() == 743
    assert len(rows) == (17 * 743 + 2 * 656) * 9
    assert not rows.duplicated(["model", "case_id", "structure"]).any()
    assert (rows["reference_present"] == rows["dice"].notna()).all()
    assert {"meta.gender", "meta.manufacturer", "meta.age", "meta.age_band"} <= set(rows.columns)
    one = rows[(rows["model"] == "MONAI_UNETR") & (rows["case_id"] == "s0001") & (rows["structure"] == "liver")]
    assert one["dice"].item() == pytest.approx(0.9426380395889282)
    assert one["nsd"].item() == pytest.approx(0.8020774126052856)


def test_read_segauge_results_real() -> None:
    if not SEGAUGE_KITS.is_file():
        pytest.skip("data bundle not pulled")
    rows = read_segauge_results(SEGAUGE_KITS, KITS_META)
    assert set(rows["model"]) == {"TotalSegmentator", "TotalSegmentator-fast"}
    assert rows.attrs["models"]["TotalSegmentator"] == {"version": "2.14.0", "licence": "Apache-2.0", "contaminated_on": ["totalsegmentator"]}
    assert rows.attrs["dataset"] == "kits23"
    # the bundle's clinical JSON covers all 489 cases, so every row has its age band
    assert rows["meta.age_band"].notna().all()
    assert (rows.loc[rows["case_id"] == "case_00000", "meta.age_band"] == "40-49").all()
    doc = json.loads(SEGAUGE_KITS.read_text())
    res = analyze(rows, metrics={"dice": True, "hd95": False, "nsd": True, "assd": False}, settings=StatsSettings(n_resamples=2000), subgroup_fields=["gender"])
    for model in doc["models"]:
        for metric, summary in model["per_organ"]["kidney"]["summary"].items():
            got = res["structures"]["kidney"]["metrics"][metric]["models"][model["name"]]["mean"]
            assert got == pytest.approx(summary["value"], rel=1e-12)


@pytest.fixture()
def touchstone_copy(tmp_path: Path) -> Path:
    if not TOUCHSTONE.is_dir():
        pytest.skip("data bundle not pulled")
    out = tmp_path / "touchstone"
    out.mkdir()
    shutil.copy(TOUCHSTONE / "metaTotalSeg.csv", out)
    for model in ("MONAI_UNETR", "nnU-Net_U-Net"):
        shutil.copytree(TOUCHSTONE / model, out / model)
    return out


def _edit(path: Path, line: int, old: str, new: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    assert old in lines[line]
    lines[line] = lines[line].replace(old, new, 1)
    path.write_text("".join(lines))


def test_touchstone_non_numeric_cell(touchstone_copy: Path) -> None:
    path = touchstone_copy / "MONAI_UNETR" / "dsc.csv"
    _edit(path, 2, "0.1430182754993438", "oops")
    with pytest.raises(ValueError, match=r"dsc\.csv: row 3 \(name='s0001'\), column 'aorta'"):
        read_touchstone(touchstone_copy)


def test_touchstone_duplicate_case(touchstone_copy: Path) -> None:
    path = touchstone_copy / "MONAI_UNETR" / "nsd.csv"
    _edit(path, 3, path.read_text().splitlines()[3].split(",")[0], "s0001")
    with pytest.raises(ValueError, match=r"nsd\.csv: rows 3 and 4 \(name 's0001'\), column 'aorta': conflicting duplicates"):
        read_touchstone(touchstone_copy)


def test_touchstone_missing_column(touchstone_copy: Path) -> None:
    path = touchstone_copy / "nnU-Net_U-Net" / "dsc.csv"
    _edit(path, 0, "name,", "case,")
    with pytest.raises(ValueError, match=r"nnU-Net_U-Net/dsc\.csv: first column must be 'name'"):
        read_touchstone(touchstone_copy)


def test_touchstone_empty_cell_in_one_file_only(touchstone_copy: Path) -> None:
    path = touchstone_copy / "MONAI_UNETR" / "nsd.csv"
    _edit(path, 2, "0.1232238560914993", "")
    with pytest.raises(ValueError, match=r"MONAI_UNETR/nsd\.csv: row 3 \(name='s0001'\), column 'aorta': empty, but dsc\.csv has a value"):
        read_touchstone(touchstone_copy)


def test_segauge_bad_value(tmp_path: Path) -> None:
    if not SEGAUGE_KITS.is_file():
        pytest.skip("data bundle not pulled")
    doc = json.loads(SEGAUGE_KITS.read_text())
    doc["models"][1]["per_organ"]["kidney"]["per_case"][2]["hd95"] = "inf"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"bad\.json: models\[1\] .*per_case\[2\] .*column 'hd95'"):
        read_segauge_results(path)
    doc["models"][1]["per_organ"]["kidney"]["per_case"][2] = dict(doc["models"][1]["per_organ"]["kidney"]["per_case"][1])
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"bad\.json: duplicate row"):
        read_segauge_results(path)


def test_reanalyze_after_sorted_json_round_trip() -> None:
    """Files are written with sort_keys; metric and field order must not change any recomputed bit."""
    if not SEGAUGE_KITS.is_file():
        pytest.skip("data bundle not pulled")
    rows = read_segauge_results(SEGAUGE_KITS, KITS_META)
    res = analyze(
        rows,
        metrics={"nsd": True, "dice": True, "hd95": False, "assd": False},
        settings=StatsSettings(n_resamples=500, ci_method="bca"),
        subgroup_fields=["malignant", "gender"],
        contaminated={"TotalSegmentator": True},
    )
    from segbench.stats import reanalyze

    assert reanalyze(json.loads(json.dumps(res, sort_keys=True))) == []
