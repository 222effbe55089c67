"""Interactive data at the boundary: the DICOM series reader, the params of interactive datasets and models, and
the challenge's published `<team>_metrics.csv` tables imported as a published set (real files, real MLflow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
import yaml

from repo_paths import TOTALSEG_EXAMPLE
from segbench.cli import main
from segbench.config.params import ConfigError, parse_params
from segbench.config.validation import compose_params
from segbench.datasets.dicom_series import DicomSeriesError, read_series
from segbench.interactive import scores
from tests_support import in_directory

EXAMPLE = TOTALSEG_EXAMPLE


def test_dicom_series_lies_on_the_grid_of_totalsegmentators_output() -> None:
    image = read_series(EXAMPLE / "ct_dicom")
    reference = nib.load(EXAMPLE / "seg_dicom.nii.gz")
    assert image.shape == reference.shape == (512, 512, 20)
    np.testing.assert_allclose(image.affine, reference.affine, atol=1e-4)
    hu, labels = np.asarray(image.dataobj), np.asarray(reference.dataobj)
    # contrast-enhanced liver is soft tissue (about +50..+150 HU); with the rows in stored order it would be mostly fat and air
    assert 50 < hu[labels == 5].mean() < 150
    assert hu[:, ::-1][labels == 5].mean() < 0
    assert hu.min() == -1024  # RescaleIntercept applied


def test_dicom_series_errors_name_the_file(tmp_path: Path) -> None:
    series = tmp_path / "series"
    shutil.copytree(EXAMPLE / "ct_dicom", series)
    (series / "notes.txt").write_text("not a slice")
    with pytest.raises(DicomSeriesError, match="notes.txt: not a readable DICOM"):
        read_series(series)
    (series / "notes.txt").unlink()
    for path in sorted(series.iterdir())[5:6]:
        path.unlink()  # a missing slice: the positions are no longer evenly spaced
    with pytest.raises(DicomSeriesError, match="not evenly spaced"):
        read_series(series)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DicomSeriesError, match="empty: no files"):
        read_series(tmp_path / "empty")


def test_interactive_params_are_checked(root: Path) -> None:
    raw = compose_params(root / "conf")
    params = parse_params(raw, root)
    assert params.interactive_dataset("totalseg_example").reference == "pseudo"
    assert set(params.interactive_models) == {"region_growing", "litemedsam"}
    # the composition itself is validated, as `dvc exp run -S` composes it
    with pytest.raises(ConfigError, match="region_growing.*interactive_model"):
        compose_params(root / "conf", ["model=[sim_dilate_1mm,region_growing]"])
    with pytest.raises(ConfigError, match="interactive_model takes kind 'interactive' only"):
        compose_params(root / "conf", ["model@interactive_model=[sim_dilate_1mm]"])
    raw["interactive_dataset"]["totalseg_example"]["cases"]["ct"]["image"] = "data/kits23/labels/case_00000.nii.gz"
    with pytest.raises(ConfigError, match="not under data_dir"):
        parse_params(raw, root)
    raw["interactive_dataset"]["totalseg_example"]["reference"] = "silver"
    with pytest.raises(ConfigError, match="reference must be one of"):
        parse_params(raw, root)


def _team_table(dsc: list[list[float]], seconds: list[float]) -> pd.DataFrame:
    """A `<team>_metrics.csv` of the challenge's layout; NSD = DSC / 2 so both are known by hand."""
    rows = []
    for i, (curve, time) in enumerate(zip(dsc, seconds)):
        y = np.asarray(curve)
        rows.append(
            {
                "CaseName": f"case_{i}.npz",
                "TotalRunningTime": time,
                "DSC_AUC": float(((y[2:] + y[1:-1]) / 2).sum()),
                "NSD_AUC": float(((y[2:] + y[1:-1]) / 4).sum()),
                "DSC_Final": y[-1],
                "NSD_Final": y[-1] / 2,
                **{f"DSC_{s}": v for s, v in enumerate(y, 1)},
                **{f"NSD_{s}": v / 2 for s, v in enumerate(y, 1)},
                **{f"RunningTime_{s}": time / 6 for s in range(1, 7)},
                "num_class": 1,
                "runtime_upperbound": 90,
            }
        )
    return pd.DataFrame(rows)


