"""The datasets section's schema: a ``dataset:`` entry (its reference label maps, label schema, scored regions, metadata
and subgroups) checked into a ``DatasetConfig``. ``cases.py`` reads a dataset's files with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segbench.base.schema import ConfigError, cluster_field, require
from segbench.scoring.settings import Region


@dataclass(frozen=True)
class DatasetConfig:
    """A dataset: where its reference label maps live, its label schema and scored regions."""

    name: str
    title: str
    reference_dir: Path
    image_dir: Path | None
    file_pattern: str
    labels: dict[str, int]
    regions: tuple[Region, ...]
    #: per region, the structures a model may leave unsegmented and still be scored on the region
    region_optional: dict[str, tuple[str, ...]]
    image_pattern: str
    modality: str
    download: dict[str, Any] | None
    metadata_file: Path | None
    metadata_format: str | None
    metadata_fields: tuple[str, ...]
    subgroups: tuple[str, ...]
    cluster_field: str | None  # the metadata field whose values cluster the cases (docs/methodology.md#516-clustered-data)
    cases: tuple[str, ...] | None
    licence: str
    citation: str

    def region_labels(self) -> set[int]:
        """Every label id the schema knows, background included."""
        return {0, *self.labels.values()}


def parse_dataset(name: str, raw: dict[str, Any], root: Path) -> DatasetConfig:
    """A ``dataset:`` entry checked: its label schema, the regions scored from it (each naming known structures) and
    where its files and metadata live (relative to ``root``)."""
    where = f"dataset {name!r}"
    labels = {str(k): int(v) for k, v in require(raw, "labels", where).items()}
    regions = []
    region_optional = {}
    for region_name, spec in require(raw, "regions", where).items():
        unknown = [s for s in spec["structures"] if s not in labels]
        if unknown:
            raise ConfigError(f"{where}: region {region_name!r} names unknown structures {unknown}; schema has {sorted(labels)}")
        optional = tuple(spec.get("optional", ()))
        if not set(optional) <= set(spec["structures"]):
            raise ConfigError(f"{where}: region {region_name!r}: optional {list(optional)} must be among its structures {spec['structures']}")
        region_optional[region_name] = optional
        regions.append(
            Region(
                name=region_name,
                labels=tuple(sorted(labels[s] for s in spec["structures"])),
                nsd_tolerance_mm=float(spec.get("nsd_tolerance_mm", 2.0)),
                detection=bool(spec.get("detection", False)),
            )
        )
    cases = raw.get("cases")
    image_dir = raw.get("image_dir")
    metadata_file = raw.get("metadata_file")
    return DatasetConfig(
        name=name,
        title=str(raw.get("title", name)),
        reference_dir=root / require(raw, "reference_dir", where),
        image_dir=root / image_dir if image_dir else None,
        file_pattern=str(raw.get("file_pattern", "{case}.nii.gz")),
        labels=labels,
        regions=tuple(regions),
        region_optional=region_optional,
        image_pattern=str(raw.get("image_pattern", "{case}.nii.gz")),
        modality=str(raw.get("modality", "CT")),
        download=raw.get("download"),
        metadata_file=root / metadata_file if metadata_file else None,
        metadata_format=raw.get("metadata_format"),
        metadata_fields=tuple(raw.get("metadata_fields", ())),
        subgroups=tuple(raw.get("subgroups", ())),
        cluster_field=cluster_field(raw.get("cluster_field"), where),
        cases=tuple(str(c) for c in cases) if cases else None,
        licence=str(raw.get("licence", "")),
        citation=str(raw.get("citation", "")),
    )
