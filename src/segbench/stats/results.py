"""The results tree as types: ``results/<name>.json`` (``ResultsDocument``) and the analysis ``stats.analyze`` returns
(``Analysis``), level by level (docs/methodology.md#5-statistics-protocol).

Every level is a ``TypedDict``: plain dicts at run time (the analysis builds and writes the same dicts; the types only
name their keys), so a reader's typo'd key is a type error and a new key without its type fails
tests/stats/test_stats_results.py, which walks every results file against these types. ``dict[str, X]`` levels are keyed by
names (model, structure, metric, subgroup field or group, case id, scheme); lists of models are in rank order unless
said otherwise. JSON-serialisable: str, bool, int, float, None, lists, dicts; NaN is None;
``json.dumps(results, sort_keys=True)`` is byte-identical for identical inputs and settings.

Case alignment (docs/methodology.md#513-case-alignment). ``settings.case_alignment`` names the protocol of "pairwise"
and "significance": "shared" (every pair on the shared cases) or "pairwise_complete" (each pair on the cases both its
models report, Touchstone's protocol). "alignment" holds the other protocol's pairwise CIs and map and where the two
disagree; it is None when every pair's common cases are the shared ones (both protocols are then one analysis).
Everything else uses the shared cases.

Ranking schemes and consensus (docs/methodology.md#514-ranking-schemes, #515-consensus): challengeR's schemes on the
shared cases of the ranked models, and one consensus over every structure and metric (tasks whose ranking is defined),
both with ``scheme_resamples`` resamples seeded per (structure, metric).

Clustered data (docs/methodology.md#516-clustered-data): with a cluster field, every cell also holds the two-stage
cluster bootstrap of ``clusters.py`` on the shared cases, beside the case bootstrap; None without a field or where the
structure's shared cases fall in one cluster.

Conventions. Ranks are 'min' competition ranks among the ranked models, from the mean (higher better when
higher_is_better). Contaminated models (docs/methodology.md#510-contamination) appear in "models", "per_case" and
"subgroups" with "contaminated": true and are left out of "ranking", "pairwise", "significance", "loo" and "power".
Pairwise interval levels: see ``pairwise.separability`` (Holm's step levels). Wilcoxon one-sided 'a better than b'
('greater' for higher-is-better, 'less' for distances), K(K-1) p-values Holm-adjusted together. Subgroup groups: the
field's values as text; numeric fields are cut at their quartiles (``inputs.group_labels``); "mann_whitney" lists
only models whose Kruskal-Wallis p < alpha; groups below ``subgroup_min_cases`` are reported with "tested": false. None
marks what is undefined (n = 0, fewer than two ranked models, SD of one case, ...). Seeds: one resample matrix per
structure, from (seed, structure name), shared by all metrics, models and subgroups.
"""

from typing import Any, NotRequired, TypedDict, cast

# --- the analysis of one dataset (stats.analyze) -------------------------------------------------------------------


class Settings(TypedDict):
    """The statistics settings the analysis ran with (``StatsSettings.to_dict``; docs/methodology.md#5-statistics-protocol)."""

    n_resamples: int
    confidence: float
    seed: int
    ci_method: str
    ci_level: str
    pairwise_test: str
    multiple_comparison: str
    alpha: float
    subgroup_min_cases: int
    power: float
    case_alignment: str
    scheme_resamples: int


class Identical(TypedDict):
    """``identical.py``: the ``cases`` of the model's ``of`` cases with Dice exactly 1 on every structure."""

    cases: int
    of: int


class ModelFlags(TypedDict):
    """One model of the analysis: its contamination mark and its cases identical to the reference (None where rows are not
    cases, e.g. the lesion unit; absent in results recomputed from files older than the count)."""

    contaminated: bool
    identical_to_reference: NotRequired[Identical | None]


class Flags(TypedDict):
    """Per flag, per model, the shared cases the flag marks."""

    prediction_missing: dict[str, list[str]]
    worst_case: dict[str, list[str]]


