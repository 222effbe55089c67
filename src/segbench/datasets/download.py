"""Download a dataset from its official source into ``data/<dataset>/`` (``segbench data fetch``).

A dataset config's ``download`` block names how: ``per_case_url`` (one URL per case, e.g. the
KiTS23 images), ``archive`` (one archive with a published md5, or a Zenodo record whose API lists
the md5), or ``manual`` (the licence requires registration: the exact steps are printed and a
local copy given with ``--source`` is verified and ingested). ``ingest`` names how the extracted
files become ``images/`` and ``labels/``: ``copy`` (globs -> folders) or ``totalsegmentator``
(per-structure masks composed into one label map in the dataset's schema).

Everything lands under ``data/``, which ``data.dvc`` pins as one output: after a download, re-pin
with ``dvc add data && dvc push`` and commit ``data.dvc``.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import nibabel as nib
import numpy as np

from segbench.base.io import copy_file_atomic, file_digest, save_label_map_atomic
from segbench.base.schema import ConfigError
from segbench.datasets.schema import DatasetConfig

ZENODO_API = "https://zenodo.org/api/records/{record}"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _download(url: str, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".partial.{target.name}")
    _say(f"downloading {url} -> {target}")
    urllib.request.urlretrieve(url, partial)  # noqa: S310 (https URLs from the dataset config)
    partial.replace(target)
    return target


def zenodo_file(record: str, key: str) -> tuple[str, str]:
    """(download URL, md5) of file ``key`` of a Zenodo record, from Zenodo's public API."""
    with urllib.request.urlopen(ZENODO_API.format(record=record)) as response:  # noqa: S310
        meta = json.load(response)
    for entry in meta.get("files", []):
        if entry.get("key") == key:
            algorithm, _, value = str(entry["checksum"]).partition(":")
            if algorithm != "md5":
                raise ValueError(f"zenodo record {record}: {key} has a {algorithm} checksum, expected md5")
            return str(entry["links"]["self"]), value
    raise ValueError(f"zenodo record {record}: no file {key!r} (has {[e.get('key') for e in meta.get('files', [])]})")


def verify_md5(path: Path, expected: str | None, dataset: str) -> None:
    """Raise unless ``path`` has md5 ``expected`` (None: nothing published to check against; say so)."""
    if expected is None:
        _say(f"{dataset}: {path.name}: the source publishes no md5; pin it with `dvc add data` after checking the file")
        return
    actual = file_digest(path, "md5")
    if actual != expected:
        raise ValueError(f"dataset {dataset!r}: {path} has md5 {actual}, the official source publishes {expected}")


def extract(archive: Path, into: Path) -> Path:
    """Unpack a .zip or .tar(.gz) archive into ``into``; refuses members escaping it."""
    into.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not (into / name).resolve().is_relative_to(into.resolve()):
                    raise ValueError(f"{archive}: member {name!r} would be written outside {into}")
            zf.extractall(into)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(into, filter="data")
    return into


def ingest_copy(dataset: DatasetConfig, folder: Path, spec: dict[str, Any]) -> None:
    """Copy files matching ``spec['images']`` / ``spec['labels']`` (a glob or list of globs) into image_dir / reference_dir."""
    for key, target in (("images", dataset.image_dir), ("labels", dataset.reference_dir)):
        patterns = [spec[key]] if isinstance(spec[key], str) else list(spec[key])
        files = sorted(p for pattern in patterns for p in folder.glob(pattern) if not p.name.startswith("._"))
        if not files:
            raise ValueError(f"dataset {dataset.name!r}: nothing matches {spec[key]!r} under {folder}")
        assert target is not None
        target.mkdir(parents=True, exist_ok=True)
        for file in files:
            copy_file_atomic(file, target / file.name)
        _say(f"{dataset.name}: {len(files)} {key} -> {target}")


