"""The published section's schema and its format registry: a ``published:`` entry (docs/published.md) checked into a
``PublishedConfig``, and per format (``PUBLISHED_FORMATS``) the options it takes and how they become its reader's
arguments. The readers live in ``published/readers.py`` (``READERS``, by the same names; tests/published/test_published_formats.py
checks the two agree); this module loads none of them, so a configuration is checked without pandas.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segbench.base.schema import ConfigError, cluster_field, require
from segbench.interactive.schema import NSD_PROFILE, PROTOCOL_VERSION, Scoring

#: Touchstone's metric files in each model folder by default
TOUCHSTONE_FILES = {"dice": "dsc.csv", "nsd": "nsd.csv"}
#: challengeR's long table: its default column names per segbench role ("value" holds the one metric)
CHALLENGER_COLUMNS = {"case": "case", "model": "algorithm", "structure": "task", "value": "value"}
#: the metrics of an nnU-Net v2 summary.json, segbench name -> nnU-Net's key
NNUNET_METRICS = {"dice": "Dice", "iou": "IoU"}
#: what an import does with rows of one key (case; model, case and structure in a long table) given twice
DUPLICATE_POLICIES = ("error", "first", "mean")
#: what it does with a value present in one of a model's metric files and empty in the other
ONE_SIDED_POLICIES = ("error", "missing")


@dataclass(frozen=True)
class PublishedConfig:
    """A published set of per-case scores (no masks), imported as one MLflow run per model."""

    name: str
    title: str
    format: str
    path: Path
    evaluated_on: str
    metadata_file: Path | None
    source: str
    metrics: dict[str, bool]
    subgroups: tuple[str, ...]
    cluster_field: str | None  # the metadata field whose values cluster the cases (docs/methodology.md#516-clustered-data)
    trained_on: dict[str, tuple[str, ...]]
    licence: str
    citation: str
    case_alignment: str | None  # the case alignment of the source's own significance maps, when it states one
    #: the metadata CSV joined to the cases (``published.join_metadata``'s arguments: path, sep, key, case_key,
    #: key_pattern, rows_where (the config's ``rows``), fields), or None (a
    #: Touchstone folder's metaTotalSeg.csv when it has one); ``{}`` for ``metadata: none`` (not even that)
    metadata: dict[str, Any] | None = None
    #: the format's options, validated and completed with their defaults (``PUBLISHED_FORMATS``)
    options: dict[str, Any] = field(default_factory=dict)


def parse_published(name: str, raw: dict[str, Any], root: Path) -> PublishedConfig:
    """A ``published:`` entry checked: its format and options, metrics, metadata (its case alignment is checked with the
    statistics settings: ``segbench.config.stats_settings``)."""
    where = f"published set {name!r}"
    fmt = str(require(raw, "format", where))
    if fmt not in PUBLISHED_FORMATS:
        raise ConfigError(f"{where}: format must be one of {tuple(PUBLISHED_FORMATS)}, got {fmt!r}")
    metadata_file = raw.get("metadata_file")
    if metadata_file and raw.get("metadata"):
        raise ConfigError(f"{where}: give either metadata_file (a segauge clinical JSON) or metadata (a CSV), not both")
    metrics = {str(k): bool(v) for k, v in require(raw, "metrics", where).items()}
    return PublishedConfig(
        name=name,
        title=str(raw.get("title", name)),
        format=fmt,
        path=root / require(raw, "path", where),
        evaluated_on=str(require(raw, "evaluated_on", where)),
        metadata_file=root / metadata_file if metadata_file else None,
        source=str(require(raw, "source", where)),
        metrics=metrics,
        subgroups=tuple(raw.get("subgroups", ())),
        cluster_field=cluster_field(raw.get("cluster_field"), where),
        trained_on={str(m): tuple(d) for m, d in (raw.get("trained_on") or {}).items()},
        licence=str(raw.get("licence", "")),
        citation=str(raw.get("citation", "")),
        case_alignment=raw.get("case_alignment"),
        metadata=published_metadata(raw.get("metadata"), root, where),
        options=format_options(fmt, raw.get("options") or {}, metrics, where),
    )


def published_metadata(value: Any, root: Path, where: str) -> dict[str, Any] | None:
    """A published set's ``metadata: {path, sep, key, case_key, key_pattern, rows, fields}`` checked
    (docs/published.md); None without one (the Touchstone reader then joins its folder's metaTotalSeg.csv when the
    folder has one); ``metadata: none`` is ``{}``: no metadata, whatever the folder holds."""
    if value is None:
        return None
    if value == "none":
        return {}
    at = f"{where}: metadata"
    if not isinstance(value, dict) or not isinstance(value.get("path"), str) or not isinstance(value.get("key"), str):
        raise ConfigError(f"{at}: expected none or {{path, key, sep (default ','), case_key, key_pattern, rows, fields (optional)}}, got {value!r}")
    if unknown := sorted(set(value) - set(METADATA_KEYS)):
        raise ConfigError(f"{at}: unknown key(s) {unknown}; it takes {', '.join(METADATA_KEYS)}")
    rows, fields = value.get("rows") or {}, value.get("fields")
    if not isinstance(rows, dict) or not all(isinstance(v, (str, int, float)) for v in rows.values()):
        raise ConfigError(f"{at}.rows: expected a mapping of column to the value its kept rows hold, e.g. {{Modality: CT}}, got {rows!r}")
    if fields is not None and (not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields)):
        raise ConfigError(f"{at}.fields: expected a list of column names (the fields joined), got {fields!r}")
    return {
        "path": root / value["path"],
        "sep": str(value.get("sep", ",")),
        "key": value["key"],
        "case_key": _pattern(value.get("case_key"), f"{at}.case_key", 1),
        "key_pattern": _pattern(value.get("key_pattern"), f"{at}.key_pattern", None),
        "rows_where": {str(k): str(v) for k, v in rows.items()},
        "fields": tuple(fields) if fields else None,
    }


#: the keys a ``metadata:`` mapping takes (docs/published.md, "Metadata from another file")
METADATA_KEYS = ("path", "sep", "key", "case_key", "key_pattern", "rows", "fields")


def _pattern(value: Any, at: str, max_groups: int | None) -> str | None:
    """An optional regular expression of the metadata join, checked to compile (and to have at most ``max_groups``
    groups); None when not given."""
    if value is None:
        return None
    try:
        if not isinstance(value, str) or (max_groups is not None and re.compile(value).groups > max_groups):
            raise ConfigError(f"{at}: {value!r} must be a regular expression with at most {max_groups} group")
        re.compile(value)
    except re.error as exc:
        raise ConfigError(f"{at}: {value!r} is not a regular expression ({exc})") from exc
    return value


def _policies(options: dict[str, Any], at: str) -> dict[str, str]:
    """The import policies of ``options`` (docs/published.md), checked; both default to ``error``."""
    chosen = {"duplicates": options.get("duplicates", "error"), "one_sided_missing": options.get("one_sided_missing", "error")}
    for key, allowed in (("duplicates", DUPLICATE_POLICIES), ("one_sided_missing", ONE_SIDED_POLICIES)):
        if chosen[key] not in allowed:
            raise ConfigError(f"{at}.{key}: must be one of {allowed}, got {chosen[key]!r}")
    return chosen


def _names(value: Any, where: str, what: str, allow_empty: bool = False) -> dict[str, str]:
    """A config mapping of strings (YAML may give int keys, e.g. nnU-Net label 1), or ConfigError."""
    if not isinstance(value, dict) or not (value or allow_empty) or not all(isinstance(v, str) and v for v in value.values()):
        raise ConfigError(f"{where}: expected a mapping of {what}, got {value!r}")
    return {str(k): v for k, v in value.items()}


def _touchstone(options: dict[str, Any], metrics: dict[str, bool], where: str) -> dict[str, Any]:
    at = f"{where}: options"
    policies = _policies(options, at)
    files = _names(options.get("files", TOUCHSTONE_FILES), f"{at}.files", "metric to its file in each model folder")
    if set(files) != set(metrics) or len(files) < 2:
        raise ConfigError(f"{at}.files: metrics {sorted(files)} must be the set's metrics {sorted(metrics)} (two or more files)")
    return {"files": files, **policies}


def _cvpr25(options: dict[str, Any], metrics: dict[str, bool], where: str) -> dict[str, Any]:
    """The challenge version the tables were computed under (default: the final one)."""
    try:
        return {"scoring": Scoring(str(options.get("protocol_version", PROTOCOL_VERSION)), str(options.get("nsd_profile", NSD_PROFILE)))}
    except ValueError as exc:
        raise ConfigError(f"{where}: options: {exc}") from None


def _nnunet(options: dict[str, Any], metrics: dict[str, bool], where: str) -> dict[str, Any]:
    """``models`` (name -> summary.json under ``path``), ``labels`` (label key -> structure) and ``file_ending``."""
    at = f"{where}: options"
    if unknown := sorted(set(metrics) - set(NNUNET_METRICS)):
        raise ConfigError(f"{where}: metrics {unknown} are not in an nnU-Net summary.json; it has {sorted(NNUNET_METRICS)}")
    models = _names(options.get("models"), f"{at}.models", "model name to its summary.json (relative to path)")
    if bad := [f for f in models.values() if Path(f).is_absolute() or ".." in Path(f).parts]:
        raise ConfigError(f"{at}.models: {bad} must be relative paths under the set's path (the import stage's dependency)")
    labels = _names(options.get("labels"), f"{at}.labels", "nnU-Net label key to a structure name")
    if len(set(labels.values())) < len(labels):
        raise ConfigError(f"{at}.labels: two labels name the same structure: {labels}")
    return {"models": models, "labels": labels, "file_ending": str(options.get("file_ending", ".nii.gz"))}


def _long_table(options: dict[str, Any], metrics: dict[str, bool], where: str, challenger: bool) -> dict[str, Any]:
    """challengeR's and the generic CSV: ``columns`` (role -> column; ``structure`` None when one fixed ``structure``
    names every row), ``metric_columns`` (metric -> column) and ``na_value`` (metric -> the value of a failed case)."""
    at = f"{where}: options"
    policies = _policies(options, at)
    columns: dict[str, str | None] = {**_names(options.get("columns", {}), f"{at}.columns", "role to a column name", allow_empty=True)}
    if challenger:
        if len(metrics) != 1:
            raise ConfigError(f"{where}: a challengeR table holds one metric; metrics must name exactly one, got {sorted(metrics)}")
        roles: tuple[str, ...] = ("case", "model", "structure", "value")
        columns = {**CHALLENGER_COLUMNS, **columns}
        metric_columns = {next(iter(metrics)): columns.pop("value", "value")}
    else:
        roles = ("case", "model", "structure")
        metric_columns = {m: str(c) for m, c in (options.get("metric_columns") or {}).items()}
        if unknown := sorted(set(metric_columns) - set(metrics)):
            raise ConfigError(f"{at}.metric_columns: {unknown} are not among the set's metrics {sorted(metrics)}")
        metric_columns = {m: metric_columns.get(m, m) for m in metrics}
    if unknown := sorted(set(columns) - set(roles)):
        raise ConfigError(f"{at}.columns: unknown role(s) {unknown}; roles are {list(roles)}")
    fixed = options.get("structure")
    if fixed is not None:
        if "structure" in options.get("columns", {}):
            raise ConfigError(f"{at}: give either columns.structure (a column) or structure (one fixed name), not both")
        columns["structure"] = None
    missing = [r for r in ("case", "model", "structure") if r not in columns]
    if missing:
        raise ConfigError(f"{at}.columns: missing role(s) {missing} (structure may instead be one fixed `structure: <name>`)")
    na_value = options.get("na_value") or {}
    if (
        not isinstance(na_value, dict)
        or not set(na_value) <= set(metrics)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in na_value.values())
    ):
        raise ConfigError(f"{at}.na_value: expected metric -> finite number for metrics among {sorted(metrics)}, got {na_value!r}")
    return {
        "columns": {r: columns[r] for r in ("case", "model", "structure")},
        "structure": None if fixed is None else str(fixed),
        "metric_columns": metric_columns,
        "na_value": {m: float(v) for m, v in na_value.items()},
        "duplicates": policies["duplicates"],
    }


@dataclass(frozen=True)
class PublishedFormat:
    """A published format: the ``options:`` it takes (any other key is an error) and how they become its reader's
    keyword arguments (``PublishedConfig.options``), given the set's metrics and where it is configured."""

    options: tuple[str, ...]
    arguments: Callable[[dict[str, Any], dict[str, bool], str], dict[str, Any]]


