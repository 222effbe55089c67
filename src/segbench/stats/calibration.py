"""Calibration audit (docs/methodology.md, "Calibration audit"): do segbench's statistics keep their promises?

The scored population (every case of a dataset, simulated models of known quality) is the truth: its per-model mean
is the value a CI should cover. Models of equal true quality (same error distribution, different seeds) still differ
a little in a finite population; in every sampled case their values are dealt to them in random order, which makes
them exactly equal in the population, so that any verdict between them is false. For each sample size n the
audit draws ``draws`` samples of n cases with replacement and runs the real analysis pieces on each one, with the
settings of the leaderboard: the paired case bootstrap and its percentile and BCa intervals
(``resampling``), the Holm-adjusted "separable" verdict over every pair (``pairwise.separability``), the
Wilcoxon-Holm significance map (``pairwise.wilcoxon_map``) and the paired-t power formula (``power``). It measures

- coverage: the share of samples whose 95 % CI of a model's mean holds the population mean;
- type-I error, family-wise: the share of samples in which any pair of equal-quality models is called separable
  (or significant in either direction on the map), which Holm bounds by alpha;
- power: per pair of models of different quality, the share of samples that separate them in the right direction,
  beside the power the paired t-test formula predicts at n for the population's effect size.

Every rate carries its Monte-Carlo standard error sqrt(p (1 - p) / draws). Pure functions of arrays; the stage
(``segbench.stages.run_calibration_audit``) reads the scores and writes the results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps
from threadpoolctl import threadpool_limits

from .pairwise import pair_indices, separability, wilcoxon_map
from .power import cases_needed, paired_t_power
from .resampling import bootstrap_means, intervals, jackknife_means, rng_for
from .settings import CI_METHODS, StatsSettings

#: the separable verdict is audited under each CI method; the map does not depend on it
PROCEDURES = (*(f"separable_{m}" for m in CI_METHODS), "wilcoxon_holm")


def population(
    rows: pd.DataFrame, models: Sequence[str], structures: Sequence[str], metrics: Sequence[str]
) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per structure: its case ids and the (M metrics, K models, N cases) values of the scored population.

    Cases whose reference lacks the structure are left out (as the leaderboard leaves them out). Every model
    must have every remaining case once, with a finite value: anything else is an error naming the cell.
    """
    out = {}
    for structure in structures:
        block = rows[(rows["structure"] == structure) & rows["reference_present"].astype(bool)]
        if block.empty:
            raise ValueError(f"calibration scores: no case has a reference {structure!r}")
        cases = sorted(block["case_id"].unique())
        values = np.empty((len(metrics), len(models), len(cases)))
        for k, model in enumerate(models):
            own = block[block["model"] == model]
            if own["case_id"].duplicated().any() or set(own["case_id"]) != set(cases):
                missing = sorted(set(cases) - set(own["case_id"]))[:5]
                raise ValueError(f"calibration scores: model {model!r}, {structure}: cases missing {missing} or duplicated")
            own = own.set_index("case_id").loc[cases]
            for m, metric in enumerate(metrics):
                column = own[metric].to_numpy(dtype=float)
                if not np.isfinite(column).all():
                    bad = own.index[~np.isfinite(column)][0]
                    raise ValueError(f"calibration scores: model {model!r}, case {bad}, {structure}: {metric} is not a finite number")
                values[m, k] = column
        out[structure] = (cases, values)
    return out