@pytest.fixture
def cvpr25_folder(tmp_path: Path, root: Path, tracking_store: str) -> Path:
    folder = tmp_path / "cvpr25"
    folder.mkdir()
    rising = [[0.5, 0.6, 0.7, 0.8, 0.85, 0.9], [0.4, 0.5, 0.6, 0.7, 0.8, 0.9], [0.6, 0.6, 0.7, 0.7, 0.8, 0.8], [0.3, 0.5, 0.6, 0.6, 0.7, 0.8]]
    flat = [[0.5] * 6, [0.4] * 6, [0.6] * 6, [0.3] * 6]
    _team_table(rising, [40, 50, 45, 60]).to_csv(folder / "team_a_metrics.csv", index=False)
    _team_table(flat, [20, 25, 22, 30]).to_csv(folder / "team_b_metrics.csv", index=False)
    raw = compose_params(root / "conf", ["stats.n_resamples=200", "published=[]"])
    raw["published"] = {
        "cvpr25_demo": {
            "title": "Two teams' published tables (hand-made for this test)",
            "format": "cvpr25_metrics",
            "path": str(folder),
            "evaluated_on": "cvpr25_demo",
            "source": "test tables",
            "metrics": scores.METRICS,
        }
    }
    for spec in raw["dataset"].values():
        for key in ("reference_dir", "metadata_file"):
            if spec.get(key):
                spec[key] = str(root / spec[key])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    (tmp_path / "data.dvc").write_text((root / "data.dvc").read_text(), encoding="utf-8")
    return tmp_path


def test_published_challenge_tables_go_through_the_statistics(cvpr25_folder: Path) -> None:
    with in_directory(cvpr25_folder):
        for argv in (["import", "--published", "cvpr25_demo"], ["track", "--dataset", "cvpr25_demo"], ["compare", "--dataset", "cvpr25_demo"]):
            assert main(argv) == 0, argv
    results = json.loads((cvpr25_folder / "results" / "cvpr25_demo.json").read_text())
    block = results["analysis"]["structures"]["mean_over_classes"]
    auc = block["metrics"]["DSC_AUC"]
    # team_a's AUC by hand: case 0 = (0.6+0.7)/2 + (0.7+0.8)/2 + (0.8+0.85)/2 + (0.85+0.9)/2 = 3.1
    assert auc["models"]["team_a"]["mean"] == pytest.approx(np.mean([3.1, 2.8, 2.9, 2.55]))
    assert auc["models"]["team_b"]["mean"] == pytest.approx(4 * np.mean([0.5, 0.4, 0.6, 0.3]))
    assert auc["ranking"]["order"][0] == "team_a"
    assert block["metrics"]["TotalRunningTime"]["ranking"]["order"][0] == "team_b"  # lower is better
    assert results["models"]["team_a"]["kind"] == "published"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop(columns="NSD_AUC"), r"missing column\(s\) \['NSD_AUC'\]"),
        (lambda t: t.assign(DSC_3=[0.5, "n/a", 0.5, 0.5]), "case 'case_1.npz', column 'DSC_3': 'n/a' is not a finite number"),
        (lambda t: t.assign(DSC_Final=[0.5, 1.5, 0.5, 0.5]), "column 'DSC_Final': 1.5 outside 0..1"),
        (lambda t: t.assign(CaseName=["a.npz", "a.npz", "b.npz", "c.npz"]), "case 'a.npz' appears more than once"),
    ],
)
def test_malformed_published_tables_are_errors_naming_the_file(cvpr25_folder: Path, change, message: str) -> None:
    path = cvpr25_folder / "cvpr25" / "team_b_metrics.csv"
    change(pd.read_csv(path)).to_csv(path, index=False)
    from segbench.published.readers import read_cvpr25_metrics

    with pytest.raises(ValueError, match=f"team_b_metrics.csv: .*{message}"):
        read_cvpr25_metrics(cvpr25_folder / "cvpr25")