class AllReported(TypedDict):
    """A model's estimates over every case it reports (published sets scoring different case sets per model)."""

    n: int
    mean: float
    sd: float | None
    median: float
    ci_low: float
    ci_high: float


class ModelEstimate(TypedDict):
    """One model's estimates in a cell (docs/methodology.md#53-estimates-and-cis) on the shared cases."""

    mean: float | None
    sd: float | None
    median: float | None
    n: int
    ci_low: float | None
    ci_high: float | None
    ci_bounded: str | None  # None, "low", "high" or "both": the ends the range rule holds at the smallest or largest
    #                         per-case value (resampling.bounded_ends)
    n_missing_prediction: int
    n_worst_case: int
    contaminated: bool
    all_reported: AllReported | None


class KendallTau(TypedDict):
    """Kendall's tau between the full-data ranking and the bootstrap rankings."""

    mean: float | None
    median: float | None
    q25: float | None
    q75: float | None


class Ranking(TypedDict):
    """Full-data ranking of the ranked models and its bootstrap stability (docs/methodology.md#54-ranking-stability)."""

    order: list[str]  # full-data rank order, then name
    rank: dict[str, int]
    p_rank1: dict[str, float]
    mean_rank: dict[str, float]
    median_rank: dict[str, float]
    rank_interval: dict[str, list[float]]  # (1-confidence) central interval [lo, hi]
    rank_frequency: dict[str, list[int]]  # count of rank 1, ..., rank K
    kendall_tau: KendallTau
    identical: list[list[str]]  # groups equal on every case (ranking.identical_groups)


class Pair(TypedDict):
    """One pair of ranked models, a ranked above b, diff = a - b (docs/methodology.md#55-pairwise-separability).

    ci_low/high: the interval that decides "separable" (the test inverted, or the bootstrap CI), None where unbounded;
    p_test, p_adjusted: the test's p-values (absent under bootstrap_ci); p_sign_flip, p_bootstrap_t: those of its two
    halves (the default test only); n_cases: the pair's common cases (pairwise_complete alignment only)."""

    a: str
    b: str
    mean_diff: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    p_bootstrap: float
    separable: bool
    p_sign_flip: NotRequired[float | None]
    p_bootstrap_t: NotRequired[float | None]
    p_test: NotRequired[float | None]
    p_adjusted: NotRequired[float | None]
    n_cases: NotRequired[int]


class Significance(TypedDict):
    """The Wilcoxon map 'a better than b' (a -> b -> x) and the co-winners (models no other significantly beats);
    n_cases: each pair's common cases (pairwise_complete alignment only)."""

    p_value: dict[str, dict[str, float | None]]
    p_adjusted: dict[str, dict[str, float | None]]
    significant: dict[str, dict[str, bool]]
    co_winners: list[str]
    n_cases: NotRequired[dict[str, dict[str, int]]]


class AlignmentChanges(TypedDict):
    """Where the two case alignments disagree: co-winner sets, Wilcoxon verdicts (ordered pairs), separability (pairs)."""

    co_winners: bool
    significant: list[list[str]]
    separable: list[list[str]]


class Alignment(TypedDict):
    """The other case alignment's pairwise CIs and map (docs/methodology.md#513-case-alignment), and what changes."""

    protocol: str  # "pairwise_complete" or "shared"
    pairwise: list[Pair]
    significance: Significance
    changes: AlignmentChanges


class LeaveOneOut(TypedDict):
    """Shares of leave-one-case-out rankings whose winner, or any rank, changes."""

    winner_change_share: float
    any_rank_change_share: float


class SchemeStability(TypedDict):
    """One scheme's bootstrap stability: P(rank 1) per model and the median Kendall tau to its full-data ranking."""

    p_rank1: dict[str, float]
    kendall_tau_median: float | None


