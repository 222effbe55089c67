"""The statistics of one dataset (docs/methodology.md#5-statistics-protocol): ``analyze`` (rows -> results dict).

Its inputs are checked and split in ``inputs``; ``reanalysis`` re-derives a stored results document through
:func:`analyze_structures`.

The output of ``analyze`` is ``results.Analysis``: ``stats/results.py`` describes every level of it (and of the results
document around it), with the conventions of case alignment, schemes, consensus, clustering, ranks and seeds. It is
JSON-serialisable (str, bool, int, float, None, lists, dicts; NaN is None) and ``json.dumps(results, sort_keys=True)``
is byte-identical for identical inputs and settings.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, TypedDict, cast

import numpy as np
import pandas as pd

from segbench.base.io import json_ready

from .bootstrap_t import StudentizedBootstrap, StudentizedTally
from .clusters import add_clustered, case_clusters, verdict_changes
from .identical import identical_to_reference
from .inputs import StructureMatrices, prepare, validate
from .pairwise import (
    PairTest,
    common_case_groups,
    mean_test,
    merge_tests,
    pair_bootstrap_p_values,
    pair_indices,
    separability,
    wilcoxon_map,
)
from .power import cases_needed
from .ranking import identical_groups, leave_one_out, rank_min, rank_order, ranking_stability
from .resampling import bootstrap_means, bounded_ends, intervals, jackknife_means, resample_counts, rng_for
from .results import (
    Alignment,
    AlignmentChanges,
    AllReported,
    Analysis,
    Consensus,
    KendallTau,
    LeaveOneOut,
    MetricCell,
    ModelEstimate,
    Pair,
    Power,
    Ranking,
    Schemes,
    Significance,
    Structure,
)
from .scheduling import run_steps, single_threaded_blas, step_threads
from .schemes import consensus, pair_ranks, schemes
from .settings import StatsSettings
from .subgroups import group_indices, subgroup_block
from .verdicts import cell_verdict, intervals_sentence

#: the level of a leaderboard's CIs of means, per (structure, metric, shared case count)
CiLevels = Callable[[str, str, int], float]


@dataclass(frozen=True)
class _Context:
    """What the comparisons of one structure and metric need beyond the shared-case values."""

    structure: str
    metric: str
    union: tuple[np.ndarray, list[str], np.ndarray] | None  # see _union_values
    reported: dict[tuple[str, ...], tuple[list[str], np.ndarray, np.ndarray]]  # see _all_reported
    counts: np.ndarray  # (scheme_resamples, n) case counts of the scheme resamples, shared by the metrics
    studentized: StudentizedBootstrap | None  # the verdict's studentized bootstrap of the ranked pairs (_studentized_tallies)


def analyze(
    rows: pd.DataFrame,
    *,
    metrics: Mapping[str, bool],
    settings: StatsSettings,
    subgroup_fields: Sequence[str] = (),
    contaminated: Mapping[str, bool] = {},
    cluster_field: str | None = None,
    count_identical: bool = True,
    ci_levels: CiLevels | None = None,
) -> Analysis:
    """The whole statistics protocol on one dataset's per-case rows (``results.Analysis``).

    ``count_identical``: count each model's cases identical to the reference (``identical.identical_to_reference``);
    False where a row is not a case (the lesion unit), and ``identical_to_reference`` is None. ``ci_levels``: the
    level of the models' CIs per (structure, metric, shared case count), e.g. the audit's calibrated level
    (``audited.level_provider``); None: ``settings.confidence`` everywhere.
    """
    metrics, subgroup_fields, models, contaminated = validate(rows, metrics, settings, subgroup_fields, contaminated)
    structures = prepare(rows, metrics, models, subgroup_fields)
    identical = identical_to_reference(rows, models) if count_identical else dict.fromkeys(models)
    return analyze_structures(
        structures, models, metrics, settings, list(subgroup_fields), contaminated, case_clusters(rows, cluster_field), identical, ci_levels
    )


def analyze_structures(
    structures: Mapping[str, StructureMatrices],
    models: list[str],
    metrics: Mapping[str, bool],
    settings: StatsSettings,
    subgroup_fields: list[str],
    contaminated: Mapping[str, bool],
    clusters: Mapping | None,
    identical: Mapping[str, dict | None],
    ci_levels: CiLevels | None = None,
) -> Analysis:
    """The results dict of structures already split (``inputs.prepare``; ``reanalysis.recompute`` rebuilds them from a
    results document), with BLAS on one thread; ``identical``: per model its ``identical_to_reference`` entry (a model not in it has none: older
    results recomputed); ``ci_levels`` as for :func:`analyze`."""

    pending: dict[str, dict[str, Callable[[], tuple[MetricCell, _TaskRanks | None]]]] = {}
    analysed: dict[tuple[str, str], tuple[MetricCell, _TaskRanks | None]] = {}
    blocks: dict[str, Structure] = {}

    def resamples(name: str, s: StructureMatrices) -> None:
        confidences = {m: settings.confidence if ci_levels is None else float(ci_levels(name, m, len(s.case_ids))) for m in metrics}
        pending[name] = _analyze_structure(s, name, s.models, metrics, np.array([not contaminated[m] for m in s.models], dtype=bool), settings, confidences)

    def cell(name: str, metric: str) -> None:
        analysed[name, metric] = pending[name].pop(metric)()  # the structure's resamples go with its last cell

    def clustered(name: str, s: StructureMatrices) -> None:
        block: Structure = {
            "n_cases": len(s.case_ids),
            "n_absent": s.n_absent,
            "n_unshared": s.n_unshared,
            "case_ids": s.case_ids,
            "flags": s.flags,  # type: ignore[typeddict-item]  # flag -> model -> case ids: a Flags
            "case_meta": s.case_meta,
            "metrics": {metric: analysed[name, metric][0] for metric in metrics},
        }
        add_clustered(cast(dict[str, dict], block["metrics"]), s.values, s.models, s.case_ids, name, clusters, settings)
        blocks[name] = block

    # structures are independent (own resamples, seeded by name; BLAS on one thread), and so are a structure's metrics
    # once its resamples are drawn: analysed side by side on the machine's cores, the heavy parts (products, sorts,
    # compiled loops) release the GIL; the output is the same bytes. Largest first (cost grows with cases x models), so
    # that the last to finish is a small one and no core idles long.
    largest_first = sorted(structures, key=lambda name: -len(structures[name].case_ids) * len(structures[name].models))
    steps: dict[Hashable, tuple[Callable[[], None], Sequence[Hashable]]] = {}
    for name in largest_first:
        steps["resamples", name] = (partial(resamples, name, structures[name]), [])
        for metric in metrics:
            steps["cell", name, metric] = (partial(cell, name, metric), [("resamples", name)])
        steps["clustered", name] = (partial(clustered, name, structures[name]), [("cell", name, metric) for metric in metrics])
    with single_threaded_blas():
        run_steps(steps, step_threads(len(structures) * len(metrics)))
        out = {name: blocks[name] for name in structures}
        tasks = [(f"{name}/{metric}", task) for name in structures for metric in metrics if (task := analysed[name, metric][1]) is not None]
        consensus = _consensus(tasks, settings)
    return cast(
        Analysis,
        json_ready(
            {
                "settings": settings.to_dict(),
                "subgroup_fields": subgroup_fields,
                "models": {m: {"contaminated": bool(contaminated[m]), **({"identical_to_reference": identical[m]} if m in identical else {})} for m in models},
                "structures": out,
                "clusters": None if clusters is None else {**clusters, "verdict_changes": verdict_changes(cast(dict[str, dict], out))},
                "consensus": consensus,
            }
        ),
    )


def _consensus(tasks: list[tuple[str, _TaskRanks]], settings: StatsSettings) -> Consensus | None:
    """challengeR's consensus over every structure and metric (docs/methodology.md#515-consensus), with its bootstrap stability.

    Tasks are resampled independently (each structure/metric has its own scheme resamples); resample b
    of the consensus combines resample b of every task.
    """
    if not tasks:
        return None
    models = sorted({m for _, (names, _, _) in tasks for m in names})
    column = {m: k for k, m in enumerate(models)}
    full = np.full((1, len(tasks), len(models)), np.nan)
    boot = np.full((settings.scheme_resamples, len(tasks), len(models)), np.nan)
    for t, (_, (names, ranks, boot_ranks)) in enumerate(tasks):
        cols = [column[m] for m in names]
        full[0, t, cols] = ranks
        boot[:, t, cols] = boot_ranks
    mean_rank, rank = (x[0] for x in consensus(full))
    _, boot_rank = consensus(boot)
    order = sorted(range(len(models)), key=lambda k: (rank[k], models[k]))
    n_models = len(models)
    freq = np.stack([np.bincount(boot_rank[:, k] - 1, minlength=n_models) for k in range(n_models)])
    return {
        "tasks": [name for name, _ in tasks],
        "order": [models[k] for k in order],
        "mean_rank": dict(zip(models, mean_rank)),
        "rank": dict(zip(models, rank)),
        "task_ranks": {name: dict(zip(names, ranks)) for name, (names, ranks, _) in tasks},
        "p_rank1": dict(zip(models, (boot_rank == 1).mean(axis=0))),
        "rank_frequency": dict(zip(models, freq)),
        "n_resamples": settings.scheme_resamples,
    }


@dataclass(frozen=True)
class _Boot:
    """Resampled means of every (metric, model) row of one case set, and what their CIs need."""

    means: np.ndarray  # (M*K,)
    boot: np.ndarray  # (B, M*K)
    jack: np.ndarray | None  # (n, M*K); None when n < 2
    span: tuple[np.ndarray, np.ndarray]  # (M*K,) smallest and largest value of each row: the range rule's bounds

    @classmethod
    def of(cls, stacked: np.ndarray, boot: np.ndarray) -> _Boot:
        jack = jackknife_means(stacked) if stacked.shape[1] > 1 else None
        return cls(stacked.mean(axis=1), boot, jack, (stacked.min(axis=1), stacked.max(axis=1)))

    def ci(self, confidence: float | np.ndarray, method: str) -> tuple[np.ndarray, np.ndarray]:
        """CIs of every row at ``confidence`` (one level, or one per row)."""
        alpha = np.broadcast_to(1.0 - np.asarray(confidence, dtype=float), self.means.shape)
        return intervals(self.boot, self.means, self.jack, alpha, method, span=self.span)


@dataclass(frozen=True)
class _Resamples:
    """One structure's resamples, shared by its metrics, models and subgroups (paired across all); None without cases."""

    full: _Boot | None  # the shared cases' resampled means of every (metric, model) row
    ci: tuple[np.ndarray, np.ndarray] | None  # their CIs, each metric's at its level
    counts: np.ndarray | None  # (scheme_resamples, n) case counts of the scheme resamples
    groups: dict[str, dict[str, np.ndarray]]  # field -> group -> positions among the shared cases
    group_boot: dict[str, dict[str, _Boot]]
    group_ci: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]  # at settings.confidence
    studentized: dict[str, StudentizedBootstrap]  # metric -> the verdict's studentized bootstrap of its ranked pairs


