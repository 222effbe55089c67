"""Published score sets as they really come (docs/published.md): rows in another order, exact and conflicting
duplicates, a value in one metric file only, metadata in another file under a key derived from the case id.

Every fixture is cut from the real Touchstone files (three models, the first 120 scans) and then messed up the way
published sets are: the reader must give the clean set's rows, or stop naming the file, the row, the case and the column.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from projects import working_folder
from repo_paths import TOUCHSTONE
from segbench.published.readers import files_version, read_nnunet_summaries, read_touchstone
from segbench.published.segauge import read_segauge_results
from segbench.report.pages import standalone_dataset_page
from tests_support import published_pipeline

MODELS = ("MONAI_UNETR", "nnU-Net_U-Net", "MONAI_SegVol")
N_CASES = 120
# the clinical file renamed, tab-separated, keyed by "series" = the case id without its "s" ("s0007" -> "0007")
METADATA = {"path": "clinical.tsv", "sep": "\t", "key": "series", "case_key": r"^s(\d+)$"}
WITHOUT_METADATA = ("s0001", "s0006")
#: MONAI_UNETR's dsc.csv once messed: every case, two exact copies and one conflicting copy
ROWS_WITH_REPEATS = N_CASES + 3


def _cut(out: Path) -> Path:
    """The clean fixture: three models' dsc.csv/nsd.csv with their first N_CASES scans, and metaTotalSeg.csv."""
    if not TOUCHSTONE.is_dir():
        pytest.skip("data bundle not pulled")
    out.mkdir()
    for model in MODELS:
        (out / model).mkdir()
        for name in ("dsc.csv", "nsd.csv"):
            lines = (TOUCHSTONE / model / name).read_text(encoding="utf-8").splitlines(keepends=True)
            (out / model / name).write_text("".join(lines[: N_CASES + 1]), encoding="utf-8")
    shutil.copy(TOUCHSTONE / "metaTotalSeg.csv", out)
    return out


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _write(path: Path, table: pd.DataFrame) -> None:
    table.to_csv(path, index=False, lineterminator="\n")


def _mess(folder: Path) -> dict[str, Any]:
    """Every fault at once; returns where each is (for the error messages) and what the clean values were."""
    dsc, nsd = folder / "MONAI_UNETR" / "dsc.csv", folder / "MONAI_UNETR" / "nsd.csv"
    # shuffled: nsd.csv in another row order and organ column order than dsc.csv; another model's dsc.csv shuffled too
    shuffled = _csv(nsd).sample(frac=1.0, random_state=0)
    _write(nsd, shuffled[["name", *reversed(list(shuffled.columns[1:]))]])
    other = folder / "nnU-Net_U-Net" / "dsc.csv"
    _write(other, _csv(other).sample(frac=1.0, random_state=1))
    # exact duplicates: two of dsc.csv's rows again at its end
    table = _csv(dsc)
    table = pd.concat([table, table.iloc[[5, 9]]], ignore_index=True)
    # conflicting duplicate: case s0001 again in dsc.csv with another liver Dice (line = its index + 2)
    conflict = table.iloc[[1]].copy()
    clean_liver = conflict["liver"].iloc[0]
    conflict["liver"] = "0.5"
    table = pd.concat([table, conflict], ignore_index=True)
    _write(dsc, table)
    # one-sided gap: s0006's spleen blanked in MONAI_SegVol's nsd.csv only
    segvol = folder / "MONAI_SegVol" / "nsd.csv"
    gap = _csv(segvol)
    assert gap.loc[4, "name"] == "s0006" and gap.loc[4, "spleen"] != ""
    gap.loc[4, "spleen"] = ""
    _write(segvol, gap)
    # metadata: renamed file, tab-separated, key column "series" without the "s"; two cases have no row
    meta = pd.read_csv(folder / "metaTotalSeg.csv", sep=";", encoding="utf-8-sig", dtype=str, keep_default_na=False)
    meta = meta[~meta["image_id"].isin(WITHOUT_METADATA)]
    meta.insert(0, "series", meta.pop("image_id").str.removeprefix("s"))
    (folder / "metaTotalSeg.csv").unlink()
    meta.to_csv(folder / "clinical.tsv", sep="\t", index=False, lineterminator="\n")
    return {"conflict_rows": (3, len(table) + 1), "clean_liver": float(clean_liver)}


