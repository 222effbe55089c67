"""The leaderboard as flat numbers for an MLflow run: every cell of the site's leaderboards as a metric.

Read from the results JSON with the site's own verdict, so MLflow and the site never disagree.
"""

from __future__ import annotations

from typing import Any

from segbench.stats.verdicts import CODE_NUMBER


def summary_metrics(results: dict[str, Any]) -> dict[str, float]:
    """``<structure>.<metric>.<model>.<statistic>`` for every model: mean, ci_low, ci_high and, for ranked
    models, p_rank1, rank_low, rank_high and separable_from_next (all but the last ranked model)."""
    metrics: dict[str, float] = {}
    for structure, block in results["analysis"]["structures"].items():
        for metric, cell in block["metrics"].items():
            ranking = cell.get("ranking") or {}
            order = ranking.get("order") or []
            for model, estimate in cell["models"].items():
                key = f"{structure}.{metric}.{model}"
                metrics.update({f"{key}.{s}": estimate[s] for s in ("mean", "ci_low", "ci_high") if estimate[s] is not None})
                if model in order:
                    lo, hi = ranking["rank_interval"][model]
                    metrics.update({f"{key}.p_rank1": ranking["p_rank1"][model], f"{key}.rank_low": lo, f"{key}.rank_high": hi})
            for v in (cell.get("verdict") or {}).get("pairs") or []:
                metrics[f"{structure}.{metric}.{v['a']}.separable_from_next"] = CODE_NUMBER[v["code"]]
    return metrics


def summary_params(results: dict[str, Any]) -> dict[str, str]:
    """The statistics settings, data version and models the leaderboard was computed with."""
    settings = {f"stats.{k}": str(v) for k, v in results["analysis"]["settings"].items()}
    return {
        **settings,
        "dataset.version": str(results["dataset"].get("version")),
        "models": ",".join(sorted(results["models"])),
        "segbench_version": str(results["segbench_version"]),
    }