#: the published formats by name (docs/published.md); ``published.READERS`` has a reader for each
PUBLISHED_FORMATS: dict[str, PublishedFormat] = {
    "touchstone": PublishedFormat(("files", "duplicates", "one_sided_missing"), _touchstone),
    "segauge_results": PublishedFormat((), lambda options, metrics, where: {}),
    "cvpr25_metrics": PublishedFormat(("protocol_version", "nsd_profile"), _cvpr25),
    "challenger_csv": PublishedFormat(
        ("columns", "structure", "na_value", "duplicates"), lambda options, metrics, where: _long_table(options, metrics, where, challenger=True)
    ),
    "generic_csv": PublishedFormat(
        ("columns", "structure", "metric_columns", "na_value", "duplicates"),
        lambda options, metrics, where: _long_table(options, metrics, where, challenger=False),
    ),
    "nnunet_summary": PublishedFormat(("models", "labels", "file_ending"), _nnunet),
}


def format_options(fmt: str, options: Any, metrics: dict[str, bool], where: str) -> dict[str, Any]:
    """A published format's ``options:`` checked against its ``PUBLISHED_FORMATS`` entry and turned into the reader's
    arguments."""
    at = f"{where}: options"
    if not isinstance(options, dict):
        raise ConfigError(f"{at}: expected a mapping, got {options!r}")
    unknown = sorted(set(options) - set(PUBLISHED_FORMATS[fmt].options))
    if unknown:
        raise ConfigError(f"{at}: {unknown} not options of format {fmt!r}; it takes {list(PUBLISHED_FORMATS[fmt].options) or 'none'}")
    return PUBLISHED_FORMATS[fmt].arguments(options, metrics, where)
