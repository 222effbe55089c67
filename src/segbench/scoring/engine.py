"""Per-case scoring: every region of a case from one decode of each label map (docs/methodology.md#3-metric-conventions)."""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np
import pandas as pd
from segauge.metrics.detection import detection_scores
from segauge.metrics.distance import SurfaceDistances

from segbench.base.metrics import REGION, analysed, names
from segbench.scoring.geometry import check_same_grid, check_spacing, resample_to_reference
from segbench.scoring.labelmaps import (
    NonzeroCrop,
    is_dicom,
    load_label_map,
    load_nifti_nonzero,
    nifti_image,
    nonzero_box,
    nonzero_crop,
    unsigned_view,
)
from segbench.scoring.profiles import Profile, get_profile
from segbench.scoring.settings import DEFAULT_PROFILE, DETECTION_METRICS, HIGHER_IS_BETTER, METRICS, Region

DISTANCE_METRICS: tuple[str, ...] = names(REGION, unit="mm")
#: the metrics a scored dataset's leaderboards analyse (and its MLflow runs' headline means), and whether higher is better
ANALYZED_METRICS: dict[str, bool] = analysed()
A = TypeVar("A")
T = TypeVar("T")
HD95_DEFINITION = get_profile(DEFAULT_PROFILE).hd95_definition
COLUMNS: tuple[str, ...] = (
    "case_id",
    "structure",
    "reference_present",
    "prediction_present",
    "prediction_missing",
    *METRICS,
    *DETECTION_METRICS,
    "worst_case",
    "worst_case_value_mm",
    "nsd_tolerance_mm",
    "hd95_definition",
    "metric_profile",
)


def _on_union_box(*crops: NonzeroCrop) -> list[np.ndarray]:
    """The maps of ``crops`` on the smallest box holding every non-zero voxel of any of them (one
    zero voxel if none has any): outside it every map is 0, so no metric changes (tested)."""
    full = [c for c in crops if not c.empty]
    if not full:
        return [np.zeros((1, 1, 1), dtype=c.data.dtype) for c in crops]
    lo = np.min([c.start for c in full], axis=0)
    hi = np.max([np.add(c.start, c.data.shape) for c in full], axis=0)
    out = []
    for c in crops:
        if not c.empty and tuple(c.start) == tuple(lo) and c.data.shape == tuple(hi - lo):
            out.append(c.data)
            continue
        box = np.zeros(tuple(int(n) for n in hi - lo), dtype=c.data.dtype)
        if not c.empty:
            box[tuple(slice(s - a, s - a + n) for s, a, n in zip(c.start, lo, c.data.shape, strict=True))] = c.data
        out.append(box)
    return out


def _region_mask(labels: np.ndarray, region: Region) -> np.ndarray:
    """Boolean mask of the union of the region's label ids (an integer label map).

    Consecutive ids lo..hi (KiTS's regions) are one range test in unsigned arithmetic, where values
    below lo (negative ones included) wrap above the range: two passes over the box instead of
    np.isin's one per id and their union (timed: benchmarks/README.md)."""
    ids = sorted(set(region.labels))
    if len(ids) == 1:
        return labels == ids[0]
    u = unsigned_view(labels)
    if ids[-1] - ids[0] == len(ids) - 1 and ids[0] >= 0 and ids[-1] <= np.iinfo(u.dtype).max:
        return (u - u.dtype.type(ids[0])) <= u.dtype.type(ids[-1] - ids[0])
    return np.isin(labels, ids)


