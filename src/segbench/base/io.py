"""Atomic file writes, and what reading a file that is not what it claims raises.

Every file segbench produces is written to a temporary name and renamed into place, so an interrupted stage never
leaves a half-written file that a later stage could read; in a DVC project the temporaries live in DVC's scratch
folder, so a killed writer's leftover is in no stage output and no git status (the next write removes it).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
#: where the atomic writes of a DVC project keep their temporaries: DVC's own scratch folder, which no stage output,
#: no `dvc status` and no `git status` sees (``.dvc/.gitignore`` ignores it)
SCRATCH = Path(".dvc", "tmp", "segbench-partial")


def remove_partial_files(folder: Path) -> list[Path]:
    """Delete the temporary files that killed writers left in ``folder``; returns them."""
    leftovers = sorted(p for p in Path(folder).glob(f".*{PARTIAL_MARK}*") if p.is_file())
    for path in leftovers:
        path.unlink()
    return leftovers


def _writer_alive(pid: int) -> bool:
    """Whether process ``pid`` (of this machine) still runs: a temporary of a live writer is never removed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_dead_partials(folder: Path, name: str) -> None:
    """Remove the temporaries in ``folder`` that a killed writer left for a target called ``name``: those whose
    process id (in their name) no longer runs, and those of a segbench before the id was in the name; a live writer's
    and another target's are left alone."""
    for leftover in folder.glob(f".{name}{PARTIAL_MARK}*"):
        pid, _, rest = leftover.name[len(name) + 1 + len(PARTIAL_MARK) :].partition("-")
        if not (pid.isdigit() and rest) or not _writer_alive(int(pid)):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


@functools.lru_cache(maxsize=64)
def _scratch_for(folder: Path) -> Path:
    """The folder the temporaries of writes into ``folder`` go to: the scratch folder (``SCRATCH``) of the DVC project
    holding ``folder`` when it is on the same filesystem (a rename cannot cross one), else ``folder`` itself (outside a
    DVC project: a ``segbench evaluate`` output, a test's folder)."""
    for parent in (folder, *folder.parents):
        if (parent / ".dvc").is_dir():
            scratch = parent / SCRATCH
            try:
                scratch.mkdir(parents=True, exist_ok=True)
                if scratch.stat().st_dev == folder.stat().st_dev:
                    return scratch
            except OSError:  # a read-only .dvc: beside the target
                pass
            break
    return folder


def _partial_prefix(target: Path) -> str:
    """A temporary's name before mkstemp's random part: hidden, the target's name, ``PARTIAL_MARK`` and the writer's
    process id (so the next write of the same target removes what a killed writer left)."""
    return f".{target.name}{PARTIAL_MARK}{os.getpid()}-"


