"""Models that lack predictions for some cases: the coverage policy (docs/methodology.md#41-coverage).

A model's case is missing when its rows are flagged ``prediction_missing`` (the score stage found no prediction file for
it: a folder of predictions covering part of the dataset, a model that failed on a case). What the leaderboard does with
such a model is one setting, ``missing_predictions`` in params.yaml:

- ``own_cases`` (default): the leaderboard is that of the models that cover every case, so adding a model that lacks cases
  never moves another model's numbers; the model lacking cases is estimated on the n cases it has, in an analysis of
  those cases with every leaderboard model (each of its pairs on the same cases), shown beside the board as "n of N cases".
- ``worst_case``: each missing case scores as a failure (0 for overlaps, the case's worst distance), and the model is
  ranked on every case beside the others.
- ``shared_cases``: the leaderboard on the cases every model has; every model's numbers are on those cases, and each view
  names the model(s) whose missing cases set them.

Without a model covering every case, ``own_cases`` has no board of its own: it is applied as ``shared_cases``; without a
case every model covers, ``shared_cases`` has no case: it is applied as ``worst_case``. The block states the policy
applied and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

COVERAGE_POLICIES = ("own_cases", "worst_case", "shared_cases")
DEFAULT_COVERAGE = "own_cases"


@dataclass(frozen=True)
class Coverage:
    """A policy applied to the models lacking cases: which rows the leaderboard reads, which each own-case analysis
    reads, and the block the views read (None when every model covers every case)."""

    applied: str
    missing: dict[str, list[str]] = field(default_factory=dict)
    block: dict[str, Any] | None = None

    def board(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows of ``frame`` (model and case_id columns: case, profile or lesion rows) the leaderboard analyses."""
        if not self.missing or self.applied == "worst_case" or frame.empty:
            return frame
        if self.applied == "shared_cases":
            return frame.loc[~frame["case_id"].astype(str).isin(set().union(*self.missing.values()))].reset_index(drop=True)
        return frame.loc[~frame["model"].astype(str).isin(self.missing)].reset_index(drop=True)

    def own_cases(self, frame: pd.DataFrame, model: str) -> pd.DataFrame:
        """``own_cases``: the rows of ``model``'s own analysis: its cases, for it and every model covering every case."""
        others = set(self.missing) - {model}
        keep = ~frame["model"].astype(str).isin(others) & ~frame["case_id"].astype(str).isin(self.missing[model])
        return frame.loc[keep].reset_index(drop=True)


def missing_cases(rows: pd.DataFrame) -> dict[str, list[str]]:
    """Per model, the sorted case ids it has no prediction for (rows flagged ``prediction_missing``); models with none left out."""
    if "prediction_missing" not in rows or not rows["prediction_missing"].any():
        return {}
    flagged = rows.loc[rows["prediction_missing"].astype(bool), ["model", "case_id"]].astype(str).drop_duplicates()
    return {str(m): sorted(group["case_id"]) for m, group in flagged.groupby("model", sort=True)}


def coverage(rows: pd.DataFrame, policy: str) -> Coverage:
    """``policy`` (module docstring) applied to the per-case ``rows`` of a scored dataset."""
    if policy not in COVERAGE_POLICIES:
        raise ValueError(f"unknown coverage policy {policy!r}; known: {', '.join(COVERAGE_POLICIES)}")
    missing = missing_cases(rows)
    if not missing:
        return Coverage(policy)
    cases = sorted(rows["case_id"].astype(str).unique())
    complete = sorted(set(rows["model"].astype(str)) - set(missing))
    dropped = sorted(set().union(*missing.values()))
    applied, reason = policy, None
    if applied == "own_cases" and not complete:
        applied, reason = "shared_cases", "no model covers every case"
    if applied == "shared_cases" and len(dropped) == len(cases):
        applied, reason = "worst_case", "no case is covered by every model"
    block: dict[str, Any] = {
        "policy": policy,
        "applied": applied,
        "n_cases": len(cases),
        "models": {m: {"n_cases": len(cases) - len(gone), "of": len(cases), "missing": gone} for m, gone in missing.items()},
    }
    if reason:
        block["reason"] = reason
    if applied == "shared_cases":
        block["shared_cases"] = {"n_cases": len(cases) - len(dropped), "dropped": dropped}
    return Coverage(applied, missing, block)


def coverage_text(entry: Mapping[str, Any], applied: str) -> str:
    """One line for a model lacking cases, as every view prints it: "40 of 78 cases (no prediction for 38; ...)"."""
    lacking = entry["of"] - entry["n_cases"]
    policy = {
        "own_cases": "estimated on its own cases, beside the leaderboard",
        "worst_case": "each missing case scored as the worst case",
        "shared_cases": "the leaderboard on the cases every model has",
    }[applied]
    return f"{entry['n_cases']} of {entry['of']} cases (no prediction for {lacking}; {policy})"