@pytest.fixture
def clean(tmp_path: Path) -> pd.DataFrame:
    return read_touchstone(_cut(tmp_path / "clean"))


@pytest.fixture
def messy(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    folder = _cut(tmp_path / "messy")
    return folder, _mess(folder)


def _read(folder: Path, **options: Any) -> pd.DataFrame:
    metadata = {**METADATA, "path": folder / METADATA["path"]}
    return read_touchstone(folder, metadata=metadata, **options)


def _key(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.sort_values(["model", "case_id", "structure"], ignore_index=True)


def test_shuffled_rows_and_columns_read_as_the_clean_set(tmp_path: Path, clean: pd.DataFrame) -> None:
    folder = _cut(tmp_path / "shuffled")
    for model in MODELS:
        path = folder / model / "nsd.csv"
        table = _csv(path).sample(frac=1.0, random_state=2)
        _write(path, table[["name", *reversed(list(table.columns[1:]))]])
    pd.testing.assert_frame_equal(_key(read_touchstone(folder)), _key(clean))


def test_exact_duplicates_are_dropped_and_counted(tmp_path: Path, clean: pd.DataFrame) -> None:
    folder = _cut(tmp_path / "duplicated")
    path = folder / "nnU-Net_U-Net" / "dsc.csv"
    table = _csv(path)
    _write(path, pd.concat([table.iloc[:4], table], ignore_index=True))
    rows = read_touchstone(folder)
    pd.testing.assert_frame_equal(_key(rows), _key(clean))
    assert rows.attrs["import"]["duplicates_dropped"] == 4


def test_every_fault_at_once_imports_with_policies(messy: tuple[Path, dict[str, Any]], clean: pd.DataFrame) -> None:
    folder, where = messy
    rows = _read(folder, duplicates="first", one_sided_missing="missing")
    notes = rows.attrs["import"]
    assert notes == {
        "duplicates_dropped": 2,
        "duplicates_resolved": 1,
        "one_sided_missing": {"MONAI_SegVol": [["s0006", "spleen"]]},
        "na_filled": 0,
        "cases_without_metadata": len(WITHOUT_METADATA),
        "metadata": None,
        "repeated": {
            "MONAI_UNETR/dsc.csv": {
                "rows": ROWS_WITH_REPEATS,
                "exact_copies_dropped": 2,
                "conflicting_copies_resolved": 1,
                "kept": "one row of each exact copy; of conflicting copies, the first row in the file",
            }
        },
    }
    # the one-sided cell leaves the rows (as a scan the model does not list); everything else is the clean set
    gap = (clean["model"] == "MONAI_SegVol") & (clean["case_id"] == "s0006") & (clean["structure"] == "spleen")
    expected, got = _key(clean[~gap]), _key(rows)
    scores = ["model", "case_id", "structure", "reference_present", "dice", "nsd"]
    pd.testing.assert_frame_equal(got[scores], expected[scores])
    # metadata joined through the derived key; the cases without a row keep their scores and have no metadata
    fields = [c for c in clean.columns if c.startswith("meta.")]
    assert [c for c in got.columns if c.startswith("meta.")] == fields
    meta, clean_meta = got.drop_duplicates("case_id").set_index("case_id"), expected.drop_duplicates("case_id").set_index("case_id")
    kept = meta.index.difference(list(WITHOUT_METADATA))
    pd.testing.assert_frame_equal(meta.loc[kept, fields], clean_meta.loc[kept, fields])
    assert meta.loc[list(WITHOUT_METADATA), fields].isna().all().all()
    # "first" kept the first s0001 row of MONAI_UNETR's dsc.csv
    first = got[(got["model"] == "MONAI_UNETR") & (got["case_id"] == "s0001") & (got["structure"] == "liver")]["dice"]
    assert first.item() == where["clean_liver"]
    mean = _read(folder, duplicates="mean", one_sided_missing="missing")
    averaged = mean[(mean["model"] == "MONAI_UNETR") & (mean["case_id"] == "s0001") & (mean["structure"] == "liver")]["dice"]
    assert averaged.item() == pytest.approx((where["clean_liver"] + 0.5) / 2)


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        # conflicting duplicates (the one-sided gap allowed): file, both rows, case, column, both values
        (
            {"one_sided_missing": "missing"},
            r"MONAI_UNETR/dsc\.csv: rows 3 and {last} \(name 's0001'\), column 'liver': conflicting duplicates '{clean}' and '0\.5'",
        ),
        # the one-sided gap (duplicates allowed): the file lacking the value, its row, the case, the column
        ({"duplicates": "first"}, r"MONAI_SegVol/nsd\.csv: row 6 \(name='s0006'\), column 'spleen': empty, but dsc\.csv has a value"),
    ],
)
def test_each_fault_kind_stops_naming_where(messy: tuple[Path, dict[str, Any]], policies: dict[str, str], expected: str) -> None:
    folder, where = messy
    pattern = expected.format(last=where["conflict_rows"][1], clean=re.escape(repr(where["clean_liver"])))
    with pytest.raises(ValueError, match=pattern):
        _read(folder, **policies)