def test_published_tables_must_list_the_same_cases(cvpr25_folder: Path) -> None:
    path = cvpr25_folder / "cvpr25" / "team_b_metrics.csv"
    pd.read_csv(path).iloc[:3].to_csv(path, index=False)
    from segbench.published.readers import read_cvpr25_metrics

    with pytest.raises(ValueError, match=r"team_b_metrics.csv: cases differ from team_a_metrics.csv's: missing \['case_3'\]"):
        read_cvpr25_metrics(cvpr25_folder / "cvpr25")


def test_tables_of_the_older_protocol_need_their_version(cvpr25_folder: Path) -> None:
    """Before 2025-03-25 the challenge's AUC took the box step too (up to 5): such a table is refused under the final
    version's bound of 4, and read with options.protocol_version 2025-03-04, its rows naming that scoring."""
    from segbench.interactive.protocol import Scoring
    from segbench.published.readers import read_cvpr25_metrics

    for path in (cvpr25_folder / "cvpr25").glob("*_metrics.csv"):
        table = pd.read_csv(path)
        table.loc[0, [f"DSC_{s}" for s in range(1, 7)]] = 0.95  # case 0 at 0.95 from the box step on
        dsc = table[[f"DSC_{s}" for s in range(1, 7)]].to_numpy()
        table["DSC_AUC"] = ((dsc[:, 1:] + dsc[:, :-1]) / 2).sum(axis=1)  # all 6 steps at x = 0..5
        table.to_csv(path, index=False)
    with pytest.raises(ValueError, match="team_a_metrics.csv: case 'case_0.npz', column 'DSC_AUC': 4.75 outside 0..4"):
        read_cvpr25_metrics(cvpr25_folder / "cvpr25")
    rows = read_cvpr25_metrics(cvpr25_folder / "cvpr25", Scoring("2025-03-04")).set_index(["model", "case_id"])
    # team_a, case 1: (0.4+0.5)/2 + 2.8 (its click steps, above) = 3.25; case 0: 5 x 0.95
    assert rows.loc[("team_a", "case_1"), "DSC_AUC"] == pytest.approx(3.25)
    assert rows.loc[("team_a", "case_0"), "DSC_AUC"] == pytest.approx(4.75)
    assert set(rows["metric_profile"]) == {"cvpr25_interactive 2025-03-04 (NSD: deepmind_surfel_area_weighted (the challenge's SurfaceDice.py))"}
    raw = yaml.safe_load((cvpr25_folder / "params.yaml").read_text())
    raw["published"]["cvpr25_demo"]["options"] = {"protocol_version": "2025-03"}
    with pytest.raises(ConfigError, match="published set 'cvpr25_demo'.*protocol_version must be one of 2025-03-25, 2025-03-04, got '2025-03'"):
        parse_params(raw, cvpr25_folder)


def test_convert_command_takes_a_dicom_series(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cases"
    argv = [
        "convert",
        "--images",
        str(EXAMPLE / "ct_dicom"),
        "--labels",
        str(EXAMPLE / "seg_dicom.nii.gz"),
        "--structures",
        "liver=5",
        "spleen=1",
        "kidney_left=3",
        "--out",
        str(out),
        "--reference",
        "pseudo",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == "ct_dicom: spleen, liver"  # ascending label order; no kidney in this series
    with np.load(out / "imgs" / "ct_dicom.npz", allow_pickle=True) as case:
        assert case["imgs"].shape == (20, 512, 512) and case["imgs"].dtype == np.int16
        np.testing.assert_allclose(case["spacing"], [2.0, 0.9765625, 0.9765625])
        assert len(case["boxes"]) == 2
    assert json.loads((out / "cases.json").read_text())["reference"] == "pseudo"
    assert main([*argv[:5], "--structures", "liver", "--out", str(tmp_path / "other")]) == 1
    assert "expected NAME=LABEL_ID" in capsys.readouterr().err
