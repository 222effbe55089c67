"""One model, two datasets (docs/methodology.md#522-one-model-two-datasets): for two real boards that rank the same
models on the same structure and metric, the two rankings side by side, their Spearman rank correlation with a
percentile bootstrap interval (cases resampled within each set, independently), the models whose rank moves most, and
whether each set's #1 is among the other's co-winners.

An assembly over results documents (as ``assembly/results_document.py`` assembles one): it takes their cells (``per_case`` on the
shared cases, ``ranking``, ``verdict``) and returns plain dicts; which published model is which across sets is the
caller's ``aliases``. It sits outside ``stats/`` so that the stages loading the whole statistics engine (compare, the
calibration audit) do not depend on it.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.stats import rankdata

#: fewest models two boards must share for a rank correlation (with two, it is always +1 or -1)
MIN_SHARED_MODELS = 3


def canonical(aliases: Mapping[str, Mapping[str, str]], dataset: str, model: str) -> str:
    """The name a model goes by across sets: its alias in ``aliases[dataset]``, else its own name."""
    return aliases.get(dataset, {}).get(model, model)


def _ranks(means: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Rank 1 = best along the last axis (average ranks for ties)."""
    return rankdata(-means if higher_is_better else means, axis=-1)


def _spearman(ranks_a: np.ndarray, ranks_b: np.ndarray) -> np.ndarray:
    """Pearson's correlation of two rank arrays along the last axis: Spearman's rho, with ties as average ranks."""
    a = ranks_a - ranks_a.mean(axis=-1, keepdims=True)
    b = ranks_b - ranks_b.mean(axis=-1, keepdims=True)
    return (a * b).sum(axis=-1) / np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))


def _resampled_means(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Each model's mean over ``n_resamples`` case bootstraps of ``values`` (cases x models): the multinomial count of
    each case per resample times its values, so no resample is materialised case by case."""
    n = values.shape[0]
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    return counts @ values / n


def cross_cell(
    a: Mapping[str, Any], b: Mapping[str, Any], models: list[tuple[str, str]], higher_is_better: bool, n_resamples: int, confidence: float, seed: int, key: str
) -> dict[str, Any]:
    """One structure and metric on two boards: ``a`` and ``b`` are the results cells, ``models`` the shared models as
    (name in a, name in b), ``key`` names the cell in the seed (so each cell's resamples are its own)."""
    names_a, names_b = [m for m, _ in models], [m for _, m in models]
    means_a = np.array([a["models"][m]["mean"] for m in names_a])
    means_b = np.array([b["models"][m]["mean"] for m in names_b])
    ranks_a, ranks_b = _ranks(means_a, higher_is_better), _ranks(means_b, higher_is_better)
    rho = float(_spearman(ranks_a, ranks_b))
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    boot = [
        _resampled_means(np.array([cell["per_case"][m] for m in names], dtype=np.float64).T, n_resamples, rng) for cell, names in ((a, names_a), (b, names_b))
    ]
    rhos = _spearman(_ranks(boot[0], higher_is_better), _ranks(boot[1], higher_is_better))
    rhos = rhos[np.isfinite(rhos)]
    tail = (1.0 - confidence) / 2.0
    moves = ranks_b - ranks_a
    largest = float(np.abs(moves).max())
    rows = [
        {
            "model": ma,
            "model_b": mb,
            "mean_a": float(means_a[i]),
            "mean_b": float(means_b[i]),
            "rank_a": float(ranks_a[i]),
            "rank_b": float(ranks_b[i]),
            "board_rank_a": a["ranking"]["order"].index(ma) + 1,
            "board_rank_b": b["ranking"]["order"].index(mb) + 1,
            "move": float(moves[i]),
        }
        for i, (ma, mb) in enumerate(models)
    ]
    rows.sort(key=lambda r: (r["rank_a"], r["model"]))
    first_a, first_b = a["ranking"]["order"][0], b["ranking"]["order"][0]
    to_b, to_a = dict(models), {mb: ma for ma, mb in models}
    return {
        "n_models": len(models),
        "n_cases_a": len(next(iter(a["per_case"].values()))),
        "n_cases_b": len(next(iter(b["per_case"].values()))),
        "spearman": rho,
        "ci_low": float(np.quantile(rhos, tail)),
        "ci_high": float(np.quantile(rhos, 1.0 - tail)),
        "n_resamples": n_resamples,
        "confidence": confidence,
        "models": rows,
        "largest_move": largest,
        "moved_most": sorted(r["model"] for r in rows if abs(r["move"]) == largest and largest > 0),
        "first_a": first_a,
        "first_a_among_b_co_winners": to_b[first_a] in b["verdict"]["co_winners"] if first_a in to_b else None,
        "first_b": first_b,
        "first_b_among_a_co_winners": to_a[first_b] in a["verdict"]["co_winners"] if first_b in to_a else None,
    }


def cross_pair(
    a: Mapping[str, Any], b: Mapping[str, Any], aliases: Mapping[str, Mapping[str, str]], n_resamples: int, confidence: float, seed: int
) -> dict[str, Any] | None:
    """Two results documents side by side, per structure and metric both rank with at least ``MIN_SHARED_MODELS``
    shared models; None when they share no such cell."""
    name_a, name_b = a["dataset"]["name"], b["dataset"]["name"]
    cells: dict[str, dict[str, Any]] = {}
    for structure in sorted(set(a["analysis"]["structures"]) & set(b["analysis"]["structures"])):
        metrics_a, metrics_b = a["analysis"]["structures"][structure]["metrics"], b["analysis"]["structures"][structure]["metrics"]
        for metric in sorted(set(metrics_a) & set(metrics_b)):
            cell_a, cell_b = metrics_a[metric], metrics_b[metric]
            if not cell_a.get("ranking") or not cell_b.get("ranking"):
                continue
            in_b = {canonical(aliases, name_b, m): m for m in cell_b["ranking"]["order"]}
            models = [(m, in_b[canonical(aliases, name_a, m)]) for m in cell_a["ranking"]["order"] if canonical(aliases, name_a, m) in in_b]
            if len(models) < MIN_SHARED_MODELS:
                continue
            key = f"{name_a}|{name_b}|{structure}|{metric}"
            cells.setdefault(structure, {})[metric] = cross_cell(cell_a, cell_b, models, bool(cell_a["higher_is_better"]), n_resamples, confidence, seed, key)
    if not cells:
        return None
    return {"a": name_a, "b": name_b, "title_a": a["dataset"]["title"], "title_b": b["dataset"]["title"], "structures": cells}
