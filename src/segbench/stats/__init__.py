"""Statistics engine (docs/methodology.md#5-statistics-protocol): estimates, ranking stability, pairwise tests, subgroups, power.

The public API is ``StatsSettings``, ``analyze`` and ``reanalyze``; see ``segbench.stats.analysis`` for
the layout of the results dict.
"""

from .analysis import analyze, reanalyze
from .settings import StatsSettings

__all__ = ["StatsSettings", "analyze", "reanalyze"]
