"""The pipeline's stages, one function each, wiring the modules together (SPEC §1).

predict -> score -> track -> compare -> report. Each stage reads the files of the stage before it and
writes its own outputs atomically; ``dvc.yaml`` declares exactly these paths.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

import segbench
from segbench import scoring, stats, tracking
from segbench.config import DatasetConfig, ModelConfig, Params
from segbench.datasets import case_ids, load_metadata, reference_path
from segbench.io import write_json_atomic, write_text_atomic
from segbench.models.runner import predict

log = logging.getLogger(__name__)

ANALYZED_METRICS = {"dice": True, "iou": True, "nsd": True, "hd95": False, "assd": False}


def predictions_dir(dataset: str, model: str) -> Path:
    return Path("predictions") / dataset / model


def scores_dir(dataset: str, model: str) -> Path:
    return Path("scores") / dataset / model


def tracking_marker(dataset: str, model: str) -> Path:
    return Path("tracking") / dataset / f"{model}.json"


def results_file(dataset: str) -> Path:
    return Path("results") / f"{dataset}.json"


def data_version(root: Path = Path(".")) -> str:
    """md5 of the pinned data bundle, from ``data.dvc``."""
    pin = yaml.safe_load((root / "data.dvc").read_text(encoding="utf-8"))
    return str(pin["outs"][0]["md5"])


def git_commit() -> str:
    """HEAD's commit, or 'unknown' outside a git checkout."""
    result = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


def stats_settings(params: Params) -> stats.StatsSettings:
    return stats.StatsSettings(**params.stats)


def run_predict(
    params: Params, dataset_name: str, model_name: str, device: str | None = None, allow_unverified_weights: bool = False
) -> None:
    """Predict stage: run the model adapter on every case of the dataset."""
    model = params.model(model_name)
    predict(
        params.dataset(dataset_name),
        model,
        predictions_dir(dataset_name, model_name),
        device=device or model.device,
        allow_unverified_weights=allow_unverified_weights,
    )


def _run_record(params: Params, dataset: DatasetConfig, model: ModelConfig, rows: pd.DataFrame) -> dict[str, Any]:
    """Tags, params and summary metrics of one (dataset, model) MLflow run (SPEC §1)."""
    import segauge

    summary = stats.analyze(rows, metrics=ANALYZED_METRICS, settings=stats_settings(params))
    metrics: dict[str, float] = {}
    for structure, block in summary["structures"].items():
        for metric, cell in block["metrics"].items():
            estimate = cell["models"][model.name]
            for key in ("mean", "ci_low", "ci_high"):
                if estimate[key] is not None:
                    metrics[f"{structure}.{metric}.{key}"] = estimate[key]
        metrics[f"{structure}.n_cases"] = block["n_cases"]
        metrics[f"{structure}.n_absent"] = block["n_absent"]
    metrics["n_missing_prediction"] = int(rows.drop_duplicates("case_id")["prediction_missing"].sum())
    metrics["n_worst_case"] = int(rows["worst_case"].sum())
    weights = model.weights or {}
    return {
        "tags": {
            "segbench.dataset": dataset.name,
            "segbench.model": model.name,
            "segbench.kind": model.kind,
            "segbench.dataset_version": data_version(),
            "segbench.weights_version": str(weights.get("md5", "none")),
            "segbench.model_version": model.version,
            "segbench.segauge_version": segauge.__version__,
            "segbench.segbench_version": segbench.__version__,
            "segbench.git_commit": git_commit(),
            "segbench.hd95_definition": str(rows["hd95_definition"].iloc[0]),
        },
        "params": {
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
            "stats.n_resamples": params.stats.get("n_resamples"),
            "stats.seed": params.stats.get("seed"),
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
    unknown = sorted({p.name for p in pred_dir.glob("*.nii.gz")} - {f"{c}.nii.gz" for c in cases})
    if unknown:
        raise ValueError(f"{pred_dir}: prediction files for unknown cases of dataset {dataset_name!r}: {unknown}")
    rows = scoring.score_cases(
        triples, dataset.regions, workers=workers or int(params.scoring.get("workers", 1)), allowed_labels=dataset.region_labels()
    )
    rows = rows.join(load_metadata(dataset, cases), on="case_id")
    rows.insert(0, "model", model.name)
    rows.insert(1, "kind", model.kind)
    out = scores_dir(dataset_name, model_name)
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, lineterminator="\n")
    write_text_atomic(out / tracking.PER_CASE_ARTIFACT, buffer.getvalue())
    write_json_atomic(out / "run.json", _run_record(params, dataset, model, rows))


def run_track(dataset_name: str, model_name: str) -> None:
    """Track stage: log the score bundle as one MLflow run (idempotent) and write the marker compare reads."""
    bundle = tracking.ScoreBundle.read(scores_dir(dataset_name, model_name))
    tracking.log_bundle(bundle)
    write_json_atomic(
        tracking_marker(dataset_name, model_name),
        {"dataset": dataset_name, "model": model_name, "fingerprint": bundle.fingerprint},
    )


def model_entry(model: ModelConfig, dataset: DatasetConfig, run_tags: dict[str, str]) -> dict[str, Any]:
    """What the results and the site say about a model: kind, provenance, contamination."""
    return {
        "title": model.title,
        "kind": model.kind,
        "simulated": model.is_simulated,
        "licence": model.licence,
        "trained_on": list(model.trained_on),
        "contaminated": dataset.name in model.trained_on,
        "versions": {k.removeprefix("segbench."): v for k, v in sorted(run_tags.items())},
    }


def run_compare(params: Params, dataset_name: str) -> None:
    """Compare stage: per-case rows read back FROM MLFLOW -> SPEC §4 statistics -> results/<dataset>.json."""
    dataset = params.dataset(dataset_name)
    markers = {m: json.loads(tracking_marker(dataset_name, m).read_text(encoding="utf-8")) for m in sorted(params.models)}
    rows, run_tags = tracking.read_runs(dataset_name, {m: marker["fingerprint"] for m, marker in markers.items()})
    models = {m: model_entry(params.model(m), dataset, run_tags[m]) for m in markers}
    analysis = stats.analyze(
        rows,
        metrics=ANALYZED_METRICS,
        settings=stats_settings(params),
        subgroup_fields=dataset.subgroups,
        contaminated={m: entry["contaminated"] for m, entry in models.items()},
    )
    results = {
        "segbench_version": segbench.__version__,
        "dataset": {
            "name": dataset.name,
            "title": dataset.title,
            "licence": dataset.licence,
            "citation": dataset.citation,
            "version": data_version(),
            "regions": {r.name: {"labels": list(r.labels), "nsd_tolerance_mm": r.nsd_tolerance_mm} for r in dataset.regions},
        },
        "models": models,
        "metrics": {m: {"higher_is_better": hib} for m, hib in ANALYZED_METRICS.items()},
        "hd95_definition": str(rows["hd95_definition"].iloc[0]),
        "analysis": analysis,
    }
    write_json_atomic(results_file(dataset_name), results)
    log.info("wrote %s", results_file(dataset_name))
