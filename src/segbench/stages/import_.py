"""Import stage (``segbench import``): a published set of per-case scores (no masks, ``published.read_set``) -> one
score bundle per model (kind=published)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from segbench import published, tracking
from segbench.config import Params
from segbench.stages.bundles import headline_metrics, version_tags
from segbench.stages.paths import scores_dir

log = logging.getLogger(__name__)


def run_import(params: Params, name: str) -> None:
    """Import stage: one score bundle per model of a published set (kind=published, no masks)."""
    source = params.published_set(name)
    rows = published.read_set(source)
    log.info("%s: imported %s", name, rows.attrs["import_summary"]["text"])
    claims = rows.attrs.get("models", {})
    files = published.files_version(
        [source.path, *([source.metadata["path"]] if source.metadata else []), *([source.metadata_file] if source.metadata_file else [])]
    )
    summaries = headline_metrics(rows, source.metrics)
    for model, model_rows in rows.groupby("model", sort=True):
        model_rows = model_rows.reset_index(drop=True)
        model_rows.insert(1, "kind", "published")
        version = {"model_version": claims[model]["version"]} if claims.get(model, {}).get("version") else {}
        record = {
            "tags": version_tags(name, str(model), "published", files, source=source.source, **version),
            "params": {"published.format": source.format, "dataset.source": Path(os.path.relpath(source.path)).as_posix()},
            "metrics": summaries[str(model)],
        }
        tracking.ScoreBundle.write(scores_dir(name, str(model)), model_rows, record)
