"""Atomic file writes, and what reading a file that is not what it claims raises.

Every file segbench produces is written to a temporary name in the target directory and renamed
into place, so an interrupted stage never leaves a half-written file that a later stage could read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import nibabel as nib

#: what reading a file raises on bytes that are not what its format says (pandas' parser errors, JSON's and UTF-8's
#: decoding errors are ValueErrors; JSON nested past the recursion limit is a RecursionError): every reader catches
#: these and names the file
UNREADABLE = (OSError, ValueError, RecursionError)


def read_json(path: Path | str, what: str) -> Any:
    """The JSON document in ``path``; a file that cannot be read or decoded is a ValueError naming it and ``what`` it
    should have been."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except UNREADABLE as exc:
        raise ValueError(f"{path}: not a readable {what} ({exc})") from None


def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest (``md5``, ``sha256``, ...) of a file's bytes, read in blocks."""
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, algorithm).hexdigest()


def _umask() -> int:
    """The process's umask (read by setting it, then restoring it)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


_UMASK = _umask()
_FILE_MODE = 0o666 & ~_UMASK  # what a plain open() gives a new file; mkstemp would give 0600


PARTIAL_MARK = ".partial-"


def remove_partial_files(folder: Path) -> list[Path]:
    """Delete the temporary files that killed writers left in ``folder``; returns them."""
    leftovers = sorted(p for p in Path(folder).glob(f".*{PARTIAL_MARK}*") if p.is_file())
    for path in leftovers:
        path.unlink()
    return leftovers


@contextlib.contextmanager
def atomic_path(target: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` only on success.

    The temporary name is hidden (a leading dot), says it is partial and ends with ``suffix``; a
    process killed while writing leaves it behind (:func:`remove_partial_files`), never a truncated
    ``target``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}{PARTIAL_MARK}", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success it replaces ``target`` whole, so files of an
    earlier write that this one lacks go too. A failed or killed writer leaves ``target`` as it was (the
    hidden partial folder a killed one leaves is removed by the next write)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for leftover in target.parent.glob(f".{target.name}{PARTIAL_MARK}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}{PARTIAL_MARK}", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_UMASK)  # what a plain mkdir gives; mkdtemp gives 0700
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomic(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` atomically (UTF-8)."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def copy_file_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` atomically: a killed copy never leaves a truncated file behind."""
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


def write_json_atomic(target: Path, data: Any) -> None:
    """Write ``data`` as canonical JSON (sorted keys, fixed indentation) so equal data is byte-equal."""
    write_text_atomic(target, json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n")


def save_label_map_atomic(target: Path, labels: np.ndarray, like: nib.Nifti1Image) -> None:
    """Save an integer label map on the grid of ``like`` (same affine and header), atomically; gzip-compressed
    unless ``target`` ends in ``.nii`` (scratch files read back at once). nibabel is imported here: the stages that
    only write JSON and text (track, report) start 0.35 s sooner without it."""
    import nibabel as nib

    header = like.header.copy()
    header.set_data_dtype(np.uint8 if labels.max(initial=0) < 256 else np.int16)
    image = nib.Nifti1Image(labels.astype(header.get_data_dtype(), copy=False), like.affine, header)
    suffix = ".nii" if Path(target).name.endswith(".nii") else ".nii.gz"
    with atomic_path(target, suffix=suffix) as tmp:  # nibabel picks compression from the suffix
        nib.save(image, tmp)
