"""Statistics engine (docs/methodology.md#5-statistics-protocol): estimates, ranking stability, pairwise tests, subgroups, power.

The public API is ``StatsSettings``, ``analyze``, ``reanalyze`` and ``recompute``, ``read_results`` (a results file
checked against its layout), ``model_entry`` (a board's model entry), ``beside_source`` (a
source's published analysis beside segbench's), ``sensitivity`` (the analysis under other metric definitions
and missing-value policies), ``lesion_analysis`` (lesion-wise scores by case and by lesion), ``identical_to_reference`` (per model, the cases
it left identical to the reference), ``audited`` (the calibration audit's rates for a leaderboard cell), ``level_provider`` (the level of a board's CIs the
audit calibrated), and the DVC views
``leaderboard_heads`` and ``mean_ci_rows``;
see ``segbench.stats.results`` for the layout of the results dict.
"""

from .analysis import CiLevels, analyze
from .audited import LESIONS as audited_lesions
from .audited import MARGIN as AUDIT_MARGIN
from .audited import AuditTables, BoardCell, audited, level_provider, population_data
from .audited import board as audited_board
from .calibration import SIMULATED
from .heads import PLOT_COLUMNS, leaderboard_heads, mean_ci_rows
from .identical import identical_to_reference
from .lesions import lesion_analysis
from .missing_cases import COVERAGE_POLICIES, DEFAULT_COVERAGE, Coverage, coverage, coverage_text
from .reanalysis import reanalyze, recompute
from .results import ModelEntry, model_entry
from .results_file import read_results
from .sensitivity import sensitivity
from .settings import StatsSettings
from .source import beside_source, reanalyze_source

__all__ = [
    "CiLevels",
    "COVERAGE_POLICIES",
    "DEFAULT_COVERAGE",
    "Coverage",
    "coverage",
    "coverage_text",
    "AUDIT_MARGIN",
    "PLOT_COLUMNS",
    "SIMULATED",
    "AuditTables",
    "BoardCell",
    "StatsSettings",
    "analyze",
    "audited",
    "audited_board",
    "audited_lesions",
    "beside_source",
    "identical_to_reference",
    "leaderboard_heads",
    "lesion_analysis",
    "level_provider",
    "mean_ci_rows",
    "ModelEntry",
    "model_entry",
    "population_data",
    "read_results",
    "reanalyze",
    "reanalyze_source",
    "recompute",
    "sensitivity",
]