def _resamples(
    s: StructureMatrices,
    structure: str,
    ranked: np.ndarray,
    metrics: Mapping[str, bool],
    settings: StatsSettings,
    confidences: Mapping[str, float],
) -> _Resamples:
    """The resample matrix of one structure (seeded by the structure) and its subgroups' columns, their CIs, the scheme
    resamples (seeded by the structure and "schemes") and, on the same case resamples as the means, each metric's
    studentized bootstrap test of its ranked models' pairs (:func:`_studentized_tallies`)."""
    n, n_models = len(s.case_ids), len(s.models)
    groups = {f: group_indices(s.case_meta[f]) for f in sorted(s.case_meta)} if n else {}
    flat = [(f, g, idx) for f, gs in groups.items() for g, idx in gs.items()]
    full = None
    group_boot: dict[str, dict[str, _Boot]] = {f: {} for f in groups}
    if n:
        stacked = np.concatenate([s.values[m] for m in metrics])
        rng = rng_for(settings.seed, structure)
        tallies = _studentized_tallies(stacked, s.models, ranked, metrics, settings)

        def tally(counts: np.ndarray, sums: np.ndarray) -> None:
            for test in tallies.values():
                test.add(counts, sums)

        boot, boots = bootstrap_means(stacked, settings.n_resamples, rng, [idx for _, _, idx in flat], on_chunk=tally if tallies else None)
        studentized = {metric: tally.result() for metric, tally in tallies.items()}
        full = _Boot.of(stacked, boot)
        for k, (f, g, idx) in enumerate(flat):
            group_boot[f][g] = _Boot.of(stacked[:, idx], boots[:, k])
    ci = full.ci(np.repeat([confidences[m] for m in metrics], n_models), settings.ci_method) if full is not None else None
    counts = resample_counts(n, settings.scheme_resamples, rng_for(settings.seed, structure, "schemes")) if n else None
    group_ci = {f: {g: b.ci(settings.confidence, settings.ci_method) for g, b in gb.items()} for f, gb in group_boot.items()}
    return _Resamples(full, ci, counts, groups, group_boot, group_ci, studentized if n else {})


