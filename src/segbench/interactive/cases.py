"""Interactive cases on disk: the challenge's npz files, validated at this boundary (docs/interactive.md).

A case folder holds ``imgs/<case>.npz`` (``imgs``, ``spacing``, optional ``boxes``), what a model
sees, and ``gts/<case>.npz`` (``gts``), which it never sees; optionally ``cases.json``, written by
:func:`convert`, says where the cases came from and whether the reference is a manual annotation or
a model's output (a pseudo-reference). Every error names the file and the key; none yields a number.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import nibabel as nib
import numpy as np

from segbench.base.io import atomic_path, write_json_atomic
from segbench.datasets.dicom_series import read_series
from segbench.interactive.protocol import BOX_KEYS, boxes_of_labels
from segbench.interactive.schema import REFERENCE_KINDS
from segbench.models import intake
from segbench.scoring.geometry import check_same_grid

MANIFEST = "cases.json"


class CaseError(ValueError):
    """A case or step file that does not follow the npz contract."""


@dataclass(frozen=True)
class Case:
    """One validated case: what the model may see (imgs, spacing, boxes) and the reference (gts)."""

    case_id: str
    image_file: Path
    imgs: np.ndarray
    spacing: tuple[float, float, float]
    boxes: list[dict[str, int]] | None
    gts: np.ndarray
    n_classes: int


def _load_npz(path: Path) -> dict[str, Any]:
    """All arrays of a case's npz; its boxes are a pickled list of dicts, as the challenge's are, unpickled as plain data
    only (:class:`_PlainDataUnpickler`): a case folder downloaded with a dataset is no reason to run the code a pickle can
    name."""
    try:
        with zipfile.ZipFile(path) as archive:
            return {info.filename.removesuffix(".npy"): _read_member(archive, info) for info in archive.infolist()}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, pickle.UnpicklingError) as exc:
        raise CaseError(f"{path}: not a readable npz file ({exc})") from exc


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One ``.npy`` member: numpy's reader for arrays of numbers, :class:`_PlainDataUnpickler` for an object array."""
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if header is None or not header(member, max_header_size=10_000)[2].hasobject:  # numbers (or a version numpy checks)
            with archive.open(info) as again:
                return np.lib.format.read_array(again, allow_pickle=False)
        array = _PlainDataUnpickler(member).load()
    if not isinstance(array, np.ndarray):
        raise ValueError(f"member {info.filename!r} is an object array's pickle holding a {type(array).__name__}, not an array")
    return array


