"""How every view prints a number: fixed decimals by metric, p-values, ranks, percentage points, a model's mean with its
CI and the head naming the CI's level. The words of an estimate come from ``segbench.stats.verdicts`` (the verdicts
print them too); nothing is recomputed."""

from __future__ import annotations

import html
from collections.abc import Iterable

from segbench.stats.results import (
    ModelEstimate,
    Settings,
)
from segbench.stats.verdicts import base_digits, format_estimate, format_level

from .document import Cell


def fmt(value: float | None, digits: int) -> str:
    """Fixed-point number, or an en dash for a missing value."""
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_p(p: float | None) -> str:
    """p-value with three decimals, '< 0.001' below that."""
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def format_points(share: float) -> str:
    """A difference of rates in percentage points, '1.5 points' for 0.015 (the audit's ``MARGIN``), '1 point' for 0.01."""
    points = round(100.0 * share, 6)
    return f"{points:g} point{'' if points == 1 else 's'}"


def fmt_rank(rank: float) -> str:
    """Whole ranks as integers; a bootstrap quantile between two ranks with up to three digits."""
    return f"{rank:.3g}"


def digits(cell: Cell) -> int:
    """Decimals for a metric: 3 for overlap scores in [0, 1], 2 for distances in mm."""
    return base_digits(bool(cell["higher_is_better"]))


def ci_level(cell: Cell, settings: Settings) -> float:
    """The level a cell's model CIs are computed at: its ``ci_confidence`` (an audit-calibrated level where the audit
    gave one), else the board's confidence."""
    return float(cell.get("ci_confidence") or settings["confidence"])


def ci_head(levels: Iterable[float]) -> str:
    """A CI column's head at the level its CIs are computed at: 'mean [95% CI]', 'mean [97.05% CI]' for a cell at an
    audit-calibrated level (computed there so that it covers the board's confidence on the audited population, which
    a failure shape it never saw may not), 'mean [95–97.05% CI]' for a table of cells at several levels."""
    distinct = sorted(set(levels))
    if not distinct:
        return "mean [CI]"
    low, high = format_level(distinct[0]), format_level(distinct[-1])
    return f"mean [{high} CI]" if low == high else f"mean [{low[:-1]}–{high} CI]"


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