def _studentized_tallies(
    stacked: np.ndarray, models: list[str], ranked: np.ndarray, metrics: Mapping[str, bool], settings: StatsSettings
) -> dict[str, StudentizedTally]:
    """Per metric, the studentized bootstrap half of the verdict's test (sign_flip_bootstrap_t) of its ranked models'
    pairs in the order :func:`_compare` ranks them, on the rows of ``stacked`` (metric by metric, the models in
    order), to be tallied from the structure's own case resamples: the test shares the means' resamples, so its cases
    are drawn once per structure for the means and both metrics (timed: benchmarks/README.md)."""
    idx = np.flatnonzero(ranked)
    if settings.pairwise_test != "sign_flip_bootstrap_t" or idx.size < 2:
        return {}
    n_models, (a, b), means = len(models), pair_indices(idx.size), stacked.mean(axis=1)  # the means as _Boot.of takes them
    tallies = {}
    for i, (metric, higher) in enumerate(metrics.items()):
        rows = i * n_models + idx
        rows = rows[rank_order(means[rows], [models[k] for k in idx], higher)]
        tallies[metric] = StudentizedTally(stacked[rows[a]] - stacked[rows[b]], settings.n_resamples, settings.alpha, factors=(stacked, rows[a], rows[b]))
    return tallies


