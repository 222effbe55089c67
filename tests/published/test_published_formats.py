"""The users' score formats (challengeR's long CSV, nnU-Net v2 summary.json, a generic mapped CSV) go through
import -> MLflow -> compare; malformed files are refused naming the file, the row and the column.

Every input is written here, small and by hand; the expected means are summed by hand in the comments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from projects import working_folder
from segbench.cli import main
from segbench.config.params import ConfigError, parse_params
from segbench.config.validation import compose_params
from segbench.published.readers import MAX_FAULTS, READERS
from segbench.published.schema import PUBLISHED_FORMATS
from tests_support import in_directory, published_pipeline

# challengeR's long table (R's write.csv style: quoted header, NA for a missing value). liver: A3 failed on c3 (NA);
# spleen: A3 has no row for c5. Both are failed cases and score options.na_value.dice = 0.
CHALLENGER_CSV = """\
"case","algorithm","task","value"
c1,A1,liver,0.90
c2,A1,liver,0.85
c3,A1,liver,0.80
c4,A1,liver,0.95
c5,A1,liver,0.70
c1,A2,liver,0.88
c2,A2,liver,0.86
c3,A2,liver,0.75
c4,A2,liver,0.90
c5,A2,liver,0.66
c1,A3,liver,0.60
c2,A3,liver,0.70
c3,A3,liver,NA
c4,A3,liver,0.80
c5,A3,liver,0.50
c1,A1,spleen,0.80
c2,A1,spleen,0.82
c3,A1,spleen,0.78
c4,A1,spleen,0.90
c5,A1,spleen,0.85
c1,A2,spleen,0.92
c2,A2,spleen,0.90
c3,A2,spleen,0.88
c4,A2,spleen,0.95
c5,A2,spleen,0.85
c1,A3,spleen,0.70
c2,A3,spleen,0.75
c3,A3,spleen,0.72
c4,A3,spleen,0.80
"""
CHALLENGER_MEANS = {
    "liver": {"A1": 4.20 / 5, "A2": 4.05 / 5, "A3": 2.60 / 5},  # A3: 0.60 + 0.70 + 0 + 0.80 + 0.50
    "spleen": {"A1": 4.15 / 5, "A2": 4.50 / 5, "A3": 2.97 / 5},  # A3: 0.70 + 0.75 + 0.72 + 0.80 + 0
}

# A generic table with its own column names, one fixed structure, a lower-is-better HD95 in mm.
GENERIC_CSV = """\
patient,team,DSC,HD95 (mm)
p01,unet,0.91,3.0
p02,unet,0.85,5.0
p03,unet,0.88,4.0
p04,unet,0.79,9.0
p01,swin,0.89,2.0
p02,swin,0.87,4.0
p03,swin,0.90,3.0
p04,swin,0.82,7.0
"""
GENERIC_MEANS = {"dice": {"unet": 3.43 / 4, "swin": 3.48 / 4}, "hd95": {"unet": 21.0 / 4, "swin": 16.0 / 4}}


def _label(dice: float, n_ref: int, n_pred: int) -> dict[str, Any]:
    """One label of an nnU-Net metric_per_case entry, with the counts nnU-Net writes beside Dice and IoU."""
    tp = round(dice * (n_ref + n_pred) / 2)
    return {
        "Dice": dice if n_ref + n_pred else float("nan"),
        "IoU": tp / (n_ref + n_pred - tp) if n_ref + n_pred else float("nan"),
        "FN": n_ref - tp,
        "FP": n_pred - tp,
        "TN": 10**6,
        "TP": tp,
        "n_pred": n_pred,
        "n_ref": n_ref,
    }


def _summary(cases: dict[str, dict[str, tuple[float, int, int]]]) -> dict[str, Any]:
    """An nnU-Net v2 summary.json: per case (reference file stem) and label key, (Dice, n_ref, n_pred)."""
    per_case = [
        {
            "metrics": {label: _label(*v) for label, v in labels.items()},
            "prediction_file": f"/data/nnUNet_results/pred/{case}.nii.gz",
            "reference_file": f"/data/nnUNet_raw/Dataset101_Abd/labelsTs/{case}.nii.gz",
        }
        for case, labels in cases.items()
    ]
    return {"foreground_mean": {}, "mean": {}, "metric_per_case": per_case}


# Two trainers on three cases; label "1" = liver, "2" = tumor. Case abd_003 has no tumor (n_ref 0): left out of
# the tumor statistics (nnUNetTrainer: both masks empty, Dice NaN as nnU-Net writes it; NoMirroring: a spurious blob, Dice 0).
NNUNET = {
    "nnUNetTrainer": {
        "abd_001": {"1": (0.96, 5000, 5100), "2": (0.70, 400, 380)},
        "abd_002": {"1": (0.94, 4000, 4100), "2": (0.60, 300, 350)},
        "abd_003": {"1": (0.95, 4500, 4400), "2": (0.0, 0, 0)},
    },
    "nnUNetTrainerNoMirroring": {
        "abd_001": {"1": (0.95, 5000, 5000), "2": (0.75, 400, 410)},
        "abd_002": {"1": (0.92, 4000, 4200), "2": (0.65, 300, 310)},
        "abd_003": {"1": (0.93, 4500, 4600), "2": (0.0, 0, 50)},
    },
}
NNUNET_MEANS = {
    "liver": {"nnUNetTrainer": 2.85 / 3, "nnUNetTrainerNoMirroring": 2.80 / 3},
    "tumor": {"nnUNetTrainer": 1.30 / 2, "nnUNetTrainerNoMirroring": 1.40 / 2},
}


def _set(fmt: str, path: Path, metrics: dict[str, bool], options: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": f"hand-made {fmt} set",
        "format": fmt,
        "path": str(path),
        "evaluated_on": "demo",
        "source": "written by tests/published/test_published_formats.py",
        "metrics": metrics,
        "options": options,
    }


def _write_nnunet(folder: Path, cases: dict[str, dict[str, dict[str, tuple[float, int, int]]]]) -> None:
    for model, per_case in cases.items():
        (folder / model).mkdir(parents=True, exist_ok=True)
        # json.dumps writes NaN as nnU-Net's save_json does
        (folder / model / "summary.json").write_text(json.dumps(_summary(per_case), indent=2), encoding="utf-8")


@pytest.fixture
def formats_folder(root: Path, tmp_path: Path, tracking_store: str) -> Path:
    """A working folder with the three formats' files and a params.yaml selecting them (B = 200)."""
    (tmp_path / "challenger.csv").write_text(CHALLENGER_CSV, encoding="utf-8")
    (tmp_path / "generic.csv").write_text(GENERIC_CSV, encoding="utf-8")
    _write_nnunet(tmp_path / "nnunet", NNUNET)
    return working_folder(
        root,
        tmp_path,
        ["stats.n_resamples=200"],
        published={
            "challenger_demo": _set("challenger_csv", tmp_path / "challenger.csv", {"dice": True}, {"na_value": {"dice": 0}}),
            "generic_demo": _set(
                "generic_csv",
                tmp_path / "generic.csv",
                {"dice": True, "hd95": False},
                {"columns": {"case": "patient", "model": "team"}, "structure": "kidney", "metric_columns": {"dice": "DSC", "hd95": "HD95 (mm)"}},
            ),
            "nnunet_demo": _set(
                "nnunet_summary",
                tmp_path / "nnunet",
                {"dice": True, "iou": True},
                {"models": {m: f"{m}/summary.json" for m in NNUNET}, "labels": {1: "liver", 2: "tumor"}},
            ),
        },
    )