def draw_cases(n_population: int, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws, n) case indices: each row a sample of n cases drawn with replacement from the population."""
    return rng.integers(0, n_population, size=(draws, n))


def rate(hits: np.ndarray) -> dict[str, float]:
    """Share of True in ``hits`` with its Monte-Carlo standard error."""
    p = float(np.mean(hits))
    return {"rate": p, "mc_se": math.sqrt(p * (1.0 - p) / hits.size)}


def audit_sample(
    values: np.ndarray, higher: Sequence[bool], n_resamples: int, rng: np.random.Generator, settings: StatsSettings, wilcoxon: bool,
) -> dict[str, np.ndarray]:
    """The analysis of one sample's (M, K, n) values, as the leaderboard computes it.

    Returns per CI method the (M, K) CI bounds of the means, per procedure the (M, P) pair verdicts (signed:
    +1 the first model of the pair is called better, -1 the second, 0 neither; the map's row is NaN when
    ``wilcoxon`` is False). One paired bootstrap serves every metric and model, as in the analysis.
    """
    n_metrics, n_models, n = values.shape
    flat = values.reshape(n_metrics * n_models, n)
    boot, _ = bootstrap_means(flat, n_resamples, rng)
    estimate, jack = flat.mean(axis=1), jackknife_means(flat)
    ordered = np.sort(boot, axis=0)
    level = np.full(flat.shape[0], 1.0 - settings.confidence)
    out: dict[str, np.ndarray] = {}
    for method in CI_METHODS:
        low, high = intervals(ordered, estimate, jack, level, method, presorted=True)
        out[f"low_{method}"], out[f"high_{method}"] = low.reshape(n_metrics, n_models), high.reshape(n_metrics, n_models)
    a, b = pair_indices(n_models)
    boot3, est2, jack3 = boot.reshape(-1, n_metrics, n_models), estimate.reshape(n_metrics, n_models), jack.reshape(n, n_metrics, n_models)
    for method in CI_METHODS:
        verdict = np.zeros((n_metrics, a.size))
        for m in range(n_metrics):
            diff = est2[m, a] - est2[m, b]
            sep = separability(boot3[:, m, a] - boot3[:, m, b], diff, jack3[:, m, a] - jack3[:, m, b],
                               alpha=settings.alpha, correction=settings.multiple_comparison, ci_method=method)
            sign = np.sign(diff) if higher[m] else -np.sign(diff)
            verdict[m] = np.where(sep["separable"], sign, 0.0)
        out[f"separable_{method}"] = verdict
    verdict = np.full((n_metrics, a.size), np.nan)
    if wilcoxon:
        for m in range(n_metrics):
            significant = wilcoxon_map(values[m], higher[m], settings.alpha)["significant"]
            verdict[m] = significant[a, b].astype(float) - significant[b, a].astype(float)
    out["wilcoxon_holm"] = verdict
    return out


def audit_draws(
    values: np.ndarray, higher: Sequence[bool], equal: Sequence[int], n: int, draws: int, wilcoxon_draws: int, n_resamples: int,
    rng: np.random.Generator, settings: StatsSettings,
) -> dict[str, np.ndarray]:
    """Every sample of one (structure, n): per key of :func:`audit_sample`, its results stacked over ``draws``.

    The models at indices ``equal`` are made exchangeable: in each sampled case their values are dealt to them in
    random order (:func:`exchange`), so that they are equal in the population itself and every verdict between
    them is a false one. The Wilcoxon map runs on the first ``wilcoxon_draws`` samples only (scipy's exact test
    for n <= 50 runs pair by pair, about 5 ms a call); its rows of the later samples are NaN.
    """
    picks = draw_cases(values.shape[2], n, draws, rng)
    order = rng.permuted(np.broadcast_to(np.asarray(equal), (draws, n, len(equal))), axis=2)
    results = [
        audit_sample(exchange(values, idx, equal, order[r]), higher, n_resamples, rng, settings, r < wilcoxon_draws)
        for r, idx in enumerate(picks)
    ]
    return {key: np.stack([res[key] for res in results]) for key in results[0]}


def exchange(values: np.ndarray, idx: np.ndarray, equal: Sequence[int], order: np.ndarray) -> np.ndarray:
    """The (M, K, n) values of the sampled cases ``idx``, the equal models' values dealt in ``order`` (n, E): in
    sampled case j, equal model ``equal[e]`` gets the value of model ``order[j, e]``."""
    sample = values[:, :, idx]
    sample[:, list(equal), :] = values[:, order.T, idx[None, :]]
    return sample


def population_truth(values: np.ndarray, equal: Sequence[int]) -> np.ndarray:
    """(M, K) population means, the equal models' replaced by their common mean (what :func:`exchange` makes them)."""
    mean = values.mean(axis=2)
    mean[:, list(equal)] = mean[:, list(equal)].mean(axis=1, keepdims=True)
    return mean


def summarize(
    stacked: Mapping[str, Mapping[int, Mapping[str, np.ndarray]]], truth: Mapping[str, np.ndarray], models: Sequence[str],
    equal: Sequence[str], metrics: Mapping[str, bool], settings: StatsSettings,
) -> dict[str, list[dict]]:
    """Coverage, type-I error and power from every structure's and n's stacked sample results.

    ``stacked[structure][n]`` is :func:`audit_draws`' output; ``truth[structure]`` the (M, K, N) population values.
    A pair's effect is that of the population's per-case differences (between an equal model and a graded one,
    the first equal model's).
    """
    a, b = pair_indices(len(models))
    is_equal = np.array([models[i] in equal and models[j] in equal for i, j in zip(a, b)])
    equal_idx = [models.index(m) for m in equal]
    coverage, type1, power = [], [], []
    for structure, by_n in stacked.items():
        pop = truth[structure]
        mean = population_truth(pop, equal_idx)
        for n, res in by_n.items():
            for m, (metric, higher) in enumerate(metrics.items()):
                cell = {"structure": structure, "metric": metric, "n": n}
                for method in CI_METHODS:
                    low, high = res[f"low_{method}"][:, m], res[f"high_{method}"][:, m]
                    below, above = high < mean[m], low > mean[m]
                    covered = ~(below | above)
                    coverage.append({
                        **cell, "method": method, **rate(covered.ravel()),
                        "coverage_min_model": float(covered.mean(axis=0).min()), "coverage_max_model": float(covered.mean(axis=0).max()),
                        "miss_below": float(below.mean()), "miss_above": float(above.mean()),
                    })
                    # the models' CIs come from the same samples: their pooled rate is no more precise than one model's
                    coverage[-1]["mc_se"] = math.sqrt(coverage[-1]["rate"] * (1.0 - coverage[-1]["rate"]) / covered.shape[0])
                for procedure in PROCEDURES:
                    verdict = res[procedure][:, m]
                    verdict = verdict[~np.isnan(verdict).any(axis=1)]
                    type1.append({**cell, "procedure": procedure, "draws": int(verdict.shape[0]),
                                  **rate((verdict[:, is_equal] != 0).any(axis=1))})
                    for p in np.flatnonzero(~is_equal):
                        diffs = pop[m, a[p]] - pop[m, b[p]]
                        truth_sign = float(np.sign(diffs.mean()) if higher else -np.sign(diffs.mean()))
                        better, worse = (models[a[p]], models[b[p]]) if truth_sign > 0 else (models[b[p]], models[a[p]])
                        need = cases_needed(diffs, settings.alpha, settings.power)
                        power.append({
                            **cell, "procedure": procedure, "better": better, "worse": worse, "draws": int(verdict.shape[0]),
                            "true_mean_diff": abs(need["mean_diff"]), "effect_size": need["effect_size"],
                            **rate(verdict[:, p] == truth_sign), "wrong_direction": float(np.mean(verdict[:, p] == -truth_sign)),
                            "predicted_power": predicted_power(n, need["effect_size"], settings.alpha),
                            "n_required": need["n_required"],
                        })
    return {"coverage": coverage, "type1": type1, "power": power}


