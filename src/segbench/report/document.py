"""The results document's parts as every view names them: ``Results`` (a results file), ``Models`` (its model
entries) and ``Cell`` (one structure and metric of its analysis), typed level by level in ``segbench.stats.results``."""

from __future__ import annotations

from segbench.stats.results import (
    MetricCell,
    ModelEntry,
    ResultsDocument,
)

Cell = MetricCell  # analysis.structures.<s>.metrics.<m>


Models = dict[str, ModelEntry]  # results["models"]


Results = ResultsDocument
