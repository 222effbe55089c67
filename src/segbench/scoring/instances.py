"""Lesion-wise (instance-wise) scoring: connected components, matching rules and per-lesion metrics (docs/scoring.md#lesion-wise-scoring).

One binary mask per structure (KiTS tumor, cyst) is split into instances, the reference instances
are matched with the prediction instances under a rule, and each reference instance (matched or
missed) and each unmatched prediction instance becomes a row of a table; the case's scores (RQ, SQ,
PQ, detection precision/recall/F1, BraTS-style lesion-wise Dice/HD95, FP/FN volumes, recall by
lesion-volume stratum) are reductions of that table. The rules and their edge cases are those of
panoptica 2.1.7 and brats-evaluation 0.0.10 (tested against both, tests/scoring/test_instances.py) and of
the BraTS 2023 lesion-wise script (dilation and merge; hand-built cases only: no package ships it).

Everything that only needs voxel counts (Dice, IoU, every matching score) comes from one overlap
table of the two label maps (one pass counting paired labels, which also gives each instance's box);
surface distances are measured per matched pair inside the pair's own bounding box, by the engine's
surface functions (``profiles``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd
from scipy import ndimage
from scipy.optimize import linear_sum_assignment
from segauge.metrics.distance import SurfaceDistances

from segbench.base.metrics import REGION, directions, names
from segbench.scoring.labelmaps import nonzero_box
from segbench.scoring.profiles import Profile, Spacing, edge_voxel_distances, get_profile

#: Connectivity (neighbours of a voxel) -> the earlier lines (raster order) a run of voxels along the last axis
#: can touch, as (axis-0 step, axis-1 step, reach along the last axis: 1 if diagonal neighbours count there).
CONNECTIVITY: dict[int, np.ndarray] = {
    6: np.array([[0, -1, 0], [-1, 0, 0]]),
    18: np.array([[0, -1, 1], [-1, 0, 1], [-1, -1, 0], [-1, 1, 0]]),
    26: np.array([[0, -1, 1], [-1, 0, 1], [-1, -1, 1], [-1, 1, 1]]),
}
MATCHING_METRICS: tuple[str, ...] = ("iou", "dice")
#: a lesion's metrics: a region's (``segbench.base.metrics.TABLE``)
INSTANCE_METRICS: tuple[str, ...] = names(REGION)
#: Margin (voxels) of a pair's box: the array's edge never touches a mask whose surface is measured.
BOX_MARGIN = 2
TABLE_COLUMNS: tuple[str, ...] = ("status", "reference_id", "prediction_ids", "reference_volume_ml", "prediction_volume_ml", *INSTANCE_METRICS)


def check_pair(reference: np.ndarray, prediction: np.ndarray, spacing: Sequence[float]) -> tuple[np.ndarray, np.ndarray, Spacing]:
    """Boolean copies of two binary 3-D masks and the spacing as floats; an error naming what is wrong
    (shape, dimensions, non-binary values, spacing) otherwise."""
    masks = []
    for name, mask in (("reference", reference), ("prediction", prediction)):
        mask = np.asarray(mask)
        if mask.ndim != 3:
            raise ValueError(f"{name} mask: expected 3 dimensions, got shape {mask.shape}")
        if mask.dtype != np.bool_:
            values = np.unique(mask)
            if not np.isin(values, (0, 1)).all():
                raise ValueError(f"{name} mask is not binary: values {values[~np.isin(values, (0, 1))][:5].tolist()} besides 0 and 1")
        masks.append(mask.astype(bool, copy=False))
    if masks[0].shape != masks[1].shape:
        raise ValueError(f"reference shape {masks[0].shape} != prediction shape {masks[1].shape}")
    if spacing is None or len(spacing) != 3 or not all(math.isfinite(s) and s > 0 for s in spacing):
        raise ValueError(f"spacing must be 3 positive finite voxel sizes (mm, array order), got {spacing!r}")
    return masks[0], masks[1], (float(spacing[0]), float(spacing[1]), float(spacing[2]))


def label_components(mask: np.ndarray, connectivity: int = 26) -> tuple[np.ndarray, int]:
    """Connected components of a boolean mask (labels 1..n in raster order of their first voxel, 0
    outside: ``scipy.ndimage.label``'s labels) and n; ``connectivity``: 6 (faces), 18 (faces and
    edges) or 26 (and corners)."""
    if connectivity not in CONNECTIVITY:
        raise ValueError(f"connectivity must be one of {sorted(CONNECTIVITY)}, got {connectivity!r}")
    labels, n = _label_runs(np.ascontiguousarray(mask, dtype=np.bool_), CONNECTIVITY[connectivity])
    return labels, int(n)


@numba.njit(inline="always")
def _root(parent: np.ndarray, r: int) -> int:
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


# explicit signatures: compiled at import, as profiles._edge_voxels says why
@numba.njit("Tuple((i4[:, :, ::1], i8))(b1[:, :, ::1], i8[:, ::1])", cache=True, nogil=True)
def _label_runs(mask: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, int]:
    """``label_components`` by runs: the runs of voxels along the last axis, each joined (union-find,
    the earliest run the root) with the overlapping runs of the earlier lines ``steps`` names, then
    numbered in the order of their components' first runs (faster than scipy's label, which visits
    every neighbour of every voxel; timed: benchmarks/README.md)."""
    n0, n1, n2 = mask.shape
    n_runs = 0
    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                if mask[i, j, k] and (k == 0 or not mask[i, j, k - 1]):
                    n_runs += 1
    start, stop = np.empty(n_runs, dtype=np.int64), np.empty(n_runs, dtype=np.int64)
    first = np.empty(n0 * n1 + 1, dtype=np.int64)  # runs of line (i, j): first[i n1 + j] to first[i n1 + j + 1]
    r = 0
    for i in range(n0):
        for j in range(n1):
            first[i * n1 + j] = r
            for k in range(n2):
                if mask[i, j, k] and (k == 0 or not mask[i, j, k - 1]):
                    start[r] = k
                if mask[i, j, k] and (k == n2 - 1 or not mask[i, j, k + 1]):
                    stop[r] = k + 1
                    r += 1
    first[n0 * n1] = r
    parent = np.arange(n_runs)
    for i in range(n0):
        for j in range(n1):
            a0, a_end = first[i * n1 + j], first[i * n1 + j + 1]
            if a0 == a_end:
                continue
            for s in range(len(steps)):
                i2, j2, reach = i + steps[s, 0], j + steps[s, 1], steps[s, 2]
                if i2 < 0 or j2 < 0 or j2 >= n1:
                    continue
                a, b, b_end = a0, first[i2 * n1 + j2], first[i2 * n1 + j2 + 1]
                while a < a_end and b < b_end:
                    if start[b] < stop[a] + reach and start[a] < stop[b] + reach:
                        ra, rb = _root(parent, a), _root(parent, b)
                        parent[max(ra, rb)] = min(ra, rb)
                    if stop[a] < stop[b]:
                        a += 1
                    else:
                        b += 1
    labels = np.zeros(mask.shape, dtype=np.int32)
    number = np.empty(n_runs, dtype=np.int32)
    n = 0
    for i in range(n0):
        for j in range(n1):
            for r in range(first[i * n1 + j], first[i * n1 + j + 1]):
                root = _root(parent, r)
                if root == r:
                    n += 1
                    number[r] = n
                else:
                    number[r] = number[root]
                labels[i, j, start[r] : stop[r]] = number[r]
    return labels, n


@dataclass(frozen=True)
class Overlap:
    """Voxel counts of two instance label maps: ``ref_voxels[r]`` and ``pred_voxels[p]`` (index 0:
    background) and ``shared[p, r]``, the voxels prediction instance p and reference instance r share;
    ``ref_box[r]`` and ``pred_box[p]``: each instance's bounding box (first voxel per axis, then one
    past the last)."""

    ref_voxels: np.ndarray
    pred_voxels: np.ndarray
    shared: np.ndarray
    ref_box: np.ndarray
    pred_box: np.ndarray

    def score(self, metric: str) -> np.ndarray:
        """IoU or Dice of every (prediction, reference) pair, as panoptica computes them (float64 from
        the integer counts), shape ``shared.shape``."""
        inter = self.shared.astype(np.float64)
        sizes = self.ref_voxels[None, :].astype(np.float64) + self.pred_voxels[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            if metric == "iou":
                return inter / (sizes - inter)
            if metric == "dice":
                return 2.0 * inter / sizes
        raise ValueError(f"matching metric must be one of {MATCHING_METRICS}, got {metric!r}")

    def ranked_pairs(self, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction ids, reference ids, scores) of the pairs sharing a voxel, best score first;
        equal scores in ascending (prediction, reference) order (panoptica's stable sort)."""
        p, r = np.nonzero(self.shared[1:, 1:])
        p, r = p + 1, r + 1
        s = self.score(metric)[p, r]
        order = np.argsort(-s, kind="stable")
        return p[order], r[order], s[order]

    def union_score(self, metric: str, preds: Sequence[int], ref: int) -> float:
        """IoU or Dice of reference instance ``ref`` with the union of prediction instances ``preds``
        (disjoint, so their counts add)."""
        inter = int(self.shared[list(preds), ref].sum())
        size = int(self.ref_voxels[ref]) + int(self.pred_voxels[list(preds)].sum())
        return inter / (size - inter) if metric == "iou" else 2 * inter / size