def _check_allowed(case_id: str, path: object, labels: np.ndarray, allowed: set[int] | None) -> None:
    """Error naming the file if any value of ``labels`` is negative (no label id under any schema), or, with
    ``allowed``, if any non-zero value is not in it.

    One lookup per voxel in a table over the value range (``np.unique`` on a whole CT volume sorts
    or hashes 10^8 values: seconds per file)."""
    if allowed is None:
        if labels.dtype.kind == "i" and labels.size and labels.min() < 0:
            negative = np.unique(labels[labels < 0])
            raise ValueError(f"case {case_id}: {path}: negative label values {negative[:10].tolist()}; label ids are 0 or more")
        return
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi > 65535:
        present = np.unique(labels)
    else:
        ok = np.zeros(hi + 1, dtype=bool)
        ok[[v for v in allowed | {0} if v <= hi]] = True
        outside = ~ok[labels]
        present = np.unique(labels[outside]) if outside.any() else np.empty(0, dtype=labels.dtype)
    bad = sorted(int(v) for v in present if int(v) != 0 and int(v) not in allowed)
    if bad:
        raise ValueError(f"case {case_id}: {path}: label values {bad} are not in the allowed set {sorted(allowed)}")


def dice_iou(pred: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """segauge's ``dice`` and ``iou`` of two boolean masks from one count: the same integer counts
    (tp, and fp + fn from the masks' sizes) and the same formulas, so the same floats, without its
    two passes of four confusion counts each (timed: benchmarks/README.md)."""
    tp = int(np.count_nonzero(pred & ref))
    n_pred, n_ref = int(np.count_nonzero(pred)), int(np.count_nonzero(ref))
    fp, fn = n_pred - tp, n_ref - tp
    if n_pred + n_ref == 0:
        return 1.0, 1.0
    return 2 * tp / (2 * tp + fp + fn), tp / (tp + fp + fn)


def empty_mask_values(one_empty: bool, worst: float) -> dict[str, float]:
    """Every region metric when a mask is empty (docs/methodology.md#4-empty-masks-and-missing-predictions): with one
    mask empty a score (higher is better) is 0 and a distance the case's ``worst``; with both empty 1 and 0."""
    return {m: (0.0 if one_empty else 1.0) if HIGHER_IS_BETTER[m] else (worst if one_empty else 0.0) for m in METRICS}


def _worst_case_row(base: dict, worst: float) -> dict:
    return base | empty_mask_values(True, worst) | {"worst_case": True}


def _region_columns(ref: np.ndarray, pred: np.ndarray, region: Region) -> dict:
    """The columns of a region no metric profile changes, from its (cropped) boolean masks: presence, detection and,
    when both masks hold voxels, Dice and IoU; measured once for all the profiles of a case."""
    row: dict[str, Any] = {"reference_present": bool(ref.any()), "prediction_present": bool(pred.any())}
    if region.detection:
        det = detection_scores(pred, ref)
        row |= {"det_precision": det.precision, "det_recall": det.recall, "det_f1": det.f1}
    if row["reference_present"] and row["prediction_present"]:
        row["dice"], row["iou"] = dice_iou(pred, ref)
    return row


def _score_region(
    ref: np.ndarray,
    pred: np.ndarray,
    spacing: tuple[float, float, float],
    region: Region,
    row: dict,
    worst: float,
    profile: Profile,
    sd: SurfaceDistances | None = None,
) -> tuple[dict, SurfaceDistances | None]:
    """A region's row under one profile from its (cropped) boolean masks and ``row`` (its base columns and
    :func:`_region_columns`): the empty-mask rules of docs/methodology.md#4-empty-masks-and-missing-predictions
    (before any profile sees the masks), the profile's surface metrics, and the surface distances they used (``sd``:
    already measured on the same masks)."""
    if not row["reference_present"] and not row["prediction_present"]:
        return row | empty_mask_values(False, worst), None
    if row["reference_present"] != row["prediction_present"]:
        return _worst_case_row(row, worst), None
    if sd is None:
        sd = profile.measure(pred, ref, spacing)
    return row | profile.metrics(sd, region.nsd_tolerance_mm), sd


@dataclass(frozen=True)
class DecodedPair:
    """A case's two label maps on their union box (``prediction`` None when the case has no prediction file),
    the reference spacing (mm, array order) and the case's worst distance (the diagonal of the reference grid)."""

    reference: np.ndarray
    prediction: np.ndarray | None
    spacing: tuple[float, float, float]
    worst_mm: float


def decode_pair(
    case_id: str,
    reference: Path,
    prediction: Path | None,
    *,
    allowed_labels: set[int] | None = None,
    dicom_labels: Mapping[str, int] | None = None,
) -> DecodedPair:
    """Decode a case's reference and prediction once, with every check scoring relies on.

    Raises :class:`GeometryError` if the prediction is not on the reference grid (DICOM predictions are
    first resampled onto it through their DICOM geometry); a negative value in either map, and with ``allowed_labels``
    any other non-zero value, is an error naming the file. ``dicom_labels``: as in :func:`score_case`.
    """
    prediction = None if prediction is None else Path(prediction)
    streams = prediction is not None and prediction.is_file() and not is_dicom(prediction)
    if streams and prediction is not None:  # the two headers' grids first: a prediction's header claiming another grid has no voxel decoded
        check_same_grid(case_id, reference, nifti_image(reference), prediction, nifti_image(prediction))
    with ThreadPoolExecutor(max_workers=1) as pool:  # the inflater and numpy release the GIL: decode both files at once
        streamed: Future | None = None
        if streams and prediction is not None:
            streamed = pool.submit(load_nifti_nonzero, prediction)
        ref_crop, ref_img = load_nifti_nonzero(Path(reference))
        pred_loaded = None if streamed is None else streamed.result()
    spacing = check_spacing(case_id, reference, ref_img)
    worst = float(math.sqrt(sum((n * s) ** 2 for n, s in zip(ref_crop.shape, spacing, strict=True))))
    if prediction is None:
        (ref_labels,) = _on_union_box(ref_crop)
        _check_allowed(case_id, reference, ref_labels, allowed_labels)
        return DecodedPair(ref_labels, None, spacing, worst)
    if pred_loaded is None:
        _, pred_img = load_label_map(prediction, dicom_labels=dicom_labels, reference_shape=ref_img.shape[:3])
        pred_img = resample_to_reference(pred_img, ref_img)
        check_same_grid(case_id, reference, ref_img, prediction, pred_img)
        pred_crop = nonzero_crop(np.asanyarray(pred_img.dataobj))
    else:
        pred_crop, pred_img = pred_loaded
        check_spacing(case_id, prediction, pred_img)
    ref_labels, pred_labels = _on_union_box(ref_crop, pred_crop)
    # every voxel of both maps outside the box is 0
    _check_allowed(case_id, reference, ref_labels, allowed_labels)
    _check_allowed(case_id, prediction, pred_labels, allowed_labels)
    return DecodedPair(ref_labels, pred_labels, spacing, worst)


def score_case(
    case_id: str,
    reference: Path,
    prediction: Path | None,
    regions: Sequence[Region],
    *,
    allowed_labels: set[int] | None = None,
    dicom_labels: Mapping[str, int] | None = None,
    profile: str = DEFAULT_PROFILE,
    extra_profiles: Sequence[str] = (),
) -> list[dict]:
    """Score one case: one row per region (and profile), from a single decode of each label map.

    A missing prediction (``None``) scores as a failure: the worst-case row for every region.
    Distances use the reference header spacing (array order), checked against both affines.
    Raises :class:`GeometryError` if the prediction is not on the reference grid (DICOM predictions
    are first resampled onto it through their DICOM geometry). A negative value in either map is an
    error; ``allowed_labels``: if given, so is any other non-zero value. ``dicom_labels``: DICOM-SEG segment label /
    RTSTRUCT ROI name -> label id (default: segment / ROI number). ``profile``: the
    metric-definition profile of the surface metrics (``profiles.PROFILES``), recorded in each row.
    ``extra_profiles``: further profiles measured on the same decoded masks, their rows after the
    first profile's (the implementation-sensitivity analysis, docs/methodology.md#5-statistics-protocol).
    """
    pair = decode_pair(case_id, reference, prediction, allowed_labels=allowed_labels, dicom_labels=dicom_labels)
    return score_pair(case_id, pair, regions, profile=profile, extra_profiles=extra_profiles)


def score_pair(
    case_id: str,
    pair: DecodedPair,
    regions: Sequence[Region],
    *,
    profile: str = DEFAULT_PROFILE,
    extra_profiles: Sequence[str] = (),
) -> list[dict]:
    """:func:`score_case` on a case already decoded (:func:`decode_pair`): the score stage decodes once for these rows
    and the lesion-wise ones (``lesionwise.score_cases_and_lesions``)."""
    definitions = [get_profile(name) for name in dict.fromkeys([profile, *extra_profiles])]
    ref_labels, pred_labels, spacing, worst = pair.reference, pair.prediction, pair.spacing, pair.worst_mm
    rows = []
    base_common = {
        "case_id": case_id,
        "prediction_missing": pred_labels is None,
        "worst_case": False,
        "worst_case_value_mm": worst,
        **{m: math.nan for m in DETECTION_METRICS},
    }
    if pred_labels is None:
        for definition in definitions:
            for region in regions:
                base = base_common | _profile_columns(definition) | {"structure": region.name, "nsd_tolerance_mm": float(region.nsd_tolerance_mm)}
                row = base | {"reference_present": bool(_region_mask(ref_labels, region).any()), "prediction_present": False}
                if region.detection:
                    row |= {m: 0.0 for m in DETECTION_METRICS}
                rows.append(_worst_case_row(row, worst))
        return [{c: r[c] for c in COLUMNS} for r in rows]

    masks = []
    for region in regions:
        ref, pred = _region_mask(ref_labels, region), _region_mask(pred_labels, region)
        box = nonzero_box(ref, pred)  # the region's own box: smaller than the case's; results unchanged
        if box is not None:
            ref, pred = ref[box], pred[box]
        masks.append((region, ref, pred, _region_columns(ref, pred, region)))
    for definition in definitions:
        # regions selecting the same voxels (mass and tumor in a case without cysts) share one surface
        measured: list[tuple[np.ndarray, np.ndarray, SurfaceDistances | None]] = []
        for region, ref, pred, columns in masks:
            base = base_common | _profile_columns(definition) | {"structure": region.name, "nsd_tolerance_mm": float(region.nsd_tolerance_mm)}
            sd = next((d for r, p, d in measured if np.array_equal(r, ref) and np.array_equal(p, pred)), None)
            row, sd = _score_region(ref, pred, spacing, region, base | columns, worst, definition, sd)
            rows.append(row)
            measured.append((ref, pred, sd))
    return [{c: r[c] for c in COLUMNS} for r in rows]


def _profile_columns(definition: Profile) -> dict[str, str]:
    return {"hd95_definition": definition.hd95_definition, "metric_profile": definition.name}


def _score_case_job(args: tuple) -> list[dict]:
    case_id, reference, prediction, regions, allowed_labels, dicom_labels, profile, extra_profiles = args
    return score_case(
        case_id, reference, prediction, regions, allowed_labels=allowed_labels, dicom_labels=dicom_labels, profile=profile, extra_profiles=extra_profiles
    )


def _score_case_or_error(args: tuple) -> list[dict] | Exception:
    """``_score_case_job``, returning the error its files raised instead of raising it, so that one bad file stops no
    other case in the pool."""
    try:
        return _score_case_job(args)
    except (ValueError, OSError) as exc:
        return exc


def worker_died(args: tuple) -> ValueError:
    """The error of a case (a job's ``(case_id, reference, prediction, ...)``) whose worker process died while scoring it
    alone (:func:`map_cases`): killed for memory, or a crash in a decoder; it names the prediction (the reference
    without one)."""
    case_id, reference, prediction = args[:3]
    return ValueError(
        f"case {case_id}: {reference if prediction is None else prediction}: the worker process scoring it died (killed for memory, or a crash in a decoder)"
    )


def raise_worker_died(args: tuple) -> NoReturn:
    """:func:`worker_died`, raised: for a run that stops on a case it cannot score."""
    raise worker_died(args)


def _one_kernel_thread() -> None:
    """Workers run one case each: parallelism is across cases, so the kernel uses one thread.

    The pool size numba launches with is pinned in the environment first: numba re-derives it from the CPU
    affinity whenever it compiles, and a different answer after launch is an error."""
    import numba

    os.environ["NUMBA_NUM_THREADS"] = str(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # numba sets its config at import
    numba.set_num_threads(1)


@contextlib.contextmanager
def _main_hidden(job: Callable) -> Iterator[None]:
    """While the pool starts, hide the main module from it unless ``job`` was defined there.

    A spawned worker imports the parent's main script before its first job, so a script without an
    ``if __name__ == "__main__":`` guard runs again in every worker, whose own pool start fails (a traceback per
    worker, or a pool that never finishes). segbench's jobs need nothing of the main module: the workers start
    without it, and a plain script can call ``score_cases`` or ``segbench.evaluate`` with ``workers > 1``."""
    if getattr(getattr(job, "func", job), "__module__", None) == "__main__":
        yield
        return
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _start_method() -> str:
    """How a pool's workers start: ``fork`` while this process has not launched numba's threads, so that they inherit
    the imported engine and score at once (a spawned worker imports it again first; timed: benchmarks/README.md);
    ``spawn`` once it has: a forked worker inherits numba's launched thread pool and its thread count, and the first
    compile in the worker (cold cache) re-reads that count and stops ("Cannot set NUMBA_NUM_THREADS ... once the threads
    have been launched"), as in a test process that ran numba first."""
    from numba.np.ufunc import parallel

    return "spawn" if getattr(parallel, "_is_initialized", True) else "fork"


def map_cases(
    job: Callable[[A], T],
    jobs: Sequence[A],
    *,
    workers: int = 1,
    progress: bool = True,
    desc: str = "scoring",
    sizes: Sequence[float] | None = None,
    died: Callable[[A], T] | None = None,
) -> list[T]:
    """``job`` of every entry of ``jobs``, in input order, with a progress bar.

    With ``workers > 1`` the jobs run in a process pool that is handed one job per free worker, so at most ``workers``
    cases are decoded at once; ``job`` must pickle (a module-level function or a ``functools.partial`` of one).
    ``sizes``: each job's expected work (:func:`case_bytes`); the pool is handed the largest first, so that the jobs
    left while another worker has nothing to do are small ones (input order, a large case last kept one worker busy
    seconds after the other finished). A worker process that dies (killed for memory, a crash in a decoder) takes the
    pool down with the jobs it was running, not the run: those jobs are run again, each alone in a fresh pool, and
    the one whose process dies again gives ``died(job)`` in the parent (None: RuntimeError naming the job); the rest
    run on. (A pool of multiprocessing waited forever for a dead worker's job.)"""
    from tqdm import tqdm

    # in a terminal the bar redraws each second; in a log (dvc repro's, CI's) each 30 s (tqdm's monitor thread forces a
    # redraw after maxinterval), not a megabyte of redraws
    interval = 1.0 if sys.stderr.isatty() else 30.0
    bar = tqdm(total=len(jobs), desc=desc, unit="case", disable=not progress, mininterval=interval, maxinterval=max(10.0, 2 * interval))
    done: dict[int, T] = {}

    def record(i: int, result: T) -> None:
        done[i] = result
        bar.update()

    try:
        if workers <= 1:
            for i, args in enumerate(jobs):
                record(i, job(args))
        else:
            method = _start_method()
            pending = list(range(len(jobs))) if sizes is None else sorted(range(len(jobs)), key=lambda i: -sizes[i])
            while pending:
                lost, pending = _pooled(job, jobs, pending, workers, method, record)
                for i in lost:  # each alone: the job whose process dies again is the one that killed it
                    if _pooled(job, jobs, [i], 1, method, record)[0]:
                        if died is None:
                            raise RuntimeError(f"{desc}: the worker process running job {i} of {len(jobs)} died")
                        record(i, died(jobs[i]))
    finally:
        bar.close()
    return [done[i] for i in range(len(jobs))]


def _pooled(
    job: Callable[[A], T], jobs: Sequence[A], order: list[int], workers: int, method: str, record: Callable[[int, T], None]
) -> tuple[list[int], list[int]]:
    """Run the jobs at ``order`` in a pool of ``workers`` processes, each result to ``record`` as it comes; a job's
    error stops the run. If a worker process dies: (the jobs that were running, the jobs not yet begun); else ([], [])."""
    queue = list(order)
    running: dict[Future, int] = {}
    with _main_hidden(job) if method == "spawn" else contextlib.nullcontext():
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method), initializer=_one_kernel_thread)
        try:
            while queue or running:
                while queue and len(running) < workers:
                    i = queue.pop(0)
                    running[pool.submit(job, jobs[i])] = i
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        result = future.result()
                    except BrokenProcessPool:
                        return sorted(running.values()), queue
                    record(running.pop(future), result)
        finally:
            pool.shutdown(wait=not running, cancel_futures=True)
    return [], []


