"""Statistics engine (docs/methodology.md#5-statistics-protocol): estimates, ranking stability, pairwise tests, subgroups, power.

The public API is ``StatsSettings``, ``analyze``, ``reanalyze`` and the DVC views ``leaderboard_heads`` and
``mean_ci_rows``; see ``segbench.stats.analysis`` for the layout of the results dict.
"""

from .analysis import analyze, reanalyze
from .heads import PLOT_COLUMNS, leaderboard_heads, mean_ci_rows
from .settings import StatsSettings

__all__ = ["PLOT_COLUMNS", "StatsSettings", "analyze", "leaderboard_heads", "mean_ci_rows", "reanalyze"]
