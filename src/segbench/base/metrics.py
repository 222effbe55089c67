"""The metric table: each metric once, with which way is better, its unit, its range rule, what scores it and whether
the leaderboard analyses it. Every list of metrics derives from it: the scored metrics and their directions
(``scoring.settings``), the rows table's columns and leaderboard metrics (``scoring.engine``), the per-lesion metrics
(``scoring.instances``), the lesion analysis's directions (``stats.lesions``), a metric's unit (``formats``) and the range
rule of its column (``rows.KINDS``). Adding a metric is one row of ``TABLE`` plus its computation
(docs/architecture.md#where-a-new-thing-goes).

Light on purpose (no numpy, pandas or numba): the configuration imports it through ``scoring.settings``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a share of cases, voxels or lesions: a number in [0, 1]
FRACTION = "fraction"
#: a distance or volume (mm, mL): a finite number >= 0 (a missing or empty mask scores the case's worst distance,
#: the diagonal of its reference grid: finite too, docs/methodology.md#4-empty-masks-and-missing-predictions)
MEASURE = "measure"
#: a count (lesions, instances, a label id): a whole number >= 0
COUNT = "count"
#: a flag of the row (True or False)
FLAG = "flag"

#: scored per region of a label map by ``scoring.engine`` (its surface distances by the metric-definition profile);
#: each lesion of the per-lesion table has them too (``scoring.instances``)
REGION = "region"
#: scored per detection region (``Region.detection``) by ``scoring.engine``
DETECTION = "detection"
#: lesion-wise: a case's lesion-wise score (``scoring.instances.case_scores``) or a lesion's (``stats.lesions``)
LESION = "lesion"


@dataclass(frozen=True)
class Metric:
    """One metric: its column's name, whether higher is better, the unit its values print with ('' for a fraction),
    the range rule of its column (``rows.KINDS``; None: no rule, its column is checked nowhere), what scores it
    (``REGION``, ``DETECTION``, ``LESION``) and whether a dataset's leaderboards analyse it (and its MLflow runs'
    headline means)."""

    name: str
    higher_is_better: bool
    unit: str
    kind: str | None
    family: str
    analysed: bool = False


#: every metric; within a family, the order of its columns in the rows table
TABLE: tuple[Metric, ...] = (
    Metric("dice", True, "", FRACTION, REGION, analysed=True),
    Metric("iou", True, "", FRACTION, REGION, analysed=True),
    Metric("hd", False, "mm", MEASURE, REGION),
    Metric("hd95", False, "mm", MEASURE, REGION, analysed=True),
    Metric("assd", False, "mm", MEASURE, REGION, analysed=True),
    Metric("masd", False, "mm", MEASURE, REGION),
    Metric("nsd", True, "", FRACTION, REGION, analysed=True),
    Metric("det_precision", True, "", FRACTION, DETECTION),
    Metric("det_recall", True, "", FRACTION, DETECTION),
    Metric("det_f1", True, "", FRACTION, DETECTION),
    Metric("precision", True, "", FRACTION, LESION),
    Metric("recall", True, "", FRACTION, LESION),
    Metric("f1", True, "", FRACTION, LESION),
    Metric("rq", True, "", FRACTION, LESION),
    Metric("sq_dice", True, "", FRACTION, LESION),
    Metric("sq_iou", True, "", FRACTION, LESION),
    # SQ of NSD and HD95: analysed (``stats.lesions``) but given no range rule when the rows check was written
    Metric("sq_nsd", True, "", None, LESION),
    Metric("sq_hd95", False, "mm", None, LESION),
    Metric("pq_dice", True, "", FRACTION, LESION),
    Metric("pq_iou", True, "", FRACTION, LESION),
    Metric("lesion_dice", True, "", FRACTION, LESION),
    Metric("lesion_hd95", False, "mm", MEASURE, LESION),
    # a reference lesion found (1) or missed (0): derived by the lesion analysis from the per-lesion table's status
    Metric("detected", True, "", None, LESION),
)


def metric(name: str) -> Metric | None:
    """The row of ``name``, None for a name the table does not hold."""
    return next((m for m in TABLE if m.name == name), None)


def names(family: str | None = None, *, kind: str | None = None, unit: str | None = None) -> tuple[str, ...]:
    """The metrics of ``family`` (all without it), of range ``kind`` and ``unit`` if given, in table order."""
    return tuple(m.name for m in TABLE if family in (None, m.family) and kind in (None, m.kind) and unit in (None, m.unit))


def directions(metric_names: tuple[str, ...] | list[str]) -> dict[str, bool]:
    """Each of ``metric_names`` (in their order) -> whether higher is better; a KeyError for a name not in the table."""
    table = {m.name: m.higher_is_better for m in TABLE}
    return {name: table[name] for name in metric_names}


def analysed() -> dict[str, bool]:
    """The metrics a dataset's leaderboards analyse -> whether higher is better: those where higher is better first,
    then the others (distances), each in table order."""
    chosen = [m for m in TABLE if m.analysed]
    return {m.name: m.higher_is_better for m in (*(m for m in chosen if m.higher_is_better), *(m for m in chosen if not m.higher_is_better))}
