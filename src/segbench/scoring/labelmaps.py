"""Decoding label maps (NIfTI, DICOM-SEG, RTSTRUCT) into integer arrays on a known world grid.

Every failure names the file: a benchmark over hundreds of cases is only debuggable if the one bad
file is identified by the error itself.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard, cast

import nibabel as nib
import numpy as np
from isal import igzip_lib
from nibabel.arrayproxy import ArrayProxy

#: NIfTI RAS+ from DICOM LPS: flip the first two world axes.
_LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
#: a prediction on its own grid (resampled onto the reference's afterwards) may be finer than the reference: at most
#: this many times its voxels, checked on its header before any volume is built
MAX_VOXEL_FACTOR = 8


def validated_labels(path: Path, data: np.ndarray) -> np.ndarray:
    """Return ``data`` as an integer array; reject non-3D, NaN and non-integer label values."""
    if data.ndim != 3:
        raise ValueError(f"{path}: expected a 3D label map, got shape {data.shape}")
    if data.size == 0:
        raise ValueError(f"{path}: label map has no voxels (shape {data.shape})")
    if np.issubdtype(data.dtype, np.integer) or data.dtype == np.bool_:
        return data.astype(np.uint8, copy=False) if data.dtype == np.bool_ else data
    if not np.issubdtype(data.dtype, np.floating):
        raise ValueError(f"{path}: unsupported label dtype {data.dtype}")
    if not np.isfinite(data).all():
        raise ValueError(f"{path}: label map contains NaN or infinite values")
    if not (np.mod(data, 1) == 0).all():
        bad = np.unique(data[np.mod(data, 1) != 0])[:5]
        raise ValueError(f"{path}: label map contains non-integer values, e.g. {bad.tolist()}")
    lo, hi = float(data.min()), float(data.max())
    int32 = np.iinfo(np.int32)
    if lo < int32.min or hi > int32.max:  # the cast would not keep them (x86 makes each -2147483648)
        bad = np.unique(data[(data < int32.min) | (data > int32.max)])[:5]
        raise ValueError(f"{path}: label values beyond the int32 range, e.g. {bad.tolist()}")
    dtype = np.uint8 if lo >= 0 and hi < 256 else np.int32
    return data.astype(dtype)


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such label map file")
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: file is empty (0 bytes)")


def check_voxel_dtype(path: Path, img: nib.spatialimages.SpatialImage) -> None:
    """Refuse a NIfTI whose header's voxel type cannot hold labels (complex, RGB, more than 8 bytes a voxel) before a voxel is
    decoded: such a volume cost 1.2-2.0 GB before its dtype was refused."""
    dtype = np.dtype(img.header.get_data_dtype())
    if dtype.kind not in "biuf" or dtype.itemsize > 8:
        raise ValueError(f"{path}: header says voxel type {dtype}; a label map is integer (or float holding integers); refused before decoding")


def load_nifti(path: Path) -> tuple[np.ndarray, nib.Nifti1Image]:
    """Decode a NIfTI label map once: (integer array, image carrying affine and header).

    A gzipped integer map without intensity scaling is inflated by ISA-L into the array (``_inflate_whole``);
    an unscaled float map (float holding integers) is streamed twice, checked, then cast, never held as floats
    (``_stream_float_labels``); anything else is decoded by nibabel. All give the same array. The voxel type is checked on
    the header first."""
    path = Path(path)
    _check_file(path)
    try:
        img = cast(nib.Nifti1Image, nib.load(path))
    except Exception as exc:
        raise ValueError(f"{path}: cannot read as NIfTI ({type(exc).__name__}: {exc})") from exc
    check_voxel_dtype(path, img)
    proxy = img.dataobj
    if _is_plain_float(proxy):
        return _stream_float_labels(path, proxy), img
    try:
        data = _inflate_whole(path, proxy) if _is_plain_integer(proxy) and _is_gzipped(path) else np.asanyarray(proxy)
    except Exception as exc:  # nibabel/gzip/zlib raise many exception types for corrupt files
        raise ValueError(f"{path}: cannot read as NIfTI ({type(exc).__name__}: {exc})") from exc
    return validated_labels(path, data), img


#: Voxel bytes decoded per step when a NIfTI is streamed (whole planes of the slowest axis).
STREAM_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class NonzeroCrop:
    """The smallest box of a label map that holds every non-zero voxel.

    ``data``: the box's voxels (C-contiguous, array-axis order; shape (0, 0, 0) if the map is all
    zero), which start at index ``start`` of the full array of shape ``shape``."""

    data: np.ndarray
    start: tuple[int, int, int]
    shape: tuple[int, int, int]

    @property
    def empty(self) -> bool:
        return self.data.size == 0


def nonzero_box(*arrays: np.ndarray) -> tuple[slice, ...] | None:
    """Smallest box holding every non-zero voxel of all (same-shape) arrays; None if all are zero."""
    hits = [np.zeros(n, dtype=bool) for n in arrays[0].shape]
    for a in arrays:
        if a.size == 0:
            continue
        # two passes over the array: along its slowest axis, and onto its (small) cross-section, whose
        # axes give the rest (numpy's reduction over two axes at once took 4-6x longer). A Fortran-ordered
        # array (nibabel decodes NIfTI so) is walked transposed: its reshape would otherwise copy it.
        nz, axes = unsigned_view(a), list(range(a.ndim))
        if not nz.flags.c_contiguous and nz.flags.f_contiguous:
            nz, axes = nz.T, axes[::-1]
        hits[axes[0]] |= nz.reshape(len(nz), -1).max(axis=1) > 0
        plane = nz.max(axis=0)
        for i in range(1, a.ndim):
            hits[axes[i]] |= plane.max(axis=tuple(x for x in range(plane.ndim) if x != i - 1)) > 0
    if not hits[0].any():
        return None
    return tuple(slice(int(np.argmax(h)), len(h) - int(np.argmax(h[::-1]))) for h in hits)


def unsigned_view(a: np.ndarray) -> np.ndarray:
    """An unsigned integer array that is non-zero where ``a`` is (a view unless ``a`` is float):
    its maximum over axes is then a fast "any non-zero" reduction, without a boolean copy."""
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    if a.dtype.kind == "i":
        return a.view(a.dtype.str.replace("i", "u"))
    if a.dtype.kind == "u":
        return a
    return (a != 0).view(np.uint8)


def nonzero_crop(data: np.ndarray) -> NonzeroCrop:
    """``data``'s non-zero box (see ``NonzeroCrop``)."""
    box = nonzero_box(data)
    shape = cast(tuple[int, int, int], tuple(int(n) for n in data.shape))
    if box is None:
        return NonzeroCrop(np.zeros((0, 0, 0), dtype=data.dtype), (0, 0, 0), shape)
    return NonzeroCrop(np.ascontiguousarray(data[box]), cast(tuple[int, int, int], tuple(b.start for b in box)), shape)