def _import_error(project: Path, name: str, capsys: pytest.CaptureFixture) -> str:
    capsys.readouterr()
    with in_directory(project):
        assert main(["import", "--published", name]) == 1
    return capsys.readouterr().err


def _cell(results: dict[str, Any], structure: str, metric: str) -> dict[str, Any]:
    return results["analysis"]["structures"][structure]["metrics"][metric]


def _ranking(cell: dict[str, Any]) -> list[str]:
    return cell["ranking"]["order"]


def test_every_format_has_its_reader() -> None:
    """The registry's formats (their options, light, for the configuration) and the readers are the same names."""
    assert list(PUBLISHED_FORMATS) == list(READERS)


def test_challenger_csv_failed_cases_score_na_value(formats_folder: Path) -> None:
    results = published_pipeline(formats_folder, "challenger_demo")
    assert set(results["models"]) == {"A1", "A2", "A3"}
    for structure, means in CHALLENGER_MEANS.items():
        assert results["analysis"]["structures"][structure]["n_cases"] == 5  # the failed cases stay in, counted against A3
        cell = _cell(results, structure, "dice")
        assert {m: cell["models"][m]["mean"] for m in means} == pytest.approx(means)
    assert _ranking(_cell(results, "liver", "dice")) == ["A1", "A2", "A3"]
    assert _ranking(_cell(results, "spleen", "dice")) == ["A2", "A1", "A3"]


