"""Real KiTS23 lesion masks and SIMULATED predictions of them that miss, split, merge and add lesions.

Shared by tests/scoring/test_instances.py and benchmarks/bench_instances.py. The reference is a KiTS23
label map (0 background, 1 kidney, 2 tumor, 3 cyst; data/README.md) cropped to the kidneys' box;
the prediction is SIMULATED from it by fixed, seeded edits (no model ran), each chosen to exercise
one matching situation: a missed lesion (FN), a split lesion (one-to-many), two lesions bridged
into one (many-to-one), an added lesion in the kidney (FP), and boundary errors on the rest.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
from scipy import ndimage

from segbench.scoring.instances import label_components
from segbench.scoring.labelmaps import nonzero_box

STRUCTURES: dict[str, int] = {"tumor": 2, "cyst": 3}


def load_case(labels_dir: Path, case: str, margin: int = 6) -> tuple[np.ndarray, tuple[float, float, float]]:
    """The case's label map cropped to the box of its non-zero voxels (kidneys and lesions) plus
    ``margin`` voxels, and its header spacing (array order)."""
    img = nib.load(labels_dir / f"{case}.nii.gz")
    labels = np.asarray(img.dataobj).astype(np.uint8)
    box = tuple(slice(max(s.start - margin, 0), min(s.stop + margin, n)) for s, n in zip(nonzero_box(labels), labels.shape, strict=True))
    zooms = img.header.get_zooms()[:3]
    return labels[box], (float(zooms[0]), float(zooms[1]), float(zooms[2]))


def _segment(shape: tuple[int, ...], a: np.ndarray, b: np.ndarray, radius: int) -> np.ndarray:
    """Voxels within ``radius`` voxels (chessboard) of the segment a-b: a bridge between two lesions."""
    out = np.zeros(shape, dtype=bool)
    for t in np.linspace(0.0, 1.0, int(np.abs(b - a).max()) * 2 + 2):
        c = np.rint(a + t * (b - a)).astype(int)
        out[tuple(slice(max(x - radius, 0), x + radius + 1) for x in c)] = True
    return out


def simulate_lesions(labels: np.ndarray, label: int, spacing: tuple[float, float, float], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(reference, SIMULATED prediction) boolean masks of one lesion label.

    Prediction = reference with: the smallest lesion removed (if there are 2+), the largest cut in
    two by a 2-voxel slab across its first axis, the second and third largest bridged (if there
    are 3+, after the removal), a ball of 4 mm radius added in the kidney 15 mm or more away from
    every lesion, and every other lesion alternately eroded or dilated by one voxel."""
    ref = labels == label
    pred = ref.copy()
    comp, n = label_components(ref, 26)
    sizes = np.bincount(comp.ravel())[1:]
    by_size = list(np.argsort(-sizes, kind="stable") + 1)
    boxes = ndimage.find_objects(comp)
    if n >= 2:
        pred[comp == by_size[-1]] = False
        by_size = by_size[:-1]
    big = by_size[0]
    box = boxes[big - 1]
    mid = (box[0].start + box[0].stop) // 2
    pred[mid : mid + 2][comp[mid : mid + 2] == big] = False
    if len(by_size) >= 3:
        a, b = (np.array(ndimage.center_of_mass(comp == i)) for i in by_size[1:3])
        pred |= _segment(ref.shape, a, b, 1)
    for k, i in enumerate(by_size[3:] if len(by_size) >= 3 else by_size[1:]):
        one = comp == i
        pred[one] = False
        pred |= ndimage.binary_erosion(one) if k % 2 == 0 else ndimage.binary_dilation(one)
    far = ndimage.distance_transform_edt(~ref, sampling=spacing) >= 15.0
    room = np.argwhere((labels == 1) & far)
    if len(room):
        centre = room[np.random.default_rng(seed).integers(len(room))]
        grid = np.indices(ref.shape, sparse=True)
        pred |= sum(((g - c) * s) ** 2 for g, c, s in zip(grid, centre, spacing, strict=True)) <= 4.0**2
    return ref, pred
