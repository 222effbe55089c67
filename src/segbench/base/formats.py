"""How every view writes a number: a metric's unit and decimals, an estimate with its interval, a coverage level, a
p-value, a share as a percentage, a ratio, a correlation, a count, a rank. One function per kind of number, so the site,
the terminal, MLflow's notes and the statistics' sentences print the same value alike; none writes a format spec of
its own. (The site's plotly hover templates keep theirs: d3 formats, applied in the browser.)"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from segbench.base.metrics import metric as table_row

#: what stands for a missing number
MISSING = "–"
_MAX_DIGITS = 8
#: an end of an interval that holds 0 this close to 0, relative to the interval's larger end, is 0 to the test that made
#: it (the sign-flip interval's ends carry a tie slack of 1e-9 of the mean |difference|): it prints as 0
_TIE_SCALE = 1e-8


def unit(metric: str) -> str:
    """The unit of a metric's values, from the metric table (``segbench.base.metrics``): 'mm' for surface distances, '' for
    overlap scores in [0, 1]; a name the table does not hold takes the unit of the metric after its last '_' (``sq_hd``:
    the SQ of ``hd``), '' if that is none either (the interactive protocol's ``DSC_AUC``)."""
    name = metric.lower()
    row = table_row(name) or table_row(name.rsplit("_", 1)[-1])
    return row.unit if row else ""


def base_digits(higher_is_better: bool) -> int:
    """Decimals for a metric's values: 3 for overlap scores in [0, 1], 2 for distances in mm."""
    return 3 if higher_is_better else 2


def fmt(value: float | None, digits: int) -> str:
    """Fixed-point number, or an en dash for a missing value."""
    return MISSING if value is None else f"{value:.{digits}f}"


def fixed_interval(low: float | None, high: float | None, digits: int) -> str:
    """'[0.901, 0.922]': an interval's ends at fixed decimals (a figure's label; ``format_estimate`` for the leaderboards)."""
    return f"[{fmt(low, digits)}, {fmt(high, digits)}]"


def fixed_estimate(value: float | None, low: float | None, high: float | None, digits: int) -> str:
    """'0.912 [0.901, 0.922]': an estimate and its interval at fixed decimals, no unit (a figure's label)."""
    return f"{fmt(value, digits)} {fixed_interval(low, high, digits)}"


def number(value: float, significant: int = 6) -> str:
    """The shortest plain form to ``significant`` digits ('0.05', '3', '1.5'): alpha, a tolerance, a count that may
    be fractional (a median, a rank)."""
    return f"{value:.{significant}g}"


def signed(value: float) -> str:
    """A change with its sign: '+2', '-1', '+0'."""
    return f"{value:+g}"


def count(n: int) -> str:
    """A count with thousands separators: '10,000'."""
    return f"{n:,}"


def fmt_rank(rank: float) -> str:
    """Whole ranks as integers; a bootstrap quantile between two ranks with up to three digits."""
    return number(rank, 3)


def skewness(value: float) -> str:
    """A skewness with its sign and one decimal: '+1.8'."""
    return f"{value:+.1f}"


def correlation(value: float | None) -> str:
    """A rank correlation (Spearman's rho, Kendall's tau) with two decimals: '0.83'."""
    return fmt(value, 2)


def ratio(value: float | None) -> str:
    """A ratio of two widths with two decimals: '1.24'."""
    return fmt(value, 2)


def percent_value(share: float, digits: int = 1) -> str:
    """A share (0.941) in percent without the sign: '94.1'; e.g. a Monte-Carlo SE after '±'."""
    return f"{100 * share:.{digits}f}"


def percent(share: float, digits: int = 1) -> str:
    """A share (0.941) as a percentage: '94.1%' ('94%' with no decimals)."""
    return f"{percent_value(share, digits)}%"


def percent_span(shares: Sequence[float]) -> str:
    """'90.0–93.9%' from the lowest share to the highest, '5.0%' where they print alike."""
    low, high = percent_value(min(shares)), percent_value(max(shares))
    return f"{low}%" if low == high else f"{low}–{high}%"


def rate_with_se(rate: float, mc_se: float, digits: int = 1) -> str:
    """A simulated rate with its Monte-Carlo standard error, in percent: '94.1% ± 1.2'."""
    return f"{percent(rate, digits)} ± {percent_value(mc_se, digits)}"


def format_points(share: float) -> str:
    """A difference of rates in percentage points, '1.5 points' for 0.015 (the audit's ``MARGIN``), '1 point' for 0.01."""
    points = round(100.0 * share, 6)
    return f"{number(points)} point{'' if points == 1 else 's'}"


def format_level(level: float) -> str:
    """A coverage level as a percentage, exact to two decimals with the fewest digits ('95%', '97.05%', '99.53%'), and
    with more where those would round a level below 1 up to 100 ('99.996%'): no label reads '100%' unless it is."""
    shown = round(level * 100.0, 2)
    n_digits = next(n for n in range(3) if float(percent_value(level, n)) == shown)
    while level < 1.0 and float(percent_value(level, n_digits)) >= 100.0 and n_digits < _MAX_DIGITS:
        n_digits += 1
    return percent(level, n_digits)


def ci_head(levels: Iterable[float]) -> str:
    """A CI column's head at the level its CIs are computed at: 'mean [95% CI]', 'mean [97.05% CI]' for a cell at an
    audit-calibrated level (computed there so that it covers the board's confidence on the audited population, which
    a failure shape it never saw may not), 'mean [95–97.05% CI]' for a table of cells at several levels."""
    distinct = sorted(set(levels))
    if not distinct:
        return "mean [CI]"
    low, high = format_level(distinct[0]), format_level(distinct[-1])
    return f"mean [{high} CI]" if low == high else f"mean [{low[:-1]}–{high} CI]"


def fmt_p(p: float | None) -> str:
    """p-value with three decimals, '< 0.001' below that."""
    if p is None:
        return MISSING
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def format_p(p: float | None) -> str:
    """'p_adj = 0.325' or 'p_adj < 0.001' (Holm-adjusted; the caller states the direction)."""
    shown = fmt_p(p)
    return f"p_adj {shown}" if shown.startswith("<") else f"p_adj = {shown}"


def _signless(value: float, n_digits: int) -> str:
    """``value`` at ``n_digits`` decimals, a zero without its sign (no '-0.00')."""
    text = f"{value:.{n_digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def interval_digits(low: float | None, high: float | None, n_digits: int, value: float | None = None) -> int:
    """The fewest decimals from ``n_digits`` on at which no non-zero bound prints as 0, two different bounds do not
    print alike, and the estimate does not print like a bound it differs from: an interval that excludes 0 never
    prints touching it, nor a narrow one as a point. An interval that holds 0 and ends within ties of it
    (``_TIE_SCALE``) prints that end as 0, not as 0.00000001 at eight decimals."""
    if low is None or high is None:
        return n_digits
    bounds: tuple[float, ...] = (low, high)
    if low <= 0.0 <= high:
        scale = max(abs(low), abs(high))
        bounds = tuple(0.0 if abs(b) <= _TIE_SCALE * scale else b for b in bounds)

    def unresolved(n: int) -> bool:
        shown = [float(fmt(b, n)) for b in bounds]
        estimate = None if value is None else float(fmt(value, n))
        return (
            any(s == 0 and b != 0 for s, b in zip(shown, bounds))
            or (shown[0] == shown[1] and bounds[0] != bounds[1])
            or any(estimate == s and value != b for s, b in zip(shown, bounds))
        )

    while n_digits < _MAX_DIGITS and unresolved(n_digits):
        n_digits += 1
    return n_digits


def format_estimate(value: float | None, low: float | None, high: float | None, metric: str, higher_is_better: bool) -> str:
    """'0.912 [0.901, 0.922]' or '-175.05 [-257.90, -101.46] mm': an estimate, its CI and the metric's unit, with as
    many decimals as it takes for an interval that excludes 0 not to print as touching it (``interval_digits``).

    An en dash stands for a missing number; a missing or unbounded interval (an end None or infinite: too few cases for
    the test to reject anything, stored as None) leaves only the estimate.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        low = high = None
    n = interval_digits(low, high, base_digits(higher_is_better), value)
    suffix = f" {unit(metric)}" if unit(metric) else ""
    if low is None:
        return f"{_signless(value, n)}{suffix}"
    return f"{_signless(value, n)} [{_signless(low, n)}, {_signless(high, n)}]{suffix}"  # type: ignore[arg-type]  # high is None only with low