def case_bytes(reference: Path | str, prediction: Path | str | None) -> int:
    """Bytes of a case's reference and prediction files (a missing or DICOM-folder prediction: 0): the measure of its
    work that :func:`map_cases` orders a pool by (label map files compress to about their masks' surface)."""
    return sum(Path(p).stat().st_size for p in (reference, prediction) if p is not None and Path(p).is_file())


def score_cases(
    cases: Sequence[tuple[str, Path, Path | None]],
    regions: Sequence[Region],
    *,
    workers: int = 1,
    progress: bool = True,
    allowed_labels: set[int] | None = None,
    dicom_labels: Mapping[str, int] | None = None,
    profile: str = DEFAULT_PROFILE,
    extra_profiles: Sequence[str] = (),
    failed: dict[int, Exception] | None = None,
) -> pd.DataFrame:
    """Score every (case_id, reference, prediction) in input order; one row per case x region (x profile).

    With ``workers > 1`` cases run in a process pool, one case per free worker (:func:`map_cases`), so at most
    ``workers`` cases are decoded at once. ``profile`` and
    ``extra_profiles``: as in :func:`score_case` (checked before any case is decoded). ``failed``: if given, a case
    whose files raise (a ValueError or OSError) or whose worker process dies (:func:`worker_died`) does not stop the
    others: it is scored again without its prediction
    (a missing one, flagged), and its error is stored under its position in ``cases``; an error of the reference
    itself raises then.
    """
    for name in (profile, *extra_profiles):
        get_profile(name)
    extra_profiles = tuple(extra_profiles)
    jobs = [
        (cid, Path(ref), None if pred is None else Path(pred), tuple(regions), allowed_labels, dicom_labels, profile, extra_profiles)
        for cid, ref, pred in cases
    ]
    done = map_cases(
        _score_case_job if failed is None else _score_case_or_error,
        jobs,
        workers=workers,
        progress=progress,
        sizes=[case_bytes(ref, pred) for _, ref, pred in cases],
        died=raise_worker_died if failed is None else worker_died,
    )
    rows: list[dict] = []
    for i, (job, case_rows) in enumerate(zip(jobs, done, strict=True)):
        if isinstance(case_rows, Exception) and failed is not None:
            failed[i], case_rows = case_rows, _score_case_job((job[0], job[1], None, *job[3:]))
        rows += case_rows  # type: ignore[arg-type]  # an error stops the run unless ``failed`` collects it (above)
    return pd.DataFrame(rows, columns=list(COLUMNS))
