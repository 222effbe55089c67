"""The streamed non-zero crop of a NIfTI equals nibabel's full decode, and damaged streams are errors."""

from __future__ import annotations

import gzip
import re
import tracemalloc
import zlib
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from segbench.scoring import labelmaps
from segbench.scoring.labelmaps import load_nifti, load_nifti_nonzero, nonzero_box


def _expected(path: Path) -> tuple[np.ndarray, tuple[int, ...]]:
    data, _ = load_nifti(path)
    box = nonzero_box(data)
    return data[box], tuple(b.start for b in box)


@pytest.mark.parametrize("case", ["case_00000", "case_00040", "case_00095"])
def test_real_kits_crop_equals_full_decode(kits_labels: Path, case: str) -> None:
    path = kits_labels / f"{case}.nii.gz"
    crop, img = load_nifti_nonzero(path)
    data, start = _expected(path)
    assert crop.start == start and crop.shape == img.shape
    assert crop.data.flags.c_contiguous and crop.data.dtype == data.dtype
    np.testing.assert_array_equal(crop.data, data)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, ">i2", np.uint16, np.int32])
@pytest.mark.parametrize("suffix", [".nii.gz", ".nii"])
def test_dtypes_layouts_and_plane_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: object, suffix: str) -> None:
    """Every integer dtype (big-endian included), plain and gzipped, with reads that split planes
    across several steps or hold several planes."""
    rng = np.random.default_rng(0)
    data = np.zeros((23, 17, 29), dtype=np.dtype(dtype).newbyteorder("="))
    data[3:9, 2:15, 6] = rng.integers(1, 5, size=(6, 13))
    data[20, 16, 27] = 300 if np.dtype(dtype).itemsize > 1 else 200
    img = nib.Nifti1Image(data, np.diag([0.8, 0.8, 2.5, 1.0]))
    img.set_data_dtype(np.dtype(dtype))
    path = tmp_path / f"map{suffix}"
    nib.save(img, path)
    for step in (1 << 20, 100, 23 * 17 * np.dtype(dtype).itemsize * 2):
        monkeypatch.setattr(labelmaps, "STREAM_BYTES", step)
        crop, _ = load_nifti_nonzero(path)
        assert crop.start == (3, 2, 6)
        np.testing.assert_array_equal(crop.data, data[3:21, 2:17, 6:28])


def test_all_zero_map_has_an_empty_crop(tmp_path: Path) -> None:
    path = tmp_path / "zero.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros((5, 6, 7), np.uint8), np.eye(4)), path)
    crop, _ = load_nifti_nonzero(path)
    assert crop.empty and crop.shape == (5, 6, 7)


def test_float_and_scaled_maps_take_nibabels_path(tmp_path: Path) -> None:
    data = np.zeros((8, 9, 10), np.float32)
    data[2:4, 3:5, 4:9] = 2.0
    path = tmp_path / "float.nii.gz"
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    crop, _ = load_nifti_nonzero(path)
    assert crop.start == (2, 3, 4) and crop.data.dtype == np.uint8
    np.testing.assert_array_equal(crop.data, 2)
    data[0, 0, 0] = np.nan
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    with pytest.raises(ValueError, match="float.nii.gz.*NaN"):
        load_nifti_nonzero(path)


def _ones_in_box(path: Path, shape: tuple[int, int, int], box: tuple[slice, ...]) -> bytes:
    """Save a uint8 map of ``shape`` that is 1 inside ``box``; return the file's bytes."""
    data = np.zeros(shape, np.uint8)
    data[box] = 1
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    return path.read_bytes()


def test_multi_member_gzip(tmp_path: Path) -> None:
    """A gzip file of several members (concatenated streams) decodes as their concatenation."""
    blob = _ones_in_box(tmp_path / "m.nii", (10, 11, 12), np.s_[4:6, 5:8, 2:11])
    path = tmp_path / "m.nii.gz"
    path.write_bytes(gzip.compress(blob[:700]) + gzip.compress(blob[700:]))
    crop, _ = load_nifti_nonzero(path)
    assert crop.start == (4, 5, 2)
    np.testing.assert_array_equal(crop.data, 1)


