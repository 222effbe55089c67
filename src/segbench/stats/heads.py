"""The head of every leaderboard, and each model's mean with its CI, in the flat shapes DVC reads.

``dvc metrics show`` prints one row per metrics file and one column per scalar leaf, ``dvc metrics diff``
one row per leaf, ``dvc exp show`` one column per leaf: so each leaderboard cell (structure x metric) is
its own small file with the same few keys, and every view stays a few columns wide whatever the number
of cells. ``dvc plots`` draws rows of a table. Both are read from an ``analyze`` results dict (see
``segbench.stats.results``), nothing is recomputed; everything else stays in ``results/<dataset>.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from segbench.base.formats import base_digits, format_estimate, format_level, interval_digits

from .verdicts import CODE_NUMBER, CODE_WORDS

PLOT_COLUMNS = ("cell", "model", "mean", "ci_low", "ci_high", "interval")
#: the CI methods' short names, for column heads and plot titles (the methodology words them in full)
CI_METHOD_NAMES = {"percentile": "percentile bootstrap", "bca": "BCa bootstrap", "skew_t": "skewness-corrected t"}


def ci_words(settings: Mapping[str, Any], level: float | None = None) -> str:
    """What a plot's CIs are, at the level they are computed at: '95% CI (skewness-corrected t)', or '97.05% CI
    (skewness-corrected t, the audit's level for 95% coverage)' where the cell's ``ci_confidence`` (``level``) is an
    audit-calibrated one: it covers the board's confidence on the audited population, which a failure shape the audit
    never saw may not (docs/methodology.md#520-failure-shapes). Every plot title says it this way, on the site and in
    ``dvc plots``, so none names another method or level than the one used."""
    method = CI_METHOD_NAMES.get(settings["ci_method"], settings["ci_method"])
    confidence = settings["confidence"]
    if level is None or level <= confidence:
        return f"{format_level(confidence)} CI ({method})"
    return f"{format_level(level)} CI ({method}, the audit's level for {format_level(confidence)} coverage)"


def shown_mean(estimate: Mapping[str, Any], higher_is_better: bool) -> float:
    """A model's mean rounded as every view prints it beside its CI (``format_estimate``'s decimals), for the flat
    views that print numbers as they get them (DVC, MLflow): '0.834', not '0.8338591957092285'."""
    n_digits = interval_digits(estimate["ci_low"], estimate["ci_high"], base_digits(higher_is_better), estimate["mean"])
    return round(float(estimate["mean"]), n_digits)


def leaderboard_heads(analysis: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (structure, metric): #1, its mean (a number, for diffs and sorting, rounded as printed), its mean [CI] as
    every view prints it, the verdict on #1 versus #2 in the words every view prints (docs/methodology.md#57-verdicts)
    and as a number for plots (``CODE_NUMBER``; none for a single ranked model), the number of cases, and when #1 left
    any case identical to the reference (``analysis.models.<model>.identical_to_reference``) ``first_identical_to_reference``,
    'k of n cases': a #1 that returned the reference is flagged where its mean is read. (A verdict's limit, a sentence,
    stays in the results and the views that print sentences: a DVC column of it would make every table a page wide.)

    The keys sort into reading order (``dvc metrics show`` sorts its columns). A cell without a ranked
    model is left out.
    """
    heads: dict[tuple[str, str], dict[str, Any]] = {}
    for structure, block in sorted(analysis["structures"].items()):
        for metric, cell in sorted(block["metrics"].items()):
            verdict = cell.get("verdict")
            if verdict is None:
                continue
            estimate = cell["models"][verdict["first"]]
            identical = (analysis.get("models", {}).get(verdict["first"]) or {}).get("identical_to_reference") or {}
            heads[structure, metric] = {
                "first": verdict["first"],
                "mean": shown_mean(estimate, bool(cell["higher_is_better"])),
                "mean_ci": format_estimate(estimate["mean"], estimate["ci_low"], estimate["ci_high"], metric, bool(cell["higher_is_better"])),
                "n": block["n_cases"],
                "verdict": CODE_WORDS[verdict["code"]],
                **({"verdict_number": CODE_NUMBER[verdict["code"]]} if verdict["code"] in CODE_NUMBER else {}),
                **({"first_identical_to_reference": f"{identical['cases']} of {identical['of']} cases"} if identical.get("cases") else {}),
            }
    return heads


def mean_ci_rows(analysis: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per structure, metric and model: ``cell`` ('<structure> <metric>'), model, mean, CI bounds and
    ``interval``, the CI in words (``ci_words``: method and level), which the plot's panel header shows.

    Rows follow the leaderboard order (ranked models by rank, then the unranked ones by name).
    """
    rows = []
    for structure, block in sorted(analysis["structures"].items()):
        for metric, cell in sorted(block["metrics"].items()):
            ranked = list((cell.get("ranking") or {}).get("order") or [])
            for model in ranked + sorted(m for m in cell["models"] if m not in ranked):
                estimate = cell["models"][model]
                if estimate["mean"] is None:
                    continue
                rows.append(
                    {
                        "cell": f"{structure} {metric}",
                        "model": model,
                        **{key: estimate[key] for key in ("mean", "ci_low", "ci_high")},
                        "interval": ci_words(analysis["settings"], cell.get("ci_confidence")),
                    }
                )
    return rows