def overlap_table(ref_labels: np.ndarray, n_ref: int, pred_labels: np.ndarray, n_pred: int) -> Overlap:
    """The ``Overlap`` of two label maps from one pass over them (``_count_pairs``)."""
    as_int32 = (np.ascontiguousarray(a, dtype=np.int32) for a in (ref_labels, pred_labels))
    counts, ref_box, pred_box = _count_pairs(next(as_int32), n_ref, next(as_int32), n_pred)
    return Overlap(ref_voxels=counts.sum(axis=0), pred_voxels=counts.sum(axis=1), shared=counts, ref_box=ref_box, pred_box=pred_box)


@numba.njit(inline="always")
def _grow(box: np.ndarray, label: int, i: int, j: int, k: int) -> None:
    box[label, 0], box[label, 3] = min(box[label, 0], i), max(box[label, 3], i + 1)
    box[label, 1], box[label, 4] = min(box[label, 1], j), max(box[label, 4], j + 1)
    box[label, 2], box[label, 5] = min(box[label, 2], k), max(box[label, 5], k + 1)


@numba.njit("Tuple((i8[:, ::1], i8[:, ::1], i8[:, ::1]))(i4[:, :, ::1], i8, i4[:, :, ::1], i8)", cache=True, nogil=True)
def _count_pairs(ref_labels: np.ndarray, n_ref: int, pred_labels: np.ndarray, n_pred: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Voxels per (prediction, reference) label pair and each label's box, in one pass (numpy's
    bincount of paired labels and scipy's find_objects on both maps took 4x longer)."""
    counts = np.zeros((n_pred + 1, n_ref + 1), dtype=np.int64)
    ref_box, pred_box = np.empty((n_ref + 1, 6), dtype=np.int64), np.empty((n_pred + 1, 6), dtype=np.int64)
    ref_box[:, :3], pred_box[:, :3] = np.iinfo(np.int64).max, np.iinfo(np.int64).max
    ref_box[:, 3:], pred_box[:, 3:] = -1, -1
    n0, n1, n2 = ref_labels.shape
    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                r, p = ref_labels[i, j, k], pred_labels[i, j, k]
                counts[p, r] += 1
                if r:
                    _grow(ref_box, r, i, j, k)
                if p:
                    _grow(pred_box, p, i, j, k)
    return counts, ref_box, pred_box


@dataclass(frozen=True)
class Matching:
    """The prediction instances each reference instance is matched with (``preds[r - 1]``, ascending;
    empty: a false negative), and the prediction instances matched with none (false positives).

    A reference instance with several predictions (one-to-many: a split lesion) is scored against
    their union; a prediction appearing under several references (many-to-one: a merged lesion) only
    happens with the dilation rule, and then counts toward each of them."""

    preds: tuple[tuple[int, ...], ...]
    unmatched: tuple[int, ...]

    @property
    def tp(self) -> int:
        return sum(1 for p in self.preds if p)


def _beats(score: float, threshold: float, strict: bool) -> bool:
    return score > threshold if strict else score >= threshold


def _matching(n_ref: int, n_pred: int, pred_to_ref: dict[int, int]) -> Matching:
    preds: list[list[int]] = [[] for _ in range(n_ref)]
    for p, r in sorted(pred_to_ref.items()):
        preds[r - 1].append(p)
    return Matching(tuple(tuple(p) for p in preds), tuple(p for p in range(1, n_pred + 1) if p not in pred_to_ref))


def match_naive(ov: Overlap, metric: str = "iou", threshold: float = 0.5, many_to_one: bool = False, strict: bool = False) -> Matching:
    """panoptica's ``NaiveThresholdMatching``: overlapping pairs best score first; a pair is matched
    if its score reaches ``threshold`` (exceeds it if ``strict``) and its prediction is unmatched and,
    unless ``many_to_one``, its reference too. With ``many_to_one`` a reference collects every
    prediction that reaches the threshold with it (one-to-many, scored as their union); a prediction
    never goes to two references."""
    pred_to_ref: dict[int, int] = {}
    for p, r, s in zip(*ov.ranked_pairs(metric), strict=True):
        if p in pred_to_ref or (not many_to_one and r in pred_to_ref.values()):
            continue
        if _beats(s, threshold, strict):
            pred_to_ref[int(p)] = int(r)
    return _matching(len(ov.ref_voxels) - 1, len(ov.pred_voxels) - 1, pred_to_ref)


def match_bipartite(ov: Overlap, metric: str = "dice", threshold: float = 1e-6, strict: bool = False) -> Matching:
    """panoptica's ``MaxBipartiteMatching`` (brats-evaluation's rule): one-to-one, maximising the sum
    of the scores of the pairs that reach ``threshold`` (``linear_sum_assignment`` on 1 - score, and
    1 + 1e-6 for every other pair, which is never kept)."""
    n_ref, n_pred = len(ov.ref_voxels) - 1, len(ov.pred_voxels) - 1
    if n_ref == 0 or n_pred == 0:
        return _matching(n_ref, n_pred, {})
    score = ov.score(metric)[1:, 1:].T
    passing = (ov.shared[1:, 1:].T > 0) & (score > threshold if strict else score >= threshold)
    cost = np.where(passing, 1.0 - score, 1.0 + 1e-6)
    rows, cols = linear_sum_assignment(cost)
    return _matching(n_ref, n_pred, {int(c) + 1: int(r) + 1 for r, c in zip(rows, cols, strict=True) if cost[r, c] < 1.0})


def match_merge(ov: Overlap, metric: str = "iou", threshold: float = 0.5, strict: bool = False) -> Matching:
    """panoptica's ``MaximizeMergeMatching``: overlapping pairs best score first; an unmatched
    prediction joins an already matched reference if the reference's score with the union of its
    predictions and this one is higher than its score so far (one-to-many: a split lesion is merged
    back), and an unmatched reference takes it if the pair's score reaches ``threshold``. A
    prediction never goes to two references."""
    pred_to_ref: dict[int, int] = {}
    best: dict[int, float] = {}
    for p, r, s in zip(*ov.ranked_pairs(metric), strict=True):
        p, r = int(p), int(r)
        if p in pred_to_ref:
            continue
        if r in best:
            union = ov.union_score(metric, [q for q, t in pred_to_ref.items() if t == r] + [p], r)
            if union > best[r]:
                pred_to_ref[p], best[r] = r, union
        elif _beats(s, threshold, strict):
            pred_to_ref[p], best[r] = r, float(s)
    return _matching(len(ov.ref_voxels) - 1, len(ov.pred_voxels) - 1, pred_to_ref)


def _padded(box: tuple[slice, ...], margin: int, shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(max(b.start - margin, 0), min(b.stop + margin, n)) for b, n in zip(box, shape, strict=True))


def match_dilation(ref_mask: np.ndarray, pred_labels: np.ndarray, n_pred: int, iterations: int) -> tuple[np.ndarray, int, Matching]:
    """The BraTS 2023 lesion-wise rule: the reference mask is dilated ``iterations`` times by the
    18-neighbour element and reference components (26-connected) lying in one component of that
    dilation are merged into one lesion; each lesion, dilated alone the same way, claims every
    prediction instance it touches. Returns the merged reference labels, their number and the
    matching. A prediction touching two lesions' dilations counts for both (many-to-one); a lesion
    claiming several predictions is scored against their union (one-to-many).

    The dilations run on the reference's box grown by ``iterations`` (nothing reaches further), whose raster order
    numbers the components as the whole array's would."""
    element = ndimage.generate_binary_structure(3, 2)
    box = nonzero_box(ref_mask)
    if box is None:
        return np.zeros(ref_mask.shape, dtype=np.int32), 0, Matching((), tuple(range(1, n_pred + 1)))
    box = _padded(box, iterations, ref_mask.shape)
    ref_crop, pred_crop = ref_mask[box], pred_labels[box]
    dilated, n_ref = label_components(ndimage.binary_dilation(ref_crop, element, iterations=iterations), 26)
    ref_labels = np.zeros(ref_mask.shape, dtype=dilated.dtype)
    ref_labels[box] = np.where(ref_crop, dilated, 0)
    preds: list[tuple[int, ...]] = []
    for r, lesion in enumerate(ndimage.find_objects(ref_labels[box]), start=1):
        lesion = _padded(lesion, iterations, ref_crop.shape)
        reach = ndimage.binary_dilation(ref_labels[box][lesion] == r, element, iterations=iterations)
        touched = np.unique(pred_crop[lesion][reach])
        preds.append(tuple(int(p) for p in touched if p))
    claimed = {p for ps in preds for p in ps}
    return ref_labels, n_ref, Matching(tuple(preds), tuple(p for p in range(1, n_pred + 1) if p not in claimed))


def panoptica_surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: Spacing) -> SurfaceDistances:
    """panoptica's surface distances: the edge-voxel distances (``profiles.edge_voxel_distances``) in
    float64, each voxel weight 1."""
    d_pg, d_gp = edge_voxel_distances(pred, ref, spacing)
    return SurfaceDistances(d_pg=d_pg, w_pg=np.ones(len(d_pg)), d_gp=d_gp, w_gp=np.ones(len(d_gp)))