def test_damaged_streams_are_named_errors(tmp_path: Path) -> None:
    blob = _ones_in_box(tmp_path / "good.nii.gz", (30, 31, 32), np.s_[5:25, 6:20, 3:30])
    for name, damaged, why in (
        ("cut.nii.gz", blob[: len(blob) - 30], "voxel data ends after"),  # deflate data ends early
        ("nocrc.nii.gz", blob[:-8], "ends before its end-of-stream marker"),  # the CRC and length trailer is gone
        ("badcrc.nii.gz", blob[:-8] + bytes(8), "corrupt gzip data .*checksum"),  # CRC and length wrong
        ("short.nii.gz", gzip.compress(zlib.decompress(blob, 31)[:-100]), "ends after 29660 of 29760 bytes"),
    ):
        path = tmp_path / name
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=f"{name}: cannot read as NIfTI .*{why}"):
            load_nifti_nonzero(path)


@pytest.mark.parametrize("dtype", [bool, np.uint8, np.int8, np.int16, np.float32])
def test_nonzero_box_is_the_box_of_the_nonzero_voxels(dtype: type) -> None:
    """The box of several arrays' non-zero voxels (negative values count), from their indices, in 1 to 4
    dimensions; None when every array is zero."""
    rng = np.random.default_rng(5)
    for shape in ((13,), (7, 11), (6, 9, 8), (4, 5, 6, 7)):
        arrays = [np.zeros(shape, dtype=dtype) for _ in range(2)]
        assert nonzero_box(*arrays) is None
        for a in arrays:
            for _ in range(2):
                a[tuple(rng.integers(0, n) for n in shape)] = -1 if dtype in (np.int8, np.int16) else 1
        idx = np.concatenate([np.argwhere(a) for a in arrays])
        expected = tuple(slice(int(lo), int(hi) + 1) for lo, hi in zip(idx.min(0), idx.max(0), strict=True))
        assert nonzero_box(*arrays) == expected, shape


def test_nonzero_box_is_the_same_in_any_memory_order() -> None:
    """nibabel decodes NIfTI in Fortran order; the box must not depend on it (it is walked transposed, not copied)."""
    mask = np.zeros((23, 31, 17), dtype=bool)
    mask[4:9, 20:30, 2] = True
    mask[15, 3, 16] = True
    expected = (slice(4, 16), slice(3, 30), slice(2, 17))
    for array in (mask, np.asfortranarray(mask), np.asfortranarray(mask).astype(np.int16), mask[:, ::-1, :][:, ::-1, :]):
        assert nonzero_box(array) == expected
    assert nonzero_box(np.asfortranarray(mask), np.zeros_like(mask)) == expected


def test_data_after_a_nifti_gzip_stream_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .nii.gz followed by gigabytes of gzip'd zeros was scored with no warning, after inflating all of them (+11 s)."""
    data = np.zeros((8, 9, 10), np.uint8)
    data[2:5, 3:6, 4:7] = 1
    path = tmp_path / "pred.nii.gz"
    nib.save(nib.Nifti1Image(data, np.eye(4)), path)
    assert np.array_equal(labelmaps.load_nifti(path)[0], data) and labelmaps.load_nifti_nonzero(path)[0].data.sum() == 27
    with open(path, "ab") as stream, gzip.GzipFile(fileobj=stream, mode="wb") as trailer:
        for _ in range(256):
            trailer.write(bytes(1 << 20))  # 256 MiB of zeros after the voxels
    decoded = []
    read = labelmaps._Inflater.read

    def counted(self: object, n: int) -> bytes:
        out = read(self, n)  # type: ignore[arg-type]
        decoded.append(len(out))
        return out

    monkeypatch.setattr(labelmaps._Inflater, "read", counted)
    for load in (labelmaps.load_nifti, labelmaps.load_nifti_nonzero):
        decoded.clear()
        with pytest.raises(
            ValueError,
            match=r"pred.nii.gz: cannot read as NIfTI \(ValueError: the gzip stream holds data after the voxels its header "
            r"implies \(trailing data\)",
        ):
            load(path)
        assert sum(decoded) <= 352 + data.nbytes + 1, f"{sum(decoded)} bytes decoded: the trailing data was inflated"


