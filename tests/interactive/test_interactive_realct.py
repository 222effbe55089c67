"""End to end: the region-growing baseline through `segbench interact` on the bundle's real CT.

The reference is TotalSegmentator's output on that CT (data/totalseg_example/seg_total.nii.gz), a
PSEUDO-REFERENCE: every table, record and log line must say so. The run is replayed from its
stored predictions: the clicks recomputed from ``all_segs`` must be the recorded ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from repo_paths import ROOT
from segbench.interactive import cases, harness, protocol

EXAMPLE = ROOT / "data" / "totalseg_example"
ORGANS = {"spleen": 1, "kidney_right": 2, "kidney_left": 3, "liver": 5}  # TotalSegmentator v2 ids


def test_region_growing_on_the_real_ct(tmp_path: Path) -> None:
    folder = tmp_path / "cases"
    manifest = cases.convert(
        [("ct_sm", EXAMPLE / "ct_sm.nii.gz", EXAMPLE / "seg_total.nii.gz")],
        ORGANS,
        folder,
        seed=2025,
        reference="pseudo",
        note="TotalSegmentator 'total' output, not a manual annotation",
    )
    assert [c["name"] for c in manifest["cases"]["ct_sm"]["classes"]] == ["spleen", "kidney_right", "kidney_left", "liver"]
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "segbench.cli",
            "interact",
            "--cases",
            str(folder),
            "--model",
            "region_growing",
            "--out",
            str(out),
            "--conf",
            str(ROOT / "conf"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "PSEUDO-REFERENCE" in result.stderr
    table = pd.read_csv(out / "metrics.csv")
    row = table.iloc[0]
    assert list(table.columns) == [*harness.COLUMNS, *harness.EXTRA_COLUMNS] and row["reference"] == "PSEUDO-REFERENCE"
    assert row["num_class"] == 4 and not row["over_time"] and pd.isna(row["failed_steps"])  # no step failed
    assert 0.0 <= row["DSC_AUC"] <= 4.0 and row["DSC_Final"] > 0.5  # the baseline reaches Dice > 0.5 against the pseudo-reference
    record = json.loads((out / "records" / "ct_sm.json").read_text())
    assert record["reference"] == "PSEUDO-REFERENCE" and json.loads((out / "run.json").read_text())["reference"] == "PSEUDO-REFERENCE"
    # replay: the clicks follow from the stored predictions and the reference alone
    case = cases.load_case("ct_sm", folder / "imgs" / "ct_sm.npz", folder / "gts" / "ct_sm.npz")
    with np.load(out / "segs" / "ct_sm.npz") as saved:
        all_segs = saved["all_segs"]
    assert all_segs.shape == (6, *case.gts.shape)
    for step in range(2, 7):
        replayed = protocol.step_clicks(all_segs[step - 2], case.gts, case.n_classes)
        assert [None if c is None else {"kind": c.kind, "zyx": list(c.zyx)} for c in replayed] == record["steps"][step - 1]["clicks"]
    dice, _ = protocol.class_scores(all_segs[-1], case.gts, case.n_classes, case.spacing)
    assert float(np.mean(dice)) == row["DSC_Final"]