def _analyze_structure(
    s: StructureMatrices,
    structure: str,
    models: list[str],
    metrics: Mapping[str, bool],
    ranked: np.ndarray,
    settings: StatsSettings,
    confidences: Mapping[str, float],
) -> dict[str, Callable[[], tuple[MetricCell, _TaskRanks | None]]]:
    """Sections 5.3-5.11 of docs/methodology.md for every metric of one structure; the models' CIs of a metric at its
    level in ``confidences`` (the subgroups' at ``settings.confidence``). Draws the structure's resamples and gives per
    metric the rest of its cell (:func:`_cell`: the cell and, where its ranking is defined, its inputs to the
    consensus), to run on any thread.

    One resample matrix per structure serves all metrics, models and subgroups (paired across all).
    """
    n_models = len(models)
    res = _resamples(s, structure, ranked, metrics, settings, confidences)
    all_reported = _all_reported(s, models, metrics, structure, settings, confidences)
    return {
        metric: partial(
            _cell,
            s,
            structure,
            metric,
            higher,
            slice(i * n_models, (i + 1) * n_models),
            models,
            ranked,
            res,
            all_reported[metric],
            settings,
            confidences[metric],
        )
        for i, (metric, higher) in enumerate(metrics.items())
    }


def _cell(
    s: StructureMatrices,
    structure: str,
    metric: str,
    higher: bool,
    cols: slice,
    models: list[str],
    ranked: np.ndarray,
    res: _Resamples,
    all_reported: tuple[dict[str, AllReported], dict[tuple[str, ...], tuple[list[str], np.ndarray, np.ndarray]]],
    settings: StatsSettings,
    confidence: float,
) -> tuple[MetricCell, _TaskRanks | None]:
    """One structure and metric: estimates, subgroups and, with ranked models on shared cases, their comparisons and verdict;
    with the cell's consensus inputs (None without a ranking). ``cols``: the metric's rows in the structure's resamples."""
    values = s.values[metric]
    reported, reported_boots = all_reported
    result: MetricCell = {
        "higher_is_better": higher,
        "per_case": {m: values[k] for k, m in enumerate(models)},
        "per_case_unshared": s.unshared[metric],
        "ci_confidence": confidence,
        "models": {m: {**e, "all_reported": reported.get(m)} for m, e in _estimates(s, values, models, ranked, res.full, res.ci, cols).items()},
        "ranking": None,
        "pairwise": [],
        "significance": None,
        "loo": None,
        "power": None,
        "alignment": None,
        "schemes": None,
        "verdict": None,
        "subgroups": {
            f: subgroup_block(values, models, gs, {g: boot.means for g, boot in res.group_boot[f].items()}, res.group_ci[f], cols, settings)
            for f, gs in res.groups.items()
        },
    }
    idx = np.flatnonzero(ranked)
    if res.full is None or not idx.size:
        return result, None
    context = _Context(structure, metric, _union_values(s, values, [models[k] for k in idx], metric), reported_boots, res.counts, res.studentized.get(metric))  # type: ignore[arg-type]  # set with res.full
    compared = _compare(values[idx], [models[k] for k in idx], higher, res.full, cols, idx, settings, context)
    result.update(compared.cell)  # type: ignore[typeddict-item]  # _Comparisons' keys are MetricCell's
    result["verdict"] = cell_verdict(
        result,
        metric,
        intervals_sentence(
            settings.pairwise_test,
            settings.multiple_comparison,  # type: ignore[typeddict-item]  # cell_verdict builds a Verdict
            settings.alpha,
            settings.ci_method,
        ),
        settings.case_alignment == "pairwise_complete",
    )
    return result, compared.task


def _estimates(
    s: StructureMatrices,
    values: np.ndarray,
    models: list[str],
    ranked: np.ndarray,
    full: _Boot | None,
    ci: tuple[np.ndarray, np.ndarray] | None,
    cols: slice,
) -> dict[str, ModelEstimate]:
    """Estimates per model (docs/methodology.md#53-estimates-and-cis): mean, SD, median, n, CI, failure counts, contamination mark."""
    n = values.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        sds = values.std(axis=1, ddof=1) if n > 1 else np.full(len(models), np.nan)
    means = values.mean(axis=1) if n else np.full(len(models), np.nan)
    medians = np.median(values, axis=1) if n else np.full(len(models), np.nan)
    low, high = (ci[0][cols], ci[1][cols]) if ci is not None else (means, means)
    bounded = bounded_ends(low, high, means, *(end[cols] for end in full.span)) if full is not None else [None] * len(models)
    return {
        m: {  # type: ignore[typeddict-item]  # all_reported is added by the caller
            "mean": means[k],
            "sd": sds[k],
            "median": medians[k],
            "n": n,
            "ci_low": low[k],
            "ci_high": high[k],
            "ci_bounded": bounded[k],
            "n_missing_prediction": len(s.flags["prediction_missing"][m]),
            "n_worst_case": len(s.flags["worst_case"][m]),
            "contaminated": not bool(ranked[k]),
        }
        for k, m in enumerate(models)
    }


