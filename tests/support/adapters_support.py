"""Helpers for the adapter tests: the published class lists and the real recorded model outputs.

Expectations here are written from the published class lists (tests/support/fixtures/published_class_lists.json),
independently of the model configs under test.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np

from repo_paths import CLASS_LISTS_JSON, ROOT

EXAMPLE = ROOT / "data" / "totalseg_example"
CLASS_LISTS = json.loads(CLASS_LISTS_JSON.read_text(encoding="utf-8"))

REAL_MODELS = [
    "totalsegmentator",
    "totalsegmentator_fast",
    "totalsegmentator_roi",
    "totalsegmentator_mr",
    "moose_organs",
    "monai_wholebody",
    "ctfm_wholebody",
    "stunet_base",
]
DATASETS = ["kits23", "amos22", "totalsegmentator", "btcv", "msd_spleen"]

#: which published class list each adapter's native ids follow
MODEL_CLASS_LIST = {
    "totalsegmentator": "totalsegmentator_total",
    "totalsegmentator_fast": "totalsegmentator_total",
    "totalsegmentator_roi": "totalsegmentator_total",
    "totalsegmentator_mr": "totalsegmentator_total_mr",
    "moose_organs": "moose_clin_ct_organs",
    "monai_wholebody": "totalsegmentator_v1",
    "ctfm_wholebody": "totalsegmentator_total",
    "stunet_base": "totalsegmentator_v1",
}
#: published names that differ from segbench's canonical vocabulary
PUBLISHED_TO_CANONICAL = {"moose_clin_ct_organs": {"bladder": "urinary_bladder"}}

#: dataset structure -> the published class names that make it (written from the datasets' label
#: definitions: KiTS kidney is both kidneys, its cyst is a renal cyst); absent = the same name
PARTS = {
    "kidney": ("kidney_left", "kidney_right"),
    "cyst": ("kidney_cyst_left", "kidney_cyst_right"),
    "thyroid_gland": ("thyroid_left", "thyroid_right"),
    "prostate_or_uterus": ("prostate", "uterus"),
}


def classes(list_name: str) -> dict[int, str]:
    """A published class list as {native id: canonical name}."""
    rename = PUBLISHED_TO_CANONICAL.get(list_name, {})
    return {int(k): rename.get(v, v) for k, v in CLASS_LISTS[list_name]["classes"].items()}


def source_ids(structure: str, class_list: dict[int, str]) -> list[int] | None:
    """Native ids composing a dataset structure, or None when the list lacks any needed part."""
    names = PARTS.get(structure, (structure,))
    ids = [i for i, n in class_list.items() if n in names]
    found = {class_list[i] for i in ids}
    return ids if found == set(names) else None


def to_schema(native: np.ndarray, class_list: dict[int, str], labels: dict[str, int]) -> np.ndarray:
    """A native label map written into a dataset schema from the published list (the expected result)."""
    out = np.zeros(native.shape, dtype=np.uint8)
    for structure, label in labels.items():
        ids = source_ids(structure, class_list)
        if ids:
            out[np.isin(native, ids)] = label
    return out


def translate(native: np.ndarray, source: dict[int, str], target: dict[int, str]) -> np.ndarray:
    """A label map in one model's ids rewritten into another model's ids by class name (absent -> 0)."""
    by_name = {n: i for i, n in target.items()}
    table = np.zeros(max(source) + 1, dtype=np.uint8)
    for i, n in source.items():
        table[i] = by_name.get(n, 0)
    return table[native]


def load(name: str) -> tuple[np.ndarray, nib.Nifti1Image]:
    image = nib.load(EXAMPLE / name)
    return np.asarray(image.dataobj), image


def flipped(image: nib.Nifti1Image, data: np.ndarray) -> nib.Nifti1Image:
    """The same world content on a grid with the first two axes reversed (another orientation and origin)."""
    flip = np.diag([-1.0, -1.0, 1.0, 1.0])
    flip[0, 3] = data.shape[0] - 1
    flip[1, 3] = data.shape[1] - 1
    out = nib.Nifti1Image(np.ascontiguousarray(data[::-1, ::-1, :]), image.affine @ flip)
    out.set_data_dtype(data.dtype)
    return out