def test_generic_csv_maps_columns_and_lower_is_better(formats_folder: Path) -> None:
    results = published_pipeline(formats_folder, "generic_demo")
    assert results["analysis"]["structures"]["kidney"]["n_cases"] == 4
    for metric, means in GENERIC_MEANS.items():
        cell = _cell(results, "kidney", metric)
        assert {m: cell["models"][m]["mean"] for m in means} == pytest.approx(means)
    assert _ranking(_cell(results, "kidney", "dice")) == ["swin", "unet"]
    assert _ranking(_cell(results, "kidney", "hd95")) == ["swin", "unet"]  # 4.0 mm beats 5.25 mm


def test_nnunet_summaries_compare_trainers(formats_folder: Path) -> None:
    results = published_pipeline(formats_folder, "nnunet_demo")
    assert set(results["models"]) == set(NNUNET)
    for structure, means in NNUNET_MEANS.items():
        cell = _cell(results, structure, "dice")
        assert {m: cell["models"][m]["mean"] for m in means} == pytest.approx(means)
    tumor = results["analysis"]["structures"]["tumor"]
    assert (tumor["n_cases"], tumor["n_absent"]) == (2, 1)  # abd_003 has no tumor in its reference
    assert _ranking(_cell(results, "liver", "dice")) == ["nnUNetTrainer", "nnUNetTrainerNoMirroring"]
    assert _ranking(_cell(results, "tumor", "dice")) == ["nnUNetTrainerNoMirroring", "nnUNetTrainer"]
    # IoU is read from the file's IoU field (from its TP, FP, FN), not derived from Dice
    iou = _cell(results, "liver", "iou")["models"]["nnUNetTrainer"]["mean"]
    assert iou == pytest.approx(sum(_label(*NNUNET["nnUNetTrainer"][c]["1"])["IoU"] for c in NNUNET["nnUNetTrainer"]) / 3)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace('"algorithm"', '"team"'), ["challenger.csv", "row 1 (header)", "'algorithm'"]),
        (lambda t: t.replace("c4,A2,liver,0.90", "c4,A2,liver,0,90"), ["challenger.csv: not a readable CSV", "line 10, saw 5"]),  # a decimal comma
        (lambda t: t.replace("c4,A2,liver,0.90", "c4,A2,liver,0.9o"), ["challenger.csv", "row 10", "column 'value'", "'0.9o'"]),
        (
            lambda t: t.replace("c5,A2,liver,0.66", "c4,A2,liver,0.66"),
            ["challenger.csv: rows 10 and 11 (model 'A2', case 'c4', ", "column 'value': conflicting duplicates '0.90' and '0.66'"],
        ),
        (lambda t: t.replace("c2,A1,spleen,0.82", ",A1,spleen,0.82"), ["challenger.csv", "row 18", "column 'case'", "empty case"]),
    ],
)
def test_challenger_csv_malformed(formats_folder: Path, capsys: pytest.CaptureFixture, edit: Any, expected: list[str]) -> None:
    path = formats_folder / "challenger.csv"
    path.write_text(edit(CHALLENGER_CSV), encoding="utf-8")
    err = _import_error(formats_folder, "challenger_demo", capsys)
    assert all(part in err for part in expected), err


