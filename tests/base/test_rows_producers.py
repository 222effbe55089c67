"""Every producer of per-case rows writes a table the rows contract (``segbench.base.rows``) accepts: the scoring engine (rows
under every profile, the lesion-wise tables), each published set's reader on the real bundle, and a score bundle read
back. The contract is checked where rows enter (``check_rows``); this test holds each producer to it on real output,
so a producer that starts writing a value out of its column's range fails here, not at a reader's door."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from repo_paths import ROOT
from segbench.base import rows
from segbench.config.params import load_params
from segbench.published import readers as published
from segbench.scoring.lesionwise import score_cases_and_lesions
from segbench.scoring.profiles import PROFILES
from segbench.scoring.settings import LesionSetting, Region, lesion_structures
from segbench.tracking import runs as tracking

REGIONS = [Region("kidney", (1, 2), 2.0), Region("tumor", (2,), 2.0, detection=True)]


def _case(folder: Path, name: str, labels: np.ndarray) -> Path:
    path = folder / f"{name}.nii.gz"
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), np.diag([0.8, 0.8, 1.5, 1.0])), path)
    return path


@pytest.fixture(scope="module")
def engine_tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The engine's rows, lesion table and per-lesion table of three cases: a close prediction, a missed tumour and a
    missing prediction (the worst case), under every profile."""
    folder = tmp_path_factory.mktemp("cases")
    reference = np.zeros((40, 36, 24), np.uint8)
    reference[8:30, 6:28, 4:20] = 1
    reference[12:18, 10:16, 8:12] = 2
    reference[22:26, 20:24, 14:17] = 2
    close = np.roll(reference, 1, axis=0)
    missed = np.where(reference == 2, 1, reference)
    cases = [
        ("close", _case(folder, "ref_close", reference), _case(folder, "pred_close", close)),
        ("missed", _case(folder, "ref_missed", reference), _case(folder, "pred_missed", missed)),
        ("absent", _case(folder, "ref_absent", reference), None),
    ]
    setting = LesionSetting(lesion_structures({"kidney": 1, "tumor": 2}, ["tumor"]), "brats", ("panoptica",), (1.0,))
    names = list(PROFILES)
    return score_cases_and_lesions(cases, REGIONS, setting, progress=False, allowed_labels={0, 1, 2}, profile=names[0], extra_profiles=names[1:])


def test_the_engines_rows_under_every_profile_keep_the_contract(engine_tables: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
    table, lesion_rows, instance_rows = engine_tables
    assert table["metric_profile"].nunique() > 1 and table["worst_case"].any()  # every profile; the missing prediction
    for name, produced in (("rows", table), ("lesion table", lesion_rows), ("per-lesion table", instance_rows)):
        assert not produced.empty, name
        assert rows.row_problems(produced, file_lines=False) == [], name
        assert [c for c in produced.columns if rows.kind(str(c)) is not None], f"{name}: no column the contract checks"


def test_a_score_bundle_written_and_read_back_keeps_the_contract(engine_tables: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    table = engine_tables[0].assign(model="toy", kind="simulated")
    record = {
        "tags": {key: "toy" for key in tracking.REQUIRED_RECORD["tags"]},
        "params": {key: "toy" for key in tracking.REQUIRED_RECORD["params"]},
        "metrics": {},
    }
    written = tracking.ScoreBundle.write(tmp_path / "toy", table, record)
    read = tracking.ScoreBundle.read(tmp_path / "toy")
    assert read.per_case_csv == written.per_case_csv
    broken = table.copy()
    broken.loc[0, "dice"] = 1.5  # out of its range: never written
    with pytest.raises(rows.RowsError, match=r"column 'dice': 1\.5 is not a number in \[0, 1\]"):
        tracking.ScoreBundle.write(tmp_path / "broken", broken, record)
    assert not (tmp_path / "broken" / tracking.PER_CASE_ARTIFACT).exists()


@pytest.mark.parametrize("name", sorted(load_params(ROOT / "params.yaml").published))
def test_each_published_readers_rows_keep_the_contract(name: str) -> None:
    params = load_params(ROOT / "params.yaml")
    source = params.published_set(name)
    if not Path(source.path).exists():
        pytest.skip(f"{source.path}: the data bundle is not pulled (`dvc pull data.dvc`)")
    produced = published.read_set(source)
    assert not produced.empty and rows.row_problems(produced, file_lines=False) == []
