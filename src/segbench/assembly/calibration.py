"""The calibration audit's population (docs/methodology.md, "Calibration audit"): simulated models of known quality
scored on every case of a dataset.

Its own module, so that the expensive cached stage that runs it (calibration/dvc.yaml's score stage, about half an
hour on 2 cores) depends on this code and not on every change to the pipeline's wiring (``segbench.stages``).
"""

from __future__ import annotations

import io
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from segbench.base.io import write_text_atomic
from segbench.datasets.cases import case_ids, reference_path
from segbench.datasets.schema import DatasetConfig
from segbench.models.simulated import predict_models
from segbench.scoring.engine import map_cases, score_case

log = logging.getLogger(__name__)


def score_population(dataset: DatasetConfig, models: Mapping[str, Sequence[str]], structures: Sequence[str], out: Path, *, workers: int, profile: str) -> None:
    """Write ``out/<model>.csv``: the rows of every case of ``dataset`` x model (name -> simulated-model options).

    Case by case (``workers`` cases in parallel): the reference is decoded once for all models
    (``simulated.predict_models``), each prediction is scored against the reference file and deleted at once.
    ``out`` is replaced only when every case is scored.
    """
    cases = case_ids(dataset)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        job = partial(
            _score_case,
            dataset=dataset,
            models={name: list(options) for name, options in models.items()},
            regions=[r for r in dataset.regions if r.name in structures],
            scratch=Path(tmp) / "predictions",
            profile=profile,
        )
        log.info("calibration: %d simulated models on %d cases", len(models), len(cases))
        rows = [row for case_rows in map_cases(job, cases, workers=workers, desc="calibration") for row in case_rows]
        table = pd.DataFrame(rows)
        for model in models:
            buffer = io.StringIO()
            table[table["model"] == model].to_csv(buffer, index=False, lineterminator="\n")
            write_text_atomic(Path(tmp) / "scores" / f"{model}.csv", buffer.getvalue())
        shutil.rmtree(out, ignore_errors=True)
        (Path(tmp) / "scores").rename(out)


def _score_case(case_id: str, *, dataset: DatasetConfig, models: dict[str, list[str]], regions: list, scratch: Path, profile: str) -> list[dict]:
    """One case: every model simulated, scored against the reference, its file deleted."""
    rows = []
    reference = reference_path(dataset, case_id)
    for model, prediction in predict_models(case_id, reference, models, scratch).items():
        scored = score_case(case_id, reference, prediction, regions, allowed_labels=dataset.region_labels(), profile=profile)
        rows += [{"model": model, **row} for row in scored]
        prediction.unlink()
    return rows
