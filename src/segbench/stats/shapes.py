"""Failure shapes: equal-mean populations whose models fail differently, and the audit of the verdict's test on them
(docs/methodology.md#520-failure-shapes).

Real segmentation models differ in how they fail: one is steady, another better on most cases but with rare failures
(Dice 0 on a few per cent of cases, HD95 at the worst case). Their per-case differences are then skewed even where
their means are equal, and a test that assumes exchangeable models (the sign flips) rejects too often. This module
builds such populations and audits the old and the new separable test on them, side by side:

- **Synthetic shapes** (:func:`failure_shapes`): per metric kind, four models of exactly equal population means over
  ``POPULATION_CASES`` cases, two steady and two better-but-failing, with a case difficulty shared by the models (the
  scores are paired as real ones are). Every pair is a true null; the family-wise rate over the six pairs is the claim.
- **Graded shapes** (:func:`graded`): the steady model made better by an effect of ``GRADES`` x the SD of its
  differences against a failing model, for power.
- **Real centred nulls** (:func:`centred_pairs`): a real pair's per-case differences centred to mean 0 (its first
  model shifted by the mean difference): the pair keeps its real shape and has no true difference.

Every sample of n cases is drawn with replacement from its population; every rate carries its Monte-Carlo SE. Pure
functions of arrays; the calibration audit (``stats.calibration.audit``) runs them and writes the tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy import stats as sps
from threadpoolctl import threadpool_limits

from segbench.base.formats import number

from .pairwise import MeanTest, PairTest, mean_test, pair_indices, separability
from .resampling import bootstrap_means, intervals, jackknife_means, rng_for, studentized_bounds
from .settings import StatsSettings

#: the audited sample sizes
SHAPE_N_CASES = (20, 50, 100, 200)
#: cases of a synthetic population: its means are the truth
POPULATION_CASES = 20_000
#: the verdict's tests compared: before (sign flips alone) and now (sign flips and the studentized bootstrap)
PROCEDURES = ("sign_flip", "sign_flip_bootstrap_t")
#: power populations: the steady model better by these multiples of the SD of its per-case differences
GRADES = (0.2, 0.3, 0.4)
#: the model CIs audited beside: the board's method at the nominal level and the bootstrap-t
MODEL_CI_METHODS = ("skew_t", "studentized")


@dataclass(frozen=True)
class Shape:
    """One audited population: (K, N) ``values`` of one metric whose per-model means are the truth."""

    name: str
    kind: str  #: "synthetic" or "real"
    metric: str
    higher_is_better: bool
    models: tuple[str, ...]
    values: np.ndarray
    description: str
    #: (K, N) True where a model fails on a case (the failures its population was built with); None: no failures
    failed: np.ndarray | None = None

    @property
    def skewness(self) -> float:
        """The skewness of the per-case differences of its first and last model (a steady and a failing one, or the
        real pair): the shape a cell is matched on."""
        return float(sps.skew(self.values[0] - self.values[-1]))


def _equalize(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values`` (K, N) with each model's mean moved to the first model's, by shifting only its cases where ``keep`` is
    False (the failures stay where they are)."""
    out = values.copy()
    target = values[0].mean()
    for k in range(1, values.shape[0]):
        free = ~keep[k]
        out[k, free] += (target - values[k].mean()) * values.shape[1] / free.sum()
    return out


