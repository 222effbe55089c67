"""Calibration audit (docs/methodology.md, "Calibration audit"): do segbench's statistics keep their promises?

A population is the truth: its per-model mean is the value a CI should cover. Two kinds are audited: every case of a
dataset scored for simulated models of known quality (``population``), and the per-case scores that real models
published (``ranked_populations``: per structure, the cases every model reports and the models at given ranks).
Models of equal true quality (same error distribution, different seeds) still differ
a little in a finite population; in every sampled case their values are dealt to them in random order, which makes
them exactly equal in the population, so that any verdict between them is false. For each sample size n the
audit draws ``draws`` samples of n cases with replacement and runs the real analysis pieces on each one, with the
settings of the leaderboard: the paired case bootstrap and every selectable CI method, plus the bootstrap-t
candidates the leaderboard does not offer (``AUDIT_CI_METHODS``, ``resampling``), the Holm-adjusted "separable"
verdict over every pair under each CI method (``pairwise.separability``), the sign-flip permutation test of the
mean difference with Holm (``pairwise.sign_flips`` through ``pairwise.separability``, as the leaderboard decides), the Wilcoxon-Holm significance map
(``pairwise.wilcoxon_map``) and the paired-t power formula (``power``). It measures

- coverage: the share of samples whose 95 % CI of a model's mean holds the population mean, and the CIs' median width;
- type-I error, family-wise: the share of samples in which any pair of equal-quality models is called separable
  (or significant in either direction on the map), which Holm bounds by alpha;
- power: per pair of models of different quality, the share of samples that separate them in the right direction,
  beside the power the paired t-test formula predicts at n for the population's effect size.
- calibrated levels: per metric, the skew_t level whose coverage reaches the confidence, and that rule's coverage
  measured out of sample (``levels``; the leaderboard's CIs use it under ``stats.ci_level: audited``).

Every rate carries its Monte-Carlo standard error sqrt(p (1 - p) / draws). Pure functions of arrays; the stage
(``segbench.stages.calibration_audit``) reads the scores and writes the results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps
from threadpoolctl import threadpool_limits

from .bootstrap_t import studentized_bootstrap
from .identical import identical_to_reference
from .levels import level_rows, population_truth
from .pairwise import MeanTest, pair_indices, separability, sign_flips, wilcoxon_map
from .power import cases_needed, paired_t_power
from .resampling import bootstrap_means, intervals, jackknife_means, rng_for, studentized_bounds
from .settings import CI_METHODS, StatsSettings
from .shapes import Shape, ShapePlan, audit_shapes, centred_pairs, shape_tables

#: the leaderboard's CI methods, then the bootstrap-t candidates audited beside them: on the plain scale, and on the
#: logit (scores in [0, 1]) or log (distances) scale
AUDIT_CI_METHODS = (*CI_METHODS, "studentized", "studentized_logit")
#: the separable verdict under each CI method, the sign-flip test of the mean difference (Holm), the sign flips and the
#: studentized bootstrap together (Holm; the board's test), the Wilcoxon-Holm map
PROCEDURES = (*(f"separable_{m}" for m in CI_METHODS), "signflip_holm", "meantest_holm", "wilcoxon_holm")
#: the procedure behind the separable verdict per ``pairwise_test`` (``bootstrap_ci``: by its CI method)
TEST_PROCEDURE = {"sign_flip": "signflip_holm", "sign_flip_bootstrap_t": "meantest_holm"}
#: ``Population.source`` of the simulated models scored by the score stage
SIMULATED = "simulated"


@dataclass(frozen=True)
class Population:
    """One audited population: the (M metrics, K models, N cases) ``values`` whose per-model means are the truth."""

    source: str
    structure: str
    models: tuple[str, ...]
    equal: tuple[str, ...]
    metrics: dict[str, bool]  # metric -> higher is better
    values: np.ndarray

    @property
    def name(self) -> str:
        """The structure for the simulated population, 'source/structure' for a published one."""
        return self.structure if self.source == SIMULATED else f"{self.source}/{self.structure}"


def verdict_procedure(settings: Mapping) -> str:
    """The audited procedure behind the leaderboard's separable verdict under ``settings`` (a StatsSettings dict)."""
    return TEST_PROCEDURE.get(str(settings.get("pairwise_test")), f"separable_{settings['ci_method']}")


def population(rows: pd.DataFrame, models: Sequence[str], structures: Sequence[str], metrics: Sequence[str]) -> dict[str, tuple[list[str], np.ndarray]]:
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


