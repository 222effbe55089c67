"""Scoring engine: the metrics of docs/methodology.md#3-metric-conventions per case and region under a metric-definition profile, fast and parallel."""

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
from segbench.scoring.lesionwise import LesionSetting, score_lesion_cases
from segbench.scoring.profiles import DEFAULT_PROFILE, PROFILES, get_profile

__all__ = [
    "COLUMNS",
    "DEFAULT_PROFILE",
    "DETECTION_METRICS",
    "GeometryError",
    "HD95_DEFINITION",
    "HIGHER_IS_BETTER",
    "LesionSetting",
    "METRICS",
    "PROFILES",
    "Region",
    "check_same_grid",
    "get_profile",
    "resample_to_reference",
    "score_case",
    "score_cases",
    "score_lesion_cases",
]