def failure_shapes(seed: int) -> list[Shape]:
    """The synthetic equal-mean populations (docs/methodology.md#520-failure-shapes): per metric kind two steady models and
    two better on most cases that fail now and then, more often on hard cases (each failing model on its own draw, so
    their failures overlap only through the cases' difficulty); and one population of four exchangeable models."""
    rng = np.random.default_rng([seed, 519])
    n = POPULATION_CASES
    difficulty = rng.standard_normal(n)  # shared by the models of a population: paired scores
    names = ("steady_a", "steady_b", "failing_a", "failing_b")
    # failures come on hard cases: a case's chance of failing grows with its difficulty (rate on average)
    proneness = np.exp(1.5 * difficulty) / np.exp(1.5 * difficulty).mean()

    def failures(rate: float) -> np.ndarray:
        return rng.random((2, n)) < np.minimum(1.0, rate * proneness)

    def overlap(name: str, centre: float, spread: float, rate: float, failed: Sequence[float], description: str) -> Shape:
        steady = np.clip(centre + spread * (0.8 * difficulty + 0.6 * rng.standard_normal((2, n))), 0.0, 1.0)
        fails = failures(rate)
        good_centre = centre + rate * (centre - np.mean(failed)) / (1.0 - rate)
        good = np.clip(good_centre + 0.6 * spread * (0.8 * difficulty + 0.6 * rng.standard_normal((2, n))), 0.0, 1.0)
        failing = np.where(fails, rng.uniform(failed[0], failed[1], (2, n)), good)
        keep = np.concatenate([np.zeros((2, n), dtype=bool), fails])
        values = np.clip(_equalize(np.concatenate([steady, failing]), keep), 0.0, 1.0)
        return Shape(name, "synthetic", name.split("_")[0], True, names, _equalize(values, keep), description, keep)

    shapes = [
        overlap("dice_rare_failures", 0.85, 0.05, 0.08, (0.0, 0.0), "Dice: two steady models; two better on most cases, Dice 0 on 8 % of cases"),
        overlap("nsd_rare_failures", 0.92, 0.04, 0.05, (0.0, 0.2), "NSD near 1: two steady models; two better on most cases, NSD 0-0.2 on 5 % of cases"),
    ]
    for name, worst, rate, sigma, description in (
        ("hd95_rare_failures", 100.0, 0.03, 0.5, "HD95 (mm): two steady models; two better on most cases, 100 mm on 3 % of cases"),
        ("hd95_heavy_tails", None, 0.0, 1.2, "HD95 (mm): two steady models; two with a heavy right tail (lognormal sigma 1.2), no failures"),
    ):
        steady = np.exp(np.log(4.0) + 0.5 * (0.8 * difficulty + 0.6 * rng.standard_normal((2, n))))
        if worst is None:
            other = np.exp(np.log(2.0) + sigma * (0.8 * difficulty + 0.6 * rng.standard_normal((2, n))))
            fails = np.zeros((2, n), dtype=bool)
        else:
            fails = failures(rate)
            good = np.exp(np.log(1.5) + sigma * (0.8 * difficulty + 0.6 * rng.standard_normal((2, n))))
            other = np.where(fails, worst, good)
        keep = np.concatenate([np.zeros((2, n), dtype=bool), fails])
        values = _equalize(np.concatenate([steady, other]), keep)
        shapes.append(Shape(name, "synthetic", "hd95", False, names, np.maximum(values, 0.0), description, keep if fails.any() else None))
    # one exchangeable control: four models whose values are dealt at random per case (the old test is exact here)
    base = np.exp(np.log(4.0) + 0.6 * difficulty)[None, :] * np.exp(0.4 * rng.standard_normal((4, n)))
    dealt = _equalize(rng.permuted(base, axis=0), np.zeros((4, n), dtype=bool))  # the last 1e-3 mm of chance, too
    shapes.append(
        Shape(
            "hd95_exchangeable",
            "synthetic",
            "hd95",
            False,
            ("model_a", "model_b", "model_c", "model_d"),
            dealt,
            "HD95 (mm): four exchangeable models (the sign flips' own null)",
        )
    )
    return shapes


def graded(shape: Shape, effect: float) -> Shape:
    """The power population of ``shape``: its first (steady) model made better than its last (failing) one by ``effect``
    times the SD of their per-case differences; two models."""
    diffs = shape.values[0] - shape.values[-1]
    step = effect * diffs.std() * (1.0 if shape.higher_is_better else -1.0)
    values = np.stack([shape.values[0] + step, shape.values[-1]])
    return Shape(
        f"{shape.name}+{number(effect)}sd",
        shape.kind,
        shape.metric,
        shape.higher_is_better,
        (shape.models[0], shape.models[-1]),
        values,
        f"{shape.description}; the steady model better by {number(effect)} SD",
        None if shape.failed is None else shape.failed[[0, -1]],
    )


def centred_pairs(name: str, metric: str, higher: bool, models: Sequence[str], values: np.ndarray, pairs: Sequence[tuple[int, int]]) -> list[Shape]:
    """Real nulls: per pair (i, j) of the (K, N) ``values``, model i shifted by the pair's mean difference, so that the
    pair has no true difference and keeps its real per-case shape."""
    out = []
    for i, j in pairs:
        shift = (values[i] - values[j]).mean()
        out.append(
            Shape(
                f"{name}: {models[i]} vs {models[j]}",
                "real",
                metric,
                higher,
                (models[i], models[j]),
                np.stack([values[i] - shift, values[j]]),
                f"real pair centred: {models[i]} minus its mean difference {number(shift, 4)} against {models[j]}",
            )
        )
    return out


def _rate(hits: np.ndarray) -> dict[str, float]:
    p = float(np.mean(hits))
    return {"rate": p, "mc_se": math.sqrt(p * (1.0 - p) / hits.size)}