@pytest.mark.parametrize("dtype", [np.complex128, np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])], ids=["complex", "rgb"])
def test_a_nifti_voxel_type_that_holds_no_labels_is_refused_from_its_header(tmp_path: Path, dtype: object) -> None:
    path = tmp_path / "pred.nii"
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), dtype), np.eye(4)), path)
    with open(path, "r+b") as stream:  # the header claims 64 voxels; cut the data short: decoding it would fail another way
        stream.truncate(400)
    for load in (labelmaps.load_nifti, labelmaps.load_nifti_nonzero):
        with pytest.raises(
            ValueError,
            match=r"pred.nii: header says voxel type .*; a label map is integer "
            r"\(or float holding integers\); refused before decoding",
        ):
            load(path)


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, ">f8"])
def test_a_float_map_is_streamed_into_its_labels_never_held_as_floats(tmp_path: Path, suffix: str, dtype: str) -> None:
    """A float64 label map on a CT's grid was decoded whole (8 bytes a voxel, then NumPy's checks on top: over 2 GB). It is
    now read twice block by block, checked, then cast into the labels: the same array and the same errors as the whole
    decode gives, its peak allocation a fraction of the float array."""
    labels = np.zeros((192, 192, 128), np.uint8)  # 4.7 million voxels: 19-38 MB as floats
    labels[10:50, 20:60, 5:40] = 1
    labels[60:190, 5:130, 40:120] = 3
    path = tmp_path / f"pred{suffix}"
    floats = labels.astype(dtype)

    def save(values: np.ndarray) -> None:  # a big-endian file for '>f8' (nibabel writes its header's byte order and type)
        header = nib.Nifti1Header(endianness=">" if np.dtype(dtype).byteorder == ">" else "<")
        header.set_data_dtype(dtype)
        nib.save(nib.Nifti1Image(values.astype(dtype), np.eye(4), header), path)

    save(labels)
    assert nib.load(path).get_data_dtype() == np.dtype(dtype)
    tracemalloc.start()
    data, _ = labelmaps.load_nifti(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert data.dtype == np.uint8 and np.array_equal(data, labels)
    assert np.array_equal(data, labelmaps.validated_labels(path, np.asanyarray(nib.load(path).dataobj)))
    assert peak < floats.nbytes / 2, f"peak {peak} bytes for a {floats.nbytes}-byte float array"
    assert np.array_equal(labelmaps.load_nifti_nonzero(path)[0].data, labelmaps.nonzero_crop(labels).data)
    wide = labels.astype(np.float64) * 1000  # labels past 255: int32, as the whole decode gives
    save(wide)
    assert labelmaps.load_nifti(path)[0].dtype == np.int32 and np.array_equal(labelmaps.load_nifti(path)[0], wide.astype(np.int32))
    fractional, beyond = r"non-integer values, e\.g\. \[0\.5, 2\.5\]", r"beyond the int32 range, e\.g\. \[3000000000\.0\]"
    for bad, words in ((np.nan, "NaN or infinite"), (0.5, fractional), (3e9, beyond)):
        broken = labels.astype(np.float64)
        broken[1, 2, 3] = bad
        if bad == 0.5:
            broken[190, 170, 120] = 2.5  # in another block: the example lists both, smallest first
        save(broken)
        with pytest.raises(ValueError, match=rf"pred{re.escape(suffix)}: .*{words}") as streamed:
            labelmaps.load_nifti(path)
        with pytest.raises(ValueError) as whole:
            labelmaps.validated_labels(path, np.asanyarray(nib.load(path).dataobj))
        assert str(streamed.value) == str(whole.value)
