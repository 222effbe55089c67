"""The metric table (#68 item 2): every list of metrics derives from it, and each derived list keeps the order and
content it had when it was written out by hand (column order reaches the output files byte for byte)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from repo_paths import SRC
from segbench.base import formats, rows
from segbench.scoring import engine, instances, settings
from segbench.stats import lesions

#: the literals the derived lists replaced, as they were written before the table
BEFORE_METRICS = ("dice", "iou", "hd", "hd95", "assd", "masd", "nsd")
BEFORE_DETECTION = ("det_precision", "det_recall", "det_f1")
BEFORE_KINDS = {
    **dict.fromkeys(
        (
            "dice",
            "iou",
            "nsd",
            "det_precision",
            "det_recall",
            "det_f1",
            "precision",
            "recall",
            "f1",
            "rq",
            "sq_dice",
            "sq_iou",
            "pq_dice",
            "pq_iou",
            "lesion_dice",
        ),
        rows.FRACTION,
    ),
    **dict.fromkeys(
        (
            "hd",
            "hd95",
            "assd",
            "masd",
            "lesion_hd95",
            "worst_case_value_mm",
            "nsd_tolerance_mm",
            "reference_volume_ml",
            "prediction_volume_ml",
            "fp_volume_ml",
            "fn_volume_ml",
        ),
        rows.MEASURE,
    ),
    **dict.fromkeys(("n_reference", "n_prediction", "tp", "fp", "fn", "reference_id"), rows.COUNT),
    **dict.fromkeys(("reference_present", "prediction_present", "prediction_missing", "worst_case"), rows.FLAG),
}


def _unit_before(metric: str) -> str:
    return "mm" if metric.lower().rsplit("_", 1)[-1] in {"hd", "hd95", "assd", "masd"} else ""


def test_derived_lists_keep_their_order_and_content() -> None:
    assert settings.METRICS == BEFORE_METRICS
    assert settings.DETECTION_METRICS == BEFORE_DETECTION
    assert list(settings.HIGHER_IS_BETTER.items()) == [*((m, m in ("dice", "iou", "nsd")) for m in BEFORE_METRICS), *((m, True) for m in BEFORE_DETECTION)]
    assert engine.DISTANCE_METRICS == ("hd", "hd95", "assd", "masd")
    assert list(engine.ANALYZED_METRICS.items()) == [("dice", True), ("iou", True), ("nsd", True), ("hd95", False), ("assd", False)]
    assert engine.COLUMNS == (
        "case_id",
        "structure",
        "reference_present",
        "prediction_present",
        "prediction_missing",
        *BEFORE_METRICS,
        *BEFORE_DETECTION,
        "worst_case",
        "worst_case_value_mm",
        "nsd_tolerance_mm",
        "hd95_definition",
        "metric_profile",
    )
    assert instances.INSTANCE_METRICS == BEFORE_METRICS
    assert instances.TABLE_COLUMNS == ("status", "reference_id", "prediction_ids", "reference_volume_ml", "prediction_volume_ml", *BEFORE_METRICS)
    assert list(rows.KINDS.items()) == list(BEFORE_KINDS.items())
    assert rows.PREFIX_KINDS == {"recall_": rows.FRACTION}
    assert list(lesions.CASE_METRICS.items()) == [("rq", True), ("pq_dice", True), ("recall", True), ("lesion_dice", True), ("lesion_hd95", False)]
    assert list(lesions.MATCHED_METRICS.items()) == [("sq_dice", True), ("sq_nsd", True), ("sq_hd95", False)]
    assert list(lesions.LESION_METRICS.items()) == [("dice", True), ("nsd", True), ("hd95", False), ("detected", True)]


def test_unit_is_the_rule_it_was() -> None:
    names = [
        *BEFORE_KINDS,
        *lesions.CASE_METRICS,
        *lesions.MATCHED_METRICS,
        *lesions.LESION_METRICS,
        *(f"sq_{m}" for m in BEFORE_METRICS),
        "HD95",
        "Dice",
        "DSC_AUC",
        "NSD_AUC",
        "DSC_Final",
        "NSD_Final",
        "TotalRunningTime",
        "recall_lt_10ml",
        "",
        "x_masd",
        "hd95_definition",
    ]
    assert {n: formats.unit(n) for n in names} == {n: _unit_before(n) for n in names}


#: a toy metric added the way docs/architecture.md says: one row of the table (set before any module derives its
#: lists from it) plus its computation (here the distance between the two masks' centroids, hooked after a region's
#: other metrics); everything else follows from the row
TOY = r"""
import math
from pathlib import Path

