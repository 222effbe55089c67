"""The audited rate of a leaderboard cell (docs/methodology.md#518-calibration-audit, "On the board").

The calibration audit (``segbench.stats.calibration``) measures, per population (source and structure), metric, n and
CI method, how often a 95 % CI covers the truth, and per procedure how often "separable" is wrong for equal models.
``audited`` picks, for one leaderboard cell, the audited coverage of its CI method and the type-I error of its verdict
procedure, so that the board can state them beside its numbers:

- **Population.** The audited population of the cell's own set and structure ("exact": a Touchstone organ's cell reads
  that organ; a cell of the audit's own dataset reads the simulated population of the same structure); else the same
  set's other structures ("other_structure": a KiTS23 kidney_and_mass cell reads the simulated tumor population);
  else populations drawn from the same data by another source ("same_data"). Among several candidates of one kind the
  least favourable rate at its nearest n is taken (lowest coverage, highest type-I error) and the entry names the
  population and how many there were. A cell with no audited population on its data and metric is not audited.
- **n.** The audited n nearest to the cell's case count (ties: the smaller n); the entry states both.
- **Flags.** ``under_covers`` when the coverage is below the confidence by more than ``MARGIN`` (1.5 points);
  ``exceeds_alpha`` when the type-I error is above alpha by more than ``MARGIN``.
- **Settings.** Coverage applies only at the audit's confidence level, the type-I error only at its alpha and
  multiple-comparison correction; a board with other settings is not audited (the entry says why).
- **Calibrated levels.** Under ``ci_level: audited`` a cell whose population has a calibrated level for its CI method
  (``levels``: the audit's ``levels.csv``, ``stats.levels``) computes its CIs at that level (``level_provider``, the
  analysis' ``ci_levels``), chosen among candidates as the highest level at its nearest n; its coverage entry is then
  that rule's cross-fitted coverage, with the ``level``. Elsewhere the CIs are at the confidence itself.

Pure functions of tables; ``segbench.stages`` reads ``calibration/results/*.csv`` and writes the entries into the
results (``results["audited"]``, None when the tables are absent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from segbench.base.formats import format_level, number

from .analysis import CiLevels
from .calibration import SIMULATED, verdict_procedure
from .limits import cell_limit
from .results import Audited

#: how far (in rate, 0.015 = 1.5 points) coverage may fall below the confidence, or type-I error rise above alpha,
#: before the board flags the cell
MARGIN = 0.015
#: how a population was chosen for a cell, best first
MATCHES = ("exact", "other_structure", "same_data")

#: why the lesion-wise leaderboards carry no audited rate
LESIONS = "not audited: the calibration audit covers the case-level means of voxel-wise scores, not lesion-wise scores"

_KEY = ("source", "structure", "metric", "n")
_COVERAGE = (*_KEY, "method", "rate", "mc_se")
_TYPE1 = (*_KEY, "procedure", "rate", "mc_se")
_LEVELS = (*_KEY, "method", "level", "capped", "rate", "mc_se", "nominal_rate", "width_ratio")


@dataclass(frozen=True)
class AuditTables:
    """The audit's coverage, type-I and calibrated-level tables (simulated and real rows together), the settings it ran
    with (``confidence``, ``alpha``, ``multiple_comparison``: audit.json's ``stats``) and, per source, the dataset its
    population's cases come from (``data``; the simulated population's is ``calibration.dataset``)."""

    coverage: pd.DataFrame
    type1: pd.DataFrame
    settings: Mapping[str, Any]
    data: Mapping[str, str]
    levels: pd.DataFrame | None = None  # None: the audit calibrated no level
    shapes: pd.DataFrame | None = None  # the failure-shape audit's type-I table (limits.py); None: not run

    def __post_init__(self) -> None:
        tables = (
            ("coverage", self.coverage, _COVERAGE, "method"),
            ("type1", self.type1, _TYPE1, "procedure"),
            *((("levels", self.levels, _LEVELS, "method"),) if self.levels is not None else ()),
        )
        for name, frame, columns, kind in tables:
            if not isinstance(frame, pd.DataFrame):
                raise ValueError(f"audit tables: {name} must be a DataFrame, got {type(frame).__name__}")
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise ValueError(f"audit tables: {name} lacks the columns {missing} (has {list(frame.columns)})")
            if frame.empty:
                raise ValueError(f"audit tables: {name} has no rows")
            n = pd.to_numeric(frame["n"], errors="coerce")
            if n.isna().any() or (n < 1).any() or (n != n.round()).any():
                raise ValueError(f"audit tables: {name}.n must be whole numbers >= 1, got {sorted(set(frame['n']))[:5]}")
            for column in ("rate", "mc_se", *(("level", "nominal_rate") if name == "levels" else ())):
                values = pd.to_numeric(frame[column], errors="coerce")
                if values.isna().any() or (values < 0).any() or (values > 1).any():
                    raise ValueError(f"audit tables: {name}.{column} must be shares in [0, 1]")
            if frame.duplicated([*_KEY, kind]).any():
                first = frame[frame.duplicated([*_KEY, kind])].iloc[0]
                raise ValueError(f"audit tables: {name} has two rows for {dict(first[[*_KEY, kind]])}")
        for key in ("confidence", "alpha", "multiple_comparison"):
            if key not in self.settings:
                raise ValueError(f"audit tables: settings lack {key!r} (audit.json's stats block)")
        levels = set() if self.levels is None else set(self.levels["source"])
        unknown = sorted((set(self.coverage["source"]) | set(self.type1["source"]) | levels) - set(self.data))
        if unknown:
            raise ValueError(f"audit tables: no dataset given for the sources {unknown} (data: {dict(self.data)})")


@dataclass(frozen=True)
class BoardCell:
    """One leaderboard cell: ``source`` is the audit source of the board's own set (the published set's name, or
    ``"simulated"`` on the audit's own dataset; None when the audit has none), ``data`` the dataset its cases come
    from, ``n`` its case count, ``settings`` the analysis' settings (``StatsSettings.to_dict()``) and
    ``ci_confidence`` the level its CIs were computed at (the analysis' ``ci_confidence``; None: the confidence)."""

    source: str | None
    data: str
    structure: str
    metric: str
    n: int
    settings: Mapping[str, Any]
    ci_confidence: float | None = None

    def __post_init__(self) -> None:
        for name in ("data", "structure", "metric"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"board cell: {name} must be a non-empty string, got {value!r}")
        if self.source is not None and (not isinstance(self.source, str) or not self.source):
            raise ValueError(f"board cell: source must be None or a non-empty string, got {self.source!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"board cell {self.structure} {self.metric}: n must be an integer >= 1, got {self.n!r}")
        missing = [k for k in ("confidence", "alpha", "ci_method", "multiple_comparison") if k not in self.settings]
        if missing:
            raise ValueError(f"board cell {self.structure} {self.metric}: settings lack {missing}")


def nearest_n(audited: list[int], n: int) -> int:
    """The audited n nearest to ``n`` (ties: the smaller one)."""
    if not audited:
        raise ValueError("nearest_n: no audited n")
    return min(audited, key=lambda a: (abs(a - n), a))


def _candidates(table: pd.DataFrame, data: Mapping[str, str], cell: BoardCell) -> tuple[str, pd.DataFrame] | None:
    """The rows of the best kind of population for ``cell`` (``MATCHES``) and that kind, or None."""
    for match in MATCHES:
        if cell.source is None and match != "same_data":
            continue
        if match == "exact":
            keep = (table["source"] == cell.source) & (table["structure"] == cell.structure)
        elif match == "other_structure":
            keep = table["source"] == cell.source
        else:
            keep = table["source"].map(data) == cell.data
        rows = table[keep]
        if not rows.empty:
            return match, rows
    return None


def _pick(table: pd.DataFrame, data: Mapping[str, str], cell: BoardCell, worst: str, column: str = "rate") -> dict | None:
    """The entry of the population chosen for ``cell`` among ``table``'s rows (one metric and method or procedure);
    ``worst``: "min" or "max", the least favourable ``column`` when several populations of one kind qualify."""
    found = _candidates(table, data, cell)
    if found is None:
        return None
    match, rows = found
    choices = []
    for (source, structure), block in rows.groupby(["source", "structure"], sort=True):
        n = nearest_n(sorted(int(v) for v in block["n"]), cell.n)
        row = block[block["n"].astype(int) == n].iloc[0]
        choices.append((float(row[column]), str(source), str(structure), n, row))
    _, source, structure, n, row = min(choices, key=lambda c: (c[0] if worst == "min" else -c[0], c[1], c[2]))
    return {
        "population": f"{source}/{structure}",
        "source": source,
        "structure": structure,
        "match": match,
        "candidates": len(choices),
        "n": n,
        "n_board": cell.n,
        "rate": float(row["rate"]),
        "mc_se": float(row["mc_se"]),
        **(
            {"level": float(row["level"]), "capped": bool(row["capped"]), "nominal_rate": float(row["nominal_rate"]), "width_ratio": float(row["width_ratio"])}
            if column == "level"
            else {}
        ),
    }


def level_entry(tables: AuditTables | None, cell: BoardCell) -> dict | None:
    """The calibrated-level entry of ``cell`` (as :func:`audited`'s, plus ``level``, ``capped``, ``nominal_rate``:
    the coverage at the confidence itself, ``width_ratio``; ``rate`` is the cross-fitted coverage at ``level``), or
    None: no tables, ``ci_level`` nominal, another confidence than the audit's, or no population calibrated for the
    cell's metric and CI method."""
    s = cell.settings
    if tables is None or tables.levels is None or s.get("ci_level", "nominal") != "audited":
        return None
    if not math.isclose(float(s["confidence"]), float(tables.settings["confidence"])):
        return None
    rows = tables.levels[(tables.levels["metric"] == cell.metric) & (tables.levels["method"] == str(s["ci_method"]))]
    return _pick(rows, tables.data, cell, "max", column="level")


def level_provider(tables: AuditTables | None, *, source: str | None, data: str, settings: Mapping[str, Any]) -> CiLevels:
    """The analysis' ``ci_levels`` for a board: per (structure, metric, n) the :func:`level_entry` of its cell, else
    the confidence. :func:`audited` picks the same entry for the cell's coverage note, so the two always agree."""

    def level(structure: str, metric: str, n: int) -> float:
        entry = level_entry(tables, BoardCell(source, data, structure, metric, n, settings)) if n > 0 else None
        return float(settings["confidence"]) if entry is None else entry["level"]

    return level


def audited(tables: AuditTables | None, cell: BoardCell) -> dict | None:
    """The audited coverage of ``cell``'s CI and type-I error of its verdict: ``{"coverage": entry | None, "type1":
    entry | None, "reason": why an entry is None | None}``; None when there are no audit tables.

    An entry: ``population`` ("source/structure") and ``match`` (``MATCHES``; ``candidates``: how many populations of
    that kind there were, the least favourable taken), ``n`` (the audited n) beside ``n_board``, ``rate`` and its
    Monte-Carlo SE ``mc_se``, ``target`` (the confidence, or alpha), the CI ``method`` or verdict ``procedure``, and
    ``under_covers`` (coverage) or ``exceeds_alpha`` (type-I error). Where the cell's CIs are at a calibrated level
    (:func:`level_entry`), the coverage entry is that one: its ``rate`` the cross-fitted coverage at ``level``.
    """
    if tables is None:
        return None
    s, audit = cell.settings, tables.settings
    reasons = []
    coverage = type1 = None
    if not math.isclose(float(s["confidence"]), float(audit["confidence"])):
        reasons.append(f"the audit measured {format_level(float(audit['confidence']))} CIs, this board's are {format_level(float(s['confidence']))}")
    else:
        method = str(s["ci_method"])
        rows = tables.coverage[(tables.coverage["metric"] == cell.metric) & (tables.coverage["method"] == method)]
        level = float(s["confidence"]) if cell.ci_confidence is None else float(cell.ci_confidence)
        calibrated = level_entry(tables, cell)
        if calibrated is not None and math.isclose(level, calibrated["level"]):
            coverage = calibrated
        elif math.isclose(level, float(s["confidence"])):
            coverage = _pick(rows, tables.data, cell, "min")
        else:
            reasons.append(f"its CIs are at {format_level(level)}, a level the audit did not calibrate for this cell")
        if coverage is not None:
            target = float(s["confidence"])
            coverage |= {"method": method, "target": target, "under_covers": coverage["rate"] < target - MARGIN}
    if not math.isclose(float(s["alpha"]), float(audit["alpha"])) or s["multiple_comparison"] != audit["multiple_comparison"]:
        reasons.append(
            f"the audit's verdicts ran at alpha {number(float(audit['alpha']))} with {audit['multiple_comparison']}, this board's at "
            f"{number(float(s['alpha']))} with {s['multiple_comparison']}"
        )
    else:
        procedure = verdict_procedure(s)
        rows = tables.type1[(tables.type1["metric"] == cell.metric) & (tables.type1["procedure"] == procedure)]
        type1 = _pick(rows, tables.data, cell, "max")
        if type1 is not None:
            target = float(s["alpha"])
            type1 |= {"procedure": procedure, "target": target, "exceeds_alpha": type1["rate"] > target + MARGIN}
    if not reasons and (coverage is None or type1 is None):
        reasons.append(f"no audited population of {cell.metric} on {cell.data}")
    return {"coverage": coverage, "type1": type1, "reason": "; ".join(reasons) or None}


def board(tables: AuditTables | None, analysis: Mapping, *, source: str | None, data: str, lesions: str | None = None) -> Audited | None:
    """A results file's ``audited`` block: per structure (with cases) and metric of ``analysis``, :func:`audited` of its
    cell; ``lesions``, when the results have lesion-wise leaderboards, says why they are not audited. None without
    ``tables``."""
    if tables is None:
        return None
    cells = {
        structure: {
            metric: cast(
                dict, audited(tables, BoardCell(source, data, structure, metric, int(block["n_cases"]), analysis["settings"], cell.get("ci_confidence")))
            )  # a dict: tables is set
            | _limit(tables, cell, metric, analysis["settings"])
            for metric, cell in block["metrics"].items()
        }
        for structure, block in analysis["structures"].items()
        if block["n_cases"] > 0
    }
    return cast(Audited, {"margin": MARGIN, "structures": cells, **({"lesions": lesions} if lesions else {})})


def _limit(tables: AuditTables, cell: Mapping, metric: str, settings: Mapping) -> dict:
    """``{"limit": ...}``: the cell's #1 and #2 (by its ranking, on the cases both have) against the failure-shape audit
    (:func:`limits.cell_limit`); empty without that audit."""
    if tables.shapes is None:
        return {}
    order = (cell.get("ranking") or {}).get("order") or []
    if len(order) < 2:
        return {"limit": None}
    first, second = (np.asarray(cell["per_case"][m], dtype=float) for m in order[:2])
    both = ~(np.isnan(first) | np.isnan(second))
    return {
        "limit": cell_limit(
            first[both], second[both], metric, bool(cell["higher_is_better"]), tables.shapes, str(settings["pairwise_test"]), float(settings["alpha"])
        )
    }


def population_data(calibration_dataset: str, real_sources: Mapping[str, str]) -> dict[str, str]:
    """Per audit source, the dataset its population's cases come from: the simulated population's is the audit's
    dataset, a published set's the data it was evaluated on (``real_sources``: source -> evaluated_on)."""
    return {SIMULATED: calibration_dataset, **real_sources}