def test_failed_case_without_na_value_is_refused(formats_folder: Path, capsys: pytest.CaptureFixture) -> None:
    params = yaml.safe_load((formats_folder / "params.yaml").read_text())
    del params["published"]["challenger_demo"]["options"]["na_value"]
    (formats_folder / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    err = _import_error(formats_folder, "challenger_demo", capsys)  # both failed cases in one run
    assert "challenger.csv: 2 faults:\n  row 14, column 'value': 'NA' (model 'A3', case 'c3', structure 'liver') is a failed case" in err
    assert "\n  no row (model 'A3', case 'c5', structure 'spleen') is a failed case" in err and "na_value.dice" in err
    (formats_folder / "challenger.csv").write_text(CHALLENGER_CSV.replace("c3,A3,liver,NA", "c3,A3,liver,0.0"), encoding="utf-8")
    assert "challenger.csv: no row (model 'A3', case 'c5', structure 'spleen') is a failed case" in _import_error(formats_folder, "challenger_demo", capsys)


def test_every_fault_of_a_file_in_one_run(formats_folder: Path, capsys: pytest.CaptureFixture) -> None:
    """Three faults of three kinds in one file: one run names all three, in one error; past MAX_FAULTS the rest are
    counted."""
    path = formats_folder / "challenger.csv"
    three = (
        CHALLENGER_CSV.replace("c4,A2,liver,0.90", "c4,A2,liver,0.9o")
        .replace("c2,A1,spleen,0.82", ",A1,spleen,0.82")
        .replace("c5,A1,spleen,0.85", "c4,A1,spleen,0.85")
    )
    path.write_text(three, encoding="utf-8")
    err = _import_error(formats_folder, "challenger_demo", capsys)
    assert "challenger.csv: 3 faults:" in err, err
    for fault in (
        "row 18, column 'case': empty case",
        "rows 20 and 21 (model 'A1', case 'c4', structure 'spleen'), column 'value': conflicting duplicates '0.90' and '0.85'",
        "row 10, column 'value': '0.9o' is not a finite number",
    ):
        assert f"\n  {fault}" in err, err
    lines = CHALLENGER_CSV.splitlines()
    path.write_text("\n".join([lines[0], *(line.rsplit(",", 1)[0] + ",x" for line in lines[1:13])]) + "\n", encoding="utf-8")
    err = _import_error(formats_folder, "challenger_demo", capsys)
    assert "challenger.csv: 12 faults:" in err and err.count("is not a finite number") == MAX_FAULTS and "\n  and 2 more" in err, err


def test_na_value_filled_cells_count_as_missing_and_filled(formats_folder: Path) -> None:
    summary = published_pipeline(formats_folder, "challenger_demo")["dataset"]["import_summary"]
    assert (summary["cells_missing"], summary["cells_filled"]) == (2, 2)  # A3's NA for c3 liver and its missing c5 spleen row
    assert "3 models, 5 cases, 2 structures; 2 cells missing (2 of them filled by na_value);" in summary["text"]


def test_generic_csv_malformed(formats_folder: Path, capsys: pytest.CaptureFixture) -> None:
    path = formats_folder / "generic.csv"
    path.write_text(GENERIC_CSV.replace("p03,swin,0.90,3.0", "p03,swin,0.90,inf"), encoding="utf-8")
    assert "generic.csv: row 8, column 'HD95 (mm)': 'inf' is not a finite number" in _import_error(formats_folder, "generic_demo", capsys)
    path.write_text(GENERIC_CSV.replace("DSC", "Dice"), encoding="utf-8")
    assert "generic.csv: row 1 (header): no column 'DSC' (the dice column)" in _import_error(formats_folder, "generic_demo", capsys)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # a label the config does not map
        (lambda d: d["abd_002"].update({"3": (0.5, 10, 10)}), "case 'abd_002', metric_per_case[1].metrics.3: label '3' is not in the set's options.labels"),
        # a case dropped by nnU-Net's --chill evaluation
        (lambda d: d.pop("abd_003"), "cases differ from summary.json's: missing ['abd_003']"),
    ],
)
def test_nnunet_malformed(formats_folder: Path, capsys: pytest.CaptureFixture, edit: Any, expected: str) -> None:
    second = {case: dict(labels) for case, labels in NNUNET["nnUNetTrainerNoMirroring"].items()}
    edit(second)
    _write_nnunet(formats_folder / "nnunet", {"nnUNetTrainerNoMirroring": second})
    err = _import_error(formats_folder, "nnunet_demo", capsys)
    assert "nnUNetTrainerNoMirroring/summary.json" in err and expected in err, err