class Schemes(TypedDict):
    """challengeR's ranking schemes (schemes.SCHEMES) of the ranked models (docs/methodology.md#514-ranking-schemes)."""

    ranks: dict[str, dict[str, float]]  # scheme -> model -> rank
    scores: dict[str, dict[str, float | None]]  # scheme -> model -> the scheme's score
    kendall_tau: dict[str, dict[str, float | None]]  # scheme -> scheme -> tau-b
    stability: dict[str, SchemeStability]
    n_resamples: int  # scheme_resamples


class VerdictPair(TypedDict):
    """One pair's answer (verdicts.py): the separability interval beside the Wilcoxon test and the case counts."""

    a: str
    b: str
    code: str
    text: str
    mean_diff: float
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    mean_separable: bool
    wilcoxon_favours: str | None
    wilcoxon_leans: str | None
    p_a_better: float | None
    p_b_better: float | None
    n_cases: int
    n_a_better: int
    n_b_better: int
    n_tied: int


class Verdict(TypedDict):
    """One answer per cell that every view prints (verdicts.py): #1 against #2 under ``scheme``, and every pair."""

    scheme: str
    code: str
    first: str
    second: str | None
    text: str
    intervals: str | None
    co_winners: list[str]
    excluded: dict[str, str]  # model -> why it is not ranked
    pairs: list[VerdictPair]


class Power(TypedDict):
    """The cases needed to separate #1 from #2 (docs/methodology.md#511-power)."""

    first: str
    second: str
    n_cases: int
    mean_diff: float
    sd_diff: float | None
    effect_size: float | None
    n_required: int | None
    alpha: float
    power: float
    separable: bool
    significant: bool


class GroupEstimate(TypedDict):
    """A model's mean and CI in one subgroup."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None


class Group(TypedDict):
    """One subgroup: its case count, whether it is tested (n >= subgroup_min_cases), and every model's estimate."""

    n: int
    tested: bool
    models: dict[str, GroupEstimate]


class Kruskal(TypedDict):
    """A model's Kruskal-Wallis test across the tested groups."""

    statistic: float | None
    p_value: float | None


class MannWhitney(TypedDict):
    """A model's Mann-Whitney test of two groups, Bonferroni-corrected over the field's group pairs."""

    a: str
    b: str
    statistic: float | None
    p_value: float | None
    p_bonferroni: float | None
    significant: bool


class Subgroups(TypedDict):
    """One metadata field's subgroups (docs/methodology.md#59-subgroups); every model, contaminated ones marked."""

    n_missing_value: int
    groups: dict[str, Group]
    kruskal: dict[str, Kruskal] | None
    mann_whitney: dict[str, list[MannWhitney]]  # only models whose Kruskal-Wallis p < alpha


class ClusteredEstimate(TypedDict):
    """A model's cluster-bootstrap CI beside its case-bootstrap CI; width_ratio: cluster CI width / case CI width."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    case_ci_low: float | None
    case_ci_high: float | None
    width_ratio: float | None


class ClusteredRank1(TypedDict):
    """P(rank 1) under the cluster and the case bootstrap."""

    cluster: float
    case: float


class ClusteredPair(TypedDict):
    """A pair's cluster-bootstrap interval beside its case interval, and both separable verdicts."""

    a: str
    b: str
    mean_diff: float
    ci_level: float
    ci_low: float | None
    ci_high: float | None
    case_ci_low: float | None
    case_ci_high: float | None
    width_ratio: float | None
    separable: bool
    case_separable: bool


class Clustered(TypedDict):
    """The two-stage cluster bootstrap of one cell (clusters.py; docs/methodology.md#516-clustered-data)."""

    field: str
    n_clusters: int
    cluster_sizes: dict[str, int]
    case_set: str  # "shared"
    models: dict[str, ClusteredEstimate]
    p_rank1: dict[str, ClusteredRank1] | None  # ranked models
    pairwise: list[ClusteredPair]


