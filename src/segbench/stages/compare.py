"""Compare stage (``segbench compare``): per-case rows read back from MLflow -> the statistics
(docs/methodology.md#5-statistics-protocol) -> ``results/<name>.json``, DVC's metrics and plots views of it, and the
leaderboard's MLflow run."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pandas as pd

from segbench import stats
from segbench.assembly.results_document import analysed_document, dataset_block
from segbench.base.io import atomic_dir, recorded, write_json_atomic, write_text_atomic
from segbench.config.params import Params
from segbench.config.stats_settings import stats_settings
from segbench.datasets.cases import data_version
from segbench.interactive import scores as interactive_scores
from segbench.interactive.schema import REFERENCE_LABELS
from segbench.scoring.engine import ANALYZED_METRICS
from segbench.stages.bundles import LESION_PROFILE_TAG, PublishedFacts, published_facts
from segbench.stages.paths import calibration_results_dir, metrics_dir, output_root, plot_file, results_file, scores_dir, tracking_marker
from segbench.stats.results import Lesions
from segbench.tracking import runs as tracking

log = logging.getLogger(__name__)

#: the audit tables compare reads (dvc.yaml declares them as deps of every compare stage); power is not read
AUDIT_TABLES = ("coverage.csv", "type1.csv", "levels.csv", "real_coverage.csv", "real_type1.csv", "real_levels.csv", "audit.json")
#: the failure-shape audit's type-I table, read where the audit ran it: each cell's honest limit (stats/limits.py)
SHAPES_TABLE = "shapes_type1.csv"


def _board_models(params: Params, name: str, root: Path) -> list[str]:
    """The models of leaderboard ``name``, in the order of its results: a published set's are those its track stage
    logged (one marker each), an interactive dataset's its interactive models, a dataset's the models run on it."""
    if name in params.published:
        return sorted(p.stem for p in tracking_marker(name, "*", root).parent.glob("*.json"))
    if name in params.interactive_datasets:
        return list(params.interactive_models)
    dataset = params.dataset(name)  # an unknown name is an error naming the ones params.yaml has, before any marker is read
    return [m.name for m in params.models.values() if m.source is None or m.source.dataset == dataset.name]  # a folder of predictions is one dataset's


def _leaderboard_setup(
    params: Params, name: str, model_names: list[str], facts: PublishedFacts | None
) -> tuple[dict[str, Any], dict[str, stats.ModelEntry], dict[str, bool], tuple[str, ...], str | None]:
    """What compare needs besides the rows: dataset block, model entries, metrics, subgroup fields, cluster field.
    ``facts``: a published set's import summary and its models' claims as its model runs carry them
    (``bundles.published_facts``): its files are not read again."""
    if facts is not None:
        source = params.published_set(name)
        claims = facts.claims
        # a segauge results file declares each model's licence and training sets (contaminated_on)
        trained = {m: tuple(sorted({*source.trained_on.get(m, ()), *claims[m].get("contaminated_on", ())})) for m in model_names}
        entries = {
            m: stats.model_entry(
                m, "published", source.evaluated_on, trained_on=trained[m], source=source.source, licence=claims[m].get("licence") or source.licence
            )
            for m in model_names
        }
        block: dict[str, Any] = {
            "name": name,
            "title": source.title,
            "licence": source.licence,
            "citation": source.citation,
            "source": source.source,
            "evaluated_on": source.evaluated_on,
            "import_summary": facts.import_summary,
        }
        if source.case_alignment:  # the source's own protocol; both alignments are in the analysis
            block["source_case_alignment"] = source.case_alignment
        return block, entries, source.metrics, source.subgroups, source.cluster_field
    if name in params.interactive_datasets:
        interactive = params.interactive_dataset(name)
        entries = {
            m.name: stats.model_entry(m.title, m.kind, name, trained_on=m.trained_on, licence=m.licence)
            for m in (params.interactive_models[n] for n in model_names)
        }
        block = {
            "name": name,
            "title": interactive.title,
            "licence": interactive.licence,
            "citation": interactive.citation,
            "interactive": True,
            "reference": REFERENCE_LABELS[interactive.reference],
            "reference_note": interactive.note,
            "seconds_per_class": interactive.seconds_per_class,
            "time_limit_clock": interactive.time_limit_clock,
        }
        return block, entries, interactive_scores.METRICS, (), None
    dataset = params.dataset(name)
    entries = {
        m.name: stats.model_entry(m.title, m.kind, dataset.name, trained_on=m.trained_on, licence=m.licence, simulated=m.is_simulated)
        for m in (params.models[n] for n in model_names)
    }
    return dataset_block(dataset), entries, ANALYZED_METRICS, dataset.subgroups, dataset.cluster_field


def run_compare(params: Params, name: str, root: Path | None = None) -> None:
    """Compare stage: per-case rows read back FROM MLFLOW -> statistics (docs/methodology.md#5-statistics-protocol) -> results/<name>.json
    under ``root`` (default: the dataset's, :func:`~segbench.stages.paths.output_root`)."""
    root = output_root(params, name) if root is None else root
    model_names = _board_models(params, name, root)
    markers = {m: json.loads(tracking_marker(name, m, root).read_text(encoding="utf-8")) for m in sorted(model_names)}
    _restore_missing_runs(name, markers, root)
    runs = tracking.read_runs(name, {m: marker["fingerprint"] for m, marker in markers.items()})
    facts = published_facts(name, runs.records) if name in params.published else None
    block, models, metrics, subgroups, cluster_field = _leaderboard_setup(params, name, model_names, facts)
    rows = runs.rows
    for model, entry in models.items():
        entry["versions"] = {k.removeprefix("segbench."): v for k, v in sorted(runs.tags[model].items())}
    contaminated = {m: entry["contaminated"] for m, entry in models.items()}
    tables = None if name in params.interactive_datasets else audit_tables(params)
    source, data = board_population(params, name)
    # a published set's version is its own files' (the import stage's tag), a dataset's the data bundle's
    block["version"] = next(iter(runs.tags.values()))["segbench.dataset_version"] if name in params.published else data_version()
    settings = stats_settings(params)
    results, covered = analysed_document(
        block,
        models,
        metrics,
        rows,
        runs.profile_rows,
        settings=settings,
        contaminated=contaminated,
        policy=params.missing_predictions,
        subgroup_fields=subgroups,
        cluster_field=cluster_field,
        ci_levels=stats.level_provider(tables, source=source, data=data, settings=settings.to_dict()),
    )
    analysis = results["analysis"]
    if not runs.lesion_rows.empty:
        results["lesions"] = _lesion_block(runs, covered, contaminated, settings)
    results["audited"] = stats.audited_board(tables, analysis, source=source, data=data, lesions=stats.audited_lesions if "lesions" in results else None)
    if facts is not None and facts.source_analysis is not None:  # the analysis a segauge results file publishes
        results["source_analysis"] = stats.beside_source(analysis, facts.source_analysis)
    write_json_atomic(results_file(name, root), results)
    with atomic_dir(metrics_dir(name, root)) as heads:
        for (structure, metric), head in stats.leaderboard_heads(analysis).items():
            write_json_atomic(heads / structure / f"{metric}.json", head)
        if "lesions" in results:  # the lesion-wise leaderboards by case and of matched lesions, under lesions/ (docs/methodology.md#519-lesion-wise-analysis)
            for lesion_analysis in (results["lesions"][unit] for unit in ("case", "matched")):
                for (structure, metric), head in (stats.leaderboard_heads(lesion_analysis) if lesion_analysis else {}).items():
                    write_json_atomic(heads / "lesions" / structure / f"{metric}.json", head)
    buffer = io.StringIO()
    pd.DataFrame(stats.mean_ci_rows(analysis), columns=stats.PLOT_COLUMNS).to_csv(buffer, index=False, lineterminator="\n")
    write_text_atomic(plot_file(name, root), buffer.getvalue())
    log.info("wrote %s, %s and %s", results_file(name, root), metrics_dir(name, root), plot_file(name, root))
    log_leaderboard(name, runs.run_ids, root)


def audit_tables(params: Params, folder: Path | None = None) -> stats.AuditTables | None:
    """The calibration audit's coverage and type-I tables (simulated and real populations) as ``stats.audited`` reads
    them, or None when they are absent (no ``calibration/results/``, e.g. a project without the audit) or params.yaml has
    no calibration block."""
    folder = calibration_results_dir() if folder is None else folder
    missing = [name for name in AUDIT_TABLES if not (folder / name).is_file()]
    if params.calibration is None or missing:
        log.info(
            "calibration audit tables absent (%s): the leaderboards say 'not audited'",
            "no calibration block" if params.calibration is None else ", ".join(str(folder / m) for m in missing),
        )
        return None

    def read(name: str) -> pd.DataFrame:
        return pd.read_csv(folder / name, dtype={"source": str, "structure": str, "metric": str})

    settings = json.loads((folder / "audit.json").read_text(encoding="utf-8"))["stats"]
    data = stats.population_data(params.calibration.dataset, {name: spec.source.evaluated_on for name, spec in params.calibration.real.items()})
    shapes = folder / SHAPES_TABLE
    return stats.AuditTables(
        coverage=pd.concat([read("coverage.csv"), read("real_coverage.csv")], ignore_index=True),
        type1=pd.concat([read("type1.csv"), read("real_type1.csv")], ignore_index=True),
        levels=pd.concat([read("levels.csv"), read("real_levels.csv")], ignore_index=True),
        settings=settings,
        data=data,
        shapes=pd.read_csv(shapes, dtype={"shape": str, "kind": str, "metric": str}) if shapes.is_file() else None,
    )


def board_population(params: Params, name: str) -> tuple[str | None, str]:
    """The audit source of leaderboard ``name``'s own population and the dataset its cases come from: the published
    set's of that name, or the simulated one on the audit's dataset (None: the audit has none). Compare reads the
    audit tables for every board but an interactive one, whose step metrics the audit does not cover
    (interactive/dvc.yaml does not declare the tables): they give the CIs' calibrated levels and the ``audited`` block
    (``stats.audited.board``: per structure and metric, the audited coverage of its CI and type-I error of its verdict;
    why the lesion-wise leaderboards are not audited)."""
    if name in params.published:
        return name, params.published_set(name).evaluated_on
    return (stats.SIMULATED if params.calibration is not None and params.calibration.dataset == name else None), name


def _lesion_block(runs: tracking.TrackedRuns, covered: stats.Coverage, contaminated: Mapping[str, bool], settings: stats.StatsSettings) -> Lesions:
    """The results' lesion-wise block (``stats.lesion_analysis``) under the lesion profile every model was scored with, on
    the leaderboard's models and cases (``covered``: a model lacking cases is left out under ``own_cases``)."""
    lesion_rows = covered.board(runs.lesion_rows)
    profiles = {model: tags.get(LESION_PROFILE_TAG) for model, tags in runs.tags.items() if model in set(lesion_rows["model"])}
    if len(set(profiles.values())) != 1 or None in profiles.values():
        raise ValueError(f"lesion-wise scores under different lesion profiles {profiles}: rerun the score stages with one scoring.lesions.profile")
    return stats.lesion_analysis(
        lesion_rows,
        covered.board(runs.instance_rows),
        profile=cast(str, next(iter(profiles.values()))),
        settings=settings,
        contaminated={m: c for m, c in contaminated.items() if m in profiles},
    )


def _restore_missing_runs(name: str, markers: dict[str, dict[str, Any]], root: Path = Path(".")) -> None:
    """Log the score bundles whose runs the store lacks, e.g. after `dvc pull` on a new machine.

    The track markers come from the DVC cache there, so no track stage reruns; the store is looked up first by each
    marker's fingerprint (``tracking.missing_runs``), and only a run it lacks is restored here from its pulled bundle
    (read and checked: ``tracking.ScoreBundle.read``). A run the store holds is never compared with its bundle: the
    rows compare reads come from the store only.
    """
    for model in tracking.missing_runs(name, {m: marker["fingerprint"] for m, marker in markers.items()}):
        marker = markers[model]
        bundle = tracking.ScoreBundle.read(scores_dir(name, model, root))  # checked: the bytes its stage wrote, every metric in range
        if bundle.fingerprint != marker["fingerprint"]:
            path = tracking_marker(name, model, root)
            record = recorded(path)
            stage = f"`dvc repro -f -s {record.stage}`" if record else "the track stage"
            raise tracking.TrackingError(
                f"{path}: names fingerprint {str(marker['fingerprint'])[:12]}, not that of {scores_dir(name, model, root)} "
                f"({bundle.fingerprint[:12]}), which is the authoritative copy (the bytes its stage wrote, checked against dvc.lock): "
                f"{stage} logs that bundle and writes the marker again"
            )
        log.info("MLflow run of %s, %s (fingerprint %s) not in the store: logged from %s", name, model, bundle.fingerprint[:12], scores_dir(name, model, root))
        tracking.log_bundle(bundle)


def log_leaderboard(name: str, model_runs: dict[str, str], root: Path = Path(".")) -> str:
    """The leaderboard of ``results/<name>.json`` as one MLflow run beside the model runs it was read from:
    the results file itself, the dataset's pages of the site as one self-contained file, the leaderboard table,
    the headline metrics, and the experiment's runs view."""
    from segbench import report  # plotly: only the stages that draw import it

    content = results_file(name, root).read_bytes()
    results = json.loads(content)
    board = tracking.Leaderboard(
        dataset=name,
        results_name=results_file(name, root).name,
        results=content,
        model_runs=model_runs,
        metrics=report.summary_metrics(results),
        tags=report.summary_tags(results),
        params=report.summary_params(results),
        table=report.leaderboard_table(results),
        view=report.view_columns(results),
        pages=lambda: {f"{name}.html": report.standalone_dataset_page(results).encode()},
    )
    return tracking.log_leaderboard(board)