def test_metadata_key_not_derivable_names_the_case(messy: tuple[Path, dict[str, Any]]) -> None:
    folder, _ = messy
    metadata = {**METADATA, "path": folder / METADATA["path"], "case_key": "^case_([0-9]+)$"}
    with pytest.raises(ValueError, match=re.escape("clinical.tsv: metadata.case_key '^case_([0-9]+)$' finds no key in case id 's0000'")):
        read_touchstone(folder, metadata=metadata, duplicates="first", one_sided_missing="missing")


def _project(root: Path, tmp_path: Path, sets: dict[str, dict[str, Any]]) -> Path:
    """A working folder whose params.yaml names ``sets`` by configuration only (B = 200)."""
    return working_folder(root, tmp_path, ["stats.n_resamples=200"], published=sets)


@pytest.fixture
def messy_import_folder(root: Path, messy: tuple[Path, dict[str, Any]], tmp_path: Path, tracking_store: str) -> Path:
    """A working folder whose params.yaml names the messy set by configuration only (B = 200)."""
    folder, _ = messy
    return _project(
        root,
        tmp_path,
        {
            "messy_touchstone": {
                "title": "Touchstone cut, shuffled, duplicated, blanked, metadata renamed",
                "format": "touchstone",
                "path": str(folder),
                "evaluated_on": "totalsegmentator",
                "source": "tests/published/test_published_mess.py",
                "metrics": {"dice": True, "nsd": True},
                "subgroups": ["gender"],
                "cluster_field": "institute",
                "metadata": {**METADATA, "path": str(folder / METADATA["path"])},
                "options": {"duplicates": "first", "one_sided_missing": "missing"},
            }
        },
    )


