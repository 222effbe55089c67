"""The honest limit of a cell's verdict (docs/methodology.md#520-failure-shapes, "On the board").

The separable verdict keeps its error rate where the audit has seen data of the cell's shape at the cell's size. Two
things a cell's own cases cannot show, each checked against the failure-shape audit (``stats.shapes``):

- **Skewed differences.** The per-case differences of #1 and #2 are skewed (one model fails now and then). The
  audited population nearest the cell's shape (same metric, or the same direction of metric, nearest skewness of the
  differences) at the audited n nearest the cell's gives the rate at which the verdict's test erred there.
- **Failures too rare to be seen.** With n cases, a failure rate up to about 3 / n goes unseen in 95 % of samples (the
  rule of three): a model that never failed here may still fail on 1 case in n / 3. Where the audited populations
  with rare failures of the cell's kind err at the cell's n, the cell says so, whatever its own cases show.

A cell is flagged when the audited rate exceeds alpha by more than two Monte-Carlo SEs; the entry carries the
population, the audited n, the rate and its SE, and one sentence every view prints beside the verdict. Pure function
of arrays and the audit's table; ``stats.audited`` calls it for every cell of a board.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from segbench.base.formats import percent, skewness

from .results import Limit

#: the synthetic shapes with rare failures (stats.shapes.failure_shapes)
RARE_FAILURES = "rare_failures"


def _kind(table: pd.DataFrame, metric: str, higher: bool) -> pd.DataFrame:
    """The audited rows of the cell's metric, or where the audit has none of that metric, of the synthetic shapes of
    the same direction (overlap scores: Dice and NSD; distances: HD95)."""
    own = table[table["metric"] == metric]
    if not own.empty:
        return own
    return table[(table["kind"] == "synthetic") & table["metric"].isin(("dice", "nsd") if higher else ("hd95",))]


def _nearest_n(rows: pd.DataFrame, n: int) -> pd.DataFrame:
    """The rows at the audited n nearest to ``n`` (ties: the smaller)."""
    audited = sorted(set(rows["n"].astype(int)))
    chosen = min(audited, key=lambda a: (abs(a - n), a))
    return rows[rows["n"].astype(int) == chosen]


def _entry(code: str, row: pd.Series, n: int, alpha: float, text: str) -> Limit:
    return {
        "code": code,
        "population": str(row["shape"]),
        "n": int(row["n"]),
        "n_board": n,
        "rate": float(row["rate"]),
        "mc_se": float(row["mc_se"]),
        "target": alpha,
        "text": text,
    }


def _exceeds(row: pd.Series, alpha: float) -> bool:
    return float(row["rate"]) > alpha + 2.0 * float(row["mc_se"])


def cell_limit(first: np.ndarray, second: np.ndarray, metric: str, higher: bool, table: pd.DataFrame | None, procedure: str, alpha: float) -> Limit | None:
    """The limit of a cell whose #1 and #2 have the per-case values ``first`` and ``second`` (the cases both have), its
    verdict decided by ``procedure`` at ``alpha``; None where the audit finds the verdict holds its rate at this
    shape and n, or ``table`` (the audit's ``shapes_type1``) is absent or has nothing of this kind."""
    if table is None or first.size < 2:
        return None
    rows = _kind(table[table["procedure"] == procedure], metric, higher)
    if rows.empty:
        return None
    n = int(first.size)
    at_n = _nearest_n(rows, n)
    diffs = first - second
    skew = float(sps.skew(diffs)) if np.ptp(diffs) > 0 else 0.0
    nearest = at_n.iloc[int(np.argmin(np.abs(at_n["skewness"].to_numpy(dtype=float) - skew)))]
    if _exceeds(nearest, alpha):
        return _entry(
            "skewed",
            nearest,
            n,
            alpha,
            f"Cases too few for this shape: #1 - #2 differences have skewness {skewness(skew)}; on the audited population "
            f"nearest it ({nearest['shape']}, skewness {skewness(float(nearest['skewness']))}, n = {int(nearest['n'])}) "
            f"'separable' was wrong in {_percent(nearest)} of samples, not {percent(alpha, 0)}.",
        )
    rare = at_n[at_n["shape"].astype(str).str.contains(RARE_FAILURES)]
    if not rare.empty:
        worst = rare.iloc[int(np.argmax(rare["rate"].to_numpy(dtype=float)))]
        if _exceeds(worst, alpha):
            return _entry(
                "failures_unseen",
                worst,
                n,
                alpha,
                f"Failures rarer than {_share(3.0 / n)} of cases can go unseen on {n} cases: where a model fails that "
                f"rarely (audited: {worst['shape']}, n = {int(worst['n'])}) 'separable' was wrong in {_percent(worst)} "
                f"of samples, not {percent(alpha, 0)}{_unseen_words(worst)}.",
            )
    return None


def _unseen_words(row: pd.Series) -> str:
    """How much of an audited rate came from samples in which a failing model never failed (the audit's split;
    '' where the table has none): those no test can tell from a model better on every case."""
    share, seen = float(row.get("unseen_share", math.nan)), float(row.get("rate_seen", math.nan))
    if not (math.isfinite(share) and math.isfinite(seen)) or share <= 0.0:
        return ""
    return (
        f": in {percent(share, 0)} of samples a failing model never failed, and no test can tell it there from a better "
        f"one; where each failed at least once, {percent(seen)}"
    )


def _share(p: float) -> str:
    return percent(min(p, 1.0), 0) if p >= 0.01 else percent(p)


def _percent(row: pd.Series) -> str:
    rate, se = float(row["rate"]), float(row["mc_se"])
    return f"{percent(rate, 0)} (± {percent(max(se, 0.0005))})" if math.isfinite(se) else percent(rate, 0)
