"""Scoring engine: the metrics of docs/methodology.md#3-metric-conventions per case and region, segauge's definitions, fast and parallel."""

from segbench.scoring.engine import (
    COLUMNS,
    DETECTION_METRICS,
    HD95_DEFINITION,
    HIGHER_IS_BETTER,
    METRICS,
    Region,
    score_case,
    score_cases,
)
from segbench.scoring.geometry import GeometryError, check_same_grid, resample_to_reference

__all__ = [
    "COLUMNS",
    "DETECTION_METRICS",
    "GeometryError",
    "HD95_DEFINITION",
    "HIGHER_IS_BETTER",
    "METRICS",
    "Region",
    "check_same_grid",
    "resample_to_reference",
    "score_case",
    "score_cases",
]
