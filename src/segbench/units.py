"""A metric's unit and the decimals its values print with: one convention for the score stage's MLflow run records
(``segbench.stages.bundles``) and every view of the statistics (``segbench.stats.verdicts``)."""

from segbench.metrics import metric as table_row


def unit(metric: str) -> str:
    """The unit of a metric's values, from the metric table (``segbench.metrics``): 'mm' for surface distances, '' for
    overlap scores in [0, 1]; a name the table does not hold takes the unit of the metric after its last '_' (``sq_hd``:
    the SQ of ``hd``), '' if that is none either (the interactive protocol's ``DSC_AUC``)."""
    name = metric.lower()
    row = table_row(name) or table_row(name.rsplit("_", 1)[-1])
    return row.unit if row else ""


def base_digits(higher_is_better: bool) -> int:
    """Decimals for a metric's values: 3 for overlap scores in [0, 1], 2 for distances in mm."""
    return 3 if higher_is_better else 2
