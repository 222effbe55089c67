"""Statistics engine (SPEC §4): estimates, ranking stability, pairwise tests, subgroups, power.

The public API is ``StatsSettings``, ``analyze``, ``reanalyze`` and ``recompute``, and ``beside_source``
(a source's published analysis beside segbench's); see ``segbench.stats.analysis`` for
the layout of the results dict.
"""

from .analysis import analyze, reanalyze, recompute
from .settings import StatsSettings
from .source import beside_source, reanalyze_source

__all__ = ["StatsSettings", "analyze", "beside_source", "reanalyze", "reanalyze_source", "recompute"]
