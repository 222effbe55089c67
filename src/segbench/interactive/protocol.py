"""The CVPR 2025 interactive-segmentation protocol as pure functions (docs/interactive.md).

Box rule, click rule, per-step scores and their AUC; no files and no processes here. Volumes are
arrays in (z, y, x) order; classes are the values 1..C of the reference label map ``gts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from segbench.interactive.schema import CLICK_STEPS, PROTOCOL_VERSION, Scoring
from segbench.interactive.schema import NSD_DEFINITIONS as NSD_DEFINITIONS  # the rules' names, read as protocol.X
from segbench.interactive.schema import NSD_PROFILE as NSD_PROFILE
from segbench.interactive.schema import PROTOCOL_VERSIONS as PROTOCOL_VERSIONS
from segbench.interactive.schema import TIME_LIMIT_CLOCKS as TIME_LIMIT_CLOCKS
from segbench.scoring.engine import dice_iou
from segbench.scoring.labelmaps import nonzero_box
from segbench.scoring.profiles import get_profile

BOX_KEYS: tuple[str, ...] = ("z_min", "z_max", "z_mid", "z_mid_x_min", "z_mid_y_min", "z_mid_x_max", "z_mid_y_max")
#: the box shift s is drawn from [0, BOX_SHIFT_MAX); each side widens by int(s * size / 256)
BOX_SHIFT_MAX = 6
#: the padded EDT box is downsampled 2x (block maximum) above this many voxels
EDT_MAX_VOXELS = 60_000_000
#: the generator is re-seeded to this before every draw among the maximal-distance voxels
CLICK_SEED = 42
NSD_TOLERANCE_MM = 2.0
#: NSD is computed only when the step's mean Dice exceeds this; otherwise it is 0
NSD_DICE_FLOOR = 0.2
#: seconds per class for the model calls of a whole case
SECONDS_PER_CLASS = 90.0


def draw_box_shift(rng: np.random.RandomState) -> int:
    """One box shift s in [0, 6): the challenge's ``np.random.randint(0, 6, 1)[0]`` on a seeded legacy generator."""
    return int(rng.randint(0, BOX_SHIFT_MAX, 1)[0])


