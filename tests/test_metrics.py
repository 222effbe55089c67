"""The metric table (#68 item 2): every list of metrics derives from it, and each derived list keeps the order and
content it had when it was written out by hand (column order reaches the output files byte for byte)."""

from __future__ import annotations

from segbench import rows, units
from segbench.scoring import engine, instances, settings
from segbench.stats import lesions

#: the literals the derived lists replaced, as they were written before the table
BEFORE_METRICS = ("dice", "iou", "hd", "hd95", "assd", "masd", "nsd")
BEFORE_DETECTION = ("det_precision", "det_recall", "det_f1")
BEFORE_KINDS = {
    **dict.fromkeys(("dice", "iou", "nsd", "det_precision", "det_recall", "det_f1", "precision", "recall", "f1", "rq",
                     "sq_dice", "sq_iou", "pq_dice", "pq_iou", "lesion_dice"), rows.FRACTION),
    **dict.fromkeys(("hd", "hd95", "assd", "masd", "lesion_hd95", "worst_case_value_mm", "nsd_tolerance_mm",
                     "reference_volume_ml", "prediction_volume_ml", "fp_volume_ml", "fn_volume_ml"), rows.MEASURE),
    **dict.fromkeys(("n_reference", "n_prediction", "tp", "fp", "fn", "reference_id"), rows.COUNT),
    **dict.fromkeys(("reference_present", "prediction_present", "prediction_missing", "worst_case"), rows.FLAG),
}


def _unit_before(metric: str) -> str:
    return "mm" if metric.lower().rsplit("_", 1)[-1] in {"hd", "hd95", "assd", "masd"} else ""


def test_derived_lists_keep_their_order_and_content() -> None:
    assert settings.METRICS == BEFORE_METRICS
    assert settings.DETECTION_METRICS == BEFORE_DETECTION
    assert list(settings.HIGHER_IS_BETTER.items()) == [*((m, m in ("dice", "iou", "nsd")) for m in BEFORE_METRICS),
                                                       *((m, True) for m in BEFORE_DETECTION)]
    assert engine.DISTANCE_METRICS == ("hd", "hd95", "assd", "masd")
    assert list(engine.ANALYZED_METRICS.items()) == [("dice", True), ("iou", True), ("nsd", True), ("hd95", False), ("assd", False)]
    assert engine.COLUMNS == ("case_id", "structure", "reference_present", "prediction_present", "prediction_missing", *BEFORE_METRICS,
                              *BEFORE_DETECTION, "worst_case", "worst_case_value_mm", "nsd_tolerance_mm", "hd95_definition", "metric_profile")
    assert instances.INSTANCE_METRICS == BEFORE_METRICS
    assert instances.TABLE_COLUMNS == ("status", "reference_id", "prediction_ids", "reference_volume_ml", "prediction_volume_ml", *BEFORE_METRICS)
    assert list(rows.KINDS.items()) == list(BEFORE_KINDS.items())
    assert rows.PREFIX_KINDS == {"recall_": rows.FRACTION}
    assert list(lesions.CASE_METRICS.items()) == [("rq", True), ("pq_dice", True), ("recall", True), ("lesion_dice", True), ("lesion_hd95", False)]
    assert list(lesions.MATCHED_METRICS.items()) == [("sq_dice", True), ("sq_nsd", True), ("sq_hd95", False)]
    assert list(lesions.LESION_METRICS.items()) == [("dice", True), ("nsd", True), ("hd95", False), ("detected", True)]


def test_unit_is_the_rule_it_was() -> None:
    names = [*BEFORE_KINDS, *lesions.CASE_METRICS, *lesions.MATCHED_METRICS, *lesions.LESION_METRICS, *(f"sq_{m}" for m in BEFORE_METRICS),
             "HD95", "Dice", "DSC_AUC", "NSD_AUC", "DSC_Final", "NSD_Final", "TotalRunningTime", "recall_lt_10ml", "", "x_masd", "hd95_definition"]
    assert {n: units.unit(n) for n in names} == {n: _unit_before(n) for n in names}
