"""Import stage (``segbench import``): a published set of per-case scores (no masks, ``published.read_set``) -> one
score bundle per model (kind=published), whose run record carries what compare needs of the set's files: the set's
import summary, the analysis a segauge results file publishes and the model's claims (``bundles.published_record``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from segbench.config.params import Params
from segbench.published import readers as published
from segbench.published import segauge as published_segauge
from segbench.stages.bundles import PUBLISHED_SECTION, headline_metrics, published_record, version_tags
from segbench.stages.paths import scores_dir
from segbench.tracking import runs as tracking

log = logging.getLogger(__name__)


def run_import(params: Params, name: str) -> None:
    """Import stage: one score bundle per model of a published set (kind=published, no masks); each run record carries
    the set's import summary, the analysis its file publishes and what the file claims of the model (compare reads them
    back from MLflow, never the set's files)."""
    source = params.published_set(name)
    rows = published.read_set(source)
    log.info("%s: imported %s", name, rows.attrs["import_summary"]["text"])
    claims = rows.attrs.get("models", {})
    files = published.files_version(
        [source.path, *([source.metadata["path"]] if source.metadata else []), *([source.metadata_file] if source.metadata_file else [])]
    )
    summaries = headline_metrics(rows, source.metrics)
    # the analysis a segauge results file publishes beside its scores (None: it publishes none), checked here
    analysis = published_segauge.read_segauge_analysis(source.path) if source.format == "segauge_results" else None
    for model, model_rows in rows.groupby("model", sort=True):
        model_rows = model_rows.reset_index(drop=True)
        model_rows.insert(1, "kind", "published")
        version = {"model_version": claims[model]["version"]} if claims.get(model, {}).get("version") else {}
        record = {
            "tags": version_tags(name, str(model), "published", files, source=source.source, **version),
            "params": {"published.format": source.format, "dataset.source": Path(os.path.relpath(source.path)).as_posix()},
            "metrics": summaries[str(model)],
            PUBLISHED_SECTION: published_record(rows.attrs["import_summary"], claims.get(model), analysis),
        }
        tracking.ScoreBundle.write(scores_dir(name, str(model)), model_rows, record)