def test_messy_set_imports_by_config_and_reports_its_summary(messy_import_folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"):
        published_pipeline(messy_import_folder, "messy_touchstone")
    line = (
        "3 models, 120 cases, 9 structures; 1 cells missing; 2 exact duplicate rows dropped; 1 conflicting duplicate rows "
        "resolved; 1 one-sided cells treated as not reported; repeated cases in MONAI_UNETR/dsc.csv "
        f"({ROWS_WITH_REPEATS} rows): 2 exact copies dropped, 1 conflicting copies resolved; kept one row of each exact copy; "
        "of conflicting copies, the first row in the file; 2 cases without metadata; policies duplicates: first, "
        "one_sided_missing: missing"
    )
    assert f"messy_touchstone: imported {line}" in caplog.text
    results = json.loads((messy_import_folder / "results" / "messy_touchstone.json").read_text())
    summary = results["dataset"]["import_summary"]
    assert summary["cells_missing"] == 1 and summary["one_sided_missing"] == {"MONAI_SegVol": [["s0006", "spleen"]]}
    assert summary["cases_without_metadata"] == 2
    # the cases without metadata stay in the statistics, out of the subgroup tests only
    liver = results["analysis"]["structures"]["liver"]
    assert set(WITHOUT_METADATA) <= set(liver["case_ids"])
    assert liver["metrics"]["dice"]["subgroups"]["gender"]["n_missing_value"] >= np.sum([c in liver["case_ids"] for c in WITHOUT_METADATA])
    assert line in standalone_dataset_page(results)


def test_every_fault_of_a_touchstone_file_in_one_run(tmp_path: Path) -> None:
    """An empty case id, a conflicting duplicate and a non-numeric cell in one dsc.csv: one error names all three."""
    folder = _cut(tmp_path / "faulty")
    path = folder / "MONAI_UNETR" / "dsc.csv"
    table = _csv(path)
    table.loc[3, "name"] = ""
    table.loc[7, "liver"] = "0.9o"
    table = pd.concat([table, table.iloc[[1]].assign(spleen="0.5")], ignore_index=True)
    _write(path, table)
    with pytest.raises(ValueError) as error:
        read_touchstone(folder)
    assert str(error.value).startswith(f"{path}: 3 faults:\n"), error.value
    for fault in (
        "row 5, column 'name' is empty",
        f"rows 3 and {len(table) + 1} (name {table.loc[1, 'name']!r}), column 'spleen': conflicting duplicates",
        f"row 9 (name={table.loc[7, 'name']!r}), column 'liver': '0.9o' is not a finite number",
    ):
        assert f"\n  {fault}" in str(error.value), error.value


@pytest.mark.parametrize("junk", [b"name,liver\ncase\xe9,0.9\n", b"\xff\xd8\xff\xe0\x00\x10JFIF"], ids=["latin-1 bytes", "a JPEG"])
def test_a_score_file_whose_bytes_are_no_utf8_csv_is_an_error_naming_it(tmp_path: Path, junk: bytes) -> None:
    """A Latin-1 dsc.csv stopped the import with "'utf-8' codec can't decode byte 0xe9", naming no file."""
    folder = _cut(tmp_path / "faulty")
    path = folder / "MONAI_UNETR" / "dsc.csv"
    path.write_bytes(junk)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: cannot read"):
        read_touchstone(folder)


@pytest.mark.parametrize("junk", [b"\xff\xfe{", b"[" * 100_000, b"{"], ids=["not UTF-8", "nested past the recursion limit", "cut short"])
def test_a_json_score_file_that_cannot_be_parsed_is_an_error_naming_it(tmp_path: Path, junk: bytes) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(junk)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: not a segauge results file"):
        read_segauge_results(path)
    summary = tmp_path / "model" / "summary.json"
    summary.parent.mkdir()
    summary.write_bytes(junk)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(summary))}: not an nnU-Net summary.json"):
        read_nnunet_summaries(tmp_path, {"model": "model/summary.json"}, {"1": "liver"}, ".nii.gz")


def _dap_atlas_shaped(folder: Path) -> Path:
    """A Touchstone-shaped folder as Touchstone's own DAP Atlas results ship: clinical_metadata.csv, no metaTotalSeg.csv."""
    (folder / "metaTotalSeg.csv").rename(folder / "clinical_metadata.csv")
    return folder


@pytest.mark.parametrize(
    ("metadata", "note"),
    [
        ({}, "no metadata ({folder} has no metaTotalSeg.csv)"),  # config alone: the folder's default is not there
        ({"metadata": "none"}, "no metadata (metadata: none)"),  # said so, whatever the folder holds
    ],
)
def test_touchstone_folder_without_its_metadata_file_imports_by_config_alone(
    root: Path, tmp_path: Path, tracking_store: str, metadata: dict[str, str], note: str
) -> None:
    folder = _cut(tmp_path / "dap_atlas")
    if not metadata:
        _dap_atlas_shaped(folder)
    project = _project(
        root,
        tmp_path,
        {
            "dap_atlas": {
                "format": "touchstone",
                "path": str(folder),
                "evaluated_on": "dap_atlas",
                "source": "tests/published/test_published_mess.py",
                "metrics": {"dice": True, "nsd": True},
                **metadata,
            }
        },
    )
    results = published_pipeline(project, "dap_atlas")
    summary = results["dataset"]["import_summary"]
    assert summary["metadata"] == note.format(folder=folder) and f"; {summary['metadata']}; " in summary["text"]
    assert summary["cases_without_metadata"] is None and summary["cells_missing"] == 0
    assert set(results["models"]) == set(MODELS)
    assert note.format(folder=folder) in standalone_dataset_page(results)
    # its "Data version" is its own files' md5, not the data bundle's (which a file outside data/ does not change)
    assert results["dataset"]["version"] == files_version([folder])
    assert results["dataset"]["version"] != yaml.safe_load((root / "data.dvc").read_text())["outs"][0]["md5"]
    assert f"Data version <code>{results['dataset']['version']}</code>" in standalone_dataset_page(results)
