"""Simulated predictions from real KiTS23 label maps (0 bg, 1 kidney, 2 tumor, 3 cyst).

Each kind is a typical or a gross segmentation error, made from the reference itself so the
expected behaviour is known: boundary errors (dilate, erode, shift), lesion-level errors (a lesion
removed, a spurious lesion added) and gross errors (a whole kidney missed, an organ-sized blob).
Shared by tests/scoring/test_scoring_vs_segauge.py and benchmarks/bench_scoring.py.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

KINDS: tuple[str, ...] = ("dilate", "erode", "shift", "lesion_removed", "spurious_lesion")
GROSS_KINDS: tuple[str, ...] = ("missed_kidney", "spurious_organ")


def _ball(shape: tuple[int, ...], center: np.ndarray, radii_vox: np.ndarray) -> np.ndarray:
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum(((g - c) / r) ** 2 for g, c, r in zip(grid, center, radii_vox, strict=True)) <= 1.0


def simulate(labels: np.ndarray, spacing: tuple[float, ...], kind: str) -> np.ndarray:
    """Return a prediction label map of the given kind made from the reference ``labels``."""
    pred = labels.copy()
    fg = labels > 0
    if kind == "dilate":  # one voxel outward, new voxels are kidney
        pred[ndimage.binary_dilation(fg) & ~fg] = 1
    elif kind == "erode":  # one voxel inward
        pred[fg & ~ndimage.binary_erosion(fg)] = 0
    elif kind == "shift":  # two voxels along the columns, one along the rows
        pred = np.roll(np.roll(labels, 2, axis=2), 1, axis=1)
    elif kind == "lesion_removed":  # the smallest tumour component becomes kidney
        comp, n = ndimage.label(labels == 2)
        if n:
            sizes = np.bincount(comp.ravel())[1:]
            pred[comp == 1 + int(np.argmin(sizes))] = 1
    elif kind == "spurious_lesion":  # a ~10 mm tumour-labelled blob on the kidney surface
        edge = np.argwhere(fg & ~ndimage.binary_erosion(fg))
        center = edge[len(edge) // 2]
        pred[_ball(labels.shape, center, 5.0 / np.asarray(spacing))] = 2
    elif kind == "missed_kidney":  # the largest connected kidney+mass component is absent
        comp, n = ndimage.label(fg)
        sizes = np.bincount(comp.ravel())[1:]
        pred[comp == 1 + int(np.argmax(sizes))] = 0
    elif kind == "spurious_organ":  # a 120 x 80 x 80 mm kidney-labelled ellipsoid far from the kidneys
        center = np.array(labels.shape) // 2
        center[1] = labels.shape[1] // 5  # anterior, away from the retroperitoneum
        pred[_ball(labels.shape, center, np.array([60.0, 40.0, 40.0]) / np.asarray(spacing)) & ~fg] = 1
    else:
        raise ValueError(f"unknown simulation kind {kind!r}")
    return pred
