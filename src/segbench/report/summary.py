"""The leaderboard for MLflow: a few headline metrics, the full leaderboard as one table, and the runs table's view.

Read from the results JSON (its estimates, rankings and verdict blocks, docs/methodology.md#57-verdicts), so MLflow
and the site never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from segbench.stats.heads import shown_mean
from segbench.stats.missing_cases import coverage_text
from segbench.stats.verdicts import CODE_NUMBER, CODE_WORDS

from .document import Cell, Results
from .marks import identical_note

#: how many structures the runs table's view shows (a published set may have a hundred; the rest are a column choice away)
VIEW_STRUCTURES = 8
#: the leaderboard run's tag naming the models that left cases identical to the reference (absent when none did)
IDENTICAL_TAG = "identical_to_reference"
#: the leaderboard table's columns, one row per structure, metric and model in leaderboard order
TABLE_COLUMNS = [
    "structure",
    "metric",
    "rank",
    "model",
    "mean",
    "ci_low",
    "ci_high",
    "n",
    "coverage",
    "p_rank1",
    "rank_low",
    "rank_high",
    "co_winner",
    "verdict_vs_next",
    "verdict_vs_next_words",
    "verdict_vs_next_text",
]
#: the model runs' headline columns of the runs table's view before the per-structure ones (``stages/bundles.headline_metrics``)
COVERAGE_COLUMNS = ["metrics.`n_cases`", "metrics.`coverage`"]


def _cells(results: Results) -> list[tuple[str, str, Cell]]:
    """(structure, metric, cell) of every analysis of the results: the leaderboards, then the lesion-wise ones by case
    and of matched lesions (structure ``<structure>.lesion``, as the model runs name their lesion-wise means) and by
    lesion (``<structure>.per_lesion``)."""
    lesions: Mapping[str, Any] = results.get("lesions") or {}
    analyses = [("", results["analysis"]), (".lesion", lesions.get("case")), (".lesion", lesions.get("matched")), (".per_lesion", lesions.get("lesion"))]
    return [
        (f"{structure}{suffix}", metric, cell)
        for suffix, analysis in analyses
        if analysis
        for structure, block in analysis["structures"].items()
        for metric, cell in block["metrics"].items()
    ]


def _first(cell: Cell) -> str | None:
    order = (cell.get("ranking") or {}).get("order") or []
    return order[0] if order else None


def summary_metrics(results: Results) -> dict[str, float]:
    """Per structure and metric with a ranking: ``<structure>.<metric>.mean``, the #1's mean rounded as every view prints
    it (the column the model runs fill with their own means), and ``<structure>.<metric>.verdict``, the verdict on #1
    against #2 as a number for plots (``segbench.stats.verdicts.CODE_NUMBER``: 1 separable, 0.5 borderline, 0 not
    separable, -1 aggregation disagrees; none for a single ranked model; its words are the run's tags,
    ``summary_tags``); and per leaderboard the calibration audit read for it (``results["audited"]``,
    docs/methodology.md#518-calibration-audit), ``<structure>.<metric>.audited_coverage`` and ``.audited_type1``."""
    metrics: dict[str, float] = {}
    for structure, by_metric in ((results.get("audited") or {}).get("structures") or {}).items():  # type: ignore[union-attr]  # a results file's is a dict or None
        for metric, entry in by_metric.items():
            for key, name in (("coverage", "audited_coverage"), ("type1", "audited_type1")):
                if entry[key] is not None:  # type: ignore[literal-required]  # one of the block's keys (the loop's literals)
                    metrics[f"{structure}.{metric}.{name}"] = entry[key]["rate"]  # type: ignore[literal-required]  # one of the block's keys (the loop's literals)
    for structure, metric, cell in _cells(results):
        first = _first(cell)
        if first is not None:
            metrics[f"{structure}.{metric}.mean"] = shown_mean(cell["models"][first], bool(cell["higher_is_better"]))
        verdict = cell.get("verdict")
        if verdict and verdict["code"] in CODE_NUMBER:
            metrics[f"{structure}.{metric}.verdict"] = CODE_NUMBER[verdict["code"]]
    return metrics


def summary_tags(results: Results) -> dict[str, str]:
    """Per structure and metric with a verdict on #1 against #2: ``<structure>.<metric>.verdict``, its words as every
    view prints them ('✘ not separable'), a text column of MLflow's runs table; ``<structure>.<metric>.verdict_limit``
    where the cell's n or shape is past what the audit verified its verdict on (the results' audited ``limit``);
    ``identical_to_reference``, the
    note naming the models that left cases identical to the reference, when one did (``identical_note``); and per model
    lacking cases ``coverage.<model>``, its n of N cases and the policy applied (``results.coverage``)."""
    verdicts = {
        f"{structure}.{metric}.verdict": CODE_WORDS[cell["verdict"]["code"]]
        for structure, metric, cell in _cells(results)
        if (cell.get("verdict") or {}).get("code") in CODE_NUMBER
    }
    limits = {
        f"{structure}.{metric}.verdict_limit": entry["limit"]["text"]
        for structure, by_metric in ((results.get("audited") or {}).get("structures") or {}).items()  # type: ignore[union-attr]  # a results file's is a dict or None
        for metric, entry in by_metric.items()
        if entry.get("limit")
    }
    coverage: Mapping[str, Any] = results.get("coverage") or {}
    return {
        **verdicts,
        **limits,
        **({IDENTICAL_TAG: note} if (note := identical_note(results)) else {}),
        **{f"coverage.{model}": coverage_text(entry, coverage["applied"]) for model, entry in (coverage.get("models") or {}).items()},
    }


def model_coverage(results: Results) -> dict[str, float]:
    """Per model of the results, the share of the dataset's cases it has a prediction for (``results.coverage``; 1 for
    every model when none lacks a case)."""
    block: Mapping[str, Any] = results.get("coverage") or {}
    lacking = block.get("models") or {}
    return {m: (lacking[m]["n_cases"] / lacking[m]["of"] if m in lacking else 1.0) for m in results["models"]}


def leaderboard_table(results: Results) -> pd.DataFrame:
    """Every leaderboard as one table (``TABLE_COLUMNS``; the lesion-wise ones as ``_cells`` names them): per structure
    and metric the ranked models by rank, then
    the unranked ones (rank empty), with mean, CI, n, coverage (``model_coverage``), P(rank 1), rank interval, whether the
    model is a co-winner and the verdict against the next ranked model (code, its words and its sentence); then each model
    lacking cases that the board leaves out (coverage ``own_cases``) with its mean and CI on its own cases, rank empty.
    Every model of the results has its row: none is dropped for lacking cases."""
    rows = []
    shares = model_coverage(results)
    own = (results.get("coverage") or {}).get("analyses") or {}
    for structure, metric, cell in _cells(results):
        ranking: Mapping[str, Any] = cell.get("ranking") or {}
        order = ranking.get("order") or []
        verdict: Mapping[str, Any] = cell.get("verdict") or {}
        next_pair = {p["a"]: p for p in verdict.get("pairs", [])}
        for model in [*order, *sorted(m for m in cell["models"] if m not in order)]:
            estimate, ranked = cell["models"][model], model in order
            low, high = ranking["rank_interval"][model] if ranked else (None, None)
            pair = next_pair.get(model, {})
            rows.append(
                [
                    structure,
                    metric,
                    ranking["rank"][model] if ranked else None,
                    model,
                    estimate["mean"],
                    estimate["ci_low"],
                    estimate["ci_high"],
                    estimate["n"],
                    shares.get(model),
                    ranking["p_rank1"][model] if ranked else None,
                    low,
                    high,
                    model in verdict.get("co_winners", ()),
                    pair.get("code"),
                    CODE_WORDS.get(pair.get("code")),
                    pair.get("text"),
                ]
            )
        for model in sorted(m for m in own if m not in cell["models"]):
            own_cell = own[model]["structures"].get(structure, {}).get("metrics", {}).get(metric)
            if own_cell and model in own_cell["models"]:
                estimate = own_cell["models"][model]
                rows.append(
                    [
                        structure,
                        metric,
                        None,
                        model,
                        estimate["mean"],
                        estimate["ci_low"],
                        estimate["ci_high"],
                        estimate["n"],
                        shares.get(model),
                        None,
                        None,
                        None,
                        False,
                        None,
                        None,
                        None,
                    ]
                )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def view_columns(results: Results) -> list[str]:
    """The columns of the runs table's saved view (MLflow's column ids): each model run's cases and coverage
    (``COVERAGE_COLUMNS``: a model lacking cases says so beside its means), then for the first ``VIEW_STRUCTURES`` structures,
    the headline metric's (the first higher-is-better one by name, e.g. dice) ``.mean`` (each model's; the #1's on the
    leaderboard run) and, on the leaderboard run, the ``.verdict`` tag in words."""
    metrics = sorted(results["metrics"], key=lambda m: (not results["metrics"][m]["higher_is_better"], m))
    structures = sorted(results["analysis"]["structures"])[:VIEW_STRUCTURES]
    headline = [column for s in structures for column in (f"metrics.`{s}.{metrics[0]}.mean`", f"tags.`{s}.{metrics[0]}.verdict`")]
    return [*COVERAGE_COLUMNS, *headline] if metrics else []


def summary_params(results: Results) -> dict[str, str]:
    """The statistics settings, data version and models the leaderboard was computed with."""
    settings = {f"stats.{k}": str(v) for k, v in results["analysis"]["settings"].items()}
    return {
        **settings,
        "dataset.version": str(results["dataset"].get("version")),
        "models": ",".join(sorted(results["models"])),
        "segbench_version": str(results["segbench_version"]),
    }
