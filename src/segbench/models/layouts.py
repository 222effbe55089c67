"""How models want their inputs laid out and how they write their outputs, as two small registries.

Model tools disagree on file layouts: nnU-Net (and STU-Net) read ``<case>_0000.nii.gz`` and write
``<case>.nii.gz``; MOOSE reads one folder per subject holding ``CT_<name>.nii.gz`` and writes into a
time-stamped ``moosez-*`` folder inside it; TotalSegmentator writes one multilabel file with
``--ml`` or a folder of per-structure binary masks without it; the MONAI bundle writes
``<stem>/<stem>_trans.nii.gz``. A model config names its ``input_layout`` and ``output_format``;
the runner looks them up here instead of branching per model.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import nibabel as nib
import numpy as np

from segbench.scoring.labelmaps import load_nifti


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(Path(source).resolve(), target)


#: input layout -> writer of one case's image into the staged input folder (symlinks, never copies)
INPUT_LAYOUTS: dict[str, Callable[[str, Path, Path], None]] = {
    "flat": lambda case, image, folder: _link(image, folder / f"{case}.nii.gz"),
    "nnunet": lambda case, image, folder: _link(image, folder / f"{case}_0000.nii.gz"),
    "moose": lambda case, image, folder: _link(image, folder / case / f"CT_{case}.nii.gz"),
}


def find_output(pattern: str, case_id: str, input_dir: Path, output_dir: Path, model_name: str) -> Path | None:
    """The native output of ``case_id``: ``pattern`` formatted, relative to ``output_dir``, glob allowed.

    None when the model wrote nothing for the case; more than one match is an error (the harness
    must never pick one of several outputs silently).
    """
    esc = glob.escape
    formatted = pattern.format(case=esc(case_id), input_dir=esc(str(input_dir)), output_dir=esc(str(output_dir)))
    if not Path(formatted).is_absolute():
        formatted = os.path.join(esc(str(output_dir)), formatted)
    matches = sorted(glob.glob(formatted))
    if len(matches) > 1:
        raise ValueError(f"model {model_name!r}, case {case_id}: output pattern {pattern!r} matches {len(matches)} paths: {matches}")
    return Path(matches[0]) if matches else None


def read_multilabel(path: Path, label_map: Mapping[int, str]) -> tuple[np.ndarray, nib.Nifti1Image]:
    """One label map holding the model's native ids (TotalSegmentator --ml, nnU-Net, MONAI, MOOSE)."""
    return load_nifti(path)


def read_mask_folder(path: Path, label_map: Mapping[int, str]) -> tuple[np.ndarray, nib.Nifti1Image]:
    """A folder of binary masks ``<structure>.nii.gz`` (TotalSegmentator without --ml) -> native label map.

    Every mask must be on one grid; a file naming a structure outside the label map, or two masks
    claiming one voxel, is an error naming the file.
    """
    ids = {name: native for native, name in label_map.items()}
    files = sorted(Path(path).glob("*.nii.gz"))
    if not files:
        raise ValueError(f"{path}: no <structure>.nii.gz masks in the output folder")
    labels: np.ndarray | None = None
    first: nib.Nifti1Image | None = None
    for file in files:
        name = file.name[: -len(".nii.gz")]
        if name not in ids:
            raise ValueError(f"{file}: structure {name!r} is not in the model's label_map")
        mask, image = load_nifti(file)
        if first is None:
            first, labels = image, np.zeros(mask.shape, dtype=np.uint16 if max(ids.values()) > 255 else np.uint8)
        elif labels is None or mask.shape != labels.shape or not np.allclose(image.affine, first.affine, atol=1e-4):
            raise ValueError(f"{file}: mask grid differs from {files[0].name} in the same folder")
        hit = mask > 0
        if (labels[hit] != 0).any():
            raise ValueError(f"{file}: mask overlaps another structure's mask in {path}")
        labels[hit] = ids[name]
    assert labels is not None and first is not None  # files is not empty
    return labels, first


#: output format -> reader of one case's native output into (native label map, its image)
OUTPUT_READERS: dict[str, Callable[[Path, Mapping[int, str]], tuple[np.ndarray, nib.Nifti1Image]]] = {
    "multilabel": read_multilabel,
    "mask_folder": read_mask_folder,
}