class _Inflater:
    """The decoded bytes of a gzip stream (every member, in order), read n at a time.

    Inflated by ISA-L (``isal``): the same format as zlib, with the CRC and length of each member
    checked, faster. Its decompressor keeps the input it has not used yet itself: zlib's interface
    hands that back as a new bytes object after every read, a copy of the rest of the file each time
    (timed: benchmarks/README.md)."""

    def __init__(self, raw: bytes) -> None:
        self._d, self._input = igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_GZIP), raw

    def read(self, n: int) -> bytes:
        """The next n decoded bytes, fewer only where the stream ends."""
        parts = []
        while n > 0:
            if self._d.eof:
                if self._d.unused_data[:2] != _GZIP_MAGIC:
                    break
                # a further member continues the data
                self._d, self._input = igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_GZIP), self._d.unused_data
            try:
                out = self._d.decompress(self._input, n)
            except igzip_lib.IsalError as exc:  # type: ignore[misc]  # isal's stubs do not declare IsalError an exception; it is one
                raise ValueError(f"corrupt gzip data ({exc})") from exc
            self._input = b""
            if out:
                parts.append(out)
                n -= len(out)
            elif self._d.needs_input and not self._d.eof:
                break  # the input ends before the stream does
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def finish(self) -> None:
        """Decode the rest, so that gzip's CRC and length check the whole stream; data after what was read (a .nii.gz followed
        by gigabytes of gzip'd zeros) is refused at its first decoded bytes, never inflated to its end."""
        extra = self.read(1)
        if extra:
            raise ValueError("the gzip stream holds data after the voxels its header implies (trailing data); refused after its first byte")
        if not self._d.eof:
            raise EOFError("compressed stream ends before its end-of-stream marker")