def ingest_totalsegmentator(dataset: DatasetConfig, folder: Path, spec: dict[str, Any]) -> None:
    """TotalSegmentator layout ``<case>/ct.nii.gz`` + ``<case>/segmentations/<structure>.nii.gz``:
    link the CT as ``images/<case>.nii.gz`` and compose the masks of the schema's structures into
    ``labels/<case>.nii.gz`` (ids from the config). The dataset's ``meta.csv`` is copied beside them."""
    assert dataset.image_dir is not None
    cases = sorted(p.parent for p in folder.glob(spec["images"]))
    if not cases:
        raise ValueError(f"dataset {dataset.name!r}: no {spec['images']!r} under {folder}")
    for case in cases:
        ct = case / "ct.nii.gz"
        dataset.image_dir.mkdir(parents=True, exist_ok=True)
        copy_file_atomic(ct, dataset.image_dir / f"{case.name}.nii.gz")
        like = cast(nib.Nifti1Image, nib.load(ct))
        labels = np.zeros(like.shape[:3], dtype=np.uint8)
        for structure, label in dataset.labels.items():
            mask = case / "segmentations" / f"{structure}.nii.gz"
            if not mask.is_file():
                raise ValueError(f"dataset {dataset.name!r}, case {case.name}: missing mask {mask}")
            labels[np.asarray(cast(nib.Nifti1Image, nib.load(mask)).dataobj) > 0] = label
        save_label_map_atomic(dataset.reference_dir / f"{case.name}.nii.gz", labels, like)
    for meta in folder.glob(spec.get("metadata", "__none__")):
        copy_file_atomic(meta, dataset.reference_dir.parent / meta.name)
    _say(f"{dataset.name}: {len(cases)} cases -> {dataset.image_dir}, {dataset.reference_dir}")


INGESTERS: dict[str, Callable[[DatasetConfig, Path, dict[str, Any]], None]] = {
    "copy": ingest_copy,
    "totalsegmentator": ingest_totalsegmentator,
}


def _per_case_urls(dataset: DatasetConfig, spec: dict[str, Any], source: Path | None) -> None:
    """One URL per case (KiTS23 images), for the cases whose reference labels are present."""
    from segbench.datasets.cases import case_ids

    assert dataset.image_dir is not None
    for case_id in case_ids(dataset):
        target = dataset.image_dir / dataset.image_pattern.format(case=case_id)
        if not target.is_file():
            number = int(case_id.rsplit("_", 1)[-1])
            _download(spec["url"].format(case=case_id, case_num=number), target)


def _archive(dataset: DatasetConfig, spec: dict[str, Any], source: Path | None) -> None:
    """One archive: downloaded (or given with --source), md5-checked, extracted, ingested."""
    dataset.reference_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dataset.reference_dir.parent) as tmp:
        if source is not None and source.is_dir():
            folder = source
        else:
            if source is None:
                url, md5 = zenodo_file(str(spec["zenodo_record"]), spec["file"]) if "zenodo_record" in spec else (spec["url"], spec.get("md5"))
                archive = _download(url, Path(tmp) / Path(spec.get("file") or url.rsplit("/", 1)[-1]).name)
            else:
                archive, md5 = source, spec.get("md5")
            verify_md5(archive, md5, dataset.name)
            folder = extract(archive, Path(tmp) / "x")
        ingester = spec.get("ingest", "copy")
        if ingester not in INGESTERS:
            raise ConfigError(f"dataset {dataset.name!r}: unknown ingest {ingester!r}; known {sorted(INGESTERS)}")
        INGESTERS[ingester](dataset, folder, spec)


def _manual(dataset: DatasetConfig, spec: dict[str, Any], source: Path | None) -> None:
    """Registration required: print the steps; with --source, verify and ingest the local copy."""
    if source is None:
        steps = "\n".join(f"  {i}. {step}" for i, step in enumerate(spec["steps"], start=1))
        raise ConfigError(f"dataset {dataset.name!r} cannot be downloaded automatically ({spec['why']}). Steps:\n{steps}")
    _archive(dataset, spec, source)


KINDS: dict[str, Callable[[DatasetConfig, dict[str, Any], Path | None], None]] = {
    "per_case_url": _per_case_urls,
    "archive": _archive,
    "manual": _manual,
}


def fetch(dataset: DatasetConfig, *, source: Path | None = None) -> None:
    """Download (or verify and ingest ``source``) the dataset named by its config's ``download`` block."""
    spec = dataset.download
    if not spec or spec.get("kind") not in KINDS:
        raise ConfigError(f"dataset {dataset.name!r}: download.kind must be one of {sorted(KINDS)}, got {spec and spec.get('kind')!r}")
    KINDS[spec["kind"]](dataset, spec, source)
    _say(f"{dataset.name}: done; pin the new files with `dvc add data && dvc push` and commit data.dvc")
