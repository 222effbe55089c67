"""The pipeline's stages, one function each, wiring the modules together (docs/methodology.md#1-pipeline-and-data-flow).

predict -> score -> track -> compare -> report, and for published score sets (no masks)
import -> track -> compare. Each stage reads the files of the stage before it and writes its own
outputs atomically; ``dvc.yaml`` declares exactly these paths.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import segbench
import segbench.scoring.engine  # noqa: F401 (scoring.score_cases: the package loads its engine on first use)
import segbench.scoring.lesionwise  # noqa: F401 (scoring.score_lesion_cases)
from segbench import published, scoring, stats, tracking
from segbench.calibration_schema import CalibrationConfig
from segbench.config import ConfigError, Params
from segbench.datasets.cases import case_ids, data_version, load_metadata, reference_path
from segbench.datasets.schema import DatasetConfig
from segbench.interactive import scores as interactive_scores
from segbench.interactive.cases import REFERENCE_LABELS
from segbench.io import atomic_dir, write_json_atomic, write_text_atomic
from segbench.leaderboard import ANALYZED_METRICS, analysed_document, dataset_block
from segbench.models.runner import predict
from segbench.models.schema import ModelConfig
from segbench.models.slurm import executor_from_environ, shard_runner_from_environ
from segbench.models.structures import compose
from segbench.published_schema import PublishedConfig
from segbench.stats.verdicts import base_digits, unit
from segbench.validation import stats_settings

log = logging.getLogger(__name__)

#: the lesion-wise means an MLflow run carries (its leaderboard analyses more: ``stats.lesions``)
LESION_HEADLINE_METRICS = ("rq", "pq_dice", "lesion_dice")
LESION_PROFILE_TAG = "segbench.lesion_profile"


#: where the interactive benchmark (interactive/dvc.yaml) keeps its outputs, laid out as the main pipeline's
INTERACTIVE_ROOT = Path("interactive")
#: where the calibration audit (calibration/dvc.yaml) keeps its outputs
CALIBRATION_ROOT = Path("calibration")


def predictions_dir(dataset: str, model: str, root: Path = Path(".")) -> Path:
    return root / "predictions" / dataset / model


def scores_dir(dataset: str, model: str, root: Path = Path(".")) -> Path:
    return root / "scores" / dataset / model


def tracking_marker(dataset: str, model: str, root: Path = Path(".")) -> Path:
    return root / "tracking" / dataset / f"{model}.json"


def results_file(dataset: str, root: Path = Path(".")) -> Path:
    return root / "results" / f"{dataset}.json"


def metrics_dir(dataset: str, root: Path = Path(".")) -> Path:
    """The leaderboard heads DVC shows (``dvc metrics show``, ``dvc exp show``): ``<structure>/<metric>.json``."""
    return root / "metrics" / dataset


def plot_file(dataset: str, root: Path = Path(".")) -> Path:
    """Each model's mean with its CI, per structure and metric, for ``dvc plots``."""
    return root / "plots" / f"{dataset}.csv"


def cases_dir(dataset: str) -> Path:
    """An interactive dataset's challenge npz cases (``segbench cases``)."""
    return INTERACTIVE_ROOT / "cases" / dataset


def run_predict(
    params: Params, dataset_name: str, model_name: str, device: str | None = None, allow_unverified_weights: bool = False
) -> None:
    """Predict stage: run the model adapter on every case of the dataset, here or on Slurm (``SEGBENCH_EXECUTOR``)."""
    model = params.model(model_name)
    predict(
        params.dataset(dataset_name),
        model,
        predictions_dir(dataset_name, model_name),
        device=device or model.device,
        allow_unverified_weights=allow_unverified_weights,
        executor=executor_from_environ(),
    )


def _shown_mean(values: pd.Series, present: np.ndarray, metric: str) -> float:
    """The mean of ``values`` over the ``present`` cases, rounded as every view prints a mean without its CI
    (``stats.verdicts.base_digits``): an MLflow run's headline, which MLflow's runs table would show to 16 digits."""
    return round(float(values.to_numpy(dtype=np.float64)[present].mean()), base_digits(unit(metric) != "mm"))