def _stream_nonzero(path: Path, proxy: ArrayProxy) -> NonzeroCrop:
    """Decode an integer NIfTI plane by plane (planes of the slowest axis), keeping only the planes
    that hold a non-zero voxel: the full volume (10^8 voxels for a CT) is never allocated, and a
    plane sized buffer stays in cache instead of writing the whole array to memory."""
    n0, n1, n2 = (int(n) for n in proxy.shape)
    plane_bytes = n0 * n1 * proxy.dtype.itemsize
    per_read = max(1, STREAM_BYTES // plane_bytes)
    kept: list[tuple[int, np.ndarray]] = []  # (plane index, plane as (n1, n0))
    footprint = np.zeros((n1, n0), dtype=bool)
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == _GZIP_MAGIC
        fh.seek(0)
        stream = _Inflater(fh.read()) if gzipped else fh
        stream.read(int(proxy.offset))
        k = 0
        while k < n2:
            count = min(per_read, n2 - k)
            block = stream.read(count * plane_bytes)
            if len(block) != count * plane_bytes:
                raise EOFError(f"voxel data ends after {k * plane_bytes + len(block)} of {n2 * plane_bytes} bytes")
            planes = np.frombuffer(block, dtype=proxy.dtype).reshape(count, n1, n0)
            hit = unsigned_view(planes).reshape(count, -1).max(axis=1) > 0
            for p in np.flatnonzero(hit):
                kept.append((k + int(p), planes[p]))
                footprint |= planes[p] != 0
            k += count
        if gzipped:
            cast(_Inflater, stream).finish()
    if not kept:
        return NonzeroCrop(np.zeros((0, 0, 0), dtype=proxy.dtype), (0, 0, 0), (n0, n1, n2))
    rows, cols = np.flatnonzero(footprint.any(axis=1)), np.flatnonzero(footprint.any(axis=0))
    (j0, j1), (i0, i1) = (rows[0], rows[-1] + 1), (cols[0], cols[-1] + 1)
    k0 = kept[0][0]
    box = np.zeros((kept[-1][0] + 1 - k0, j1 - j0, i1 - i0), dtype=proxy.dtype.newbyteorder("="))
    for kk, plane in kept:
        box[kk - k0] = plane[j0:j1, i0:i1]
    return NonzeroCrop(np.ascontiguousarray(box.transpose(2, 1, 0)), (int(i0), int(j0), int(k0)), (n0, n1, n2))


def _is_plain_integer(proxy: object) -> TypeGuard[ArrayProxy]:
    """An integer 3D array stored in Fortran order without intensity scaling: its voxels are the file's bytes."""
    return (
        isinstance(proxy, ArrayProxy)
        and len(proxy.shape) == 3
        and min(proxy.shape) > 0
        and proxy.order == "F"
        and proxy.dtype.kind in "iu"
        and proxy.slope == 1.0
        and proxy.inter == 0.0
    )


def _is_gzipped(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def _inflate_whole(path: Path, proxy: ArrayProxy) -> np.ndarray:
    """The whole voxel array of a gzipped plain-integer NIfTI (``_is_plain_integer``), inflated by ISA-L in
    ``STREAM_BYTES`` steps straight into the array, the stream's CRC and length checked: nibabel's gzip reader
    is slower (timed: benchmarks/README.md)."""
    shape = tuple(int(n) for n in proxy.shape)
    out = np.empty(int(np.prod(shape)) * proxy.dtype.itemsize, dtype=np.uint8)
    with open(path, "rb") as fh:
        stream = _Inflater(fh.read())
    stream.read(int(proxy.offset))
    for start in range(0, len(out), STREAM_BYTES):
        block = stream.read(min(STREAM_BYTES, len(out) - start))
        if start + len(block) < min(start + STREAM_BYTES, len(out)):
            raise EOFError(f"voxel data ends after {start + len(block)} of {len(out)} bytes")
        out[start : start + len(block)] = np.frombuffer(block, dtype=np.uint8)
    stream.finish()
    return out.view(proxy.dtype).reshape(shape, order="F")


def _is_plain_float(proxy: object) -> TypeGuard[ArrayProxy]:
    """A float 3D array stored in Fortran order without intensity scaling: labels written as floats (float64 costs 8
    bytes a voxel, 1.2 GB for a CT's grid before a label is checked)."""
    return (
        isinstance(proxy, ArrayProxy)
        and len(proxy.shape) == 3
        and min(proxy.shape) > 0
        and proxy.order == "F"
        and proxy.dtype.kind == "f"
        and proxy.slope == 1.0
        and proxy.inter == 0.0
    )


def _voxel_blocks(path: Path, proxy: ArrayProxy) -> Iterator[np.ndarray]:
    """The voxels of a Fortran-order NIfTI in file order, ``STREAM_BYTES`` at a time, as arrays of the file's dtype; a
    gzip stream's CRC, length and trailing data are checked after the last block (``_Inflater.finish``). A file that
    cannot be read so is an error naming it."""
    try:
        yield from _decoded_blocks(path, proxy)
    except Exception as exc:  # gzip/isal/OS errors of many types for a corrupt or truncated file
        raise ValueError(f"{path}: cannot read as NIfTI ({type(exc).__name__}: {exc})") from exc


def _decoded_blocks(path: Path, proxy: ArrayProxy) -> Iterator[np.ndarray]:
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == _GZIP_MAGIC
        fh.seek(0)
        stream = _Inflater(fh.read()) if gzipped else fh
        stream.read(int(proxy.offset))
        total = int(np.prod([int(n) for n in proxy.shape])) * proxy.dtype.itemsize
        step = max(proxy.dtype.itemsize, STREAM_BYTES - STREAM_BYTES % proxy.dtype.itemsize)
        for start in range(0, total, step):
            block = stream.read(min(step, total - start))
            if len(block) != min(step, total - start):
                raise EOFError(f"voxel data ends after {start + len(block)} of {total} bytes")
            yield np.frombuffer(block, dtype=proxy.dtype)
        if gzipped:
            cast(_Inflater, stream).finish()


def _stream_float_labels(path: Path, proxy: ArrayProxy) -> np.ndarray:
    """``validated_labels`` of an unscaled float map (``_is_plain_float``) without its float array: a first pass checks
    every block (finite, whole numbers, within int32) and finds the range, a second casts each block into the label
    array of the dtype that range needs (uint8 or int32). Same array, same errors (their examples the smallest values)."""
    lo, hi, nonfinite = np.inf, -np.inf, False
    fractional: np.ndarray = np.empty(0)
    beyond: np.ndarray = np.empty(0)
    int32 = np.iinfo(np.int32)
    for block in _voxel_blocks(path, proxy):
        finite = np.isfinite(block)
        nonfinite |= not finite.all()
        values = block[finite] if not finite.all() else block
        whole = np.mod(values, 1) == 0
        if not whole.all():
            fractional = np.unique(np.concatenate([fractional, values[~whole]]))[:5]
        if values.size:
            lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
            out_of_range = (values < int32.min) | (values > int32.max)
            if out_of_range.any():
                beyond = np.unique(np.concatenate([beyond, values[out_of_range]]))[:5]
    if nonfinite:
        raise ValueError(f"{path}: label map contains NaN or infinite values")
    if fractional.size:
        raise ValueError(f"{path}: label map contains non-integer values, e.g. {fractional.tolist()}")
    if beyond.size:
        raise ValueError(f"{path}: label values beyond the int32 range, e.g. {beyond.tolist()}")
    dtype = np.uint8 if lo >= 0 and hi < 256 else np.int32
    out = np.empty(int(np.prod([int(n) for n in proxy.shape])), dtype=dtype)
    start = 0
    for block in _voxel_blocks(path, proxy):
        out[start : start + block.size] = block
        start += block.size
    return out.reshape(tuple(int(n) for n in proxy.shape), order="F")


def load_nifti_nonzero(path: Path) -> tuple[NonzeroCrop, nib.Nifti1Image]:
    """Decode a NIfTI label map once, keeping only its non-zero box: (crop, image with the header).

    Integer maps without intensity scaling (what segmentation tools write) are streamed plane by
    plane (``_stream_nonzero``); anything else is decoded whole by nibabel and checked like
    ``load_nifti`` (NaN, non-integer values), then cropped. Errors name the file."""
    path = Path(path)
    img = nifti_image(path)
    check_voxel_dtype(path, img)
    try:
        proxy = img.dataobj
        if _is_plain_integer(proxy):
            return _stream_nonzero(path, proxy), img
    except Exception as exc:
        raise ValueError(f"{path}: cannot read as NIfTI ({type(exc).__name__}: {exc})") from exc
    data, img = load_nifti(path)
    return nonzero_crop(data), img


def nifti_image(path: Path) -> nib.Nifti1Image:
    """A NIfTI file as nibabel opens it: its header read, not a voxel (so a grid can be checked before any is
    decoded); errors name the file."""
    path = Path(path)
    _check_file(path)
    try:
        return cast(nib.Nifti1Image, nib.load(path))
    except Exception as exc:
        raise ValueError(f"{path}: cannot read as NIfTI ({type(exc).__name__}: {exc})") from exc


def is_dicom(path: Path) -> bool:
    """True for a file with the DICOM preamble magic ``DICM`` at byte 128."""
    with open(path, "rb") as fh:
        fh.seek(128)
        return fh.read(4) == b"DICM"


def load_label_map(
    path: Path,
    *,
    dicom_labels: Mapping[str, int] | None = None,
    reference_shape: tuple[int, ...] | None = None,
    series_folder: Path | None = None,
) -> tuple[np.ndarray, nib.spatialimages.SpatialImage]:
    """Decode a NIfTI, DICOM-SEG or RTSTRUCT label map into (integer array, image with world affine).

    DICOM label values: the segment number (DICOM-SEG) or ROI number (RTSTRUCT), unless
    ``dicom_labels`` maps segment labels / ROI names to label ids. ``reference_shape``: a DICOM volume whose geometry
    (the SEG's frames, the RTSTRUCT's series) has over MAX_VOXEL_FACTOR times its voxels is refused before it is built.
    ``series_folder``: where an RTSTRUCT's image series is (default: the RTSTRUCT's own folder; evaluate reads a
    private copy of a team's RTSTRUCT, drawn on the series in the team's folder).
    """
    path = Path(path)
    _check_file(path)
    if not is_dicom(path):
        return load_nifti(path)
    import pydicom

    cap = dicom_byte_cap(reference_shape)
    with _regular_file(path) as stream:
        check_deflated(stream, path, cap)  # its errors name the file
        try:
            header = pydicom.dcmread(stream, stop_before_pixels=True)
            modality = header.Modality
        except Exception as exc:
            raise ValueError(f"{path}: cannot read DICOM header ({type(exc).__name__}: {exc})") from exc
    if modality == "SEG":
        _check_frames(path, header, cap)
        data, affine = _load_dicom_seg(path, dicom_labels, reference_shape)
    elif modality == "RTSTRUCT":
        data, affine = _load_rtstruct(path, dicom_labels, reference_shape, path.parent if series_folder is None else Path(series_folder))
    else:
        raise ValueError(f"{path}: DICOM modality {modality!r} is not a segmentation (SEG or RTSTRUCT)")
    img = nib.Nifti1Image(data, affine)
    return validated_labels(path, data), img


#: what a DICOM file's deflated dataset may inflate to, and a DICOM-SEG's frames decode to: this much, plus two bytes for
#: each voxel MAX_VOXEL_FACTOR times the reference grid allows (without a reference, this much alone)
DICOM_BASE_BYTES = 256 << 20
#: the Deflated Explicit VR Little Endian transfer syntax: the whole dataset after the file meta is one deflate stream
DEFLATED_SYNTAX = "1.2.840.10008.1.2.1.99"


def dicom_byte_cap(reference_shape: tuple[int, ...] | None) -> int:
    """The most bytes a DICOM label map may inflate or decode to (DICOM_BASE_BYTES's rule)."""
    return DICOM_BASE_BYTES + (2 * MAX_VOXEL_FACTOR * math.prod(reference_shape) if reference_shape is not None else 0)


def check_deflated(stream: BinaryIO, where: Path, cap: int) -> None:
    """Refuse a DICOM file in the deflated transfer syntax whose dataset inflates past ``cap`` bytes, counted in 1 MB chunks
    before pydicom inflates it whole (a 1.5 MB file cost pydicom 3.43 GB); ``stream`` is left at its start."""
    import zlib

    import pydicom

    start = stream.tell()
    try:
        pydicom.filereader.read_preamble(stream, False)
        meta = pydicom.filereader._read_file_meta_info(stream)
        if str(meta.get("TransferSyntaxUID", "")) != DEFLATED_SYNTAX:
            return
        inflater, inflated = zlib.decompressobj(-zlib.MAX_WBITS), 0
        while chunk := stream.read(STREAM_BYTES):
            inflated += len(inflater.decompress(chunk, cap + 1 - inflated))
            while inflater.unconsumed_tail and inflated <= cap:
                inflated += len(inflater.decompress(inflater.unconsumed_tail, cap + 1 - inflated))
            if inflated > cap:
                raise ValueError(f"{where}: its deflated DICOM dataset inflates past {cap:,} bytes; refused before decoding")
    except zlib.error as exc:
        raise ValueError(f"{where}: its deflated DICOM dataset is corrupt ({exc})") from exc
    except pydicom.errors.InvalidDicomError as exc:
        raise ValueError(f"{where}: cannot read DICOM header ({exc})") from exc
    finally:
        stream.seek(start)


def _check_frames(path: Path, ds: Any, cap: int) -> None:
    """Refuse a DICOM-SEG whose frames, as its header describes them, decode past ``cap`` bytes (compressed pixel data is
    decoded frame by frame into that many)."""
    try:
        n_bytes = (
            int(getattr(ds, "NumberOfFrames", 1) or 1) * int(ds.Rows) * int(ds.Columns) * int(getattr(ds, "SamplesPerPixel", 1)) * max(1, int(ds.BitsAllocated))
        ) // 8
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: its header does not describe its frames ({exc})") from exc
    if n_bytes > cap:
        raise ValueError(f"{path}: its header's frames decode to {n_bytes:,} bytes, more than {cap:,}; refused before decoding")


def _check_volume(path: Path, shape: tuple[int, ...], reference_shape: tuple[int, ...] | None) -> None:
    """Refuse a DICOM volume of ``shape`` (from its header) of over MAX_VOXEL_FACTOR times the reference's voxels before
    it is built."""
    if reference_shape is not None and math.prod(shape) > MAX_VOXEL_FACTOR * math.prod(reference_shape):
        raise ValueError(
            f"{path}: its geometry makes a volume of shape {tuple(shape)}, over {MAX_VOXEL_FACTOR} times the "
            f"reference grid {tuple(reference_shape)}; refused before it is built"
        )


def _load_dicom_seg(path: Path, dicom_labels: Mapping[str, int] | None, reference_shape: tuple[int, ...] | None) -> tuple[np.ndarray, np.ndarray]:
    """DICOM-SEG -> (label array, RAS affine) using highdicom's geometry reconstruction."""
    import highdicom as hd

    try:
        seg = hd.seg.segread(str(path))
        geometry = seg.get_volume_geometry()
    except Exception as exc:
        raise ValueError(f"{path}: cannot build a regular 3D volume from the DICOM-SEG ({exc})") from exc
    if geometry is not None:
        _check_volume(path, tuple(geometry.spatial_shape), reference_shape)
    try:
        volume = seg.get_volume(combine_segments=True, relabel=False, dtype=np.uint16)
    except Exception as exc:
        raise ValueError(f"{path}: cannot build a regular 3D volume from the DICOM-SEG ({exc})") from exc
    data = np.asarray(volume.array)
    if dicom_labels is not None:
        lut = np.zeros(int(data.max()) + 1, dtype=np.int32)
        for number in seg.get_segment_numbers():
            name = seg.get_segment_description(number).segment_label
            if name not in dicom_labels:
                raise ValueError(f"{path}: segment {number} {name!r} has no label id in {sorted(dicom_labels)}")
            lut[number] = dicom_labels[name]
        data = lut[data]
    data = data.astype(np.uint8) if data.max(initial=0) < 256 else data.astype(np.int32)
    return data, _LPS_TO_RAS @ np.asarray(volume.affine, dtype=np.float64)


def _load_rtstruct(
    path: Path, dicom_labels: Mapping[str, int] | None, reference_shape: tuple[int, ...] | None, series_folder: Path
) -> tuple[np.ndarray, np.ndarray]:
    """RTSTRUCT -> (label array (rows, columns, slices), RAS affine), its closed planar contours filled on the image
    series it references (``_rtstruct_series``: the slices' headers, found in ``series_folder``).

    A contour is drawn on the slice its ContourImageSequence names, else on the slice its points lie in; its points,
    mapped to (column, row) pixel indices and rounded, are filled as one polygon set per ROI and slice (OpenCV's
    ``fillPoly``, as rt-utils draws them). ROIs are drawn in StructureSetROISequence order, a later one over an earlier
    one. POINT and OPEN contours (markers, lines) enclose nothing and are not drawn."""
    import cv2
    import pydicom

    try:
        rt = pydicom.dcmread(path)
        rois = [(int(r.ROINumber), str(r.ROIName)) for r in rt.StructureSetROISequence]
        contours = {int(c.ReferencedROINumber): c.get("ContourSequence", []) for c in rt.get("ROIContourSequence", [])}
    except Exception as exc:  # pydicom raises many exception types for a corrupt file
        raise ValueError(f"{path}: cannot read the RTSTRUCT ({type(exc).__name__}: {exc})") from exc
    if not rois:
        raise ValueError(f"{path}: RTSTRUCT has no ROIs")
    series = _rtstruct_series(path, rt, series_folder)
    first = series[0]
    rows, columns = int(first.Rows), int(first.Columns)
    _check_volume(path, (rows, columns, len(series)), reference_shape)
    iop = np.asarray(first.ImageOrientationPatient, dtype=np.float64)
    row_dir, col_dir = iop[:3], iop[3:]  # direction of increasing column index, of increasing row index
    dr, dc = (float(v) for v in first.PixelSpacing)  # spacing between rows, between columns
    ipp = np.array([[float(v) for v in s.ImagePositionPatient] for s in series])
    step = (ipp[-1] - ipp[0]) / max(len(series) - 1, 1)
    affine = np.eye(4)
    affine[:3, 0] = col_dir * dr  # array axis 0 = row index
    affine[:3, 1] = row_dir * dc  # array axis 1 = column index
    affine[:3, 2] = step if len(series) > 1 else np.cross(row_dir, col_dir) * float(first.get("SliceThickness") or 1.0)
    affine[:3, 3] = ipp[0]
    to_index = np.linalg.inv(affine)
    slice_of = {str(s.SOPInstanceUID): k for k, s in enumerate(series)}
    data = np.zeros((rows, columns, len(series)), dtype=np.int32)
    plane = np.empty((rows, columns), dtype=np.uint8)
    for number, name in rois:
        label = number if dicom_labels is None else dicom_labels.get(name)
        if label is None:
            raise ValueError(f"{path}: ROI {number} {name!r} has no label id in {sorted(dicom_labels or {})}")
        if not 0 < label <= np.iinfo(np.int32).max:  # 0 would draw nothing, and the array holds int32
            raise ValueError(f"{path}: ROI {number} {name!r}: label {label} is not a label id (1 to {np.iinfo(np.int32).max})")
        polygons: dict[int, list[np.ndarray]] = {}
        for contour in contours.get(number, []):
            if contour.get("ContourGeometricType", "CLOSED_PLANAR") != "CLOSED_PLANAR":
                continue
            k, points = _contour_on_slice(path, name, contour, to_index, slice_of, (rows, columns, len(series)))
            polygons.setdefault(k, []).append(points)
        for k, drawn in polygons.items():
            plane.fill(0)
            cv2.fillPoly(plane, drawn, 1)
            data[:, :, k][plane.view(bool)] = label
    return data, _LPS_TO_RAS @ affine


def _contour_on_slice(
    path: Path, roi: str, contour: Any, to_index: np.ndarray, slice_of: Mapping[str, int], shape: tuple[int, int, int]
) -> tuple[int, np.ndarray]:
    """The slice index of one RTSTRUCT contour and its points as rounded (column, row) pixel indices for ``fillPoly``;
    a contour with malformed or non-finite coordinates, off its series, or naming an image not in it is refused."""
    try:
        values = np.asarray(contour.get("ContourData", []), dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: ROI {roi!r}: a contour's ContourData is not numbers ({exc})") from exc
    if values.size < 9 or values.size % 3 or not np.isfinite(values).all():
        raise ValueError(f"{path}: ROI {roi!r}: a contour of {values.size} coordinates, not a polygon of finite 3D points")
    points = values.reshape(-1, 3)
    index = points @ to_index[:3, :3].T + to_index[:3, 3]  # (row, column, slice) per point
    images = contour.get("ContourImageSequence", [])
    if images:
        uid = str(images[0].ReferencedSOPInstanceUID)
        if uid not in slice_of:
            raise ValueError(f"{path}: ROI {roi!r}: a contour is drawn on image {uid}, not a slice of its series")
        k = slice_of[uid]
    else:
        k = int(np.rint(index[:, 2].mean()))
    # beyond one image size off the image a point is no segmentation (and its rounding would overflow int32)
    limit = np.array(shape[:2], dtype=np.float64)
    if not 0 <= k < shape[2] or (np.abs(index[:, :2] - limit / 2) > 1.5 * limit).any():
        raise ValueError(f"{path}: ROI {roi!r}: a contour lies outside its series' {shape} grid")
    return k, np.rint(index[:, 1::-1]).astype(np.int32)


def _rtstruct_series(path: Path, rt: Any, folder: Path) -> list:
    """The headers of the slices of the one image series the RTSTRUCT ``rt`` references, sorted along the slice normal.

    Only regular DICOM files directly in ``folder`` (the RTSTRUCT's) are read, and only their headers (drawing contours needs
    the geometry, not the pixels): a symlink is not followed and a subfolder not entered, since a submission's folder
    is its own and a link's target is not. The slices must share their size, orientation and spacing and be evenly
    spaced, or the grid is refused: an affine cannot place them."""
    import pydicom

    referenced = {
        str(s.SeriesInstanceUID)
        for f in rt.get("ReferencedFrameOfReferenceSequence", [])
        for study in f.get("RTReferencedStudySequence", [])
        for s in study.get("RTReferencedSeriesSequence", [])
        if "SeriesInstanceUID" in s
    }
    if len(referenced) != 1:
        raise ValueError(
            f"{path}: the RTSTRUCT references {len(referenced)} image series "
            "(ReferencedFrameOfReferenceSequence > RTReferencedStudySequence > RTReferencedSeriesSequence); one expected"
        )
    uid = referenced.pop()
    series = []
    for name in _series_files(str(folder), os.stat(folder).st_mtime_ns).get(uid, ()):
        with _regular_file(folder / name) as stream:
            check_deflated(stream, folder / name, DICOM_BASE_BYTES)
            try:
                series.append(pydicom.dcmread(stream, stop_before_pixels=True))
            except Exception as exc:  # replaced since it was indexed: pydicom raises many exception types
                raise ValueError(f"{folder / name}: a slice of {path}'s series cannot be read ({type(exc).__name__}: {exc})") from exc
    if not series:
        raise ValueError(f"{path}: no slice of its image series {uid} beside it (regular DICOM files directly in {folder})")
    try:
        geometry = {(int(s.Rows), int(s.Columns), tuple(float(v) for v in s.ImageOrientationPatient), tuple(float(v) for v in s.PixelSpacing)) for s in series}
        iop = np.asarray(series[0].ImageOrientationPatient, dtype=np.float64)
        pixel = np.asarray(series[0].PixelSpacing, dtype=np.float64)
        normal = np.cross(iop[:3], iop[3:])
        position = np.array([normal @ np.asarray(s.ImagePositionPatient, dtype=np.float64) for s in series])
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: a slice of its image series {uid} lacks its geometry ({exc})") from exc
    if len(geometry) != 1:
        raise ValueError(f"{path}: the slices of its image series {uid} differ in size, orientation or pixel spacing")
    rows, columns = next(iter(geometry))[:2]
    # unit, orthogonal row and column directions (rt-utils' tolerance), positive spacings, finite positions, a grid
    orthonormal = iop.size == 6 and np.allclose([iop[:3] @ iop[:3], iop[3:] @ iop[3:], iop[:3] @ iop[3:]], [1, 1, 0], atol=1e-3)
    if not (orthonormal and pixel.size == 2 and (pixel > 0).all() and np.isfinite(pixel).all() and np.isfinite(position).all() and rows > 0 and columns > 0):
        raise ValueError(
            f"{path}: its image series {uid} has no usable geometry (ImageOrientationPatient {iop.tolist()}, "
            f"PixelSpacing {pixel.tolist()}, {rows} x {columns} pixels)"
        )
    order = np.argsort(position, kind="stable")
    gaps = np.diff(position[order])
    if gaps.size and (gaps.min() <= 0 or gaps.max() - gaps.min() > 0.01 * gaps.mean()):
        raise ValueError(
            f"{path}: the slices of its image series {uid} are not evenly spaced (gaps {gaps.min():.4g} to {gaps.max():.4g} mm along the slice normal)"
        )
    return [series[i] for i in order]


@contextlib.contextmanager
def _regular_file(path: Path) -> Iterator[BinaryIO]:
    """``path`` open for reading if it is a regular file, the name not followed (``O_NOFOLLOW``, then ``fstat`` of what
    was opened: no window between a check and the open for a symlink to slip into); else ValueError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be opened as a regular file ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        yield stream


@functools.lru_cache(maxsize=8)
def _series_files(folder: str, mtime_ns: int) -> dict[str, tuple[str, ...]]:
    """Series instance UID -> names of the regular DICOM image files directly in ``folder`` as of its ``mtime_ns`` (read
    once per process and folder state: a folder of many cases' RTSTRUCTs and series is indexed once, not once per case).
    Unreadable files and other segmentations are no slices."""
    import pydicom

    found: dict[str, list[str]] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            with _regular_file(Path(entry.path)) as stream:
                if stream.read(132)[128:] != b"DICM":
                    continue
                stream.seek(0)
                check_deflated(stream, Path(entry.path), DICOM_BASE_BYTES)
                ds = pydicom.dcmread(stream, stop_before_pixels=True, specific_tags=["SeriesInstanceUID", "Modality"])
        except Exception:  # pydicom raises many exception types for a corrupt file; it is no slice
            continue
        if "SeriesInstanceUID" in ds and ds.get("Modality") not in ("SEG", "RTSTRUCT"):
            found.setdefault(str(ds.SeriesInstanceUID), []).append(entry.name)
    return {uid: tuple(names) for uid, names in found.items()}
