"""The head of every leaderboard, and each model's mean with its CI, in the flat shapes DVC reads.

``dvc metrics show``, ``dvc metrics diff`` and ``dvc exp show`` compare experiments by the scalar leaves
of a metrics file; ``dvc plots`` draws rows of a table. Both are read from an ``analyze`` results dict
(see ``segbench.stats.analysis``), nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PLOT_COLUMNS = ("cell", "model", "mean", "ci_low", "ci_high")


def leaderboard_heads(analysis: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per structure and metric: #1, its mean [CI], P(rank 1), #2, and whether #2 is separable from #1.

    ``second_separable`` is the paired-bootstrap verdict (CI of the difference, family-wise adjusted,
    excludes 0); ``second_significant`` is the Wilcoxon-Holm map's "#1 significantly better than #2"
    (docs/methodology.md, statistics). A cell with fewer than two ranked models has no #2 fields;
    a cell without a ranked model is left out.
    """
    heads: dict[str, dict[str, dict[str, Any]]] = {}
    for structure, block in sorted(analysis["structures"].items()):
        for metric, cell in sorted(block["metrics"].items()):
            ranking = cell.get("ranking")
            if not ranking or not ranking["order"]:
                continue
            first = ranking["order"][0]
            estimate = cell["models"][first]
            head: dict[str, Any] = {
                "first": first,
                "mean": estimate["mean"],
                "ci_low": estimate["ci_low"],
                "ci_high": estimate["ci_high"],
                "p_rank1": ranking["p_rank1"][first],
                "n_cases": block["n_cases"],
            }
            if len(ranking["order"]) > 1:
                second = ranking["order"][1]
                pair = next(p for p in cell["pairwise"] if (p["a"], p["b"]) == (first, second))
                head.update(
                    second=second,
                    second_separable=bool(pair["separable"]),
                    second_significant=bool(cell["significance"]["significant"][first][second]),
                )
            heads.setdefault(structure, {})[metric] = head
    return heads


def mean_ci_rows(analysis: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per structure, metric and model: ``cell`` ('<structure> <metric>'), model, mean, CI bounds.

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
                rows.append({"cell": f"{structure} {metric}", "model": model,
                             **{key: estimate[key] for key in ("mean", "ci_low", "ci_high")}})
    return rows