def _all_reported(
    s: StructureMatrices,
    models: list[str],
    metrics: Mapping[str, bool],
    structure: str,
    settings: StatsSettings,
    confidences: Mapping[str, float],
) -> dict[str, tuple[dict[str, AllReported], dict[tuple[str, ...], tuple[list[str], np.ndarray, np.ndarray]]]]:
    """Per metric, per model with scores outside the shared cases: mean, SD, median, n and CI over all its reported cases.

    Published sets may score different case sets per model (Touchstone: two models report 656 of 743
    scans). Ranks and paired tests need the shared cases (docs/methodology.md#512-published-sets), but the source's own per-model
    numbers are over every case the model reports; both are given, the latter here. All (metric, model)
    rows reporting the same case set share one paired bootstrap (one call, keyed by structure and case
    set, as the shared-case resamples serve every metric). Second result per metric, per set of extra
    cases: the models, their values (shared cases, then the extra ones) and resampled means, which the
    pairwise-complete alignment reuses for pairs on that case set.
    """
    groups: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    for metric in metrics:
        for k, model in enumerate(models):
            extra = s.unshared[metric].get(model)
            if extra:
                groups.setdefault(tuple(sorted(extra)), []).append((metric, k))
    out: dict = {metric: ({}, {}) for metric in metrics}
    for extra_cases, rows in groups.items():
        own = np.stack([np.concatenate([s.values[metric][k], [s.unshared[metric][models[k]][c] for c in extra_cases]]) for metric, k in rows])
        rng = rng_for(settings.seed, structure, "all_reported", *extra_cases)
        boot, _ = bootstrap_means(own, settings.n_resamples, rng)
        low, high = _Boot.of(own, boot).ci(np.array([confidences[metric] for metric, _ in rows]), settings.ci_method)
        for metric in dict.fromkeys(m for m, _ in rows):
            sel = [r for r, (m, _) in enumerate(rows) if m == metric]
            out[metric][1][extra_cases] = ([models[rows[r][1]] for r in sel], own[sel], boot[:, sel])
        for r, (metric, k) in enumerate(rows):
            out[metric][0][models[k]] = {
                "n": int(own.shape[1]),
                "mean": float(own[r].mean()),
                "sd": float(own[r].std(ddof=1)) if own.shape[1] > 1 else None,
                "median": float(np.median(own[r])),
                "ci_low": float(low[r]),
                "ci_high": float(high[r]),
            }
    return out


def _union_values(s: StructureMatrices, values: np.ndarray, names: list[str], metric: str) -> tuple[np.ndarray, list[str], np.ndarray] | None:
    """The named models' values on every case any of them reports: (K, N) with NaN where a model lacks a case.

    Also the union's case ids and the positions of the shared cases in it. None when no named model
    reports a case outside the shared ones (then both case alignments are the same analysis).
    """
    extra = {m: s.unshared[metric].get(m, {}) for m in names}
    if not any(extra.values()):
        return None
    case_ids = sorted(set(s.case_ids).union(*extra.values()))
    position = {c: i for i, c in enumerate(case_ids)}
    shared_at = np.array([position[c] for c in s.case_ids], dtype=np.int64)
    out = np.full((len(names), len(case_ids)), np.nan)
    rows = [s.models.index(m) for m in names]
    out[:, shared_at] = values[rows]
    for k, m in enumerate(names):
        out[k, [position[c] for c in extra[m]]] = list(extra[m].values())
    return out, case_ids, shared_at


class _TaskRanks(NamedTuple):
    """One cell's inputs to the consensus (docs/methodology.md#515-consensus): its ranked models in rank order, their
    full-data ranks and their mean ranks under each scheme resample."""

    names: list[str]
    ranks: np.ndarray  # (K,)
    boot_mean_ranks: np.ndarray  # (scheme_resamples, K)


class _Comparisons(TypedDict):
    """The keys of a cell :func:`_compare` fills."""

    ranking: Ranking
    pairwise: list[Pair]
    significance: Significance
    loo: LeaveOneOut | None
    power: Power | None
    alignment: Alignment | None
    schemes: Schemes


