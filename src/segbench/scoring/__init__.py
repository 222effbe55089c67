"""Scoring engine: the metrics of docs/methodology.md#3-metric-conventions per case and region under a metric-definition profile, fast and parallel.

The names a configuration needs (regions, metric names, profile names, the lesion setting) live in the light
``settings`` module and are imported here directly; the engine's names load on first use (PEP 562), so importing
``segbench.scoring.settings`` or this package does not load numba.
"""

from __future__ import annotations

import importlib
from typing import Any

from segbench.scoring.settings import DEFAULT_PROFILE, DETECTION_METRICS, HIGHER_IS_BETTER, METRICS, LesionSetting, Region

#: the engine's public names by the module that defines them, imported on first access
_LAZY = {
    "COLUMNS": "engine", "HD95_DEFINITION": "engine", "score_case": "engine", "score_cases": "engine",
    "GeometryError": "geometry", "check_same_grid": "geometry", "resample_to_reference": "geometry",
    "score_lesion_cases": "lesionwise", "score_cases_and_lesions": "lesionwise",
    "PROFILES": "profiles", "get_profile": "profiles",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


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
    "score_cases_and_lesions",
    "score_lesion_cases",
]