class MetricCell(TypedDict):
    """One structure and metric: the per-case values every number derives from, and every statistic of them."""

    higher_is_better: bool
    per_case: dict[str, list[float]]  # model -> values aligned to the structure's case_ids
    per_case_unshared: dict[str, dict[str, float]]  # model -> case id -> value scored outside the shared cases
    ci_confidence: float  # the level of the models' CIs (and all_reported's): ``confidence``, or the calibrated level a
    #                       ``ci_levels`` gave (stats.levels; ci_level: audited)
    models: dict[str, ModelEstimate]
    ranking: Ranking | None
    pairwise: list[Pair]
    significance: Significance | None
    alignment: Alignment | None
    loo: LeaveOneOut | None
    power: Power | None
    schemes: Schemes | None
    verdict: Verdict | None
    subgroups: dict[str, Subgroups]  # field -> its subgroups
    clustered: NotRequired[Clustered | None]  # absent in results written before the cluster bootstrap


class Structure(TypedDict):
    """One structure: its shared cases (reference present and scored for every model), their flags and metadata, and
    its metric cells (docs/methodology.md#52-shared-cases)."""

    n_cases: int  # shared cases
    n_absent: int  # cases whose reference is absent (excluded for every model)
    n_unshared: int  # reference present but missing for at least one model (excluded)
    case_ids: list[str]  # the n shared cases, sorted; every per-case list is aligned to it
    flags: Flags
    case_meta: dict[str, list[str | None]]  # field -> group label per shared case
    metrics: dict[str, MetricCell]


class VerdictChanges(TypedDict):
    """The cells ("structure/metric") whose #1-versus-#2 or co-winner verdict the cluster bootstrap changes."""

    unit: str  # "case"
    n_cells: int
    first_second: list[str]
    co_winners: list[str]


class Clusters(TypedDict):
    """The cluster of every case (the analysis' cluster field) and the verdicts it changes."""

    field: str
    labels: dict[str, str]  # case id -> cluster
    verdict_changes: VerdictChanges


class Consensus(TypedDict):
    """challengeR's consensus over every structure and metric (docs/methodology.md#515-consensus), with its bootstrap stability."""

    tasks: list[str]  # "structure/metric"
    order: list[str]
    mean_rank: dict[str, float]
    rank: dict[str, int]
    p_rank1: dict[str, float]
    task_ranks: dict[str, dict[str, float]]  # task -> model -> rank
    rank_frequency: dict[str, list[int]]  # model -> count of rank 1..K
    n_resamples: int  # scheme_resamples


class Analysis(TypedDict):
    """The statistics of one dataset's per-case rows (``stats.analyze``; ``stats.reanalyze`` re-derives it)."""

    settings: Settings
    subgroup_fields: list[str]
    models: dict[str, ModelFlags]
    structures: dict[str, Structure]
    clusters: Clusters | None
    consensus: Consensus | None


# --- the rest of the results document (leaderboard.results_document and the compare stage) -------------------------


class Region(TypedDict):
    """A scored region: its label ids and NSD tolerance."""

    labels: list[int]
    nsd_tolerance_mm: float


class DatasetBlock(TypedDict):
    """The leaderboard's dataset: names, licence and citation, and what kind of set it is (scored regions, a published
    score set with its import summary, an interactive set with its reference and time limit)."""

    name: str
    title: str
    licence: str
    citation: str
    version: NotRequired[str]
    regions: NotRequired[dict[str, Region]]  # scored datasets
    source: NotRequired[str]  # published sets, `segbench evaluate`
    evaluated_on: NotRequired[str]  # published sets
    import_summary: NotRequired[dict[str, Any]]  # published sets: published.import_summary
    source_case_alignment: NotRequired[str]  # published sets with their own case alignment
    nsd_tolerance_mm: NotRequired[dict[str, float]]  # sets stating an NSD tolerance per structure
    interactive: NotRequired[bool]  # interactive sets
    reference: NotRequired[str]
    reference_note: NotRequired[str]
    seconds_per_class: NotRequired[float]
    time_limit_clock: NotRequired[str]


class ModelEntry(TypedDict):
    """A leaderboard model: its title, kind, licence, training sets and contamination, and the versions its runs used."""

    title: str
    kind: NotRequired[str]  # every writer sets it; results written before kinds lack it (read from "simulated")
    simulated: bool
    licence: str
    trained_on: list[str]
    contaminated: bool
    source: NotRequired[str]
    versions: NotRequired[dict[str, str]]