def panoptica_metrics(sd: SurfaceDistances, nsd_tolerance: float) -> dict[str, float]:
    """hd, hd95, assd, masd and nsd by panoptica's formulas: HD95 the linear 95th percentile of both
    directions pooled (``np.percentile``); panoptica's "ASSD" is the mean of the two directed means,
    here ``masd`` (``assd`` is the pooled mean, as everywhere in segbench); NSD the mean of the two
    directions' shares within the tolerance (its GaNDLF formula)."""
    both = np.concatenate([sd.d_gp, sd.d_pg])
    a, b = len(sd.d_gp), len(sd.d_pg)
    tp_a, tp_b = np.sum(sd.d_gp <= nsd_tolerance) / a, np.sum(sd.d_pg <= nsd_tolerance) / b
    fp, fn = np.sum(sd.d_gp > nsd_tolerance) / a, np.sum(sd.d_pg > nsd_tolerance) / b
    return {
        "hd": float(both.max()),
        "hd95": float(np.percentile(both, 95)),
        "assd": float(both.mean()),
        "masd": float(np.mean((sd.d_gp.mean(), sd.d_pg.mean()))),
        "nsd": float((tp_a + tp_b) / (tp_a + tp_b + fp + fn + sys.float_info.min)),
    }


PANOPTICA_SURFACE = Profile("panoptica", "panoptica_pooled_percentile_unweighted", panoptica_surface_distances, panoptica_metrics)