def _temporary_home(target: Path) -> Path:
    """Where ``target``'s temporary is made (``_scratch_for`` its folder), after removing killed writers' leftovers
    for the same target there and beside the target (those of an older segbench)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    home = _scratch_for(target.parent.resolve())
    _remove_dead_partials(home, target.name)
    if home != target.parent.resolve():
        _remove_dead_partials(target.parent, target.name)
    return home


@contextlib.contextmanager
def atomic_path(target: Path, suffix: str = ".tmp", size: int | None = None) -> Iterator[Path]:
    """Yield a temporary path; rename it onto ``target`` only on success.

    In a DVC project the temporary lives in its scratch folder (``SCRATCH``), seen by no stage output and no git
    status, else beside ``target``; its name is hidden, says it is partial, carries the writer's process id and ends
    with ``suffix``. A process killed while writing leaves it behind, never a truncated ``target``; the next write of
    ``target`` removes it. A full disk is an OSError naming ``target`` and the ``size`` in bytes to write, if given.
    """
    target = Path(target)
    fd, tmp_name = tempfile.mkstemp(prefix=_partial_prefix(target), suffix=suffix, dir=_temporary_home(target))
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, target)
    except OSError as error:  # a bare write's "No space left on device" names neither the file nor the bytes
        if error.errno != errno.ENOSPC:
            raise
        raise OSError(errno.ENOSPC, f"{size} bytes needed" if size is not None else error.strerror, str(target)) from error
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temporary folder (where :func:`atomic_path` makes a temporary file); on success it replaces ``target``
    whole, so files of an earlier write that this one lacks go too. A failed or killed writer leaves ``target`` as it
    was (the partial folder a killed one leaves is removed by the next write)."""
    target = Path(target)
    tmp = Path(tempfile.mkdtemp(prefix=_partial_prefix(target), dir=_temporary_home(target)))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_UMASK)  # what a plain mkdir gives; mkdtemp gives 0700
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomic(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` atomically (UTF-8)."""
    data = text.encode("utf-8")
    with atomic_path(target, size=len(data)) as tmp:
        tmp.write_bytes(data)


def copy_file_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` atomically: a killed copy never leaves a truncated file behind."""
    with atomic_path(target, size=Path(source).stat().st_size) as tmp:
        shutil.copyfile(source, tmp)


def write_json_atomic(target: Path, data: Any) -> None:
    """Write ``data`` as canonical JSON (sorted keys, fixed indentation) so equal data is byte-equal."""
    write_text_atomic(target, json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n")


def json_ready(obj: Any) -> object:
    """Plain-Python copy: numpy scalars/arrays -> float/int/bool/list, non-finite floats -> None."""
    kind = type(obj)
    if kind is float:  # the common leaves first: exact type checks are much cheaper than the ABC checks below
        return obj if math.isfinite(obj) else None
    if kind is np.float64:
        value = float(obj)
        return value if math.isfinite(value) else None
    if kind is str or kind is int or kind is bool or obj is None:
        return obj
    if kind is dict:
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, Mapping):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "iub":
        return obj.tolist()
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f" and np.isfinite(obj).all():
        return obj.tolist()  # fast path for the per-case columns
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else None
    return obj


def save_label_map_atomic(target: Path, labels: np.ndarray, like: nib.Nifti1Image) -> None:
    """Save an integer label map on the grid of ``like`` (same affine and header), atomically; gzip-compressed
    unless ``target`` ends in ``.nii`` (scratch files read back at once). nibabel is imported here: the stages that
    only write JSON and text (track, report) start sooner without it (timed: benchmarks/README.md)."""
    import nibabel as nib

    header = like.header.copy()
    header.set_data_dtype(np.uint8 if labels.max(initial=0) < 256 else np.int16)
    image = nib.Nifti1Image(labels.astype(header.get_data_dtype(), copy=False), like.affine, header)
    suffix = ".nii" if Path(target).name.endswith(".nii") else ".nii.gz"
    with atomic_path(target, suffix=suffix) as tmp:  # nibabel picks compression from the suffix
        nib.save(image, tmp)


@dataclass(frozen=True)
class Recorded:
    """What DVC recorded for a file a stage wrote: the stage (as ``dvc repro`` names it), its lock file and the
    file's md5 there."""

    stage: str
    lock: Path
    md5: str


def _lock_outputs(lock: Path) -> dict[str, tuple[str, str]]:
    """Each output path (relative to the lock's folder) in a ``dvc.lock`` -> (stage, md5); {} for an unreadable lock
    (DVC leaves it empty when killed while writing it, and says so itself)."""
    import yaml

    try:
        document = yaml.load(lock.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except (*UNREADABLE, yaml.YAMLError):
        return {}
    stages = document.get("stages") if isinstance(document, dict) else None
    return {
        str(out["path"]).rstrip("/"): (str(stage), str(out["md5"]))
        for stage, entry in (stages or {}).items()
        if isinstance(entry, dict)
        for out in entry.get("outs") or ()
        if isinstance(out, dict) and out.get("md5")
    }


def _dir_manifest(project: Path, md5: str) -> dict[str, str]:
    """The files of a folder output (relative path -> md5) from DVC's cache of its ``.dir`` listing; {} without it."""
    for cache in (project / ".dvc" / "cache" / "files" / "md5", project / ".dvc" / "cache"):
        listing = cache / md5[:2] / md5[2:]
        if listing.is_file():
            try:
                return {str(e["relpath"]): str(e["md5"]) for e in json.loads(listing.read_text(encoding="utf-8"))}
            except (*UNREADABLE, KeyError, TypeError):
                return {}
    return {}


def recorded(path: Path | str) -> Recorded | None:
    """What the nearest ``dvc.lock`` records for ``path`` (a stage's output file, or a file in an output folder, read
    through DVC's cache of the folder's listing), or None: no DVC project, no lock naming it, a listing not cached."""
    path = Path(path).resolve()
    for folder in path.parents:
        lock = folder / "dvc.lock"
        if lock.is_file():
            relative = path.relative_to(folder)
            outputs = _lock_outputs(lock)
            for candidate in (relative, *relative.parents[:-1]):
                if candidate.as_posix() in outputs:
                    stage, md5 = outputs[candidate.as_posix()]
                    if candidate == relative:
                        return Recorded(stage, lock, md5)
                    root = next((p for p in (folder, *folder.parents) if (p / ".dvc").is_dir()), None)
                    inner = _dir_manifest(root, md5).get(relative.relative_to(candidate).as_posix()) if md5.endswith(".dir") and root else None
                    return Recorded(stage, lock, inner) if inner else None
        if (folder / ".dvc").is_dir():
            return None
    return None


def recorded_files(folder: Path | str) -> dict[Path, Recorded]:
    """The files directly in ``folder`` that the nearest ``dvc.lock`` records as stage outputs (present or not), each
    with its record: what should be there after ``dvc repro``."""
    folder = Path(folder).resolve()
    for parent in (folder, *folder.parents):
        lock = parent / "dvc.lock"
        if lock.is_file():
            found = {parent / out: Recorded(stage, lock, md5) for out, (stage, md5) in _lock_outputs(lock).items()}
            return {path: record for path, record in sorted(found.items()) if path.parent == folder}
        if (parent / ".dvc").is_dir():
            break
    return {}


def changed_since_recorded(path: Path | str) -> Recorded | None:
    """DVC's record of ``path`` when the file differs from it (its producer did not write these bytes: an edit, a
    damaged cache object checked out, a bit flip), else None (the same bytes, or nothing recorded)."""
    record = recorded(path)
    return record if record is not None and file_digest(Path(path), "md5") != record.md5 else None
