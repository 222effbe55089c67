"""A metric's unit and the decimals its values print with: one convention for the score stage's MLflow run records
(``segbench.stages.bundles``) and every view of the statistics (``segbench.stats.verdicts``)."""

_DISTANCES_MM = frozenset({"hd", "hd95", "assd", "masd"})


def unit(metric: str) -> str:
    """The unit of a metric's values: 'mm' for surface distances (also the lesion-wise ones, ``lesion_hd95``,
    ``sq_hd95``), '' for overlap scores in [0, 1]."""
    return "mm" if metric.lower().rsplit("_", 1)[-1] in _DISTANCES_MM else ""


def base_digits(higher_is_better: bool) -> int:
    """Decimals for a metric's values: 3 for overlap scores in [0, 1], 2 for distances in mm."""
    return 3 if higher_is_better else 2