@dataclass(frozen=True)
class LesionProfile:
    """One lesion-wise definition: instances, matching rule, per-instance surface and case reductions.

    ``matcher``: naive | bipartite | merge | dilation (``match_*``); ``surface``: the metric profile
    measuring a matched pair; ``unmatched_distance_mm``: the distance metrics of a missed or false
    positive lesion (BraTS' penalty; NaN: undefined); ``size_floor_mm3`` and ``lesionwise``: which
    reference lesions the BraTS-style lesion-wise Dice/HD95 keep and how they are averaged (``brats``:
    volume >= floor, brats-evaluation's ``parse_mets_results``; ``brats2023``: volume > floor, the
    2023 script); ``nsd_tolerance_mm``: None is the smallest voxel size (panoptica's default)."""

    name: str
    connectivity: int
    matcher: str
    matching_metric: str
    matching_threshold: float
    surface: Profile
    unmatched_distance_mm: float
    size_floor_mm3: float
    lesionwise: str
    many_to_one: bool = False
    strict: bool = False
    dilation_iterations: int = 0
    nsd_tolerance_mm: float | None = None


LESION_PROFILES: dict[str, LesionProfile] = {
    # panoptica's defaults: 26-connected components (cc3d), naive one-to-one matching at IoU >= 0.5
    "panoptica": LesionProfile("panoptica", 26, "naive", "iou", 0.5, PANOPTICA_SURFACE, math.nan, 0.0, "brats"),
    # panoptica's maximize-merge matcher: a first match at IoU >= 0.5, then split predictions merged onto it while the IoU grows
    "panoptica_merge": LesionProfile("panoptica_merge", 26, "merge", "iou", 0.5, PANOPTICA_SURFACE, math.nan, 0.0, "brats"),
    # brats-evaluation 0.0.10: its bundled configs (config_mets.yaml: bipartite at Dice >= 1e-6) and parse_mets_results' defaults
    "brats": LesionProfile("brats", 26, "bipartite", "dice", 1e-6, PANOPTICA_SURFACE, 373.0, 20.0, "brats"),
    # BraTS 2023 lesion-wise script, BraTS-GLI parameters (dilation 3, volume floor 50 mm^3, HD95 penalty 374 mm)
    "brats2023": LesionProfile("brats2023", 26, "dilation", "dice", 0.0, get_profile("deepmind"), 374.0, 50.0, "brats2023", dilation_iterations=3),
}


