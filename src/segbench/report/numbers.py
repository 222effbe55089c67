"""The number formats that read a leaderboard cell: its metric's decimals, the level its CIs are at, a model's mean with
its CI as every view writes it (``segbench.base.formats`` holds the formats themselves; nothing is recomputed)."""

from __future__ import annotations

import html

from segbench.base.formats import base_digits, format_estimate
from segbench.stats.results import (
    ModelEstimate,
    Settings,
)

from .document import Cell


def digits(cell: Cell) -> int:
    """Decimals for a metric: 3 for overlap scores in [0, 1], 2 for distances in mm."""
    return base_digits(bool(cell["higher_is_better"]))


def ci_level(cell: Cell, settings: Settings) -> float:
    """The level a cell's model CIs are computed at: its ``ci_confidence`` (an audit-calibrated level where the audit
    gave one), else the board's confidence."""
    return float(cell.get("ci_confidence") or settings["confidence"])


def estimate(est: ModelEstimate, cell: Cell, metric: str) -> str:
    """'mean [ci_low, ci_high] unit' of one estimate, written as every view writes it."""
    return format_estimate(est["mean"], est["ci_low"], est["ci_high"], metric, bool(cell["higher_is_better"]))


#: which bound of a model's CI the range rule moved (the estimate's ``ci_bounded``), for the CI cell's tooltip
BOUNDED = {"low": "its lower bound", "high": "its upper bound", "both": "both its bounds"}


def estimate_html(est: ModelEstimate, cell: Cell, metric: str) -> str:
    """A table's 'mean [ci_low, ci_high] unit', marked '⇤' where the range rule moved a bound of the CI (``ci_bounded``),
    the tooltip saying which: the interval keeps within the metric's range and the per-case values it averages."""
    shown = html.escape(estimate(est, cell, metric))
    moved = est.get("ci_bounded")
    if not moved:
        return shown
    title = f"The range rule set {BOUNDED[moved]}: the interval stays within the metric's range and the per-case values it averages (docs/methodology.md, 5.3)"
    return f'{shown}<span class="bounded" title="{html.escape(title)}">⇤</span>'