import segbench.base.metrics as metrics
metrics.TABLE = (*metrics.TABLE, metrics.Metric("centroid_mm", False, "mm", metrics.MEASURE, metrics.REGION, analysed=True))

import nibabel as nib
import numpy as np
import pandas as pd

from segbench.base import formats, rows as rows_table
from segbench.scoring import engine, instances, settings
from segbench.stages.bundles import headline_metrics

scored = engine._score_region


def with_centroid(ref, pred, spacing, region, row, worst, profile, sd=None):
    row, sd = scored(ref, pred, spacing, region, row, worst, profile, sd)
    if row["reference_present"] and row["prediction_present"]:
        gap = np.subtract(np.argwhere(pred).mean(axis=0), np.argwhere(ref).mean(axis=0)) * spacing
        row = row | {"centroid_mm": float(np.sqrt((gap ** 2).sum()))}
    return row, sd


engine._score_region = with_centroid
folder = Path(__import__("sys").argv[1])
reference = np.zeros((12, 16, 16), np.uint8)
reference[3:9, 4:10, 4:10] = 1
for name, labels in (("ref", reference), ("pred", np.roll(reference, 2, axis=1))):
    nib.save(nib.Nifti1Image(labels, np.diag([1.5, 1.0, 1.0, 1.0])), folder / f"{name}.nii.gz")
regions = [settings.Region("kidney", (1,), 1.0), settings.Region("cyst", (2,), 1.0)]
shifted = {r["structure"]: r for r in engine.score_case("c1", folder / "ref.nii.gz", folder / "pred.nii.gz", regions)}
missing = {r["structure"]: r for r in engine.score_case("c2", folder / "ref.nii.gz", None, regions)}

# named and directed where the configuration looks (the calibration audit's metrics), a column of the rows table
assert settings.METRICS[-1] == "centroid_mm" and settings.HIGHER_IS_BETTER["centroid_mm"] is False
assert engine.COLUMNS.index("centroid_mm") == engine.COLUMNS.index("nsd") + 1 == engine.COLUMNS.index("det_precision") - 1
assert instances.INSTANCE_METRICS[-1] == "centroid_mm" and "centroid_mm" in instances.TABLE_COLUMNS
# its computation, and the empty-mask rules of a distance: the case's worst on a missing prediction, 0 with both empty
assert shifted["kidney"]["centroid_mm"] == 2.0, shifted["kidney"]
assert missing["kidney"]["centroid_mm"] == missing["kidney"]["worst_case_value_mm"] > 0
assert shifted["cyst"]["centroid_mm"] == 0.0
# on the leaderboard, after the other distances; its headline mean rounded as a distance, printed with its unit
assert list(engine.ANALYZED_METRICS.items())[-3:] == [("hd95", False), ("assd", False), ("centroid_mm", False)]
table = pd.DataFrame([*shifted.values(), *missing.values()]).assign(model="toy")
assert headline_metrics(table, engine.ANALYZED_METRICS)["toy"]["kidney.centroid_mm.mean"] == round((2.0 + missing["kidney"]["worst_case_value_mm"]) / 2, 2)
assert formats.unit("centroid_mm") == "mm" and formats.format_estimate(2.0, 1.5, 2.5, "centroid_mm", False) == "2.00 [1.50, 2.50] mm"
# and the rows check holds it to a distance's range
assert rows_table.KINDS["centroid_mm"] == metrics.MEASURE
rows_table.check_rows(table, "toy.csv", "fix")
try:
    rows_table.check_rows(table.assign(centroid_mm=-1.0), "toy.csv", "fix")
    raise AssertionError("a negative distance passed the rows check")
except rows_table.RowsError as refused:
    assert "column 'centroid_mm': -1.0 is not a finite number >= 0" in str(refused), refused
print("toy metric flows")
"""


def test_a_toy_metric_is_one_table_row_plus_its_computation(tmp_path: Path) -> None:
    """Adding a metric is one row of ``segbench.base.metrics.TABLE`` plus its computation: in a fresh interpreter whose table
    holds one more row, the toy is a scored metric with its direction, a column of the rows table in its place, scored
    by the empty-mask rules of a distance, analysed on the leaderboard, shown with its unit and checked in its range."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", TOY, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "toy metric flows"