def get_lesion_profile(name: str) -> LesionProfile:
    """The lesion profile called ``name``; an error listing the known ones otherwise."""
    if name not in LESION_PROFILES:
        raise ValueError(f"unknown lesion profile {name!r}; known: {sorted(LESION_PROFILES)}")
    return LESION_PROFILES[name]


@dataclass(frozen=True)
class Labelled:
    """A pair's instances under one way of finding them: the prediction's components, the reference's (or the
    dilation rule's merged lesions) and their overlap table."""

    pred_labels: np.ndarray
    n_pred: int
    ref_labels: np.ndarray
    n_ref: int
    overlap: Overlap


def _instances(profile: LesionProfile, ref: np.ndarray, pred: np.ndarray) -> tuple[Labelled, Matching | None]:
    """The pair's instances under the profile's connectivity, or its dilation rule (whose lesions come with their
    claims: the matching, None otherwise)."""
    pred_labels, n_pred = label_components(pred, profile.connectivity)
    claims = None
    if profile.matcher == "dilation":
        ref_labels, n_ref, claims = match_dilation(ref, pred_labels, n_pred, profile.dilation_iterations)
    else:
        ref_labels, n_ref = label_components(ref, profile.connectivity)
    return Labelled(pred_labels, n_pred, ref_labels, n_ref, overlap_table(ref_labels, n_ref, pred_labels, n_pred)), claims


