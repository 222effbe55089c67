"""Read what a model left in its outputs folder as hostile data: the one place segbench opens an untrusted output.

A submission controls every byte of its outputs folder, and inside its container it can learn the host path of that
folder (``/proc/self/mountinfo``). So a file is read only if it is a regular file directly in the folder, with no other
link to it (``lstat``, then ``open`` with ``O_NOFOLLOW`` and the same inode checked): a symlink, FIFO, device,
folder or hard link is refused before a byte is read. An npz is opened as a zip and only the expected member is read,
after its ``.npy`` header names the expected shape and an integer dtype; its bytes are inflated in bounded chunks and a
member that inflates past the size its header implies is refused while streaming, never allocated first. A NIfTI output
has its header's dimensions and datatype checked before any voxel is read, its compressed and inflated sizes bounded.
Every refusal is an :class:`IntakeError` whose message is one line naming the file and what is wrong.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import nibabel as nib
import numpy as np

from segbench.scoring.labelmaps import MAX_VOXEL_FACTOR

#: bytes inflated per read while streaming a member
CHUNK = 1 << 20
#: the largest npz, NIfTI or DICOM output read (bytes); an honest label map of a CT is a few MB
MAX_FILE_BYTES = 1 << 30
NIFTI_HEADER_BYTES = 352
#: the most members an npz output may list (an honest one holds ``segs`` alone) and the largest central directory read
MAX_NPZ_MEMBERS = 64
MAX_ZIP_DIRECTORY_BYTES = 64 << 10
#: a zip's end-of-central-directory record, its zip64 locator and record
_EOCD, _ZIP64_LOCATOR, _ZIP64_EOCD = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"


class IntakeError(ValueError):
    """An output refused unread (or read only up to the point it lied): the message is one line naming the file."""


class NotAnArchive(IntakeError):
    """A regular file that is not a zip at all (an honest model's broken write, as often as an attack)."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path, max_bytes: int | None = None) -> os.stat_result:
    """``path``'s lstat if it is a regular file with a single link (nothing followed) and, with ``max_bytes``, of at most
    that size; else IntakeError. A missing ``path`` raises FileNotFoundError."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise IntakeError(f"{path}: {_kind(info.st_mode)}, not a regular file; refused unread")
    if info.st_nlink != 1:
        raise IntakeError(f"{path}: a hard link ({info.st_nlink} names for one file); refused unread")
    if max_bytes is not None and info.st_size > max_bytes:
        raise IntakeError(f"{path}: {info.st_size} bytes, over the cap of {max_bytes}; refused unread")
    return info


@contextlib.contextmanager
def open_output(path: Path, max_bytes: int = MAX_FILE_BYTES) -> Iterator[BinaryIO]:
    """``path`` opened for reading if it is a regular file of at most ``max_bytes`` with a single link; else IntakeError.

    FileNotFoundError passes through (a missing output is the caller's case, not a refusal)."""
    path = Path(path)
    before = check_regular(path, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:  # replaced by a symlink or FIFO between lstat and open
        raise IntakeError(f"{path}: cannot be opened as a regular file ({exc.strerror}); refused unread") from exc
    with os.fdopen(fd, "rb") as stream:
        after = os.fstat(stream.fileno())
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(after.st_mode) or after.st_nlink != 1:
            raise IntakeError(f"{path}: replaced while being opened; refused")
        yield stream


def _read_exactly(stream: BinaryIO, n_bytes: int, what: str, keep: bool = True) -> bytearray:
    """Exactly ``n_bytes`` of ``stream`` (kept, or only counted) in bounded chunks, then proof that nothing follows."""
    buffer, left = bytearray(), n_bytes
    while left > 0:
        chunk = stream.read(min(CHUNK, left))
        if not chunk:
            raise IntakeError(f"{what}: ends {left} bytes short of the {n_bytes} its header implies")
        left -= len(chunk)
        if keep:
            buffer += chunk
    if stream.read(1):
        raise IntakeError(f"{what}: inflates past the {n_bytes} bytes its header implies; refused while streaming")
    return buffer


def _read_npy(stream: BinaryIO, what: str, shape: tuple[int, ...], kinds: str) -> np.ndarray:
    """The array of the ``.npy`` bytes of ``stream``, read only after its header names exactly ``shape`` and a dtype of
    one of ``kinds`` (numpy's dtype kinds; no objects, at most 8 bytes an item), in bounded chunks, and refused if its
    data ends early or runs past what the header implies."""
    version = np.lib.format.read_magic(stream)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    found_shape, fortran, dtype = header(stream, max_header_size=10_000)
    if tuple(found_shape) != tuple(shape):
        raise IntakeError(f"{what} has shape {tuple(found_shape)}; expected {tuple(shape)}")
    if dtype.kind not in kinds or dtype.hasobject or dtype.itemsize > 8:
        raise IntakeError(f"{what} has dtype {dtype}; expected {'an integer' if kinds == 'iu' else 'a numeric'} label map")
    data = _read_exactly(stream, math.prod(shape) * dtype.itemsize, what)
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")  # over a bytearray: writable, as np.load's


#: what numpy and zipfile raise on bytes that lie
_READ_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError)


def _unreadable(what: str, exc: BaseException) -> IntakeError:
    """One line naming what could not be read and why."""
    return IntakeError(f"{what}: unreadable: {' '.join(str(exc).split())}")


def _zip_directory(stream: BinaryIO, path: Path) -> tuple[int, int]:
    """The entry count and byte size a zip's central directory claims (its end record, or zip64's), read before zipfile
    parses that directory: a million empty entries in 47 MB cost zipfile 974 MB and a minute and a half."""
    size = stream.seek(0, os.SEEK_END)
    tail_start = max(0, size - (22 + 0xFFFF))
    stream.seek(tail_start)
    tail = stream.read()
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        raise NotAnArchive(f"{path}: not an npz (zip) file: no end of central directory")
    entries, directory = int.from_bytes(tail[at + 10 : at + 12], "little"), int.from_bytes(tail[at + 12 : at + 16], "little")
    if (entries == 0xFFFF or directory == 0xFFFFFFFF) and at >= 20 and tail[at - 20 : at - 16] == _ZIP64_LOCATOR:
        stream.seek(int.from_bytes(tail[at - 12 : at - 4], "little"))
        record = stream.read(56)
        if record[:4] != _ZIP64_EOCD or len(record) < 56:
            raise IntakeError(f"{path}: a zip64 end record that is not where its locator says; refused")
        entries, directory = int.from_bytes(record[32:40], "little"), int.from_bytes(record[40:48], "little")
    stream.seek(0)
    return entries, directory


def read_npz_array(path: Path, key: str, shape: tuple[int, ...], max_bytes: int = MAX_FILE_BYTES) -> tuple[np.ndarray, list[str]]:
    """Member ``key`` of the npz ``path``: of exactly ``shape`` and an integer dtype, read without inflating anything else;
    and the members left unread, each named with the sizes the zip directory claims for it (never inflated to check),
    so that a caller can flag a file that carries more than it asked for. The directory's claimed entry count and size are
    capped (MAX_NPZ_MEMBERS, MAX_ZIP_DIRECTORY_BYTES) before it is parsed, and two members of one name are refused: which
    of them a reader takes is the reader's choice."""
    with open_output(path, max_bytes) as stream:
        entries, directory = _zip_directory(stream, path)
        if entries > MAX_NPZ_MEMBERS or directory > MAX_ZIP_DIRECTORY_BYTES:
            raise IntakeError(
                f"{path}: its zip directory claims {entries:,} members in {directory:,} bytes, more than {MAX_NPZ_MEMBERS} members "
                f"or {MAX_ZIP_DIRECTORY_BYTES:,} bytes; refused unparsed"
            )
        try:
            archive = zipfile.ZipFile(stream)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise NotAnArchive(f"{path}: not an npz (zip) file: {exc}") from exc
        with archive:
            names = [info.filename for info in archive.infolist()]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise IntakeError(
                    f"{path}: members named twice: {', '.join(repr(name) for name in twice[:5])}; refused (which one is read is a reader's choice)"
                )
            unread = [
                f"{other.filename!r} (claims {other.file_size} bytes, {other.compress_size} compressed)"
                for other in archive.infolist()
                if other.filename != f"{key}.npy"
            ]
            try:
                info = archive.getinfo(f"{key}.npy")
            except KeyError:
                raise IntakeError(f"{path}: key {key!r} missing") from None
            what = f"{path}: key {key!r}"
            try:
                with archive.open(info) as member:
                    return _read_npy(cast(BinaryIO, member), what, shape, "iu"), unread
            except IntakeError:
                raise
            except _READ_ERRORS as exc:
                raise _unreadable(what, exc) from exc


def read_npy_array(path: Path, shape: tuple[int, ...], kinds: str = "iu", max_bytes: int = MAX_FILE_BYTES) -> np.ndarray:
    """The ``.npy`` file ``path`` (a regular file of at most ``max_bytes`` with one link) if its header names exactly
    ``shape`` and a dtype of ``kinds``: a header claiming any other size is refused before anything is allocated."""
    with open_output(path, max_bytes) as stream:
        try:
            return _read_npy(stream, str(path), shape, kinds)
        except IntakeError:
            raise
        except _READ_ERRORS as exc:
            raise _unreadable(str(path), exc) from exc


def check_nifti_output(path: Path, reference_shape: tuple[int, ...], max_bytes: int = MAX_FILE_BYTES) -> None:
    """Refuse a NIfTI output before nibabel reads its voxels: a regular file under ``max_bytes`` whose header is 3D
    (a trailing dimension of 1 allowed), of an integer datatype, with at most MAX_VOXEL_FACTOR times the reference's voxels,
    and which inflates to exactly what that header implies."""
    with open_output(path, max_bytes) as stream:
        gzipped = stream.read(2) == b"\x1f\x8b"
        stream.seek(0)
        body: BinaryIO = gzip.GzipFile(fileobj=stream) if gzipped else stream  # type: ignore[assignment]
        try:
            raw = body.read(NIFTI_HEADER_BYTES)
            header = nib.Nifti1Header.from_fileobj(io.BytesIO(raw), check=True)
            shape = tuple(int(n) for n in header.get_data_shape())
            dtype = header.get_data_dtype()
            offset = int(header.get_data_offset())
        except Exception as exc:  # nibabel raises many kinds on a lying header; all of them are a refusal
            raise IntakeError(f"{path}: not a readable NIfTI-1 header: {' '.join(str(exc).split())[:200]}") from exc
        while len(shape) > 3 and shape[-1] == 1:
            shape = shape[:-1]
        if len(shape) != 3:
            raise IntakeError(f"{path}: header says shape {shape}; a 3D label map is needed")
        if dtype.kind not in "iu":
            raise IntakeError(f"{path}: header says datatype {dtype}; expected an integer label map")
        if math.prod(shape) > MAX_VOXEL_FACTOR * math.prod(reference_shape):
            raise IntakeError(f"{path}: header says shape {shape}, over {MAX_VOXEL_FACTOR} times the reference grid {tuple(reference_shape)}; refused unread")
        expected = offset + math.prod(shape) * dtype.itemsize - len(raw)
        try:
            _read_exactly(body, expected, f"{path}: voxels", keep=False)
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            raise IntakeError(f"{path}: unreadable compressed data: {exc}") from exc
