"""Track stage (``segbench track``): score bundles -> MLflow runs (idempotent), and the markers compare reads."""

from __future__ import annotations

from pathlib import Path

from segbench.base.io import write_json_atomic
from segbench.stages.paths import scores_dir, tracking_marker
from segbench.tracking import runs as tracking


def run_track(dataset_name: str, model_name: str | None = None, root: Path = Path(".")) -> None:
    """Track stage: log score bundles as MLflow runs (idempotent) and write the markers compare reads.

    Without ``model_name`` every bundle under ``<root>/scores/<dataset>/`` is logged (published sets).
    """
    models = [model_name] if model_name else sorted(p.name for p in (root / "scores" / dataset_name).iterdir() if p.is_dir())
    for model in models:
        bundle = tracking.ScoreBundle.read(scores_dir(dataset_name, model, root))
        tracking.log_bundle(bundle)
        write_json_atomic(tracking_marker(dataset_name, model, root), {"dataset": dataset_name, "model": model, "fingerprint": bundle.fingerprint})