def _match(labelled: Labelled, claims: Matching | None, profile: LesionProfile) -> Matching:
    """The profile's matching of the instances (the dilation rule's claims as they are)."""
    if claims is not None:
        return claims
    ov = labelled.overlap
    rules: dict[str, Callable[[], Matching]] = {
        "naive": lambda: match_naive(ov, profile.matching_metric, profile.matching_threshold, profile.many_to_one, profile.strict),
        "bipartite": lambda: match_bipartite(ov, profile.matching_metric, profile.matching_threshold, profile.strict),
        "merge": lambda: match_merge(ov, profile.matching_metric, profile.matching_threshold, profile.strict),
    }
    if profile.matcher not in rules:
        raise ValueError(f"lesion profile {profile.name}: unknown matcher {profile.matcher!r}; known: {sorted([*rules, 'dilation'])}")
    return rules[profile.matcher]()


def instance_table(reference: np.ndarray, prediction: np.ndarray, spacing: Sequence[float], profile: LesionProfile | str = "panoptica") -> pd.DataFrame:
    """One row per reference lesion (status TP or FN) and per unmatched prediction lesion (FP):
    reference and prediction ids (the prediction lesions of a row, ``;``-separated), volumes (mL),
    and Dice, IoU, HD, HD95, ASSD, MASD and NSD of the reference lesion against the union of its
    predictions (``profile.surface``'s distances, in the pair's bounding box); FN and FP rows score
    Dice, IoU and NSD 0 and ``profile.unmatched_distance_mm`` for the distances."""
    return instance_tables(reference, prediction, spacing, [profile])[0]


def instance_tables(reference: np.ndarray, prediction: np.ndarray, spacing: Sequence[float], profiles: Sequence[LesionProfile | str]) -> list[pd.DataFrame]:
    """:func:`instance_table` of one pair under each profile. The profiles share what they do alike: the check and
    the box, the instances of one connectivity (components, their overlap table) and the surface distances of a
    matched pair under one surface profile (the score stage's four profiles measure most pairs once, not three times)."""
    lesion_profiles = [get_lesion_profile(p) if isinstance(p, str) else p for p in profiles]
    ref, pred, spacing = check_pair(reference, prediction, spacing)
    box = nonzero_box(ref, pred)
    if box is not None:  # every metric is unchanged outside the masks' box (with room for the dilation)
        box = _padded(box, max([BOX_MARGIN, *(p.dilation_iterations for p in lesion_profiles)]), ref.shape)
        ref, pred = ref[box], pred[box]
    found: dict[tuple, tuple[Labelled, Matching | None]] = {}
    measured: dict[tuple, SurfaceDistances] = {}
    tables = []
    for profile in lesion_profiles:
        key = (profile.connectivity, profile.dilation_iterations) if profile.matcher == "dilation" else (profile.connectivity,)
        if key not in found:
            found[key] = _instances(profile, ref, pred)
        labelled, claims = found[key]
        tables.append(_table(labelled, _match(labelled, claims, profile), spacing, profile, measured, key))
    return tables