def predicted_power(n: int, effect: float, alpha: float) -> float:
    """The power segbench's paired-t formula (``power.paired_t_power``) gives at n for effect d_z; where scipy's
    noncentral t returns NaN (very large noncentrality) the normal approximation, then indistinguishable from 1."""
    value = paired_t_power(n, effect, alpha)
    return value if math.isfinite(value) else float(sps.norm.sf(sps.norm.isf(alpha / 2.0) - effect * math.sqrt(n)))


def _audit_task(task: tuple) -> tuple[str, int, dict[str, np.ndarray]]:
    """One (structure, n) on one BLAS thread, as the analysis runs (the same bytes whatever the core count)."""
    structure, n, values, higher, equal, draws, wilcoxon_draws, n_resamples, seed, settings = task
    rng = rng_for(seed, "calibration", structure, str(n))
    with threadpool_limits(limits=1, user_api="blas"):
        return structure, n, audit_draws(values, higher, equal, n, draws, wilcoxon_draws, n_resamples, rng, settings)


def audit(
    rows: pd.DataFrame, *, models: Sequence[str], equal: Sequence[str], structures: Sequence[str], metrics: Mapping[str, bool],
    n_cases: Sequence[int], draws: int, wilcoxon_draws: int, n_resamples: int, seed: int, settings: StatsSettings, workers: int = 1,
) -> dict:
    """The whole audit of the scored population ``rows`` (one row per model x case x structure): a JSON-ready dict.

    Each (structure, n) draws its samples from its own generator (seed and names), so adding an n or a structure
    leaves the others' samples unchanged; ``workers`` processes share the (structure, n) tasks.
    """
    from concurrent.futures import ProcessPoolExecutor

    truth = {s: v for s, (_, v) in population(rows, models, structures, list(metrics)).items()}
    higher = list(metrics.values())
    equal_idx = [list(models).index(m) for m in equal]
    tasks = [(s, n, truth[s], higher, equal_idx, draws, min(wilcoxon_draws, draws), n_resamples, seed, settings) for s in structures for n in n_cases]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_audit_task, tasks))
    else:
        done = [_audit_task(t) for t in tasks]
    stacked: dict[str, dict[int, dict[str, np.ndarray]]] = {s: {} for s in structures}
    for structure, n, res in done:
        stacked[structure][n] = res
    summary = summarize(stacked, truth, models, equal, metrics, settings)
    pop = {
        s: {"n_cases": int(v.shape[2]), "metrics": {
            metric: {"higher_is_better": metrics[metric], "mean": dict(zip(models, v[m].mean(axis=1).tolist())),
                     "truth": dict(zip(models, population_truth(v, equal_idx)[m].tolist())),
                     "sd": dict(zip(models, v[m].std(axis=1, ddof=1).tolist())),
                     "skewness": dict(zip(models, sps.skew(v[m], axis=1).tolist()))}
            for m, metric in enumerate(metrics)}}
        for s, v in truth.items()
    }
    return {
        "models": list(models), "equal": list(equal), "n_cases": list(n_cases), "draws": draws, "wilcoxon_draws": min(wilcoxon_draws, draws),
        "n_resamples": n_resamples, "seed": seed, "stats": settings.to_dict(), "population": pop, **summary,
    }


def tables(audit_result: Mapping) -> dict[str, pd.DataFrame]:
    """The audit's three tables (coverage, type-I error, power) as data frames, one row per entry."""
    return {key: pd.DataFrame(audit_result[key]) for key in ("coverage", "type1", "power")}