def audit_shape(shape: Shape, n: int, draws: int, n_resamples: int, seed: int, settings: StatsSettings) -> dict[str, list[dict]]:
    """The samples of ``draws`` x n cases of one shape, each analysed by both tests as the board would (Holm over every
    pair): per procedure the family-wise rate of a separable pair against its truth (a true null: any separable pair;
    with a true difference, power: the right direction), split for the type-I rate by whether every failing model
    failed at least once in the sample (``rate_seen``, over the share ``unseen_share`` of samples where one never
    did, which no test can tell from a better model), the coverage of the 95 % interval of the mean difference (the
    test inverted at alpha), and of each model's CI by ``MODEL_CI_METHODS`` at the confidence."""
    rng = rng_for(seed, "shapes", shape.name, str(n))
    k, n_population = shape.values.shape
    a, b = pair_indices(k)
    truth_diff = shape.values[a].mean(axis=1) - shape.values[b].mean(axis=1)
    truth_mean = shape.values.mean(axis=1)
    separable = {p: np.zeros((draws, a.size)) for p in PROCEDURES}
    covered = {p: np.zeros((draws, a.size), dtype=bool) for p in PROCEDURES}
    model_covered = {m: np.zeros((draws, k), dtype=bool) for m in MODEL_CI_METHODS}
    # the models that fail in the population, and the samples in which one of them never does (no test can tell it
    # there from a model better on every case: the limit the cells state, not an error of the test)
    failing = np.zeros((0, n_population), dtype=bool) if shape.failed is None else shape.failed[shape.failed.any(axis=1)]
    unseen = np.zeros(draws, dtype=bool)
    with threadpool_limits(limits=1, user_api="blas"):
        for r in range(draws):
            cases = rng.integers(0, n_population, n)
            sample = shape.values[:, cases]
            unseen[r] = bool((~failing[:, cases].any(axis=1)).any())
            for procedure, (verdict, hits) in _pair_verdicts(sample, a, b, truth_diff, shape.higher_is_better, n_resamples, settings, rng).items():
                separable[procedure][r], covered[procedure][r] = verdict, hits
            for method, hits in _model_coverage(sample, truth_mean, n_resamples, settings, rng).items():
                model_covered[method][r] = hits
    return _shape_rows(shape, n, draws, truth_diff, separable, covered, model_covered, unseen)