def model_entry(
    title: str, kind: str, evaluated_on: str, *, trained_on: tuple[str, ...] | list[str] = (), licence: str = "", simulated: bool = False, **extra: str
) -> ModelEntry:
    """A model's entry, the one way every board writes it: contaminated when ``evaluated_on`` (the dataset the board
    scores) is among the datasets it was trained on; ``extra``: the ``source`` or an image digest."""
    return cast(
        ModelEntry,
        {
            "title": title,
            "kind": kind,
            "simulated": simulated,
            "licence": licence,
            "trained_on": list(trained_on),
            "contaminated": evaluated_on in trained_on,
            **extra,
        },
    )


class MetricEntry(TypedDict):
    """A metric of the leaderboard."""

    higher_is_better: bool


class TopChange(TypedDict):
    """A value under the baseline and under the variant."""

    baseline: Any
    variant: Any


class SensitivityCell(TypedDict):
    """How one cell's ranking and verdicts change under a variant (sensitivity.compare_analyses); only "ranked" where
    either side has no ranking."""

    ranked: bool
    kendall_tau: NotRequired[float | None]
    flipped_pairs: NotRequired[list[list[str]]]
    top: NotRequired[TopChange]
    top_changed: NotRequired[bool]
    co_winners: NotRequired[TopChange]
    co_winners_changed: NotRequired[bool]
    verdict: NotRequired[TopChange]
    verdict_changed: NotRequired[bool]
    verdicts_changed: NotRequired[list[list[str]]]
    separable_changed: NotRequired[list[list[str]]]
    means: NotRequired[dict[str, TopChange]]


class SensitivitySummary(TypedDict):
    """The counts of one variant's changes over its ranked cells."""

    n_cells: int
    n_cells_with_flips: int
    n_flipped_pairs: int
    n_top_changed: int
    n_co_winners_changed: int
    n_verdicts_changed: int
    kendall_tau_min: float | None


class Variant(TypedDict):
    """One variant (a metric profile or a missing-value policy): whether it ran (and why not), its cells and summary;
    "undefined": the lesion-wise rows a variant profile leaves undefined."""

    run: NotRequired[bool]
    reason: NotRequired[str]
    cells: NotRequired[dict[str, dict[str, SensitivityCell]]]  # structure -> metric -> cell
    summary: NotRequired[SensitivitySummary]
    undefined: NotRequired[Any]


class Variants(TypedDict):
    """The baseline (profile or policy) and the variants set beside it."""

    baseline: str
    variants: dict[str, Variant]
    n_failed_rows: NotRequired[int]  # missing-value policies


class Sensitivity(TypedDict):
    """The analysis under other metric-definition profiles and missing-value policies (docs/methodology.md#517-implementation-sensitivity)."""

    profiles: Variants
    missing_policy: Variants


class AuditEntry(TypedDict, total=False):
    """One audited rate of a cell (audited.py): the population it reads, its rate and Monte Carlo SE, and the target;
    coverage entries add the method and calibrated level, type-I entries the procedure."""

    population: str
    source: str
    structure: str
    match: str
    candidates: int
    n: int
    n_board: int
    rate: float
    mc_se: float
    level: float
    capped: bool
    nominal_rate: float
    width_ratio: float
    method: str
    target: float
    under_covers: bool
    procedure: str
    exceeds_alpha: bool


class Limit(TypedDict):
    """Where a cell's verdict is past what the audit verified (limits.py): the audited population nearest the cell's
    shape, its n beside the cell's, the rate at which the verdict erred there and its Monte-Carlo SE, alpha, and the
    sentence every view prints beside the verdict."""

    code: str  # "skewed" or "failures_unseen"
    population: str
    n: int
    n_board: int
    rate: float
    mc_se: float
    target: float
    text: str