def _table(
    labelled: Labelled, matching: Matching, spacing: Spacing, profile: LesionProfile, measured: dict[tuple, SurfaceDistances], key: tuple
) -> pd.DataFrame:
    """:func:`instance_table`'s rows from the instances (found the profile's way, ``key``) and their matching; a matched
    pair's surface distances are taken from ``measured`` when another profile measured that pair already."""
    ov, ref_labels, pred_labels = labelled.overlap, labelled.ref_labels, labelled.pred_labels
    ml = float(np.prod(spacing)) / 1000.0
    tol = min(spacing) if profile.nsd_tolerance_mm is None else profile.nsd_tolerance_mm
    miss = {m: 0.0 if up else profile.unmatched_distance_mm for m, up in directions(INSTANCE_METRICS).items()}
    rows = []
    for r, preds in enumerate(matching.preds, start=1):
        row = {
            "reference_id": r,
            "prediction_ids": ";".join(map(str, preds)),
            "reference_volume_ml": ov.ref_voxels[r] * ml,
            "prediction_volume_ml": ov.pred_voxels[list(preds)].sum() * ml,
        }
        if not preds:
            rows.append(row | {"status": "FN"} | miss)
            continue
        inter, size = int(ov.shared[list(preds), r].sum()), int(ov.ref_voxels[r] + ov.pred_voxels[list(preds)].sum())
        pair = (profile.surface.name, key, r, preds)
        if pair not in measured:
            boxes = np.vstack([ov.ref_box[r], ov.pred_box[list(preds)]])
            lo, hi = boxes[:, :3].min(axis=0), boxes[:, 3:].max(axis=0)
            pair_box = _padded(tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True)), BOX_MARGIN, ref_labels.shape)
            ref_m, pred_m = ref_labels[pair_box] == r, np.isin(pred_labels[pair_box], preds)
            measured[pair] = profile.surface.measure(pred_m, ref_m, spacing)
        distances = profile.surface.metrics(measured[pair], tol)
        rows.append(row | {"status": "TP", "dice": 2 * inter / size, "iou": inter / (size - inter), **distances})
    for p in matching.unmatched:
        rows.append(
            {"status": "FP", "reference_id": 0, "prediction_ids": str(p), "reference_volume_ml": 0.0, "prediction_volume_ml": ov.pred_voxels[p] * ml} | miss
        )
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    return table.astype({"reference_id": np.int64, "reference_volume_ml": float, "prediction_volume_ml": float, **dict.fromkeys(INSTANCE_METRICS, float)})


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def counted_references(table: pd.DataFrame, profile: LesionProfile) -> pd.DataFrame:
    """The reference lesions (rows of an ``instance_table``) the profile's lesion-wise Dice/HD95 keep: volume at
    least the size floor (``brats``, brats-evaluation) or above it (``brats2023``, the 2023 script)."""
    refs = table[table.status != "FP"]
    volume_mm3 = refs.reference_volume_ml * 1000.0
    return refs[volume_mm3 > profile.size_floor_mm3 if profile.lesionwise == "brats2023" else volume_mm3 >= profile.size_floor_mm3]


def _brats_lesionwise(table: pd.DataFrame, profile: LesionProfile) -> tuple[float, float]:
    """brats-evaluation's ``parse_mets_results``: the reference lesions of at least the size floor
    (their own Dice/HD95, or 0 and the penalty if missed) and one (0, penalty) per false positive;
    infinite HD95s left out of the mean; NaN if no reference lesion reaches the floor."""
    large = counted_references(table, profile)
    if large.empty:
        return math.nan, math.nan
    n_fp = int((table.status == "FP").sum())
    dice = [*large.dice, *[0.0] * n_fp]
    hd95 = [v for v in [*large.hd95, *[profile.unmatched_distance_mm] * n_fp] if not math.isinf(v)]
    return float(np.mean(dice)), float(np.mean(hd95)) if hd95 else profile.unmatched_distance_mm


