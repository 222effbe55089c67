"""The real-model pipeline's predict stage (realmodel/dvc.yaml; docs/guide.md#a-real-model-run-here): the predict stage
with the model's wall time and peak memory measured into ``runs/<model>.json`` with its package, weights digests and device
(a measurement: it differs from run to run, unlike the predictions).
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from segbench.base.io import file_digest, write_json_atomic
from segbench.config.params import Params
from segbench.models.weights import weights_status
from segbench.stages.paths import runs_file


def run_measured_predict(params: Params, dataset_name: str, model_name: str, root: Path, run_predict: Callable[[], None]) -> dict[str, Any]:
    """``run_predict`` (the predict stage into ``root``: :func:`~segbench.stages.predict.run_predict`), its wall time and the peak resident
    memory of the model's process (or of this one, if larger) written to ``runs/<model>.json``; returns that record."""
    model = params.model(model_name)
    start = time.perf_counter()
    run_predict()
    wall = time.perf_counter() - start
    peak_kib = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    weights = weights_status(model)
    digests = {}
    if weights.get("file") and Path(weights["file"]).is_file():
        digests = {"weights_md5": file_digest(Path(weights["file"]), "md5"), "weights_sha256": file_digest(Path(weights["file"]), "sha256")}
    record = {
        "dataset": dataset_name,
        "model": model_name,
        "package": model.version,
        "device": model.device,
        "weights_status": weights["status"],
        **digests,
        "wall_time_s": round(wall, 1),
        "peak_memory_gb": round(peak_kib / 2**20, 2),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPU(s)",
    }
    write_json_atomic(runs_file(model_name, root), record)
    return record