#: the globals a case file's pickle may name: numpy's arrays, dtypes and scalars (numpy 2's module names and numpy
#: 1's); lists, dicts, tuples, strings and numbers are pickle's own opcodes and name none
_PLAIN_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
    }
)


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays and plain containers and refuses any other global (``os.system``,
    ``builtins.eval``, a class whose construction runs code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PLAIN_GLOBALS:
            raise pickle.UnpicklingError(f"its pickle names {module}.{name}, not plain data (arrays, lists, dicts, numbers); refused")
        return super().find_class(module, name)


def _require_key(data: Mapping[str, Any], key: str, path: Path) -> Any:
    if key not in data:
        raise CaseError(f"{path}: key {key!r} missing (has {sorted(data)})")
    return data[key]


def _volume(value: Any, key: str, path: Path, *, integer: bool, shape: tuple[int, ...] | None = None) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 3 or (shape is not None and array.shape != shape):
        raise CaseError(f"{path}: key {key!r} has shape {array.shape}; expected {shape or 'a 3D volume (z, y, x)'}")
    kinds = "biu" if integer else "biuf"
    if array.dtype.kind not in kinds:
        raise CaseError(f"{path}: key {key!r} has dtype {array.dtype}; expected {'an integer label map' if integer else 'numbers'}")
    return array


def _spacing(value: Any, path: Path) -> tuple[float, float, float]:
    try:
        spacing = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise CaseError(f"{path}: key 'spacing' is not numeric ({exc})") from exc
    if spacing.shape != (3,) or not np.all(np.isfinite(spacing)) or np.any(spacing <= 0):
        raise CaseError(f"{path}: key 'spacing' must be 3 positive millimetre values (z, y, x), got {spacing.tolist()}")
    return tuple(float(s) for s in spacing)  # type: ignore[return-value]


def check_boxes(value: Any, shape: tuple[int, ...], path: Path, n_classes: int | None = None) -> list[dict[str, int]]:
    """The ``boxes`` entry as a list of dicts of ints, one per class, each inside the volume."""
    boxes = list(np.asarray(value, dtype=object).reshape(-1))
    if n_classes is not None and len(boxes) != n_classes:
        raise CaseError(f"{path}: key 'boxes' has {len(boxes)} box(es) for {n_classes} class(es)")
    checked = []
    for i, box in enumerate(boxes):
        where = f"{path}: key 'boxes', class {i + 1}"
        if not isinstance(box, Mapping):
            raise CaseError(f"{where}: expected a dict with {list(BOX_KEYS)}, got {type(box).__name__}")
        missing = [k for k in BOX_KEYS if k not in box]
        if missing:
            raise CaseError(f"{where}: box key(s) {missing} missing")
        try:
            b = {k: int(box[k]) for k in BOX_KEYS}
        except (TypeError, ValueError) as exc:
            raise CaseError(f"{where}: box values must be integers ({exc})") from exc
        depth, height, width = shape
        inside = (
            0 <= b["z_min"] <= b["z_mid"] <= b["z_max"] < depth
            and 0 <= b["z_mid_y_min"] <= b["z_mid_y_max"] < height
            and 0 <= b["z_mid_x_min"] <= b["z_mid_x_max"] < width
        )
        if not inside:
            raise CaseError(f"{where}: box {b} is not an ordered box inside the volume of shape {shape}")
        checked.append(b)
    return checked


def check_clicks(clicks: Any, clicks_order: Any, shape: tuple[int, ...], n_classes: int, path: Path) -> None:
    """``clicks`` (one {'fg': [[z, y, x], ...], 'bg': [...]} per class) inside the volume and agreeing with ``clicks_order``."""
    per_class = list(np.asarray(clicks, dtype=object).reshape(-1)) if clicks is not None else []
    orders = [list(o) for o in np.asarray(clicks_order, dtype=object).reshape(n_classes, -1)] if clicks_order is not None else []
    if len(per_class) != n_classes or len(orders) != n_classes:
        raise CaseError(f"{path}: keys 'clicks'/'clicks_order' must have one entry per class ({n_classes})")
    for i, (entry, order) in enumerate(zip(per_class, orders, strict=True)):
        where = f"{path}: key 'clicks', class {i + 1}"
        if not isinstance(entry, Mapping) or set(entry) != {"fg", "bg"}:
            raise CaseError(f"{where}: expected a dict with keys 'fg' and 'bg'")
        for kind in ("fg", "bg"):
            for point in entry[kind]:
                zyx = np.asarray(point)
                if zyx.shape != (3,) or zyx.dtype.kind not in "iu" or np.any(zyx < 0) or np.any(zyx >= np.array(shape)):
                    raise CaseError(f"{where}: {kind} click {np.asarray(point).tolist()} is not a voxel (z, y, x) inside the volume of shape {shape}")
            if order.count(kind) != len(entry[kind]):
                raise CaseError(f"{path}: key 'clicks_order', class {i + 1}: {order.count(kind)} {kind!r} entries for {len(entry[kind])} {kind} click(s)")


def list_cases(folder: Path) -> list[tuple[str, Path, Path]]:
    """(case id, image file, reference file) of every ``imgs/*.npz`` of a case folder, sorted."""
    images = sorted((Path(folder) / "imgs").glob("*.npz"))
    if not images:
        raise CaseError(f"{folder}: no case files imgs/*.npz (a case folder holds imgs/<case>.npz and gts/<case>.npz)")
    out = []
    for image in images:
        gts = Path(folder) / "gts" / image.name
        if not gts.is_file():
            raise CaseError(f"{image}: its reference {gts} does not exist (gts are kept in gts/<case>.npz, apart from the images)")
        out.append((image.stem, image, gts))
    return out


def load_case(case_id: str, image_file: Path, gts_file: Path) -> Case:
    """Read and validate one case; classes must be 1..C, each present, with one box each if boxes are given."""
    image = _load_npz(image_file)
    if "gts" in image:
        raise CaseError(f"{image_file}: key 'gts' must not be in the model's input file (keep it in {gts_file})")
    imgs = _volume(_require_key(image, "imgs", image_file), "imgs", image_file, integer=False)
    spacing = _spacing(_require_key(image, "spacing", image_file), image_file)
    gts = _volume(_require_key(_load_npz(gts_file), "gts", gts_file), "gts", gts_file, integer=True, shape=imgs.shape)
    n_classes = int(gts.max(initial=0))
    present = np.flatnonzero(np.bincount(gts.ravel().astype(np.int64))[1:]) + 1 if gts.min(initial=0) >= 0 else None
    if present is None or n_classes == 0 or present.tolist() != list(range(1, n_classes + 1)):
        raise CaseError(f"{gts_file}: key 'gts' must hold the classes 1..C, each present (found values {np.unique(gts).tolist()})")
    boxes = check_boxes(image["boxes"], imgs.shape, image_file, n_classes) if "boxes" in image else None
    return Case(case_id, Path(image_file), imgs, spacing, boxes, gts.astype(np.uint8, copy=False), n_classes)


def write_step_input(target: Path, case: Case, clicks: list[dict] | None, clicks_order: list[list] | None, prev_pred: np.ndarray | None) -> None:
    """The model's input for one step: the box step gets the case file's keys (``imgs``, ``spacing``,
    ``boxes``); a click step adds ``clicks``, ``clicks_order`` and ``prev_pred``, as the challenge's files do."""
    arrays: dict[str, Any] = {"imgs": case.imgs, "spacing": np.asarray(case.spacing)}
    if case.boxes is not None:
        arrays["boxes"] = case.boxes
    if clicks is not None:
        check_clicks(clicks, clicks_order, case.imgs.shape, case.n_classes, target)
        arrays |= {"clicks": clicks, "clicks_order": clicks_order, "prev_pred": prev_pred}
    save_npz_atomic(target, **{key: _numpy1_readable(value) for key, value in arrays.items()})


class _Numpy1Pickle(np.ndarray):
    """An object array whose pickle names only ``numpy.ndarray`` and ``numpy.dtype``.

    numpy 2 pickles an array through ``numpy._core.multiarray._reconstruct``, a module numpy 1.x (what many
    model images have, e.g. Debian 12's 1.24) cannot import. ``ndarray((0,), 'b')`` followed by the same state
    is what ``_reconstruct`` does, so the array read back, by numpy 1 or 2, is a plain ndarray equal to this one.
    """

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        _, _, state = cast(tuple[Any, Any, Any], np.ndarray.__reduce__(self))
        return np.ndarray, ((0,), "b"), state


def _numpy1_readable(value: Any) -> Any:
    """``value`` as ``np.savez`` would store it, its object array (lists of dicts: boxes, clicks) pickled for numpy 1.x too."""
    array = np.asanyarray(value)
    return array.view(_Numpy1Pickle) if array.dtype.hasobject else value


def read_step_output(path: Path, shape: tuple[int, ...], n_classes: int) -> tuple[np.ndarray | None, str, str | None]:
    """A model's output ``segs`` as uint8, its status and the step's flag (a one-line reason, or None).

    (segs, "ok", None) for an npz holding ``segs`` alone; (segs, "extra_members", reason) when it holds other members
    too: ``segs`` is scored (the challenge's outputs are ``segs`` only, so the others cannot change a score) and the
    reason names each member left unread with the sizes the zip directory claims. (None, "missing", None) or
    (None, "unreadable", None) when the file is absent or not an npz (the step then counts as all-zero). The file is
    untrusted (segbench.models.intake: only a regular file, only ``segs`` read, its header checked first); a refused
    file, ``segs`` absent, of another shape, of a non-integer dtype or with a label outside the case's
    0..``n_classes`` is an error naming the file."""
    try:
        segs, unread = intake.read_npz_array(path, "segs", tuple(shape))
    except FileNotFoundError:
        return None, "missing", None
    except intake.NotAnArchive:
        return None, "unreadable", None
    except intake.IntakeError as exc:
        raise CaseError(str(exc)) from exc
    if segs.size and (int(segs.min()) < 0 or int(segs.max()) > n_classes):
        raise CaseError(
            f"{path}: key 'segs' has values {int(segs.min())}..{int(segs.max())}; the case's labels are 0..{n_classes} (background and its {n_classes} classes)"
        )
    if unread:
        return segs.astype(np.uint8, copy=False), "extra_members", f"{path}: extra members not read: {', '.join(unread)}; scored from 'segs'"
    return segs.astype(np.uint8, copy=False), "ok", None


def reference_kind(folder: Path, given: str | None) -> str:
    """Whether a case folder's reference is a manual annotation or a model's output ("pseudo").

    From ``cases.json`` when the folder has one, else from ``given``; both and different is an error.
    """
    manifest = Path(folder) / MANIFEST
    recorded = json.loads(manifest.read_text(encoding="utf-8")).get("reference") if manifest.is_file() else None
    if recorded is not None and given is not None and recorded != given:
        raise CaseError(f"{manifest}: reference is {recorded!r}, but {given!r} was given")
    kind = recorded or given
    if kind not in REFERENCE_KINDS:
        raise CaseError(f"{folder}: say whether the reference is {' or '.join(REFERENCE_KINDS)} (no {MANIFEST} records it)")
    return kind


def save_npz_atomic(target: Path, **arrays: Any) -> None:
    """``np.savez_compressed`` to ``target`` atomically (lists of dicts become object arrays, as in the challenge's files)."""
    with atomic_path(target, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def _image_volume(path: Path) -> tuple[np.ndarray, nib.Nifti1Image]:
    """A NIfTI file, or a folder holding one DICOM image series (read as dcm2niix orders it), as int16 (z, y, x)."""
    image = read_series(path) if Path(path).is_dir() else cast(nib.Nifti1Image, nib.load(path))
    data = np.asanyarray(image.dataobj)
    if data.ndim != 3:
        raise CaseError(f"{path}: a 3D image is needed, got shape {data.shape}")
    info = np.iinfo(np.int16)
    if data.dtype.kind not in "iu" and not np.array_equal(data, np.round(data)):
        raise CaseError(f"{path}: intensities are not integers; the case files store int16 images")
    if data.min() < info.min or data.max() > info.max:
        raise CaseError(f"{path}: intensities {data.min()}..{data.max()} do not fit int16")
    return data.astype(np.int16).transpose(2, 1, 0), image


def convert(
    sources: Sequence[tuple[str, Path, Path]],
    structures: Mapping[str, int],
    out_dir: Path,
    *,
    seed: int = 2025,
    reference: str = "manual",
    note: str = "",
) -> dict[str, Any]:
    """NIfTI images and reference label maps -> a case folder of challenge npz files; returns its manifest.

    ``sources``: (case id, image, reference label map) on the same grid. ``structures``: name ->
    label id in the reference; those present in a case become its classes 1..C in ascending label
    order, everything else background. Volumes go to (z, y, x) array order (the stored voxel order,
    axes reversed), spacing likewise. Boxes follow the box rule with one legacy generator seeded
    with ``seed``, one shift per class, cases in id order.
    """
    if reference not in REFERENCE_KINDS:
        raise CaseError(f"reference must be one of {REFERENCE_KINDS}, got {reference!r}")
    rng = np.random.RandomState(seed)
    by_label = sorted((int(v), k) for k, v in structures.items())
    manifest: dict[str, Any] = {"reference": reference, "note": note, "seed": seed, "structures": dict(structures), "cases": {}}
    for case_id, image_path, reference_path in sorted(sources):
        imgs, image = _image_volume(Path(image_path))
        ref_image = cast(nib.Nifti1Image, nib.load(reference_path))
        check_same_grid(case_id, Path(image_path), image, Path(reference_path), ref_image)
        labels = np.asanyarray(ref_image.dataobj).transpose(2, 1, 0)
        gts = np.zeros(labels.shape, dtype=np.uint8)
        classes: list[dict[str, Any]] = []
        for label, name in by_label:
            mask = labels == label
            if mask.any():
                gts[mask] = len(classes) + 1
                classes.append({"class": len(classes) + 1, "name": name, "source_label": label})
        if not classes:
            raise CaseError(f"{reference_path}: none of the labels {[label for label, _ in by_label]} is present")
        boxes, shifts = boxes_of_labels(gts, rng)
        spacing = np.asarray(image.header.get_zooms()[:3], dtype=float)[::-1]
        save_npz_atomic(Path(out_dir) / "imgs" / f"{case_id}.npz", imgs=imgs, spacing=spacing, boxes=boxes)
        save_npz_atomic(Path(out_dir) / "gts" / f"{case_id}.npz", gts=gts)
        manifest["cases"][case_id] = {"image": _relative(image_path), "reference_file": _relative(reference_path), "classes": classes, "box_shifts": shifts}
    write_json_atomic(Path(out_dir) / MANIFEST, manifest)
    return manifest


def _relative(path: Path) -> str:
    """A path as the manifest records it: relative to the working folder, so that the file is the same on every clone."""
    return Path(os.path.relpath(path)).as_posix()


def class_names(folder: Path, case_id: str, n_classes: int) -> list[str]:
    """The names of classes 1..C of a case from ``cases.json``; "class_<c>" without one."""
    manifest = Path(folder) / MANIFEST
    if manifest.is_file():
        entry = json.loads(manifest.read_text(encoding="utf-8"))["cases"].get(case_id)
        if entry:
            return [c["name"] for c in entry["classes"]]
    return [f"class_{c}" for c in range(1, n_classes + 1)]