def ranked_populations(rows: pd.DataFrame, source: str, metrics: Mapping[str, bool], ranks: Sequence[int]) -> list[Population]:
    """Per structure of a published set's ``rows``: a population of real models' per-case scores.

    Its cases are those with a reference where every model of the set reports a finite value of every metric; its
    models are those at ``ranks`` (1 = best mean of the first metric, ties by name), in that order. The first two
    are the equal pair (their values are exchanged per sampled case); the others are graded against them.
    """
    first, higher = next(iter(metrics.items()))
    out = []
    for structure, block in rows[rows["reference_present"].astype(bool)].groupby("structure", sort=True):
        if block.duplicated(["model", "case_id"]).any():
            raise ValueError(f"calibration: {source}, {structure}: a model reports a case twice")
        tables = {m: block.pivot(index="case_id", columns="model", values=m).astype(float) for m in metrics}
        complete = np.logical_and.reduce([np.isfinite(t.to_numpy()).all(axis=1) for t in tables.values()])
        means = tables[first][complete].mean()
        ordered = sorted(means.index, key=lambda model: (-means[model] if higher else means[model], model))
        if max(ranks) > len(ordered):
            raise ValueError(f"calibration: {source}, {structure}: rank {max(ranks)} asked, {len(ordered)} models")
        models = tuple(ordered[r - 1] for r in ranks)
        values = np.stack([tables[m][complete][list(models)].to_numpy().T for m in metrics])
        out.append(Population(source, str(structure), models, models[:2], dict(metrics), values))
    return out