class _Compared(NamedTuple):
    """What :func:`_compare` gives: the cell's public comparisons and, apart from them, the cell's consensus inputs."""

    cell: _Comparisons
    task: _TaskRanks


def _compare(
    values: np.ndarray,
    names: list[str],
    higher: bool,
    full: _Boot,
    cols: slice,
    idx: np.ndarray,
    settings: StatsSettings,
    context: _Context,
) -> _Compared:
    """Ranking, pairwise CIs, significance map, leave-one-out, power, case alignment and schemes (docs/methodology.md 5.4-5.8, 5.11, 5.13-5.14)."""
    cols = np.arange(cols.start, cols.stop)[idx]
    means, boot = full.means[cols], full.boot[:, cols]
    jack = None if full.jack is None else full.jack[:, cols]
    order = rank_order(means, names, higher)
    full_ranks = rank_min(means[None, :], higher)[0]
    names = [names[k] for k in order]
    values, means, boot, full_ranks = values[order], means[order], boot[:, order], full_ranks[order]
    jack = None if jack is None else jack[:, order]

    ranking = _ranking(values, names, boot, full_ranks, higher, settings)
    a, b = pair_indices(len(names))
    test = _mean_test(values, a, b, settings, context.studentized, context.structure, context.metric) if a.size else None
    pairwise = _pairwise(names, a, b, means, boot, jack, test, settings)
    paired = pair_ranks(values)  # one sort of the pairs' differences for the map and the test-then-rank scheme
    significance = _significance(wilcoxon_map(values, higher, settings.alpha, paired), names, ("p_value", "p_adjusted", "significant"))
    alignment = None
    if context.union is not None:
        union, case_ids, shared_at = context.union
        alignment = _pairwise_complete(union[order], case_ids, shared_at, names, higher, (boot, means, jack, test), settings, context)
    pairwise, significance, alignment = _aligned(pairwise, significance, alignment, settings)
    loo = None
    if jack is not None:
        winner, any_rank = leave_one_out(jack, full_ranks, higher)
        loo = LeaveOneOut(winner_change_share=winner, any_rank_change_share=any_rank)
    scheme_block, boot_mean_ranks = schemes(values, names, higher, settings.alpha, context.counts, paired)
    cell = _Comparisons(
        ranking=ranking,
        pairwise=pairwise,
        significance=significance,
        loo=loo,
        power=_power(values, names, pairwise, significance, settings),
        alignment=alignment,
        schemes=scheme_block,  # type: ignore[typeddict-item]  # schemes() builds a Schemes
    )
    return _Compared(cell, _TaskRanks(names, full_ranks, boot_mean_ranks))


def _ranking(values: np.ndarray, names: list[str], boot: np.ndarray, full_ranks: np.ndarray, higher: bool, settings: StatsSettings) -> Ranking:
    """The full-data ranking of the models (in rank order) and its bootstrap stability (docs/methodology.md#54-ranking-stability)."""
    stab = ranking_stability(boot, full_ranks, higher, settings.confidence)
    return {
        "order": names,
        "rank": dict(zip(names, full_ranks)),
        "p_rank1": dict(zip(names, stab["p_rank1"])),
        "mean_rank": dict(zip(names, stab["mean_rank"])),
        "median_rank": dict(zip(names, stab["median_rank"])),
        "rank_interval": {m: [lo, hi] for m, lo, hi in zip(names, stab["rank_low"], stab["rank_high"])},
        "rank_frequency": dict(zip(names, stab["rank_frequency"])),
        "kendall_tau": KendallTau(**dict(zip(("q25", "median", "q75"), stab["tau_q"])), mean=stab["tau_mean"]),  # type: ignore[typeddict-item]  # the three quantiles by name
        "identical": identical_groups(values, names),
    }


def _pairwise(
    names: list[str],
    a: np.ndarray,
    b: np.ndarray,
    means: np.ndarray,
    boot: np.ndarray,
    jack: np.ndarray | None,
    test: PairTest | None,
    settings: StatsSettings,
) -> list[Pair]:
    """Every pair's separability on the shared cases, a ranked above b (docs/methodology.md#55-pairwise-separability):
    the pairs (a, b) of :func:`pair_indices`, ``test`` the verdict's test of them (None under ``bootstrap_ci``)."""
    if not a.size:
        return []
    by_resamples = test is None  # the bootstrap CIs decide: they read the resampled differences
    sep = separability(
        boot[:, a] - boot[:, b] if by_resamples else None,
        means[a] - means[b],
        None if jack is None or not by_resamples else jack[:, a] - jack[:, b],
        alpha=settings.alpha,
        correction=settings.multiple_comparison,
        ci_method=settings.ci_method,
        test=test,
        p_boot=pair_bootstrap_p_values(boot, a, b),
    )
    return [
        {"a": names[i], "b": names[j], "mean_diff": means[i] - means[j], **{k: v[p] for k, v in sep.items()}}  # type: ignore[typeddict-item]  # separability's keys are Pair's
        for p, (i, j) in enumerate(zip(a, b))
    ]


