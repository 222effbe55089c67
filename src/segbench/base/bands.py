"""Ordinal subgroups (docs/methodology.md#59-subgroups): the one ``age_band`` every reader derives, and the order in
which every view shows a field's groups.

Scored datasets (``segbench.datasets``) and published sets (``segbench.published.readers``) both derive ``age_band`` here, so
the same patient falls in the same group under the same name on every board. Nothing of segbench is imported: the
readers below and the views above (``segbench.report``, ``segbench.evaluation``) import this.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

#: the derived age field (``meta.age_band``): a reader adds it beside the age it is cut from
AGE_BAND = "age_band"
#: its bands (years, left-closed): decades between 40 and 80, open-ended at both ends so that the youngest and oldest
#: bands still hold enough cases for the subgroup tests
AGE_BANDS: tuple[tuple[float, float, str], ...] = (
    (-np.inf, 40, "<40"),
    (40, 50, "40-49"),
    (50, 60, "50-59"),
    (60, 70, "60-69"),
    (70, 80, "70-79"),
    (80, np.inf, "80+"),
)
#: per field defined here, its groups in their order
LEVELS: dict[str, tuple[str, ...]] = {AGE_BAND: tuple(label for _, _, label in AGE_BANDS)}


def age_band(ages: pd.Series) -> pd.Series:
    """Each age's ``AGE_BANDS`` label; a missing age stays missing (None), a value that is no number raises ValueError."""
    values = pd.to_numeric(ages, errors="raise").astype(np.float64)
    bins = [lo for lo, _, _ in AGE_BANDS] + [np.inf]
    banded = pd.cut(values, bins, right=False, labels=list(LEVELS[AGE_BAND]))
    return pd.Series([None if pd.isna(v) else str(v) for v in banded], index=ages.index, dtype=object)


_NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
#: a group label naming a range of numbers: '<40', '>=75', '40-49', '40–59', '52-<61.5' (the statistics' quartile bands
#: of a numeric field), '80+' or a plain number
_RANGE = re.compile(rf"^\s*(?:(?P<cmp>[<>]=?)\s*(?P<edge>{_NUMBER})|(?P<low>{_NUMBER})\s*(?:[-–]\s*<?\s*(?P<high>{_NUMBER})|(?P<plus>\+))?)\s*$")


def _range(label: str) -> tuple[float, float] | None:
    """(lowest, highest) value of a range label, None for a label that names no range ('F', 'venous')."""
    m = _RANGE.match(label)
    if m is None:
        return None
    if m["cmp"]:
        edge = float(m["edge"])
        return (-math.inf, edge) if m["cmp"].startswith("<") else (edge, math.inf)
    low = float(m["low"])
    return low, math.inf if m["plus"] else float(m["high"] or low)


def level_order(field: str, labels: Iterable[str]) -> list[str]:
    """The groups ``labels`` of ``field`` in their natural order: a field defined here in its definition's order
    (``LEVELS``); else, when every label names a range of numbers (the statistics' quartile bands of a numeric field,
    a metadata file's own bands), by value; else alphabetically (categories without an order, e.g. gender)."""
    labels = list(labels)
    defined = LEVELS.get(field, ())
    if set(labels) <= set(defined):
        return [label for label in defined if label in labels]
    ranges = [_range(label) for label in labels]
    if labels and all(r is not None for r in ranges):
        return [label for _, label in sorted(zip(ranges, labels))]
    return sorted(labels)
