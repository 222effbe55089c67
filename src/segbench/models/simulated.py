"""Simulated models: seeded, realistic error models applied to the reference label map.

SIMULATED, NOT REAL MODELS. They exist so the whole pipeline (predict -> score -> compare -> report)
runs on real reference data without a GPU, and so the statistics can be checked against errors of
known, graded severity. Every run they produce is tagged ``segbench.kind=simulated``.

Run as the model's own subprocess, exactly like a real adapter::

    python -m segbench.models.simulated --input labels/ --output out/ --cases cases.txt \
        --boundary-mm 1.0 --seed 0

Error components (all in world millimetres, seeded per case from ``--seed`` and the case id, so a
case's prediction does not depend on which other cases run):
- ``--boundary-mm D``: every structure's boundary displaced outward by D mm (inward if D < 0), with
  a per-case jitter of +-``--jitter`` x D. The displacement reaches at least one voxel layer: its
  distance threshold is max(|D|, the case's finest voxel spacing) mm with D's sign. Without that
  floor a move of 0.75-1.25 mm on a 0.8 mm grid or coarser flips no voxel (the nearest voxel
  centre across the boundary is one spacing away) and the "model" returns the reference unchanged;
- ``--shift-mm S``: the whole prediction translated by S mm in a random direction, rounded to whole
  voxels per axis; when every per-axis offset rounds to 0 it moves one voxel along the axis with
  the largest |direction / spacing| component (the direction's sign);
- ``--miss-lesion-prob P``: with probability P the largest tumor component is missed (read as kidney);
- ``--blob-prob P --blob-radius-mm R``: with probability P a spurious sphere of radius R mm labelled
  tumor is added next to the kidney.

A model changes every case it claims to change (a boundary move or shift, a missed lesion or a blob
drawn for the case); a case that really cannot change (an empty label map, no tumor to miss) is
named on stderr in a warning. How many cases each model left identical to the reference is counted
downstream from the scores (``segbench.stats.identical_to_reference``), not here.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numba
import numpy as np
from scipy import ndimage

from segbench.base.io import save_label_map_atomic
from segbench.models.schema import simulated_parser
from segbench.scoring.labelmaps import load_nifti, nonzero_box

KIDNEY, TUMOR = 1, 2


def case_rng(seed: int, case_id: str) -> np.random.Generator:
    """A generator seeded by (seed, case id): stable whatever the order cases are processed in."""
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _bbox(mask: np.ndarray, margin: tuple[int, ...]) -> tuple[slice, ...]:
    """Bounding box of ``mask`` grown by ``margin`` voxels per axis, clipped to the array."""
    slices = []
    for axis in range(mask.ndim):
        others = tuple(a for a in range(mask.ndim) if a != axis)
        hits = np.flatnonzero(mask.any(axis=others))
        lo = max(int(hits[0]) - margin[axis], 0)
        hi = min(int(hits[-1]) + margin[axis] + 1, mask.shape[axis])
        slices.append(slice(lo, hi))
    return tuple(slices)


def _boxes(mask: np.ndarray, margin: tuple[int, ...]) -> list[tuple[slice, slice, slice]]:
    """Bounding boxes of the parts of ``mask`` separated by an empty gap of > 2 margins along the last axis.

    Left and right kidneys fall into separate boxes, so distance transforms never run over the
    empty space between them.
    """
    columns = np.flatnonzero(mask.any(axis=(0, 1)))
    breaks = np.flatnonzero(np.diff(columns) > 2 * margin[2] + 1)
    boxes = []
    for part in np.split(columns, breaks + 1):
        cols = slice(part[0], part[-1] + 1)
        box = _bbox(mask[:, :, cols], margin)
        lo = max(part[0] - margin[2], 0)
        hi = min(part[-1] + margin[2] + 1, mask.shape[2])
        boxes.append((box[0], box[1], slice(lo, hi)))
    return boxes


def effective_mm(mm: float, spacing: tuple[float, ...]) -> float:
    """The distance threshold a boundary move of ``mm`` uses: max(|mm|, finest voxel spacing) in world mm, with mm's sign.

    Voxel centres across a boundary are at least one spacing apart, so a smaller threshold moves no voxel: the floor
    makes every non-zero move reach at least one voxel layer (the floor has a relative slack of 1e-6, so that a distance
    transform's rounding of exactly one spacing stays within it). 0 stays 0 (no move).
    """
    return 0.0 if mm == 0 else float(np.copysign(max(abs(mm), min(spacing) * (1.0 + 1e-6)), mm))


def displace_boundary(labels: np.ndarray, spacing: tuple[float, ...], mm: float) -> np.ndarray:
    """Move every structure's boundary by ``mm`` millimetres (outward > 0, inward < 0), in world space.

    The threshold is :func:`effective_mm`: max(|mm|, the finest voxel spacing) mm with mm's sign, so that a non-zero
    move always reaches at least one voxel layer. Outward: a background voxel within that distance of the foreground
    takes the label of its nearest foreground voxel (scipy's feature transform). Inward: a foreground voxel within that
    distance of the background becomes background (a voxel beyond the array's edge is not background, as in a distance
    transform), found by looking for background at the :func:`ball_offsets` of each foreground voxel, nearest first: the
    voxels a distance transform puts within reach, faster (timed: benchmarks/README.md). Work is done inside the foreground's bounding boxes plus
    the displacement.
    """
    found = nonzero_box(labels)
    if mm == 0 or found is None:
        return labels.copy(order="K")
    mm = effective_mm(mm, spacing)
    margin = _margin(spacing, mm)
    box = tuple(slice(max(b.start - m, 0), min(b.stop + m, n)) for b, m, n in zip(found, margin, labels.shape, strict=True))
    crop, out = labels[box], labels.copy(order="K")
    foreground = crop > 0
    if not foreground.any():
        return out
    if mm < 0:
        out[box] = np.where(_kept(np.ascontiguousarray(foreground), ball_offsets(spacing, -mm)), crop, 0)
        return out
    for part in _boxes(foreground, margin):
        nearest = ndimage.distance_transform_edt(crop[part] == 0, sampling=spacing, return_distances=False, return_indices=True)
        _grow(crop[part], nearest, *(float(s) for s in spacing), mm, out[box][part])  # type: ignore[call-arg, arg-type]  # a numba dispatcher: mypy sees no signature
    return out


@numba.njit(cache=True, nogil=True)
def _grow(crop: np.ndarray, nearest: np.ndarray, s0: float, s1: float, s2: float, mm: float, out: np.ndarray) -> None:
    """``out = where(distance <= mm, crop[nearest], 0)``: each voxel takes the label of its nearest foreground voxel
    (``nearest``: scipy's feature transform) when it is within ``mm``, in one pass instead of scipy's distance map and
    a gather (faster; timed: benchmarks/README.md). The distance is scipy's ``distance_transform_edt`` arithmetic,
    sqrt(((d0 s0)^2 + (d1 s1)^2) + (d2 s2)^2), so the same voxels move."""
    n0, n1, n2 = crop.shape
    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                a, b, c = nearest[0, i, j, k], nearest[1, i, j, k], nearest[2, i, j, k]
                d0, d1, d2 = np.float64(a - i) * s0, np.float64(b - j) * s1, np.float64(c - k) * s2
                out[i, j, k] = crop[a, b, c] if np.sqrt(d0 * d0 + d1 * d1 + d2 * d2) <= mm else 0


def _margin(spacing: tuple[float, ...], mm: float) -> tuple[int, ...]:
    return tuple(int(np.ceil(abs(mm) / s)) + 1 for s in spacing)


def ball_offsets(spacing: tuple[float, ...], mm: float) -> np.ndarray:
    """The non-zero voxel offsets within ``mm`` world millimetres, nearest first, shape (n, 3). The distance is
    scipy's ``distance_transform_edt`` arithmetic, sqrt(((d0 s0)^2 + (d1 s1)^2) + (d2 s2)^2), so a voxel has a
    background voxel at one of these offsets exactly when the distance transform puts it within ``mm``."""
    reach = [np.arange(-int(mm // s) - 1, int(mm // s) + 2) for s in spacing]  # one step more: the distance decides
    d = np.stack(np.meshgrid(*reach, indexing="ij"), axis=-1).reshape(-1, 3)
    w = d * np.asarray(spacing, dtype=np.float64)
    dist = np.sqrt((w[:, 0] * w[:, 0] + w[:, 1] * w[:, 1]) + w[:, 2] * w[:, 2])
    inside = (dist <= mm) & d.any(axis=1)
    return np.ascontiguousarray(d[inside][np.argsort(dist[inside], kind="stable")], dtype=np.int64)


@numba.njit("b1[:, :, ::1](b1[:, :, ::1], i8[:, ::1])", cache=True, nogil=True)
def _kept(foreground: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The foreground voxels with no background voxel (inside the array) at any of ``offsets``."""
    n0, n1, n2 = foreground.shape
    kept = np.zeros_like(foreground)
    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                if not foreground[i, j, k]:
                    continue
                keep = True
                for o in range(len(offsets)):
                    a, b, c = i + offsets[o, 0], j + offsets[o, 1], k + offsets[o, 2]
                    if 0 <= a < n0 and 0 <= b < n1 and 0 <= c < n2 and not foreground[a, b, c]:
                        keep = False
                        break
                kept[i, j, k] = keep
    return kept


def shift(labels: np.ndarray, spacing: tuple[float, ...], mm: float, rng: np.random.Generator) -> np.ndarray:
    """Translate the label map by ``mm`` world millimetres in a random direction (rounded to whole voxels per axis).

    When every per-axis offset rounds to 0 (``mm`` below about half the spacing), the map moves by one voxel along the
    axis with the largest |direction / spacing| component, in that component's direction: a non-zero shift always moves.
    """
    direction = rng.normal(size=3)
    direction /= np.linalg.norm(direction)
    steps = direction * mm / np.asarray(spacing)
    offsets = np.round(steps).astype(int)
    if mm and not offsets.any():
        axis = int(np.argmax(np.abs(steps)))
        offsets[axis] = 1 if steps[axis] > 0 else -1
    out = np.zeros_like(labels)
    target = tuple(slice(max(o, 0), n + min(o, 0)) for o, n in zip(offsets, labels.shape))
    source = tuple(slice(max(-o, 0), n - max(o, 0)) for o, n in zip(offsets, labels.shape))
    out[target] = labels[source]
    return out


def miss_largest_lesion(labels: np.ndarray) -> np.ndarray:
    """Relabel the largest tumor component as kidney: the lesion is missed, the organ is not."""
    tumor = labels == TUMOR
    out = labels.copy(order="K")
    if not tumor.any():
        return out
    box = _bbox(tumor, (1, 1, 1))
    components, _ = ndimage.label(tumor[box])
    sizes = np.bincount(components.ravel())[1:]
    out[box][components == int(np.argmax(sizes)) + 1] = KIDNEY
    return out


def add_blob(labels: np.ndarray, spacing: tuple[float, ...], radius_mm: float, rng: np.random.Generator) -> np.ndarray:
    """Add a spurious tumor-labelled sphere of ``radius_mm`` just outside the kidney's bounding box."""
    kidney = labels > 0
    if not kidney.any():
        return labels.copy(order="K")
    box = _bbox(kidney, (0, 0, 0))
    spacing_arr = np.asarray(spacing)
    radius_vox = np.ceil(radius_mm / spacing_arr).astype(int)
    # centre: one radius beyond a randomly chosen face of the box along a random in-plane axis
    axis = int(rng.integers(1, 3))
    side = int(rng.integers(0, 2))
    centre = np.array([(s.start + s.stop) // 2 for s in box])
    edge = box[axis].stop + radius_vox[axis] if side else box[axis].start - radius_vox[axis]
    centre[axis] = int(np.clip(edge, 0, labels.shape[axis] - 1))
    lo = np.maximum(centre - radius_vox, 0)
    hi = np.minimum(centre + radius_vox + 1, labels.shape)
    grid = np.ogrid[tuple(slice(a, b) for a, b in zip(lo, hi))]
    dist2 = sum(((g - c) * s) ** 2 for g, c, s in zip(grid, centre, spacing_arr))
    out = labels.copy(order="K")
    region = out[tuple(slice(a, b) for a, b in zip(lo, hi))]
    region[(dist2 <= radius_mm**2) & (region == 0)] = TUMOR
    return out


def simulate(labels: np.ndarray, spacing: tuple[float, ...], case_id: str, args: argparse.Namespace) -> np.ndarray:
    """Apply the configured error components to one reference label map.

    The boundary move is the jittered ``--boundary-mm`` with :func:`displace_boundary`'s one-voxel floor. When a
    component was applied (a boundary move or shift, a missed lesion or blob drawn for the case) and the result still
    equals the reference (e.g. an empty label map), a warning naming the case goes to stderr.
    """
    rng = case_rng(args.seed, case_id)
    out = labels
    claimed = bool(args.boundary_mm or args.shift_mm)
    if args.boundary_mm:
        jitter = 1.0 + args.jitter * rng.uniform(-1.0, 1.0)
        out = displace_boundary(out, spacing, args.boundary_mm * jitter)
    if args.shift_mm:
        out = shift(out, spacing, args.shift_mm, rng)
    if args.miss_lesion_prob and rng.uniform() < args.miss_lesion_prob:
        out, claimed = miss_largest_lesion(out), True
    if args.blob_prob and rng.uniform() < args.blob_prob:
        out, claimed = add_blob(out, spacing, args.blob_radius_mm, rng), True
    if claimed and np.array_equal(out, labels):
        print(
            f"[simulated model] warning: {case_id}: the prediction equals the reference (nothing to change: "
            f"{'empty label map' if not labels.any() else 'no voxel moved'})",
            file=sys.stderr,
            flush=True,
        )
    return out


def predict_case(case_id: str, args: argparse.Namespace) -> str:
    """Write the simulated prediction of one case; returns the case id."""
    labels, image = load_nifti(args.input / f"{case_id}.nii.gz")
    spacing = tuple(float(z) for z in image.header.get_zooms()[:3])
    save_label_map_atomic(args.output / f"{case_id}.nii.gz", simulate(labels, spacing, case_id, args), image)
    return case_id


def predict_models(case_id: str, reference: Path, models: dict[str, list[str]], output: Path) -> dict[str, Path]:
    """Write ``output/<model>/<case>.nii`` for several simulated models (name -> command-line options) of one case.

    The reference is decoded once; each model's map equals :func:`simulate`'s. Uncompressed: scratch files for the
    calibration audit, scored at once and deleted. Returns model -> file.
    """
    labels, image = load_nifti(reference)
    spacing = tuple(float(z) for z in image.header.get_zooms()[:3])
    parsed = {name: simulated_parser().parse_args(["--input", ".", "--output", ".", "--cases", ".", *options]) for name, options in models.items()}
    written = {}
    for name, args in parsed.items():
        written[name] = output / name / f"{case_id}.nii"
        save_label_map_atomic(written[name], simulate(labels, spacing, case_id, args), image)
    return written


def main(argv: list[str] | None = None) -> int:
    args = simulated_parser().parse_args(argv)
    cases = [c.strip() for c in args.cases.read_text(encoding="utf-8").splitlines() if c.strip()]
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        jobs = [pool.submit(predict_case, case_id, args) for case_id in cases]
        for done, job in enumerate(as_completed(jobs), start=1):
            print(f"[simulated model] {job.result()} ({done}/{len(cases)})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
