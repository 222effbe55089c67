"""The real-model pipeline's cases stage (realmodel/dvc.yaml; docs/guide.md#a-real-model-run-here):
``segbench --params realmodel/params.yaml realmodel cases`` makes the dataset's cases from the data bundle (``sources`` of
its entry): the images, the reference's and the shipped outputs' liver voxels as 0/1 masks, under the params file's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml

from segbench.base.io import atomic_path, copy_file_atomic, save_label_map_atomic
from segbench.base.schema import ConfigError
from segbench.config.params import Params
from segbench.datasets.cases import reference_path


def _sources(params_file: Path, dataset: str) -> tuple[dict[str, dict[str, Any]], int]:
    """The dataset entry's ``sources`` (per case: image, reference, shipped outputs) and ``source_label``, read from the
    params file (the dataset's schema does not keep them); paths relative to the file's folder."""
    raw = yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}
    entry = (raw.get("dataset") or {}).get(dataset) or {}
    sources, label = entry.get("sources"), entry.get("source_label")
    if not isinstance(sources, dict) or not sources or not isinstance(label, int):
        raise ConfigError(
            f"{params_file}: dataset {dataset!r} needs `sources` (case -> image, reference, shipped) and an integer "
            "`source_label` for the cases stage (conf/dataset/totalseg_liver.yaml shows them)"
        )
    return sources, label


def run_cases(params: Params, params_file: Path, dataset_name: str) -> None:
    """Cases stage: each configured case's image (a NIfTI copied byte for byte, a DICOM series folder read into NIfTI),
    its reference as the 0/1 mask of ``source_label``'s voxels, and each shipped output's mask the same way, into the
    dataset's image, reference and ``<reference_dir>/../shipped/<model>/`` folders."""
    import nibabel as nib
    import numpy as np

    from segbench.datasets.dicom_series import read_series

    dataset = params.dataset(dataset_name)
    if dataset.image_dir is None:
        raise ConfigError(f"dataset {dataset_name!r}: the cases stage writes its images, so it needs image_dir")
    sources, label = _sources(params_file, dataset_name)
    base = params_file.parent
    unknown = sorted(set(dataset.cases or ()) ^ set(sources))
    if unknown:
        raise ConfigError(f"{params_file}: dataset {dataset_name!r}: cases {sorted(dataset.cases or ())} and sources {sorted(sources)} differ in {unknown}")
    for case_id, source in sorted(sources.items()):
        image = base / source["image"]
        target = dataset.image_dir / dataset.image_pattern.format(case=case_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        if image.is_dir():
            with atomic_path(target, suffix=".nii.gz") as tmp:
                nib.save(read_series(image), tmp)
        elif image.is_file():
            copy_file_atomic(image, target)
        else:
            raise ConfigError(f"{params_file}: case {case_id!r}: image {image} does not exist (run `dvc pull data.dvc`)")
        masks = {reference_path(dataset, case_id): base / source["reference"]}
        masks.update(
            {dataset.reference_dir.parent / "shipped" / model / f"{case_id}.nii.gz": base / path for model, path in (source.get("shipped") or {}).items()}
        )
        for mask_target, labels_file in masks.items():
            if not labels_file.is_file():
                raise ConfigError(f"{params_file}: case {case_id!r}: label map {labels_file} does not exist (run `dvc pull data.dvc`)")
            labels = cast(nib.Nifti1Image, nib.load(labels_file))
            header = labels.header.copy()
            header.extensions.clear()  # TotalSegmentator's label names: not this mask's, and refused by the harness's checks
            mask_target.parent.mkdir(parents=True, exist_ok=True)
            save_label_map_atomic(mask_target, (np.asarray(labels.dataobj) == label).astype(np.uint8), nib.Nifti1Image(labels.dataobj, labels.affine, header))