def box_of_mask(mask: np.ndarray, shift: int) -> dict[str, int]:
    """The box prompt of one class: z range of ``mask``, z_mid = middle of its sorted distinct z indices,
    and the 2D box of the mask on slice z_mid, each side widened by int(shift * size / 256), clipped."""
    z_indices = np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))
    if z_indices.size == 0:
        raise ValueError("box of an empty mask")
    z_mid = int(z_indices[len(z_indices) // 2])
    rows, cols = np.nonzero(mask[z_mid])
    height, width = mask.shape[1:]
    dy, dx = int(shift * height / 256), int(shift * width / 256)
    return {
        "z_min": int(z_indices[0]),
        "z_max": int(z_indices[-1]),
        "z_mid": z_mid,
        "z_mid_x_min": max(0, int(cols.min()) - dx),
        "z_mid_y_min": max(0, int(rows.min()) - dy),
        "z_mid_x_max": min(width - 1, int(cols.max()) + dx),
        "z_mid_y_max": min(height - 1, int(rows.max()) + dy),
    }


def boxes_of_labels(gts: np.ndarray, rng: np.random.RandomState) -> tuple[list[dict[str, int]], list[int]]:
    """The boxes of classes 1..C of ``gts`` in order, one shift drawn per class from ``rng``; and the shifts."""
    boxes, shifts = [], []
    for c in range(1, int(gts.max(initial=0)) + 1):
        shifts.append(draw_box_shift(rng))
        boxes.append(box_of_mask(gts == c, shifts[-1]))
    return boxes, shifts


@dataclass(frozen=True)
class Click:
    """One simulated click: voxel (z, y, x) and whether it is a foreground ("fg") or background ("bg") click."""

    kind: str
    zyx: tuple[int, int, int]


def largest_component(error: np.ndarray) -> np.ndarray:
    """The largest 26-connected component of a boolean mask (the first in raster order among equals,
    as the challenge's argmax over cc3d's raster-ordered labels picks it)."""
    labels, _ = ndimage.label(error, structure=np.ones((3, 3, 3), dtype=bool))
    sizes = np.bincount(labels.ravel())
    sizes[0] = 0
    return labels == int(np.argmax(sizes))


def _block_max_2x(volume: np.ndarray) -> np.ndarray:
    """2x2x2 block maximum, the volume zero-padded at its end to even sizes (skimage's block_reduce)."""
    padded = np.pad(volume, [(0, n % 2) for n in volume.shape])
    z, y, x = (n // 2 for n in padded.shape)
    return padded.reshape(z, 2, y, 2, x, 2).max(axis=(1, 3, 5))


def component_edt(component: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Euclidean distance transform (voxel units) of ``component`` on its bounding box, and the box's corner.

    Computed on the box padded by max(1, int(0.25 * size)) per axis; when the padded box exceeds
    6e7 voxels, on its 2x block-maximum and repeated back, as the challenge does. Voxels outside
    the component get 0.
    """
    box = nonzero_box(component)
    assert box is not None, "EDT of an empty component"
    crop = component[box]
    shape = np.array(crop.shape)
    pad = np.maximum((shape * 0.25).astype(int), 1)
    padded = np.zeros(tuple(shape + 2 * pad), dtype=np.uint8)
    inner = tuple(slice(int(p), int(p + n)) for p, n in zip(pad, shape, strict=True))
    padded[inner] = crop
    if padded.size > EDT_MAX_VOXELS:
        edt = ndimage.distance_transform_edt(_block_max_2x(padded))
        edt = edt.repeat(2, axis=0).repeat(2, axis=1).repeat(2, axis=2)
    else:
        edt = ndimage.distance_transform_edt(padded)
    return edt[inner] * crop, tuple(s.start for s in box)


def draw_among_maxima(values: np.ndarray) -> tuple[int, ...]:
    """A voxel of maximal value, drawn uniformly among the maxima in np.argwhere order by a generator
    seeded to 42 for this draw (the challenge's ``np.random.seed(42); np.random.choice(n)``)."""
    maxima = np.argwhere(values == values.max())
    index = np.random.RandomState(CLICK_SEED).choice(len(maxima))
    return tuple(int(v) for v in maxima[index])


def click_for_class(segs: np.ndarray, gts: np.ndarray, c: int) -> Click | None:
    """The click of class ``c`` after prediction ``segs``: None when the class has no error; else a
    voxel of maximal EDT in the largest 26-connected error component (drawn from the component itself
    when every distance is 0), foreground if the reference holds the class there, background otherwise."""
    truth = gts == c
    error = (segs == c) != truth
    if not error.any():
        return None
    component = largest_component(error)
    edt, corner = component_edt(component)
    if not edt.any():
        box = nonzero_box(component)
        edt, corner = component[box], tuple(s.start for s in box)  # type: ignore[union-attr]
    zyx = tuple(int(a + b) for a, b in zip(draw_among_maxima(edt), corner, strict=True))
    return Click("fg" if truth[zyx] else "bg", zyx)  # type: ignore[arg-type]


def step_clicks(segs: np.ndarray, gts: np.ndarray, n_classes: int) -> list[Click | None]:
    """One click (or None) per class 1..C, all classes in parallel."""
    return [click_for_class(segs, gts, c) for c in range(1, n_classes + 1)]


def class_scores(
    segs: np.ndarray, gts: np.ndarray, n_classes: int, spacing: Sequence[float], nsd_profile: str = NSD_PROFILE
) -> tuple[list[float], list[float] | None]:
    """Per-class Dice, and per-class NSD at 2 mm when the mean Dice exceeds 0.2 (None otherwise).

    Dice = 2|P∩G| / (|P| + |G|). NSD = the share of both surfaces' area within 2 mm of the other surface, at the npz
    spacing, by ``nsd_profile``'s surfaces (NSD_DEFINITIONS; ``deepmind`` is the challenge's, its
    ``compute_surface_dice_at_tolerance``); a class the prediction misses has NSD 0, as the challenge's script gives it.
    """
    dice, masks = [], []
    for c in range(1, n_classes + 1):
        pred, ref = segs == c, gts == c
        dice.append(dice_iou(pred, ref)[0])
        masks.append((pred, ref))
    if float(np.mean(dice)) <= NSD_DICE_FLOOR:
        return dice, None
    profile = get_profile(nsd_profile)
    nsd = []
    spacing = tuple(float(s) for s in spacing)
    for pred, ref in masks:
        if not pred.any():
            nsd.append(0.0)
            continue
        box = nonzero_box(pred, ref)
        sd = profile.measure(pred[box], ref[box], spacing)  # type: ignore[arg-type]
        nsd.append(profile.metrics(sd, NSD_TOLERANCE_MM)["nsd"])
    return dice, nsd


def auc(values: Sequence[float], version: str = PROTOCOL_VERSION, box_step: bool = True) -> float:
    """Trapezoid area of a case's 6 step values under ``version``'s rule (PROTOCOL_VERSIONS): the last 5 (the click
    steps) at x = 0..4; under 2025-03-04, all 6 at x = 0..5 when the case had its ``box_step``."""
    Scoring(version)  # validates it
    y = np.asarray(values[-CLICK_STEPS:] if version == "2025-03-25" or not box_step else values, dtype=float)
    return float(np.sum((y[1:] + y[:-1]) / 2.0))


#: on the cpu clock a call is stopped as well once it has run this many times the case's remaining budget in wall
#: seconds: a model that sleeps or waits spends no CPU, and must not hang the run
CPU_CLOCK_WALL_FACTOR = 10.0


def time_limit(n_classes: int, seconds_per_class: float = SECONDS_PER_CLASS) -> float:
    """The case's budget for all its model calls."""
    return seconds_per_class * n_classes