def _aligned(
    pairwise: list[Pair], significance: Significance, complete: Alignment | None, settings: StatsSettings
) -> tuple[list[Pair], Significance, Alignment | None]:
    """The cell's pairwise list, map and alignment under ``settings.case_alignment`` (docs/methodology.md#513-case-alignment):
    the shared-case ones and the pairwise-complete ones (None when every pair's common cases are the shared ones) swap
    places under "pairwise_complete"; "changes" says where they disagree."""
    if complete is None:
        return pairwise, significance, None
    shared: Alignment = {"protocol": "shared", "pairwise": pairwise, "significance": significance}  # type: ignore[typeddict-item]  # changes is set below or by the caller
    complete["changes"] = _alignment_changes(shared, complete)
    if settings.case_alignment == "pairwise_complete":
        shared["changes"] = complete.pop("changes")  # type: ignore[misc]  # moved to the shared alignment
        return complete["pairwise"], complete["significance"], shared
    return pairwise, significance, complete


def _power(values: np.ndarray, names: list[str], pairwise: list[Pair], significance: Significance, settings: StatsSettings) -> Power | None:
    """The cases needed to separate #1 from #2 (docs/methodology.md#511-power); None with one ranked model."""
    if len(names) < 2:
        return None
    return cast(
        Power,
        {
            "first": names[0],
            "second": names[1],
            "n_cases": values.shape[1],
            "alpha": settings.alpha,
            "power": settings.power,
            "separable": bool(pairwise[0]["separable"]),
            "significant": bool(significance["significant"][names[0]][names[1]]),
            **cases_needed(values[0] - values[1], settings.alpha, settings.power),
        },
    )


def _mean_test(
    values: np.ndarray, a: np.ndarray, b: np.ndarray, settings: StatsSettings, studentized: StudentizedBootstrap | None, *keys: str
) -> PairTest | None:
    """The separable verdict's test of the pairs (a, b) of the (K, n) ``values`` (:func:`pairwise.mean_test`), its
    draws from the seed and ``keys`` (docs/methodology.md#55-pairwise-separability), its studentized bootstrap half
    ``studentized`` where the structure's resamples already tallied it; None under ``bootstrap_ci``."""
    if settings.pairwise_test == "bootstrap_ci":
        return None
    return mean_test(
        values,
        a,
        b,
        settings.pairwise_test,
        settings.n_resamples,
        settings.alpha,
        rng_for(settings.seed, *keys, "sign_flips"),
        rng_for(settings.seed, *keys, "bootstrap_t") if studentized is None else studentized,
    )


def _significance(wil: dict[str, np.ndarray], names: list[str], keys: Sequence[str]) -> Significance:
    """The (K, K) Wilcoxon matrices as nested dicts a -> b, and the co-winners (models no other significantly beats)."""
    out: dict[str, Any] = {key: {x: {y: wil[key][i, j] for j, y in enumerate(names) if i != j} for i, x in enumerate(names)} for key in keys}
    out["co_winners"] = [m for m, lost in zip(names, cast(np.ndarray, wil["significant"].any(axis=0))) if not lost]
    return cast(Significance, out)