def _brats2023_lesionwise(table: pd.DataFrame, profile: LesionProfile) -> tuple[float, float]:
    """The BraTS 2023 script: sums over the reference lesions larger than the size floor, plus one
    (0, penalty) per false positive, over their number; 1 and 0 when there is neither."""
    kept = counted_references(table, profile)
    n = len(kept) + int((table.status == "FP").sum())
    if n == 0:
        return 1.0, 0.0
    n_fp = n - len(kept)
    return float(kept.dice.sum() / n), float((kept.hd95.sum() + n_fp * profile.unmatched_distance_mm) / n)


def case_scores(table: pd.DataFrame, profile: LesionProfile | str = "panoptica", strata_ml: Sequence[float] = ()) -> dict[str, float]:
    """A case's lesion-wise scores from its ``instance_table``.

    Counts (tp, fp, fn; a split lesion matched as one is one TP), detection precision, recall and F1
    (= panoptica's RQ, tp / (tp + fp/2 + fn/2); 0 with no TP, NaN with no lesion at all; precision and
    recall NaN when their denominator is 0), SQ per metric (the mean over TPs, NaN with none), PQ
    (IoU and Dice: SQ x RQ, 0 when RQ is 0), BraTS-style lesion-wise Dice and HD95 (the profile's
    ``lesionwise`` rule), FP and FN volumes (mL), and the recall of reference lesions in each
    volume stratum cut at ``strata_ml`` (``recall_lt_A``, ``recall_A_B``, ``recall_ge_B``; NaN if none
    falls in it: panoptica's ``recall_by_volume`` bins)."""
    profile = get_lesion_profile(profile) if isinstance(profile, str) else profile
    status = table.status
    tp, fp, fn = int((status == "TP").sum()), int((status == "FP").sum()), int((status == "FN").sum())
    rq = tp / (tp + 0.5 * fp + 0.5 * fn) if tp else (0.0 if fp + fn else math.nan)
    matched = table[status == "TP"]
    out: dict[str, float] = {
        "n_reference": tp + fn,
        "n_prediction": len(set(";".join(table.prediction_ids).split(";")) - {""}),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, tp + fn),
        "f1": rq,
        "rq": rq,
    }
    for m in INSTANCE_METRICS:
        out[f"sq_{m}"] = float(matched[m].mean()) if tp else math.nan
    for m in ("iou", "dice"):
        out[f"pq_{m}"] = out[f"sq_{m}"] * rq if tp else rq
    rule = {"brats": _brats_lesionwise, "brats2023": _brats2023_lesionwise}[profile.lesionwise]
    out["lesion_dice"], out["lesion_hd95"] = rule(table, profile)
    out["fp_volume_ml"] = float(table.prediction_volume_ml[status == "FP"].sum())
    out["fn_volume_ml"] = float(table.reference_volume_ml[status == "FN"].sum())
    refs = table[status != "FP"]
    strata = volume_strata(refs.reference_volume_ml.to_numpy(), strata_ml)
    for name in stratum_names(strata_ml):
        hit = refs.status.to_numpy()[strata == name] == "TP"
        out[f"recall_{name}"] = float(hit.mean()) if hit.size else math.nan
    return out


def stratum_names(strata_ml: Sequence[float]) -> list[str]:
    """The lesion-volume strata cut at ``strata_ml`` (mL), smallest first: ``lt_A``, ``A_B``, ..., ``ge_B`` (with ``ml``)."""
    edges = sorted(float(e) for e in strata_ml)
    if not edges:
        return []
    return [f"lt_{edges[0]:g}ml", *(f"{a:g}_{b:g}ml" for a, b in zip(edges, edges[1:])), f"ge_{edges[-1]:g}ml"]


def volume_strata(volumes_ml: np.ndarray, strata_ml: Sequence[float]) -> np.ndarray:
    """The stratum name of each volume (``stratum_names``; a volume equal to a cut falls in the stratum above it, as
    panoptica's ``recall_by_volume`` bins); empty strings without cuts."""
    names = stratum_names(strata_ml)
    if not names:
        return np.full(len(volumes_ml), "", dtype=object)
    return np.asarray(names, dtype=object)[np.digitize(volumes_ml, sorted(float(e) for e in strata_ml))]


def score_lesions(
    reference: np.ndarray, prediction: np.ndarray, spacing: Sequence[float], profile: LesionProfile | str = "panoptica", strata_ml: Sequence[float] = ()
) -> tuple[pd.DataFrame, dict[str, float]]:
    """The per-lesion table and the case's scores of one structure (``instance_table``, ``case_scores``)."""
    table = instance_table(reference, prediction, spacing, profile)
    return table, case_scores(table, profile, strata_ml)