def _headline_metrics(rows: pd.DataFrame, metrics: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per model, its MLflow run's headline metrics: ``<structure>.<metric>.mean`` over the cases whose reference has
    the structure, rounded as printed (``_shown_mean``), ``<structure>.n_cases`` (those cases) and
    ``<structure>.n_absent`` (the others).

    Plain means, no statistics settings: a change of ``stats`` must not rerun scoring. CIs, ranks and verdicts
    are leaderboard statistics, logged by compare with the leaderboard run (docs/methodology.md#12-what-an-mlflow-run-carries).
    """
    summary: dict[str, dict[str, float]] = {}
    for (model, structure), group in rows.groupby(["model", "structure"], sort=True):
        present = group["reference_present"].to_numpy(dtype=bool)
        values = summary.setdefault(str(model), {})
        values.update({f"{structure}.{m}.mean": _shown_mean(group[m], present, m) for m in metrics if present.any()})
        values[f"{structure}.n_cases"] = int(group["case_id"][present].nunique())
        values[f"{structure}.n_absent"] = int(group["case_id"][~present].nunique())
    return summary


def _version_tags(dataset: str, model: str, kind: str, data: str | None = None, **extra: str) -> dict[str, str]:
    """The tags every MLflow run carries (docs/methodology.md#12-what-an-mlflow-run-carries): names, kind and the
    versions of everything used; ``data``: the version of the scored files when they are not the data bundle (a
    published set's own files).

    Only what the outputs depend on: the git commit is not here (the score bundle is a DVC output that
    must not change with every commit); tracking records it on the MLflow run when logging.
    """
    import segauge

    return {
        "segbench.dataset": dataset,
        "segbench.model": model,
        "segbench.kind": kind,
        "segbench.dataset_version": data or data_version(),
        "segbench.segauge_version": segauge.__version__,
        "segbench.segbench_version": segbench.__version__,
        **{f"segbench.{k}": v for k, v in extra.items()},
    }


def _csv_text(rows: pd.DataFrame) -> str:
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


def _write_bundle(out: Path, rows: pd.DataFrame, record: dict[str, Any], tables: Mapping[str, pd.DataFrame] = {}) -> None:
    """Write one score bundle atomically: per-case table, run record and the optional tables it has
    (``tracking.OPTIONAL_ARTIFACTS``: rows under the other profiles, lesion-wise tables); any other left is removed."""
    write_text_atomic(out / tracking.PER_CASE_ARTIFACT, _csv_text(rows))
    for name in tracking.OPTIONAL_ARTIFACTS:
        if name in tables:
            write_text_atomic(out / name, _csv_text(tables[name]))
        else:
            (out / name).unlink(missing_ok=True)
    write_json_atomic(out / "run.json", record)


def _run_record(params: Params, dataset: DatasetConfig, model: ModelConfig, rows: pd.DataFrame) -> dict[str, Any]:
    """Tags, params and headline metrics of one scored (dataset, model) MLflow run (docs/methodology.md#12-what-an-mlflow-run-carries)."""
    metrics = _headline_metrics(rows, ANALYZED_METRICS)[model.name]
    metrics["n_missing_prediction"] = int(rows.drop_duplicates("case_id")["prediction_missing"].sum())
    metrics["n_worst_case"] = int(rows["worst_case"].sum())
    weights = model.weights or {}
    n_cases, lacking = rows["case_id"].nunique(), metrics["n_missing_prediction"]
    # a model lacking cases says so on its run (MLflow's runs table): what the leaderboard does with it is compare's
    coverage = {"coverage": f"{n_cases - lacking} of {n_cases} cases (no prediction for {lacking})"} if lacking else {}
    return {
        "tags": _version_tags(
            dataset.name,
            model.name,
            model.kind,
            weights_version=str(weights.get("md5", "none")),
            model_version=model.version,
            hd95_definition=str(rows["hd95_definition"].iloc[0]),
            metric_profile=str(rows["metric_profile"].iloc[0]),
            **coverage,
        ),
        "params": {
            "dataset.source": Path(os.path.relpath(dataset.reference_dir)).as_posix(),
            "model.title": model.title,
            "model.command": " ".join(model.command),
            "model.environment": json.dumps(model.environment, sort_keys=True),
            "model.label_map": json.dumps(model.label_map, sort_keys=True),
            "model.trained_on": ",".join(model.trained_on),
            "model.device": model.device,
            "model.licence": model.licence,
            "scoring.regions": json.dumps({r.name: list(r.labels) for r in dataset.regions}, sort_keys=True),
            "scoring.nsd_tolerance_mm": json.dumps({r.name: r.nsd_tolerance_mm for r in dataset.regions}, sort_keys=True),
            "scoring.n_cases": rows["case_id"].nunique(),
            "scoring.profile": str(rows["metric_profile"].iloc[0]),
        },
        "metrics": metrics,
    }


def run_score(params: Params, dataset_name: str, model_name: str, workers: int | None = None) -> None:
    """Score stage: per-case rows of one (dataset, model) with metadata, and the MLflow run record."""
    dataset, model = params.dataset(dataset_name), params.model(model_name)
    cases = case_ids(dataset)
    pred_dir = predictions_dir(dataset_name, model_name)
    triples = []
    for case_id in cases:
        prediction = pred_dir / f"{case_id}.nii.gz"
        triples.append((case_id, reference_path(dataset, case_id), prediction if prediction.is_file() else None))
    files = {p.name for p in pred_dir.glob("*.nii.gz") if not p.name.startswith(".")}  # hidden: a killed write's temp file
    unknown = sorted(files - {f"{c}.nii.gz" for c in cases})
    if unknown:
        raise ValueError(f"{pred_dir}: prediction files for unknown cases of dataset {dataset_name!r}: {unknown}")
    missing = [case_id for case_id, _, prediction in triples if prediction is None]
    if missing:
        shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
        log.warning(
            "%s: %d of %d cases have no prediction file; each is scored as the worst case and flagged prediction_missing, and the "
            "leaderboard applies missing_predictions to them (docs/methodology.md#41-coverage): %s",
            pred_dir, len(missing), len(cases), shown,
        )
    excluded = excluded_regions(pred_dir)
    regions = [r for r in dataset.regions if r.name not in excluded]
    if not regions:
        raise ValueError(f"model {model_name!r} on dataset {dataset_name!r}: no region can be scored ({excluded})")
    profile = str(params.scoring.get("profile", scoring.DEFAULT_PROFILE))
    others = [name for name in params.scoring.get("sensitivity_profiles") or () if name != profile]
    scored = scoring.score_cases(
        triples, regions, workers=workers or int(params.scoring.get("workers", 1)), allowed_labels=dataset.region_labels(),
        profile=profile, extra_profiles=others,
    )
    scored.insert(0, "model", model.name)
    scored.insert(1, "kind", model.kind)
    main = (scored["metric_profile"] == profile).to_numpy()
    rows = scored[main].reset_index(drop=True).join(load_metadata(dataset, cases), on="case_id")
    record = _run_record(params, dataset, model, rows)
    record["params"]["scoring.excluded_regions"] = json.dumps(excluded, sort_keys=True)
    record["params"]["scoring.sensitivity_profiles"] = ",".join(others)
    tables = {tracking.PROFILES_ARTIFACT: scored[~main].reset_index(drop=True)} if others else {}
    tables |= _score_lesions(params, dataset, model, triples, excluded, record, workers)
    _write_bundle(scores_dir(dataset_name, model_name), rows, record, tables)


def _score_lesions(
    params: Params, dataset: DatasetConfig, model: ModelConfig, triples: list[tuple[str, Path, Path | None]], excluded: Mapping[str, Any],
    record: dict[str, Any], workers: int | None,
) -> dict[str, pd.DataFrame]:
    """The lesion-wise tables of a (dataset, model) when ``scoring.lesions`` names structures the dataset has and the
    model segments (a structure the model lacks, or whose region predict excluded, is not scored); their settings
    and headline means go into the run record (docs/methodology.md#37-lesion-wise-scores)."""
    setting = params.lesion_setting(dataset.name)
    if setting is None:
        return {}
    produced = {name for name, parts in compose(model.label_map.values(), dataset.labels, where=f"model {model.name!r}").items() if parts}
    setting = dataclasses.replace(setting, structures=tuple(s for s in setting.structures if s.name in produced and s.name not in excluded))
    if not setting.structures:
        return {}
    lesion_rows, instance_rows = scoring.score_lesion_cases(
        triples, setting, workers=workers or int(params.scoring.get("workers", 1)), allowed_labels=dataset.region_labels(),
    )
    lesion_rows.insert(0, "model", model.name)
    instance_rows.insert(0, "model", model.name)
    record["params"]["scoring.lesions"] = json.dumps(
        {"structures": [s.name for s in setting.structures], "profile": setting.profile, "sensitivity_profiles": list(setting.extra_profiles),
         "strata_ml": list(setting.strata_ml)}, sort_keys=True)
    record["tags"][LESION_PROFILE_TAG] = setting.profile
    baseline = lesion_rows[lesion_rows["lesion_profile"] == setting.profile]
    for structure, group in baseline.groupby("structure", sort=True):
        present = group["reference_present"].to_numpy(dtype=bool)
        for metric in LESION_HEADLINE_METRICS:
            if present.any():
                record["metrics"][f"{structure}.lesion.{metric}.mean"] = _shown_mean(group[metric], present, metric)
        record["metrics"][f"{structure}.lesion.n_reference"] = int(group["n_reference"].sum())
        record["metrics"][f"{structure}.lesion.fp"] = int(group["fp"].sum())
    return {tracking.LESIONS_ARTIFACT: lesion_rows, tracking.INSTANCES_ARTIFACT: instance_rows}


def excluded_regions(pred_dir: Path) -> dict[str, dict[str, Any]]:
    """Regions the predict stage marked not applicable (the model does not segment them) or flagged
    (spot-check Dice under the floor): they get no rows, so the model is absent from those leaderboards
    instead of being published with a silent zero."""
    manifest = pred_dir / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest}: missing; run the predict stage first")
    regions = json.loads(manifest.read_text(encoding="utf-8")).get("regions", {})
    excluded = {name: r for name, r in regions.items() if r.get("status", "scored") != "scored"}
    for name, region in excluded.items():
        log.warning("%s: region %s excluded (%s: %s)", pred_dir, name, region["status"], region.get("reason"))
    return excluded


def read_published(source: PublishedConfig) -> pd.DataFrame:
    """Rows of a published score set, its ``metadata`` joined; ``rows.attrs["import_summary"]`` says what the import
    found and what its policies did (docs/published.md). Segauge results keep each model's version, licence and
    training sets in ``rows.attrs["models"]``."""
    rows = published.READERS[source.format](source)
    attrs = dict(rows.attrs)
    notes = attrs.pop("import", None) or published.import_notes()
    if source.metadata and source.format != "touchstone":  # the Touchstone reader joins its own
        rows = published.join_metadata(rows, **source.metadata, notes=notes)
    policies = {k: v for k, v in source.options.items() if k in ("duplicates", "one_sided_missing")}
    rows.attrs = {**attrs, "import_summary": published.import_summary(rows, notes, policies)}
    return rows


def run_import(params: Params, name: str) -> None:
    """Import stage: one score bundle per model of a published set (kind=published, no masks)."""
    source = params.published_set(name)
    rows = read_published(source)
    log.info("%s: imported %s", name, rows.attrs["import_summary"]["text"])
    claims = rows.attrs.get("models", {})
    files = published.files_version([source.path, *([source.metadata["path"]] if source.metadata else []),
                                     *([source.metadata_file] if source.metadata_file else [])])
    summaries = _headline_metrics(rows, source.metrics)
    for model, model_rows in rows.groupby("model", sort=True):
        model_rows = model_rows.reset_index(drop=True)
        model_rows.insert(1, "kind", "published")
        version = {"model_version": claims[model]["version"]} if claims.get(model, {}).get("version") else {}
        record = {
            "tags": _version_tags(name, str(model), "published", files, source=source.source, **version),
            "params": {"published.format": source.format, "dataset.source": Path(os.path.relpath(source.path)).as_posix()},
            "metrics": summaries[str(model)],
        }
        _write_bundle(scores_dir(name, str(model)), model_rows, record)


def run_track(dataset_name: str, model_name: str | None = None, root: Path = Path(".")) -> None:
    """Track stage: log score bundles as MLflow runs (idempotent) and write the markers compare reads.

    Without ``model_name`` every bundle under ``<root>/scores/<dataset>/`` is logged (published sets).
    """
    models = [model_name] if model_name else sorted(p.name for p in (root / "scores" / dataset_name).iterdir() if p.is_dir())
    for model in models:
        bundle = tracking.ScoreBundle.read(scores_dir(dataset_name, model, root))
        tracking.log_bundle(bundle)
        write_json_atomic(tracking_marker(dataset_name, model, root), {"dataset": dataset_name, "model": model, "fingerprint": bundle.fingerprint})


def output_root(params: Params, name: str) -> Path:
    """Where a dataset's outputs live: under ``interactive/`` for an interactive dataset, else the project."""
    return INTERACTIVE_ROOT if name in params.interactive_datasets else Path(".")


def _leaderboard_setup(
    params: Params, name: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, bool], tuple[str, ...], str | None]:
    """What compare needs besides the rows: dataset block, model entries, metrics, subgroup fields, cluster field."""
    if name in params.published:
        source = params.published_set(name)
        models = sorted(p.stem for p in tracking_marker(name, "*").parent.glob("*.json"))
        attrs = read_published(source).attrs
        # a segauge results file declares each model's version, licence and training sets (contaminated_on)
        claims = attrs.get("models", {})
        trained = {m: tuple(sorted({*source.trained_on.get(m, ()), *claims.get(m, {}).get("contaminated_on", ())})) for m in models}
        entries = {
            m: {"title": m, "kind": "published", "simulated": False, "source": source.source,
                "licence": claims.get(m, {}).get("licence") or source.licence,
                "trained_on": list(trained[m]), "contaminated": source.evaluated_on in trained[m]}
            for m in models
        }
        block = {"name": name, "title": source.title, "licence": source.licence, "citation": source.citation,
                 "source": source.source, "evaluated_on": source.evaluated_on, "import_summary": attrs["import_summary"]}
        if source.case_alignment:  # the source's own protocol; both alignments are in the analysis
            block["source_case_alignment"] = source.case_alignment
        return block, entries, source.metrics, source.subgroups, source.cluster_field
    if name in params.interactive_datasets:
        source = params.interactive_dataset(name)
        entries = {
            m.name: {"title": m.title, "kind": m.kind, "simulated": False, "licence": m.licence,
                     "trained_on": list(m.trained_on), "contaminated": name in m.trained_on}
            for m in params.interactive_models.values()
        }
        block = {"name": name, "title": source.title, "licence": source.licence, "citation": source.citation,
                 "interactive": True, "reference": REFERENCE_LABELS[source.reference], "reference_note": source.note,
                 "seconds_per_class": source.seconds_per_class, "time_limit_clock": source.time_limit_clock}
        return block, entries, interactive_scores.METRICS, (), None
    dataset = params.dataset(name)
    entries = {
        m.name: {"title": m.title, "kind": m.kind, "simulated": m.is_simulated, "licence": m.licence,
                 "trained_on": list(m.trained_on), "contaminated": dataset.name in m.trained_on}
        for m in params.models.values() if m.source is None or m.source.dataset == name  # a folder of predictions is one dataset's
    }
    return dataset_block(dataset), entries, ANALYZED_METRICS, dataset.subgroups, dataset.cluster_field


def _published_analysis(params: Params, name: str) -> dict[str, Any] | None:
    """The analysis a published set's file publishes beside its scores (segauge results files), else None."""
    if name not in params.published or params.published_set(name).format != "segauge_results":
        return None
    return published.read_segauge_analysis(params.published_set(name).path)


def run_compare(params: Params, name: str) -> None:
    """Compare stage: per-case rows read back FROM MLFLOW -> statistics (docs/methodology.md#5-statistics-protocol) -> results/<name>.json."""
    root = output_root(params, name)
    block, models, metrics, subgroups, cluster_field = _leaderboard_setup(params, name)
    markers = {m: json.loads(tracking_marker(name, m, root).read_text(encoding="utf-8")) for m in sorted(models)}
    _restore_runs(name, markers, root)
    runs = tracking.read_runs(name, {m: marker["fingerprint"] for m, marker in markers.items()})
    rows = runs.rows
    for model, entry in models.items():
        entry["versions"] = {k.removeprefix("segbench."): v for k, v in sorted(runs.tags[model].items())}
    contaminated = {m: entry["contaminated"] for m, entry in models.items()}
    tables = None if name in params.interactive_datasets else audit_tables(params)
    source, data = board_population(params, name)
    # a published set's version is its own files' (the import stage's tag), a dataset's the data bundle's
    block["version"] = next(iter(runs.tags.values()))["segbench.dataset_version"] if name in params.published else data_version()
    results, covered = analysed_document(block, models, metrics, rows, runs.profile_rows, settings=stats_settings(params), contaminated=contaminated,
                                         policy=params.missing_predictions, subgroup_fields=subgroups, cluster_field=cluster_field,
                                         ci_levels=stats.level_provider(tables, source=source, data=data, settings=stats_settings(params).to_dict()))
    analysis = results["analysis"]
    if not runs.lesion_rows.empty:
        results["lesions"] = _lesion_block(runs, covered, contaminated, stats_settings(params))
    results["audited"] = stats.audited_board(tables, analysis, source=source, data=data,
                                             lesions=stats.audited_lesions if "lesions" in results else None)
    source_analysis = _published_analysis(params, name)
    if source_analysis is not None:
        results["source_analysis"] = stats.beside_source(analysis, source_analysis)
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


#: the audit tables compare reads (dvc.yaml declares them as deps of every compare stage); power is not read
AUDIT_TABLES = ("coverage.csv", "type1.csv", "levels.csv", "real_coverage.csv", "real_type1.csv", "real_levels.csv", "audit.json")


def audit_tables(params: Params, folder: Path | None = None) -> stats.AuditTables | None:
    """The calibration audit's coverage and type-I tables (simulated and real populations) as ``stats.audited`` reads
    them, or None when they are absent (no ``calibration/results/``, e.g. a project without the audit) or params.yaml has
    no calibration block."""
    folder = calibration_results_dir() if folder is None else folder
    missing = [name for name in AUDIT_TABLES if not (folder / name).is_file()]
    if params.calibration is None or missing:
        log.info("calibration audit tables absent (%s): the leaderboards say 'not audited'",
                 "no calibration block" if params.calibration is None else ", ".join(str(folder / m) for m in missing))
        return None
    def read(name: str) -> pd.DataFrame:
        return pd.read_csv(folder / name, dtype={"source": str, "structure": str, "metric": str})
    settings = json.loads((folder / "audit.json").read_text(encoding="utf-8"))["stats"]
    data = stats.population_data(params.calibration.dataset,
                                 {name: spec.source.evaluated_on for name, spec in params.calibration.real.items()})
    return stats.AuditTables(coverage=pd.concat([read("coverage.csv"), read("real_coverage.csv")], ignore_index=True),
                             type1=pd.concat([read("type1.csv"), read("real_type1.csv")], ignore_index=True),
                             levels=pd.concat([read("levels.csv"), read("real_levels.csv")], ignore_index=True),
                             settings=settings, data=data)


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


def _lesion_block(runs: tracking.TrackedRuns, covered: stats.Coverage, contaminated: Mapping[str, bool], settings: stats.StatsSettings) -> dict[str, Any]:
    """The results' lesion-wise block (``stats.lesion_analysis``) under the lesion profile every model was scored with, on
    the leaderboard's models and cases (``covered``: a model lacking cases is left out under ``own_cases``)."""
    lesion_rows = covered.board(runs.lesion_rows)
    profiles = {model: tags.get(LESION_PROFILE_TAG) for model, tags in runs.tags.items() if model in set(lesion_rows["model"])}
    if len(set(profiles.values())) != 1 or None in profiles.values():
        raise ValueError(f"lesion-wise scores under different lesion profiles {profiles}: rerun the score stages with one scoring.lesions.profile")
    return stats.lesion_analysis(lesion_rows, covered.board(runs.instance_rows), profile=next(iter(profiles.values())), settings=settings,
                                 contaminated={m: c for m, c in contaminated.items() if m in profiles})


def _restore_runs(name: str, markers: dict[str, dict[str, Any]], root: Path = Path(".")) -> None:
    """Log the score bundles whose runs the store lacks, e.g. after `dvc pull` on a new machine.

    The track markers come from the DVC cache there, so no track stage reruns; the runs compare reads
    are restored here from the pulled bundles (idempotent: a run already in the store is reused).
    """
    for model, marker in markers.items():
        bundle = tracking.ScoreBundle.read(scores_dir(name, model, root))
        if bundle.fingerprint != marker["fingerprint"]:
            raise tracking.TrackingError(
                f"{scores_dir(name, model, root)}: score bundle differs from {tracking_marker(name, model, root)}; rerun the track stage"
            )
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


def run_cases(params: Params, dataset_name: str) -> None:
    """Cases stage: an interactive dataset's images and references as challenge npz cases (docs/interactive.md)."""
    import shutil
    import tempfile

    from segbench.interactive.cases import convert

    source = params.interactive_dataset(dataset_name)
    out = cases_dir(dataset_name)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{dataset_name}.") as tmp:
        sources = [(c, Path(os.path.relpath(image)), Path(os.path.relpath(labels))) for c, image, labels in source.sources]
        convert(sources, source.structures, Path(tmp) / "cases", seed=source.seed, reference=source.reference, note=source.note)
        shutil.rmtree(out, ignore_errors=True)
        (Path(tmp) / "cases").rename(out)


def run_interact(params: Params, dataset_name: str, model_name: str, device: str | None = None, allow_unverified_weights: bool = False) -> None:
    """Interact stage: the box step and 5 clicks per case (docs/interactive.md), here or on Slurm (``SEGBENCH_EXECUTOR``),
    then the run's score bundle.

    ``interactive/predictions/<dataset>/<model>/`` gets what reruns reproduce (predictions, prompt and
    score records); ``interactive/scores/<dataset>/<model>/`` the per-case rows with the measured
    running times, the challenge's table (``metrics.csv``) and the MLflow run record with the per-step curves.
    """
    from segbench.interactive.harness import interact

    source, model = params.interactive_dataset(dataset_name), params.interactive_model(model_name)
    predictions = predictions_dir(dataset_name, model_name, INTERACTIVE_ROOT)
    bundle = scores_dir(dataset_name, model_name, INTERACTIVE_ROOT)
    table_file = bundle / "metrics.csv"
    table = interact(cases_dir(dataset_name), model, predictions, reference=source.reference, seconds_per_class=source.seconds_per_class,
                     time_limit_clock=source.time_limit_clock, scoring=source.scoring, device=device, allow_unverified_weights=allow_unverified_weights,
                     table_file=table_file, shard_runner=shard_runner_from_environ())
    rows = interactive_scores.interactive_rows(table, predictions / "records", model.name, where=str(table_file), scoring=source.scoring)
    metrics = _headline_metrics(rows, interactive_scores.METRICS)[model.name]
    metrics.update({f"n_{k}": v for k, v in interactive_scores.summary(rows).items() if k != "n_cases"})
    weights = model.weights or {}
    record = {
        "tags": _version_tags(dataset_name, model.name, model.kind, weights_version=str(weights.get("md5", "none")), model_version=model.version,
                              reference=REFERENCE_LABELS[source.reference], protocol="cvpr25_box_then_5_clicks"),
        "params": {
            "dataset.source": cases_dir(dataset_name).as_posix(),
            "model.title": model.title,
            "model.command": " ".join(model.command),
            "model.environment": json.dumps(model.environment, sort_keys=True),
            "model.trained_on": ",".join(model.trained_on),
            "model.device": device or model.device,
            "model.licence": model.licence,
            "interactive.seconds_per_class": source.seconds_per_class,
            "interactive.time_limit_clock": source.time_limit_clock,
            "interactive.box_seed": source.seed,
            "interactive.nsd_tolerance_mm": interactive_scores.protocol.NSD_TOLERANCE_MM,
            "interactive.protocol_version": source.scoring.version,
            "interactive.nsd_profile": source.scoring.nsd_profile,
        },
        "metrics": metrics,
        # MLflow step metrics (step 1 = box, 2-6 = clicks): the DSC-versus-interaction curve in the run's charts
        "step_metrics": interactive_scores.step_curves(rows),
    }
    _write_bundle(bundle, rows, record)


def calibration_scores_dir() -> Path:
    """The calibration audit's per-case rows, one ``<model>.csv`` per simulated model (cached by DVC, not in git)."""
    return CALIBRATION_ROOT / "scores"


def run_calibration_scores(params: Params, workers: int | None = None) -> None:
    """Calibration stage 1: the simulated models of known quality on every reference label map of the dataset (the
    configured case subset does not apply), scored -> ``calibration/scores/<model>.csv`` (``segbench.calibration``)."""
    import dataclasses

    from segbench.calibration import score_population

    config = _calibration(params)
    score_population(
        dataclasses.replace(config.population, cases=None), config.models, config.structures, calibration_scores_dir(),
        workers=workers or config.workers, profile=str(params.scoring.get("profile", scoring.DEFAULT_PROFILE)),
    )


def calibration_results_dir() -> Path:
    """The audit's small results (audit.json and its tables): kept in git, so the site has them without a rerun."""
    return CALIBRATION_ROOT / "results"


def run_calibration_audit(params: Params) -> list[Path]:
    """Calibration stage 2: redraw samples of n cases from the scored population, and from the real populations of
    ``calibration.real`` (published scores), and analyse each as compare would; writes ``audit.json`` and one CSV per
    table. Returns the files written."""
    from segbench.stats import calibration

    config = _calibration(params)
    frames = []
    for model in config.models:
        path = calibration_scores_dir() / f"{model}.csv"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `segbench calibrate score` (the score stage of calibration/dvc.yaml)")
        frames.append(pd.read_csv(path, dtype={"case_id": str, "model": str, "structure": str}))
    real = [(calibration.ranked_populations(read_published(spec.source), name, spec.source.metrics, spec.ranks), spec.draws, spec.wilcoxon_draws)
            for name, spec in config.real.items()]
    audit = calibration.audit(
        pd.concat(frames, ignore_index=True), models=tuple(config.models), equal=config.equal, structures=config.structures,
        metrics=config.metrics, n_cases=config.n_cases, draws=config.draws, wilcoxon_draws=config.wilcoxon_draws,
        n_resamples=config.n_resamples, seed=config.seed, settings=stats_settings(params), workers=config.workers, real=real,
    )
    out = calibration_results_dir()
    written = [out / "audit.json"]
    write_json_atomic(written[0], audit)
    for name, table in calibration.tables(audit).items():
        buffer = io.StringIO()
        table.to_csv(buffer, index=False, lineterminator="\n", float_format="%.6g")
        written.append(out / f"{name}.csv")
        write_text_atomic(written[-1], buffer.getvalue())
    return written


def _calibration(params: Params) -> CalibrationConfig:
    if params.calibration is None:
        raise ConfigError("params.yaml has no calibration block (conf/config.yaml's calibration:)")
    return params.calibration