class AuditedCell(TypedDict):
    """The audited coverage of a cell's CI and type-I error of its verdict; reason: why an entry is None; limit: where
    its n or shape is past what the verdict's test was verified on (None: within it; absent: no failure-shape audit)."""

    coverage: AuditEntry | None
    type1: AuditEntry | None
    reason: str | None
    limit: NotRequired[Limit | None]


class Audited(TypedDict):
    """The calibration audit's rates for every leaderboard cell (audited.board)."""

    margin: float
    structures: dict[str, dict[str, AuditedCell]]  # structure -> metric -> cell
    lesions: NotRequired[str]  # why the lesion-wise leaderboards are not audited


class VolumeStratum(TypedDict):
    """Reference lesions and true positives in one volume stratum."""

    stratum: str
    n_reference: int
    tp: int


class LesionCounts(TypedDict):
    """A model's lesion detection counts on one structure (the lesion counts are sums of float columns: whole floats)."""

    tp: float
    fp: float
    fn: float
    n_reference: float
    n_prediction: float
    fp_volume_ml: float
    fn_volume_ml: float
    n_cases: int
    n_cases_with_lesions: int
    by_volume: list[VolumeStratum]


class Lesions(TypedDict):
    """The lesion-wise analyses (docs/methodology.md#519-lesion-wise-analysis): by case, of matched lesions and by lesion,
    their counts, the rows left undefined, and the sensitivity to other lesion profiles."""

    profile: str
    case: Analysis | None
    matched: Analysis | None
    lesion: Analysis | None
    undefined: dict[str, list[Any]]
    counts: dict[str, dict[str, LesionCounts]]  # structure -> model -> counts
    sensitivity: Variants


class SourcePairwise(TypedDict):
    """segbench's pairwise CIs under a source's correction, set beside the source's (source.beside_source)."""

    correction: str
    alpha: float
    n_resamples: int
    ci_method: str
    pairwise_test: str
    pairwise: list[Pair]


class SourcePair(TypedDict):
    """A source's own verdict on a pair: its difference a - b, bootstrap CI, and the model it favours if the CI excludes 0."""

    a: str
    b: str
    delta: float
    ci_low: float | None
    ci_high: float | None
    distinguishable: bool
    favored: str | None


class SourceCell(TypedDict, total=False):
    """A source's published analysis of one cell (its own keys, published/readers.py), with segbench's beside it."""

    ci_level: float
    correction: str
    n_cases: int
    n_comparisons: int
    n_resamples: int
    models: dict[str, dict[str, Any]]
    pairwise: list[SourcePair]
    segbench: SourcePairwise


class SourceAnalysis(TypedDict):
    """A published set's own analysis (its protocol and cells) beside segbench's."""

    protocol: dict[str, Any]
    structures: dict[str, dict[str, SourceCell]]


class CoverageModel(TypedDict):
    """A model lacking cases: its n of N cases and the cases it lacks."""

    n_cases: int
    of: int
    missing: list[str]


class CoverageBlock(TypedDict):
    """The coverage policy (stats.coverage; docs/methodology.md#41-coverage) and, under own_cases, each lacking model's
    analysis on its own cases."""

    policy: str
    applied: str
    n_cases: int
    models: dict[str, CoverageModel]
    reason: NotRequired[str]
    shared_cases: NotRequired[dict[str, Any]]
    analyses: NotRequired[dict[str, Analysis]]


class ResultsDocument(TypedDict):
    """``results/<name>.json``: one leaderboard, whichever way its rows were obtained (assembly/results_document.py)."""

    segbench_version: str
    dataset: DatasetBlock
    models: dict[str, ModelEntry]
    metrics: dict[str, MetricEntry]
    hd95_definition: str
    metric_profile: str
    analysis: Analysis
    sensitivity: Sensitivity
    coverage: NotRequired[CoverageBlock]
    lesions: NotRequired[Lesions]
    audited: NotRequired[Audited | str | None]  # None: no audit tables; a sentence: why none is audited (the report's
    #                                           lesion-wise views)
    source_analysis: NotRequired[SourceAnalysis]
