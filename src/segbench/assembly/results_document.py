"""The results document of one leaderboard (``results/<dataset>.json``), shared by the compare stage and
``segbench evaluate``: the same keys whichever way the per-case rows were obtained, so ``segbench show``, ``report``,
``export`` and ``reanalyze`` read both."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, cast

import pandas as pd

import segbench
from segbench import stats
from segbench.datasets.schema import DatasetConfig
from segbench.scoring.settings import Region
from segbench.stats.results import Analysis, CoverageBlock, ModelEntry, ResultsDocument


def regions_block(regions: tuple[Region, ...] | list[Region]) -> dict[str, dict[str, Any]]:
    """The dataset block's ``regions``: each scored region's label ids and NSD tolerance."""
    return {r.name: {"labels": list(r.labels), "nsd_tolerance_mm": r.nsd_tolerance_mm} for r in regions}


def dataset_block(dataset: DatasetConfig) -> dict[str, Any]:
    """The dataset block of a scored dataset's results: names, licence, citation and regions."""
    return {"name": dataset.name, "title": dataset.title, "licence": dataset.licence, "citation": dataset.citation, "regions": regions_block(dataset.regions)}


def results_document(
    block: dict[str, Any],
    models: Mapping[str, ModelEntry],
    metrics: Mapping[str, bool],
    rows: pd.DataFrame,
    profile_rows: pd.DataFrame,
    analysis: Analysis,
    settings: stats.StatsSettings,
    contaminated: Mapping[str, bool],
) -> ResultsDocument:
    """The results document over ``analysis`` (``stats.analyze`` of ``rows``): dataset block, model entries, metrics,
    the rows' HD95 definition and metric profile, and the sensitivity analysis over ``profile_rows`` (the same cases
    under the other metric-definition profiles) and the missing-value policies."""
    hd95 = rows["hd95_definition"].iloc[0] if "hd95_definition" in rows else "as published by the source"
    profile = rows["metric_profile"].iloc[0] if "metric_profile" in rows else "as published by the source"
    sensitivity = stats.sensitivity(analysis, rows, profile_rows, baseline_profile=str(profile), metrics=metrics, settings=settings, contaminated=contaminated)
    if "regions" not in block and "nsd_tolerance_mm" in rows:  # a published set stating its NSD tolerance
        block["nsd_tolerance_mm"] = {str(s): float(t) for s, t in rows.groupby("structure", sort=True)["nsd_tolerance_mm"].first().items()}
    return cast(
        ResultsDocument,
        {
            "segbench_version": segbench.__version__,
            "dataset": block,
            "models": models,
            "metrics": {m: {"higher_is_better": hib} for m, hib in metrics.items()},
            "hd95_definition": str(hd95),
            "metric_profile": str(profile),
            "analysis": analysis,
            "sensitivity": sensitivity,
        },
    )


def coverage_document(
    covered: stats.Coverage,
    rows: pd.DataFrame,
    analyze: Callable[..., Analysis],
    contaminated: Mapping[str, bool],
    subgroup_fields: tuple[str, ...] | list[str] = (),
) -> CoverageBlock:
    """The results' ``coverage`` block (``stats.coverage``: the policy, each lacking model's n of N cases and the cases it
    lacks) and, under ``own_cases``, each lacking model's analysis on its own cases with every model covering them all
    (``analyze``: ``stats.analyze`` with the leaderboard's metrics, settings and levels; the board's ``subgroup_fields``,
    so a subgroup table has the model too; no clusters)."""
    assert covered.block is not None
    document: dict[str, Any] = dict(covered.block)
    if covered.applied == "own_cases":
        document["analyses"] = {}
        for model in covered.missing:
            own = covered.own_cases(rows, model)
            present = set(own["model"].astype(str))
            document["analyses"][model] = analyze(
                own, subgroup_fields=subgroup_fields, cluster_field=None, contaminated={m: flag for m, flag in contaminated.items() if m in present}
            )
    return cast(CoverageBlock, document)


def analysed_document(
    block: dict[str, Any],
    models: Mapping[str, ModelEntry],
    metrics: Mapping[str, bool],
    rows: pd.DataFrame,
    profile_rows: pd.DataFrame,
    *,
    settings: stats.StatsSettings,
    contaminated: Mapping[str, bool],
    policy: str,
    subgroup_fields: tuple[str, ...] | list[str] = (),
    cluster_field: str | None = None,
    ci_levels: stats.CiLevels | None = None,
) -> tuple[ResultsDocument, stats.Coverage]:
    """The results document of ``rows`` with the models lacking cases under the coverage ``policy`` (``stats.coverage``):
    the board analysed on its rows, the document over it, and its ``coverage`` block; with the coverage, whose ``board``
    filters further rows (the lesion-wise ones) alike. Shared by the compare stage and ``segbench evaluate``."""
    covered = stats.coverage(rows, policy)
    board = covered.board(rows)
    present = set(board["model"].astype(str))
    on_board = {m: flag for m, flag in contaminated.items() if m in present}
    analyze = functools.partial(stats.analyze, metrics=metrics, settings=settings, ci_levels=ci_levels)
    analysis = analyze(board, subgroup_fields=subgroup_fields, cluster_field=cluster_field, contaminated=on_board)
    results = results_document(block, models, metrics, board, covered.board(profile_rows), analysis, settings, on_board)
    if covered.block is not None:
        results["coverage"] = coverage_document(covered, rows, analyze, contaminated, subgroup_fields)
    return results, covered
