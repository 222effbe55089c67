"""Score stage (``segbench score``): one (dataset, model)'s predictions against the references -> per-case rows with the
cases' metadata, the rows under the sensitivity profiles, the lesion-wise tables, and the MLflow run record."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from segbench.config.params import Params
from segbench.datasets.cases import case_ids, load_metadata, reference_path
from segbench.datasets.schema import DatasetConfig
from segbench.models.schema import ModelConfig
from segbench.models.structures import compose
from segbench.scoring.engine import ANALYZED_METRICS, score_cases
from segbench.scoring.lesionwise import score_cases_and_lesions
from segbench.scoring.settings import DEFAULT_PROFILE, LesionSetting
from segbench.stages.bundles import LESION_PROFILE_TAG, headline_metrics, shown_mean, version_tags
from segbench.stages.paths import predictions_dir, scores_dir
from segbench.tracking import runs as tracking

log = logging.getLogger(__name__)

#: the lesion-wise means an MLflow run carries (its leaderboard analyses more: ``stats.lesions``)
LESION_HEADLINE_METRICS = ("rq", "pq_dice", "lesion_dice")


def _run_record(params: Params, dataset: DatasetConfig, model: ModelConfig, rows: pd.DataFrame) -> dict[str, Any]:
    """Tags, params and headline metrics of one scored (dataset, model) MLflow run (docs/methodology.md#12-what-an-mlflow-run-carries)."""
    # over the model's own cases: a case without a prediction file is in no mean (a model covering 15 of 78 cases shows
    # its means over those 15, as the leaderboard's own-case analysis does, never with the others counted as failures)
    own = rows[~rows["prediction_missing"].astype(bool)]
    metrics = headline_metrics(own, ANALYZED_METRICS).get(model.name, {})
    metrics["n_missing_prediction"] = int(rows.drop_duplicates("case_id")["prediction_missing"].sum())
    metrics["n_worst_case"] = int(rows["worst_case"].sum())
    weights = model.weights or {}
    n_cases, lacking = rows["case_id"].nunique(), metrics["n_missing_prediction"]
    metrics["n_cases"] = n_cases - lacking  # the runs table's columns beside the means (report.summary.COVERAGE_COLUMNS)
    metrics["coverage"] = round((n_cases - lacking) / n_cases, 4)
    # a model lacking cases says so on its run (MLflow's runs table): what the leaderboard does with it is compare's
    coverage = {"coverage": f"{n_cases - lacking} of {n_cases} cases (no prediction for {lacking})"} if lacking else {}
    return {
        "tags": version_tags(
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


def run_score(params: Params, dataset_name: str, model_name: str, workers: int | None = None, root: Path = Path(".")) -> None:
    """Score stage: per-case rows of one (dataset, model) with metadata, and the MLflow run record; ``root``: the folder
    of the pipeline's outputs (a pipeline of its own, e.g. realmodel/, keeps them under its folder)."""
    dataset, model = params.dataset(dataset_name), params.model(model_name)
    cases = case_ids(dataset)
    pred_dir = predictions_dir(dataset_name, model_name, root)
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
            pred_dir,
            len(missing),
            len(cases),
            shown,
        )
    excluded = excluded_regions(pred_dir)
    regions = [r for r in dataset.regions if r.name not in excluded]
    if not regions:
        raise ValueError(f"model {model_name!r} on dataset {dataset_name!r}: no region can be scored ({excluded})")
    profile = str(params.scoring.get("profile", DEFAULT_PROFILE))
    others = [name for name in params.scoring.get("sensitivity_profiles") or () if name != profile]
    setting = _lesion_setting(params, dataset, model, excluded)
    options: dict[str, Any] = {"workers": workers or int(params.scoring.get("workers", 1)), "allowed_labels": dataset.region_labels()}
    if setting is None:
        scored = score_cases(triples, regions, profile=profile, extra_profiles=others, **options)
    else:  # one decode of each case and one pool for both (score_cases_and_lesions)
        scored, lesion_rows, instance_rows = score_cases_and_lesions(triples, regions, setting, profile=profile, extra_profiles=others, **options)
    scored.insert(0, "model", model.name)
    scored.insert(1, "kind", model.kind)
    main = (scored["metric_profile"] == profile).to_numpy()
    rows = scored[main].reset_index(drop=True).join(load_metadata(dataset, cases), on="case_id")
    record = _run_record(params, dataset, model, rows)
    record["params"]["scoring.excluded_regions"] = json.dumps(excluded, sort_keys=True)
    record["params"]["scoring.sensitivity_profiles"] = ",".join(others)
    tables = {tracking.PROFILES_ARTIFACT: scored[~main].reset_index(drop=True)} if others else {}
    if setting is not None:
        tables |= _lesion_tables(setting, model, lesion_rows, instance_rows, record)
    tracking.ScoreBundle.write(scores_dir(dataset_name, model_name, root), rows, record, tables)


def _lesion_setting(params: Params, dataset: DatasetConfig, model: ModelConfig, excluded: Mapping[str, Any]) -> LesionSetting | None:
    """The lesion setting of a (dataset, model): the structures of ``scoring.lesions`` the dataset has and the model
    segments (a structure the model lacks, or whose region predict excluded, is not scored); None without any."""
    setting = params.lesion_setting(dataset.name)
    if setting is None:
        return None
    produced = {name for name, parts in compose(model.label_map.values(), dataset.labels, where=f"model {model.name!r}").items() if parts}
    setting = dataclasses.replace(setting, structures=tuple(s for s in setting.structures if s.name in produced and s.name not in excluded))
    return setting if setting.structures else None


def _lesion_tables(
    setting: LesionSetting,
    model: ModelConfig,
    lesion_rows: pd.DataFrame,
    instance_rows: pd.DataFrame,
    record: dict[str, Any],
) -> dict[str, pd.DataFrame]:
    """The lesion-wise tables of a (dataset, model) (docs/methodology.md#37-lesion-wise-scores); their settings and
    headline means go into the run record."""
    lesion_rows.insert(0, "model", model.name)
    instance_rows.insert(0, "model", model.name)
    record["params"]["scoring.lesions"] = json.dumps(
        {
            "structures": [s.name for s in setting.structures],
            "profile": setting.profile,
            "sensitivity_profiles": list(setting.extra_profiles),
            "strata_ml": list(setting.strata_ml),
        },
        sort_keys=True,
    )
    record["tags"][LESION_PROFILE_TAG] = setting.profile
    baseline = lesion_rows[lesion_rows["lesion_profile"] == setting.profile]
    for structure, group in baseline.groupby("structure", sort=True):
        # over the model's own cases, as its voxel-wise means (``headline_metrics``): a case without a prediction is in none
        present = group["reference_present"].to_numpy(dtype=bool) & ~group["prediction_missing"].to_numpy(dtype=bool)
        for metric in LESION_HEADLINE_METRICS:
            if present.any():
                record["metrics"][f"{structure}.lesion.{metric}.mean"] = shown_mean(group[metric], present, metric)
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