def _pairwise_complete(
    union: np.ndarray,
    case_ids: list[str],
    shared_at: np.ndarray,
    names: list[str],
    higher: bool,
    shared: tuple[np.ndarray, np.ndarray, np.ndarray | None, PairTest | None],
    settings: StatsSettings,
    context: _Context,
) -> Alignment | None:
    """Pairwise CIs and significance map with each pair on the cases both its models have (docs/methodology.md#513-case-alignment).

    ``union`` (K, N) holds the ranked models (in rank order) on every case any reports, NaN where one
    lacks it. ``shared``: the shared-case resampled means, means, jackknife and verdict test of those models. Pairs
    are grouped by their common-case set: the group on the shared cases reuses the shared resamples and test (a pair
    on the same cases gets the same p-value and interval under both alignments, not another draw of them), a
    group whose models all report exactly its cases reuses their all-reported bootstrap (_all_reported),
    any other gets one paired bootstrap of its models over its cases, seeded from the structure, metric
    and case set. None when every pair's common cases are the shared ones.
    """
    boot, means, jack, shared_test = shared
    a, b = pair_indices(len(names))
    if not a.size:
        return None
    observed = ~np.isnan(union)
    groups = common_case_groups(observed, a, b)
    n_shared = shared_at.size
    if all(cases.size == n_shared for _, cases in groups):
        return None
    # the resampled differences and their jackknife only where the bootstrap CIs decide (no test of the mean)
    by_resamples = settings.pairwise_test == "bootstrap_ci"
    diff_boot = np.empty((boot.shape[0], a.size)) if by_resamples else None
    p_boot, diff = np.empty(a.size), np.empty(a.size)
    reads_jack = by_resamples and settings.ci_method != "percentile"  # BCa and skew_t read the jackknife
    diff_jack = np.full((len(case_ids), a.size), np.nan) if reads_jack else None
    n_cases = np.empty(a.size, dtype=np.int64)
    tests = []
    for pairs, cases in groups:
        n_cases[pairs] = cases.size
        on_shared = cases.size == n_shared  # a superset of the shared cases of the same size: the shared cases
        if on_shared:
            test = None if shared_test is None else shared_test.part(pairs)
        else:
            test = _mean_test(
                union[:, cases], a[pairs], b[pairs], settings, None, context.structure, context.metric, "pairwise_complete", *(case_ids[c] for c in cases)
            )
        if test is not None:
            tests.append((pairs, test))
        if on_shared:
            g_boot, g_means, g_jack, ga, gb, rows = boot, means, jack, a[pairs], b[pairs], shared_at
        else:
            used = np.union1d(a[pairs], b[pairs])
            g_boot, sub, rows = _group_bootstrap(union, case_ids, shared_at, [names[u] for u in used], used, cases, settings, context)
            g_means = sub.mean(axis=1)
            g_jack = jackknife_means(sub) if reads_jack and cases.size > 1 else None
            ga, gb = np.searchsorted(used, a[pairs]), np.searchsorted(used, b[pairs])
        p_boot[pairs] = pair_bootstrap_p_values(g_boot, ga, gb)
        if by_resamples:
            diff_boot[:, pairs] = g_boot[:, ga] - g_boot[:, gb]  # type: ignore[index]  # allocated when by_resamples
        diff[pairs] = g_means[ga] - g_means[gb]
        if reads_jack and g_jack is not None:
            diff_jack[np.ix_(rows, pairs)] = g_jack[:, ga] - g_jack[:, gb]  # type: ignore[index]  # allocated when reads_jack
    sep = separability(
        diff_boot,
        diff,
        diff_jack,
        alpha=settings.alpha,
        correction=settings.multiple_comparison,
        ci_method=settings.ci_method,
        test=merge_tests(tests, a.size) if tests else None,
        p_boot=p_boot,
    )
    pairwise = [
        {"a": names[i], "b": names[j], "mean_diff": diff[p], "n_cases": n_cases[p], **{k: v[p] for k, v in sep.items()}} for p, (i, j) in enumerate(zip(a, b))
    ]
    wil = wilcoxon_map(union, higher, settings.alpha)
    return cast(
        Alignment,
        {"protocol": "pairwise_complete", "pairwise": pairwise, "significance": _significance(wil, names, ("p_value", "p_adjusted", "significant", "n_cases"))},
    )


def _group_bootstrap(
    union: np.ndarray,
    case_ids: list[str],
    shared_at: np.ndarray,
    used_names: list[str],
    used: np.ndarray,
    cases: np.ndarray,
    settings: StatsSettings,
    context: _Context,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Resampled means (B, k), values (k, m) and union positions (m,) of one common-case group's k models."""
    on_shared = np.isin(cases, shared_at)
    extra = tuple(case_ids[c] for c in cases[~on_shared])
    cached = context.reported.get(extra)
    if cached is not None and set(used_names) <= set(cached[0]):
        rows = [cached[0].index(m) for m in used_names]
        position = {c: i for i, c in enumerate(case_ids)}
        return cached[2][:, rows], cached[1][rows], np.concatenate([shared_at, [position[c] for c in extra]]).astype(np.int64)
    sub = union[used][:, cases]
    rng = rng_for(settings.seed, context.structure, context.metric, "pairwise_complete", *(case_ids[c] for c in cases))
    return bootstrap_means(sub, settings.n_resamples, rng)[0], sub, cases


def _alignment_changes(shared: Alignment, complete: Alignment) -> AlignmentChanges:
    """Where the two case alignments disagree: co-winner sets, Wilcoxon verdicts (ordered pairs), separability (pairs)."""
    sig_s, sig_c = shared["significance"]["significant"], complete["significance"]["significant"]
    return {
        "co_winners": shared["significance"]["co_winners"] != complete["significance"]["co_winners"],
        "significant": [[x, y] for x in sig_s for y in sig_s[x] if sig_s[x][y] != sig_c[x][y]],
        "separable": [[p["a"], p["b"]] for p, q in zip(shared["pairwise"], complete["pairwise"]) if p["separable"] != q["separable"]],
    }
