"""Import stage (``segbench import``): a published set of per-case scores (no masks) -> one score bundle per model
(kind=published); ``read_published`` is also how compare and the calibration audit read a set."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd

from segbench import published
from segbench.config import Params
from segbench.published_schema import PublishedConfig
from segbench.rows import check_rows
from segbench.stages.bundles import headline_metrics, version_tags, write_bundle
from segbench.stages.paths import scores_dir

log = logging.getLogger(__name__)


def read_published(source: PublishedConfig) -> pd.DataFrame:
    """Rows of a published score set, its ``metadata`` joined; ``rows.attrs["import_summary"]`` says what the import
    found and what its policies did (docs/published.md). Segauge results keep each model's version, licence and
    training sets in ``rows.attrs["models"]``."""
    rows = check_rows(published.READERS[source.format](source), str(source.path),
                      "correct the published file or its format's options in params.yaml (docs/published.md)", file_lines=False)
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
        write_bundle(scores_dir(name, str(model)), model_rows, record)