def draw_cases(n_population: int, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws, n) case indices: each row a sample of n cases drawn with replacement from the population."""
    return rng.integers(0, n_population, size=(draws, n))


def rate(hits: np.ndarray) -> dict[str, float]:
    """Share of True in ``hits`` with its Monte-Carlo standard error."""
    p = float(np.mean(hits))
    return {"rate": p, "mc_se": math.sqrt(p * (1.0 - p) / hits.size)}


def audit_sample(
    values: np.ndarray,
    higher: Sequence[bool],
    n_resamples: int,
    rng: np.random.Generator,
    flip_rng: np.random.Generator,
    t_rng: np.random.Generator,
    settings: StatsSettings,
    wilcoxon: bool,
) -> dict[str, np.ndarray]:
    """The analysis of one sample's (M, K, n) values, as the leaderboard computes it.

    Returns per CI method of ``AUDIT_CI_METHODS`` the (M, K) CI bounds of the means, per procedure the (M, P) pair
    verdicts (signed: +1 the first model of the pair is called better, -1 the second, 0 neither; the map's row is
    NaN when ``wilcoxon`` is False). One paired bootstrap of the values and their squares serves every metric, model
    and method, as in the analysis; the sign flips come from ``flip_rng`` and the studentized bootstrap test's resamples
    from ``t_rng``, so the other draws do not depend on them.
    """
    n_metrics, n_models, n = values.shape
    flat = values.reshape(n_metrics * n_models, n)
    moments, _ = bootstrap_means(np.concatenate([flat, flat**2]), n_resamples, rng)
    boot, boot_sq = moments[:, : flat.shape[0]], moments[:, flat.shape[0] :]
    estimate, jack = flat.mean(axis=1), jackknife_means(flat)
    ordered = np.sort(boot, axis=0)
    level = np.full(flat.shape[0], 1.0 - settings.confidence)
    out: dict[str, np.ndarray] = {}
    for method in CI_METHODS:
        low, high = intervals(ordered, estimate, jack, level, method, presorted=True)
        out[f"low_{method}"], out[f"high_{method}"] = low.reshape(n_metrics, n_models), high.reshape(n_metrics, n_models)
    rows = np.arange(flat.shape[0]).reshape(n_metrics, n_models)
    for method, scaled in (("studentized", False), ("studentized_logit", True)):
        low, high = np.empty((n_metrics, n_models)), np.empty((n_metrics, n_models))
        for m in range(n_metrics):
            scale = ("logit" if higher[m] else "log") if scaled else "none"
            r = rows[m]
            low[m], high[m] = studentized_bounds(boot[:, r], boot_sq[:, r], estimate[r], (flat[r] ** 2).mean(axis=1), n, 1.0 - settings.confidence, scale)
        out[f"low_{method}"], out[f"high_{method}"] = low, high
    a, b = pair_indices(n_models)
    boot3, est2, jack3 = boot.reshape(-1, n_metrics, n_models), estimate.reshape(n_metrics, n_models), jack.reshape(n, n_metrics, n_models)
    sign = np.where(np.asarray(higher)[:, None], 1.0, -1.0) * np.sign(est2[:, a] - est2[:, b])
    for method in CI_METHODS:
        verdict = np.zeros((n_metrics, a.size))
        for m in range(n_metrics):
            sep = separability(
                boot3[:, m, a] - boot3[:, m, b],
                est2[m, a] - est2[m, b],
                jack3[:, m, a] - jack3[:, m, b],
                alpha=settings.alpha,
                correction=settings.multiple_comparison,
                ci_method=method,
            )
            verdict[m] = np.where(sep["separable"], sign[m], 0.0)
        out[f"separable_{method}"] = verdict
    rows = values.reshape(-1, n)  # (metric, model) rows: the pairs of metric m are rows m K + a and m K + b
    first, second = (np.arange(n_metrics)[:, None] * n_models + np.stack([a, b])[:, None, :]).reshape(2, -1)
    diffs = rows[first] - rows[second]
    flips = sign_flips(diffs, n_resamples, flip_rng, settings.alpha, factors=(rows, first, second))
    both = MeanTest(flips, studentized_bootstrap(diffs, n_resamples, t_rng, settings.alpha, factors=(rows, first, second)))
    for procedure, test in (("signflip_holm", flips), ("meantest_holm", both)):
        verdict = np.zeros((n_metrics, a.size))
        for m in range(n_metrics):  # the leaderboard's verdict: Holm over the test, its inverted intervals beside it
            sep = separability(
                boot3[:, m, a] - boot3[:, m, b],
                est2[m, a] - est2[m, b],
                None,
                alpha=settings.alpha,
                correction=settings.multiple_comparison,
                ci_method=settings.ci_method,
                test=test.part(slice(m * a.size, (m + 1) * a.size)),
            )
            verdict[m] = np.where(sep["separable"], sign[m], 0.0)
        out[procedure] = verdict
    verdict = np.full((n_metrics, a.size), np.nan)
    if wilcoxon:
        for m in range(n_metrics):
            significant = wilcoxon_map(values[m], higher[m], settings.alpha)["significant"]
            verdict[m] = significant[a, b].astype(float) - significant[b, a].astype(float)
    out["wilcoxon_holm"] = verdict
    return out


def audit_draws(
    values: np.ndarray,
    higher: Sequence[bool],
    equal: Sequence[int],
    n: int,
    draws: int,
    wilcoxon_draws: int,
    n_resamples: int,
    rng: np.random.Generator,
    flip_rng: np.random.Generator,
    t_rng: np.random.Generator,
    settings: StatsSettings,
) -> dict[str, np.ndarray]:
    """Every sample of one (population, n): per key of :func:`audit_sample`, its results stacked over ``draws``.

    The models at indices ``equal`` are made exchangeable: in each sampled case their values are dealt to them in
    random order (:func:`exchange`), so that they are equal in the population itself and every verdict between
    them is a false one. The Wilcoxon map runs on the first ``wilcoxon_draws`` samples only (scipy's exact test
    for n <= 50 runs pair by pair, slow per call; timed: benchmarks/README.md); its rows of the later samples are NaN.
    """
    picks = draw_cases(values.shape[2], n, draws, rng)
    order = rng.permuted(np.broadcast_to(np.asarray(equal), (draws, n, len(equal))), axis=2)
    results = [
        audit_sample(exchange(values, idx, equal, order[r]), higher, n_resamples, rng, flip_rng, t_rng, settings, r < wilcoxon_draws)
        for r, idx in enumerate(picks)
    ]
    return {key: np.stack([res[key] for res in results]) for key in results[0]}


def exchange(values: np.ndarray, idx: np.ndarray, equal: Sequence[int], order: np.ndarray) -> np.ndarray:
    """The (M, K, n) values of the sampled cases ``idx``, the equal models' values dealt in ``order`` (n, E): in
    sampled case j, equal model ``equal[e]`` gets the value of model ``order[j, e]``."""
    sample = values[:, :, idx]
    sample[:, list(equal), :] = values[:, order.T, idx[None, :]]
    return sample


def summarize(stacked: Sequence[tuple[Population, Mapping[int, Mapping[str, np.ndarray]]]], settings: StatsSettings) -> dict[str, list[dict]]:
    """Coverage, type-I error and power from every population's and n's stacked sample results.

    ``stacked``: per population, per n, :func:`audit_draws`' output. A pair's effect is that of the population's
    per-case differences (between an equal model and a graded one, the first equal model's).
    """
    coverage: list[dict[str, Any]] = []
    type1: list[dict[str, Any]] = []
    power: list[dict[str, Any]] = []
    for pop, by_n in stacked:
        models = list(pop.models)
        a, b = pair_indices(len(models))
        is_equal = np.array([models[i] in pop.equal and models[j] in pop.equal for i, j in zip(a, b)])
        mean = population_truth(pop.values, [models.index(m) for m in pop.equal])
        for n, res in by_n.items():
            for m, (metric, higher) in enumerate(pop.metrics.items()):
                cell = {"source": pop.source, "structure": pop.structure, "metric": metric, "n": n}
                for method in AUDIT_CI_METHODS:
                    low, high = res[f"low_{method}"][:, m], res[f"high_{method}"][:, m]
                    below, above = high < mean[m], low > mean[m]
                    covered = ~(below | above)
                    coverage.append(
                        {
                            **cell,
                            "method": method,
                            **rate(covered.ravel()),
                            "coverage_min_model": float(covered.mean(axis=0).min()),
                            "coverage_max_model": float(covered.mean(axis=0).max()),
                            "miss_below": float(below.mean()),
                            "miss_above": float(above.mean()),
                            "width_median": float(np.median(high - low)),
                        }
                    )
                    # the models' CIs come from the same samples: their pooled rate is no more precise than one model's
                    coverage[-1]["mc_se"] = math.sqrt(coverage[-1]["rate"] * (1.0 - coverage[-1]["rate"]) / covered.shape[0])
                for procedure in PROCEDURES:
                    verdict = res[procedure][:, m]
                    verdict = verdict[~np.isnan(verdict).any(axis=1)]
                    type1.append({**cell, "procedure": procedure, "draws": int(verdict.shape[0]), **rate((verdict[:, is_equal] != 0).any(axis=1))})
                    for p in np.flatnonzero(~is_equal):
                        diffs = pop.values[m, a[p]] - pop.values[m, b[p]]
                        truth_sign = float(np.sign(diffs.mean()) if higher else -np.sign(diffs.mean()))
                        better, worse = (models[a[p]], models[b[p]]) if truth_sign > 0 else (models[b[p]], models[a[p]])
                        need = cases_needed(diffs, settings.alpha, settings.power)
                        power.append(
                            {
                                **cell,
                                "procedure": procedure,
                                "better": better,
                                "worse": worse,
                                "draws": int(verdict.shape[0]),
                                "true_mean_diff": abs(need["mean_diff"]),  # type: ignore[arg-type]  # floats (power.cases_needed)
                                "effect_size": need["effect_size"],
                                **rate(verdict[:, p] == truth_sign),
                                "wrong_direction": float(np.mean(verdict[:, p] == -truth_sign)),
                                "predicted_power": predicted_power(n, need["effect_size"], settings.alpha),  # type: ignore[arg-type]  # as above
                                "n_required": need["n_required"],
                            }
                        )
    return {"coverage": coverage, "type1": type1, "power": power}


def predicted_power(n: int, effect: float, alpha: float) -> float:
    """The power segbench's paired-t formula (``power.paired_t_power``) gives at n for effect d_z; where scipy's
    noncentral t returns NaN (very large noncentrality) the normal approximation, then indistinguishable from 1."""
    value = paired_t_power(n, effect, alpha)
    return value if math.isfinite(value) else float(sps.norm.sf(sps.norm.isf(alpha / 2.0) - effect * math.sqrt(n)))


@dataclass(frozen=True)
class Task:
    """One (population, n) of the audit and how many samples it draws."""

    population: Population
    n: int
    draws: int
    wilcoxon_draws: int


def _audit_task(task: tuple[Task, int, int, StatsSettings]) -> dict[str, np.ndarray]:
    """One (population, n) on one BLAS thread, as the analysis runs (the same bytes whatever the core count)."""
    job, n_resamples, seed, settings = task
    pop = job.population
    keys = (pop.structure,) if pop.source == SIMULATED else (pop.source, pop.structure)
    rng, flip_rng = rng_for(seed, "calibration", *keys, str(job.n)), rng_for(seed, "calibration", *keys, str(job.n), "sign_flips")
    t_rng = rng_for(seed, "calibration", *keys, str(job.n), "bootstrap_t")
    with threadpool_limits(limits=1, user_api="blas"):
        return audit_draws(
            pop.values,
            list(pop.metrics.values()),
            [pop.models.index(m) for m in pop.equal],
            job.n,
            job.draws,
            min(job.wilcoxon_draws, job.draws),
            n_resamples,
            rng,
            flip_rng,
            t_rng,
            settings,
        )


def _level_task(task: tuple[Task, int, float]) -> list[dict]:
    """The calibrated levels of one (population, n) (``levels.level_rows``), from a generator of their own."""
    job, seed, confidence = task
    pop = job.population
    keys = (pop.structure,) if pop.source == SIMULATED else (pop.source, pop.structure)
    rows = level_rows(
        pop.values,
        [pop.models.index(m) for m in pop.equal],
        list(pop.metrics),
        job.n,
        job.draws,
        confidence,
        rng_for(seed, "calibration", *keys, str(job.n), "levels"),
    )
    return [{"source": pop.source, "structure": pop.structure, **row} for row in rows]


def describe(pop: Population) -> dict:
    """A population's size and, per metric, each model's mean, truth (equal models: their common mean), SD and skewness."""
    truth = population_truth(pop.values, [pop.models.index(m) for m in pop.equal])
    return {
        "n_cases": int(pop.values.shape[2]),
        "metrics": {
            metric: {
                "higher_is_better": higher,
                "mean": dict(zip(pop.models, pop.values[m].mean(axis=1).tolist())),
                "truth": dict(zip(pop.models, truth[m].tolist())),
                "sd": dict(zip(pop.models, pop.values[m].std(axis=1, ddof=1).tolist())),
                "skewness": dict(zip(pop.models, sps.skew(pop.values[m], axis=1).tolist())),
            }
            for m, (metric, higher) in enumerate(pop.metrics.items())
        },
    }


def audit(
    rows: pd.DataFrame,
    *,
    models: Sequence[str],
    equal: Sequence[str],
    structures: Sequence[str],
    metrics: Mapping[str, bool],
    n_cases: Sequence[int],
    draws: int,
    wilcoxon_draws: int,
    n_resamples: int,
    seed: int,
    settings: StatsSettings,
    workers: int = 1,
    real: Sequence[tuple[Sequence[Population], int, int]] = (),
    shapes: ShapePlan | None = None,
) -> dict:
    """The whole audit of the scored population ``rows`` (one row per model x case x structure): a JSON-ready dict.

    ``"identical_to_reference"``: per model of the scored population, ``{"cases": k, "of": n}``, the cases it left identical
    to the reference (``identical.identical_to_reference``, the leaderboard's count: every structure Dice exactly 1); a
    simulated model that leaves cases unchanged makes the population look better than the error model it claims.

    ``real``: published populations (:func:`ranked_populations`) with their draws and Wilcoxon draws, audited at every n
    of ``n_cases`` up to their own case count, under ``"real"``. Each (population, n) draws its samples from its own
    generator (seed and names), so adding an n or a population leaves the others' samples unchanged; ``workers``
    processes share the tasks.

    ``shapes``: the failure-shape audit's plan (:mod:`.shapes`): its synthetic populations, and every real population's
    pairs #1-#2 and #1-last, and the simulated population's first equal model against its worst, centred to no
    difference (:func:`real_shapes`), under ``"shapes"``.
    """
    simulated = [
        Population(SIMULATED, s, tuple(models), tuple(equal), dict(metrics), v) for s, (_, v) in population(rows, models, structures, list(metrics)).items()
    ]
    tasks = [Task(pop, n, draws, wilcoxon_draws) for pop in simulated for n in n_cases]
    tasks += [Task(pop, n, d, w) for pops, d, w in real for pop in pops for n in n_cases if n <= pop.values.shape[2]]
    done, levels = _run_tasks(tasks, n_resamples, seed, settings, workers)
    level_table = {
        kind: [row for task, rows in zip(tasks, levels) if (task.population.source == SIMULATED) == (kind == SIMULATED) for row in rows]
        for kind in (SIMULATED, "real")
    }
    by_pop: dict[str, tuple[Population, dict[int, dict[str, np.ndarray]]]] = {}
    for task, res in zip(tasks, done):
        by_pop.setdefault(task.population.name, (task.population, {}))[1][task.n] = res
    summary = summarize([v for v in by_pop.values() if v[0].source == SIMULATED], settings)
    real_summary = summarize([v for v in by_pop.values() if v[0].source != SIMULATED], settings)
    real_pops = _real_descriptions(tasks, by_pop)
    shape_audit = None
    if shapes is not None:
        pops = [*simulated, *(pop for pops, _, _ in real for pop in pops)]
        shape_audit = audit_shapes(real_shapes(pops), shapes, n_resamples=n_resamples, seed=seed, settings=settings, workers=workers)
    return {
        "models": list(models),
        "equal": list(equal),
        "n_cases": list(n_cases),
        "draws": draws,
        "wilcoxon_draws": min(wilcoxon_draws, draws),
        "n_resamples": n_resamples,
        "seed": seed,
        "stats": settings.to_dict(),
        "ci_methods": list(AUDIT_CI_METHODS),
        "procedures": list(PROCEDURES),
        "population": {pop.structure: describe(pop) for pop in simulated},
        "identical_to_reference": identical_to_reference(rows[rows["model"].isin(list(models))], models),
        **summary,
        "levels": level_table[SIMULATED],
        "real": {"population": real_pops, **real_summary, "levels": level_table["real"]},
        **({"shapes": shape_audit} if shape_audit is not None else {}),
    }


def _run_tasks(
    tasks: Sequence[Task], n_resamples: int, seed: int, settings: StatsSettings, workers: int
) -> tuple[list[dict[str, np.ndarray]], list[list[dict]]]:
    """Every (population, n) task's stacked sample results (:func:`_audit_task`), then its calibrated levels
    (:func:`_level_task`), in task order: in ``workers`` processes, or in this one when ``workers`` is 1."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(t, n_resamples, seed, settings) for t in tasks]
    level_jobs = [(t, seed, settings.confidence) for t in tasks]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_audit_task, jobs))
            levels = list(pool.map(_level_task, level_jobs))
    else:
        done = [_audit_task(j) for j in jobs]
        levels = [_level_task(j) for j in level_jobs]
    return done, levels