def _pair_verdicts(
    sample: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    truth_diff: np.ndarray,
    higher_is_better: bool,
    n_resamples: int,
    settings: StatsSettings,
    rng: np.random.Generator,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One sample's pairs under each procedure, as the board decides (Holm over every pair): the signed separable
    verdicts (+1 the first model of the pair called better, -1 the second, 0 neither) and whether each pair's interval
    of the mean difference holds the truth. One test serves both procedures: the old one is the new one's sign flips."""
    diff = sample[a].mean(axis=1) - sample[b].mean(axis=1)
    sign = np.sign(diff) * (1.0 if higher_is_better else -1.0)
    both = cast(MeanTest, mean_test(sample, a, b, PROCEDURES[1], n_resamples, settings.alpha, rng, rng))  # the new procedure's test
    tests: tuple[PairTest, PairTest] = (both.flips, both)
    out = {}
    for procedure, test in zip(PROCEDURES, tests):  # the old test is the new one's sign flips
        sep = separability(
            None,
            diff,
            None,
            alpha=settings.alpha,
            correction=settings.multiple_comparison,
            ci_method=settings.ci_method,
            test=test,
            p_boot=np.zeros(a.size),
        )
        low, high = test.interval(np.full(a.size, settings.alpha))
        out[procedure] = (np.where(sep["separable"], sign, 0.0), (low <= truth_diff) & (truth_diff <= high))
    return out


def _model_coverage(sample: np.ndarray, truth_mean: np.ndarray, n_resamples: int, settings: StatsSettings, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per method of ``MODEL_CI_METHODS``, whether each model's CI of its mean on this (K, n) sample holds its
    population mean; one set of bootstrap resamples serves every method, as in the analysis."""
    k, n = sample.shape
    level = np.full(k, 1.0 - settings.confidence)
    moments, _ = bootstrap_means(np.concatenate([sample, sample**2]), n_resamples, rng)  # one set of resamples
    boot, boot_squares = moments[:, :k], moments[:, k:]
    out = {}
    for method in MODEL_CI_METHODS:
        if method == "studentized":
            low, high = studentized_bounds(boot, boot_squares, sample.mean(axis=1), (sample**2).mean(axis=1), n, 1.0 - settings.confidence, "none")
        else:
            low, high = intervals(np.sort(boot, axis=0), sample.mean(axis=1), jackknife_means(sample), level, method, presorted=True)
        out[method] = (low <= truth_mean) & (truth_mean <= high)
    return out


def _shape_rows(
    shape: Shape,
    n: int,
    draws: int,
    truth_diff: np.ndarray,
    separable: Mapping[str, np.ndarray],
    covered: Mapping[str, np.ndarray],
    model_covered: Mapping[str, np.ndarray],
    unseen: np.ndarray,
) -> dict[str, list[dict]]:
    """The type-I, power and coverage rows of one (shape, n) from its samples' verdicts and coverage: the pairs with no
    true difference give the type-I rate (also over the samples where every failing model failed) and the intervals'
    coverage, the others the power in the right direction."""
    null = np.abs(truth_diff) < 1e-9 * max(1.0, float(np.abs(shape.values).mean()))
    right = np.sign(truth_diff) * (1.0 if shape.higher_is_better else -1.0)
    cell = {"shape": shape.name, "kind": shape.kind, "metric": shape.metric, "n": n, "draws": draws, "skewness": shape.skewness}
    rows: dict[str, list[dict]] = {"type1": [], "power": [], "coverage": []}
    for procedure in PROCEDURES:
        verdicts = separable[procedure]
        if null.any():
            wrong = (verdicts[:, null] != 0).any(axis=1)
            seen = _rate(wrong[~unseen]) if (~unseen).any() else {"rate": math.nan, "mc_se": math.nan}
            rows["type1"].append(
                {
                    **cell,
                    "procedure": procedure,
                    "pairs": int(null.sum()),
                    **_rate(wrong),
                    "unseen_share": float(unseen.mean()),
                    "rate_seen": seen["rate"],
                    "mc_se_seen": seen["mc_se"],
                }
            )
            rows["coverage"].append({**cell, "interval": f"difference: {procedure}", **_rate(covered[procedure][:, null].ravel())})
        for p in np.flatnonzero(~null):
            rows["power"].append(
                {
                    **cell,
                    "procedure": procedure,
                    "effect": shape.name.rsplit("+", 1)[-1],
                    **_rate(verdicts[:, p] == right[p]),
                    "wrong_direction": float(np.mean(verdicts[:, p] == -right[p])),
                }
            )
    for method in MODEL_CI_METHODS:
        hits = model_covered[method]
        rows["coverage"].append({**cell, "interval": f"model mean: {method}", **_rate(hits.ravel()), "worst_model": float(hits.mean(axis=0).min())})
        rows["coverage"][-1]["mc_se"] = math.sqrt(rows["coverage"][-1]["rate"] * (1 - rows["coverage"][-1]["rate"]) / draws)
    return rows


def _task(task: tuple[Shape, int, int, int, int, StatsSettings]) -> dict[str, list[dict]]:
    return audit_shape(*task)


@dataclass(frozen=True)
class ShapePlan:
    """How much the failure-shape audit draws: the sample sizes, and samples per n of each synthetic null, each real
    centred pair and each graded (power) population."""

    n_cases: tuple[int, ...]
    draws: int
    real_draws: int
    power_draws: int


def audit_shapes(real: Sequence[Shape], plan: ShapePlan, *, n_resamples: int, seed: int, settings: StatsSettings, workers: int = 1) -> dict[str, list[dict]]:
    """The synthetic shapes (:func:`failure_shapes`), their graded populations (:func:`graded`, every shape whose models
    are not exchangeable) and the ``real`` centred pairs, each at every n of the plan up to its own case count: the
    type-I, power and coverage tables (rows as dicts) and each population's description (``populations``). ``workers``
    processes share the (shape, n) tasks; each task draws from its own generator (seed, shape and n), so the tables do
    not depend on the worker count."""
    from concurrent.futures import ProcessPoolExecutor

    synthetic = failure_shapes(seed)
    powers = [graded(shape, g) for shape in synthetic if "exchangeable" not in shape.name for g in GRADES]
    planned = [(s, plan.draws) for s in synthetic] + [(s, plan.real_draws) for s in real] + [(s, plan.power_draws) for s in powers]
    tasks = [(s, n, draws, n_resamples, seed, settings) for s, draws in planned for n in plan.n_cases if n <= s.values.shape[1]]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_task, tasks))
    else:
        done = [_task(t) for t in tasks]
    out: dict[str, list[dict]] = {"type1": [], "power": [], "coverage": []}
    for rows in done:
        for key, value in rows.items():
            out[key] += value
    out["populations"] = [
        {
            "shape": s.name,
            "kind": s.kind,
            "metric": s.metric,
            "higher_is_better": s.higher_is_better,
            "models": list(s.models),
            "n_cases": int(s.values.shape[1]),
            "skewness": s.skewness,
            "means": dict(zip(s.models, s.values.mean(axis=1).tolist())),
            "description": s.description,
        }
        for s, _ in planned
    ]
    return out


def shape_tables(result: Mapping[str, list[dict]]) -> dict[str, list[dict]]:
    """The shape audit's tables by file stem (``shapes_type1`` ...)."""
    return {f"shapes_{key}": result[key] for key in ("type1", "power", "coverage")}