def test_nnunet_duplicate_case_missing_label_nan_dice(formats_folder: Path, capsys: pytest.CaptureFixture) -> None:
    path = formats_folder / "nnunet" / "nnUNetTrainer" / "summary.json"
    doc = json.loads(path.read_text())
    doc["metric_per_case"][2]["reference_file"] = doc["metric_per_case"][0]["reference_file"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    err = _import_error(formats_folder, "nnunet_demo", capsys)
    assert "summary.json: metric_per_case[2].reference_file: case 'abd_001' again (first at metric_per_case[0])" in err
    doc = _summary(NNUNET["nnUNetTrainer"])
    del doc["metric_per_case"][1]["metrics"]["2"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert "summary.json: case 'abd_002', metric_per_case[1].metrics.2: missing" in _import_error(formats_folder, "nnunet_demo", capsys)
    doc = _summary(NNUNET["nnUNetTrainer"])
    doc["metric_per_case"][1]["metrics"]["1"]["Dice"] = float("nan")  # NaN where the reference holds the label
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert "summary.json: case 'abd_002', metric_per_case[1].metrics.1.Dice: nan is not a number in [0, 1]" in _import_error(
        formats_folder, "nnunet_demo", capsys
    )


@pytest.mark.parametrize(
    ("fmt", "metrics", "options", "expected"),
    [
        ("challenger_csv", {"dice": True}, {"na_vlaue": {"dice": 0}}, "options: ['na_vlaue'] not options of format 'challenger_csv'"),
        ("challenger_csv", {"dice": True, "nsd": True}, {}, "a challengeR table holds one metric"),
        ("generic_csv", {"dice": True}, {"columns": {"case": "id"}}, "options.columns: missing role(s) ['model', 'structure']"),
        ("generic_csv", {"dice": True}, {"columns": {"case": "c", "model": "m", "structure": "s"}, "structure": "liver"}, "not both"),
        ("generic_csv", {"dice": True}, {"columns": {"case": "c", "model": "m", "organ": "s"}}, "unknown role(s) ['organ']"),
        ("generic_csv", {"dice": True}, {"columns": {"case": "c", "model": "m"}, "structure": "x", "na_value": {"hd95": 0}}, "options.na_value"),
        ("nnunet_summary", {"dice": True, "hd95": False}, {"models": {"a": "a.json"}, "labels": {1: "liver"}}, "metrics ['hd95'] are not in an nnU-Net"),
        ("nnunet_summary", {"dice": True}, {"models": {"a": "../a.json"}, "labels": {1: "liver"}}, "must be relative paths under the set's path"),
        ("nnunet_summary", {"dice": True}, {"models": {"a": "a.json"}}, "options.labels: expected a mapping"),
        ("nnunet_summary", {"dice": True}, {"models": {"a": "a.json"}, "labels": {1: "liver", 2: "liver"}}, "two labels name the same structure"),
        ("touchstone", {"dice": True}, {"labels": {}}, "not options of format 'touchstone'; it takes ['files', 'duplicates', 'one_sided_missing']"),
        ("touchstone", {"dice": True, "nsd": True}, {"duplicates": "last"}, "options.duplicates: must be one of ('error', 'first', 'mean')"),
        ("touchstone", {"dice": True, "nsd": True}, {"one_sided_missing": "zero"}, "options.one_sided_missing: must be one of ('error', 'missing')"),
        ("touchstone", {"dice": True, "hd95": False}, {}, "options.files: metrics ['dice', 'nsd'] must be the set's metrics ['dice', 'hd95']"),
        ("cvpr25_metrics", {"dice": True}, {"duplicates": "first"}, "not options of format 'cvpr25_metrics'"),
    ],
)
def test_published_options_validated(root: Path, fmt: str, metrics: dict[str, bool], options: dict[str, Any], expected: str) -> None:
    raw = compose_params(root / "conf", [])
    raw["published"] = {"users_set": _set(fmt, Path("x"), metrics, options)}
    with pytest.raises(ConfigError, match="published set 'users_set'") as error:
        parse_params(raw, root)
    assert expected in str(error.value)


@pytest.mark.parametrize(
    ("name", "fmt", "metric", "options"),
    [
        ("challenger_demo", "challenger_csv", "dice", {}),
        ("generic_demo", "generic_csv", None, {"columns": {"case": "case", "model": "model", "structure": "structure"}}),
    ],
)
def test_export_then_import_gives_the_same_statistics(formats_folder: Path, name: str, fmt: str, metric: str | None, options: dict[str, Any]) -> None:
    source = formats_folder / ("challenger.csv" if fmt == "challenger_csv" else "generic.csv")
    table = pd.read_csv(source)
    numbers = table.columns[3:] if fmt == "challenger_csv" else table.columns[2:]
    table[numbers] = table[numbers] / 3  # values of 17 significant digits: the export must not round them
    table.to_csv(source, index=False)
    results = published_pipeline(formats_folder, name)
    exported = formats_folder / f"{name}_export.csv"
    argv = ["export", "--dataset", name, "--format", fmt, "--out", str(exported)] + (["--metric", metric] if metric else [])
    with in_directory(formats_folder):
        assert main(argv) == 0
    params = yaml.safe_load((formats_folder / "params.yaml").read_text())
    params["published"]["round_trip"] = {**params["published"][name], "format": fmt, "path": str(exported), "options": options}
    (formats_folder / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    again = published_pipeline(formats_folder, "round_trip")
    assert json.dumps(again["analysis"], sort_keys=True) == json.dumps(results["analysis"], sort_keys=True)
