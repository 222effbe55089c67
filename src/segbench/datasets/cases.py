"""Case listing and metadata for a configured dataset.

Metadata readers are registered per ``metadata_format`` so a new dataset adds a reader, not a branch
in the pipeline. Every metadata value becomes a ``meta.<field>`` column on each per-case row.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml

from segbench.base.bands import AGE_BAND, age_band
from segbench.base.io import UNREADABLE
from segbench.base.schema import ConfigError
from segbench.datasets.schema import DatasetConfig

CaseList = list[str]


def data_version(root: Path = Path(".")) -> str:
    """md5 of the pinned data bundle, from ``data.dvc`` (the version every result records)."""
    pin = yaml.safe_load((root / "data.dvc").read_text(encoding="utf-8"))
    return str(pin["outs"][0]["md5"])


def _suffix(pattern: str) -> str:
    return pattern.split("{case}", 1)[1]


def reference_path(dataset: DatasetConfig, case_id: str) -> Path:
    """The reference label map of ``case_id``."""
    return dataset.reference_dir / dataset.file_pattern.format(case=case_id)


def case_ids(dataset: DatasetConfig) -> CaseList:
    """The dataset's evaluated cases, sorted: the configured subset, or every reference file found.

    A configured case without a reference file, or a duplicated case id, is an error.
    """
    if not dataset.reference_dir.is_dir():
        raise ConfigError(f"dataset {dataset.name!r}: reference folder {dataset.reference_dir} does not exist (run `dvc pull`)")
    suffix = _suffix(dataset.file_pattern)
    prefix = dataset.file_pattern.split("{case}", 1)[0]
    found = sorted(
        p.name[len(prefix) : len(p.name) - len(suffix)] for p in dataset.reference_dir.iterdir() if p.name.startswith(prefix) and p.name.endswith(suffix)
    )
    if dataset.cases is None:
        if not found:
            raise ConfigError(f"dataset {dataset.name!r}: no reference files matching {dataset.file_pattern} in {dataset.reference_dir}")
        return found
    duplicates = sorted({c for c in dataset.cases if dataset.cases.count(c) > 1})
    if duplicates:
        raise ConfigError(f"dataset {dataset.name!r}: duplicate case ids in params: {duplicates}")
    missing = sorted(set(dataset.cases) - set(found))
    if missing:
        raise ConfigError(
            f"dataset {dataset.name!r}: configured cases have no reference file in {dataset.reference_dir}: {missing}; {_valid_ids(found, missing)}"
        )
    return sorted(dataset.cases)


def _valid_ids(found: CaseList, missing: CaseList) -> str:
    """The valid case ids in a few words: how many, the first and last, and the ones closest to the first unknown id."""
    if not found:
        return "the folder has no reference files"
    closest = difflib.get_close_matches(missing[0], found, n=3, cutoff=0.0)
    return f"it has {len(found)} cases, {found[0]} to {found[-1]} (closest to {missing[0]!r}: {', '.join(closest)})"


def _kits23_json(path: Path) -> pd.DataFrame:
    """KiTS23's kits23.json: a list of one object per case, each with its ``case_id``."""
    records = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(records, list) or not all(isinstance(r, dict) and isinstance(r.get("case_id"), str) for r in records):
        raise ValueError("not a list of objects with a case_id each")
    return pd.DataFrame.from_records(records).set_index("case_id")


def _totalsegmentator_csv(path: Path) -> pd.DataFrame:
    """The TotalSegmentator dataset's meta.csv: ';'-separated, UTF-8 with BOM, one row per image_id."""
    table = pd.read_csv(path, sep=";", encoding="utf-8-sig", dtype={"image_id": str})
    if "image_id" not in table.columns:
        raise ValueError(f"no image_id column (has {list(table.columns)[:10]})")
    return table.rename(columns={"image_id": "case_id"}).set_index("case_id")


METADATA_READERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    "kits23_json": _kits23_json,
    "totalsegmentator_csv": _totalsegmentator_csv,
}


def load_metadata(dataset: DatasetConfig, cases: CaseList) -> pd.DataFrame:
    """Configured metadata fields for ``cases`` as ``meta.<field>`` columns, indexed by case id.

    ``age_band`` (``segbench.base.bands``, as for published sets) is derived from the first configured field whose name
    starts with ``age``.
    """
    if dataset.metadata_file is None or not dataset.metadata_fields:
        return pd.DataFrame(index=pd.Index(cases, name="case_id"))
    if dataset.metadata_format not in METADATA_READERS:
        raise ConfigError(f"dataset {dataset.name!r}: unknown metadata_format {dataset.metadata_format!r}; known {sorted(METADATA_READERS)}")
    try:
        table = METADATA_READERS[dataset.metadata_format](dataset.metadata_file)
    except UNREADABLE as exc:
        raise ConfigError(f"dataset {dataset.name!r}: metadata file {dataset.metadata_file} is not readable as {dataset.metadata_format} ({exc})") from None
    repeated = sorted(set(table.index[table.index.duplicated()]))
    if repeated:  # which of its rows would describe the case is anyone's guess
        raise ConfigError(f"dataset {dataset.name!r}: metadata file {dataset.metadata_file} has more than one row for {len(repeated)} case(s): {repeated[:5]}")
    unknown = [f for f in dataset.metadata_fields if f not in table.columns]
    if unknown:
        raise ConfigError(f"dataset {dataset.name!r}: metadata fields {unknown} not in {dataset.metadata_file}")
    table = table.reindex(cases)[list(dataset.metadata_fields)]
    ages = [f for f in dataset.metadata_fields if f.startswith("age")]
    if ages:
        try:
            table[AGE_BAND] = age_band(table[ages[0]])
        except ValueError as exc:
            raise ConfigError(f"dataset {dataset.name!r}: metadata field {ages[0]!r} of {dataset.metadata_file} is not an age in years ({exc})") from None
    table.index.name = "case_id"
    return table.add_prefix("meta.")