def _real_descriptions(tasks: Sequence[Task], by_pop: Mapping[str, tuple[Population, Mapping[int, Any]]]) -> dict[str, dict]:
    """The audit's ``real.population``: per published population its models, the n it was audited at, the samples drawn
    per n (its task's plan) and :func:`describe`'s summary, so that the page can say what each rate stands on."""
    plan = {task.population.name: task for task in tasks}
    return {
        pop.name: {
            "source": pop.source,
            "structure": pop.structure,
            "models": list(pop.models),
            "equal": list(pop.equal),
            "n_audited": sorted(by_n),
            "draws": plan[pop.name].draws,
            "wilcoxon_draws": min(plan[pop.name].wilcoxon_draws, plan[pop.name].draws),
            **describe(pop),
        }
        for pop, by_n in by_pop.values()
        if pop.source != SIMULATED
    }


def real_shapes(pops: Sequence[Population]) -> list[Shape]:
    """The real and simulated populations' pairs, centred to no difference (:func:`.shapes.centred_pairs`): per
    population and metric, a published set's #1 against its #2 (the board's headline pair), the simulated population's
    first equal model against its worst (two error models of different shapes)."""
    out = []
    for pop in pops:
        pair = (0, len(pop.models) - 1) if pop.source == SIMULATED else (0, 1)
        for m, (metric, higher) in enumerate(pop.metrics.items()):
            out += centred_pairs(f"{pop.name} {metric}", metric, higher, pop.models, pop.values[m], [pair])
    return out


def tables(audit_result: Mapping) -> dict[str, pd.DataFrame]:
    """The audit's tables, one row per entry: coverage, type-I error, power and calibrated levels (``levels``) of the
    simulated population, the same four of the real populations (``real_coverage``, ... ``real_levels``) and the
    failure-shape audit's (``shapes_type1``, ``shapes_power``, ``shapes_coverage``)."""
    keys = ("coverage", "type1", "power", "levels")
    out = {key: pd.DataFrame(audit_result[key]) for key in keys}
    out |= {f"real_{key}": pd.DataFrame(audit_result["real"][key]) for key in keys}
    if "shapes" in audit_result:
        out |= {name: pd.DataFrame(rows) for name, rows in shape_tables(audit_result["shapes"]).items()}
    return out
