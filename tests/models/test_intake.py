"""Hostile outputs (segbench.models.intake) as real crafted files: every one refused with a one-line reason naming the file,
none followed, none inflated past what its header implies, the reader's peak RSS bounded (measured in a child process)."""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from segbench.interactive import cases, harness, protocol
from segbench.models import intake
from segbench.models.runner import check_container_output

SHAPE = (6, 7, 8)
#: the reader's peak RSS over that of a child that only imports it (MB): nothing inflated but ``segs``
RSS_MARGIN_MB = 64


def _npy_header(shape: tuple[int, ...], dtype: str = "<u1") -> bytes:
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def _write_npz(path: Path, members: dict[str, tuple[bytes, int]]) -> None:
    """An npz whose members are ``header + payload`` then ``extra_zeros`` zero bytes, streamed (nothing held in memory)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, (head, extra_zeros) in members.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                member.write(head)
                zeros = bytes(1 << 20)
                for start in range(0, extra_zeros, len(zeros)):
                    member.write(zeros[: min(len(zeros), extra_zeros - start)])


def _segs(shape: tuple[int, ...] = SHAPE, value: int = 1) -> bytes:
    return _npy_header(shape) + np.full(shape, value, np.uint8).tobytes()


def test_an_honest_npz_reads_as_np_load_reads_it(tmp_path: Path) -> None:
    segs = np.random.default_rng(0).integers(0, 3, SHAPE).astype(np.int16)
    np.savez_compressed(tmp_path / "c.npz", segs=segs)
    read, status, flag = cases.read_step_output(tmp_path / "c.npz", SHAPE, 2)
    assert status == "ok" and flag is None and np.array_equal(read, segs) and read.dtype == np.uint8
    np.savez(tmp_path / "f.npz", segs=np.asfortranarray(segs))
    assert np.array_equal(cases.read_step_output(tmp_path / "f.npz", SHAPE, 2)[0], segs)


def test_a_plain_npy_reads_as_np_load_reads_it_and_a_lying_header_allocates_nothing(tmp_path: Path) -> None:
    """``read_npy_array`` (segbench evaluate's .npy predictions): an honest file in either order, floats where asked;
    a header of another shape, of objects or of more data than the file holds is refused before a byte is allocated."""
    labels = np.random.default_rng(0).integers(0, 3, SHAPE).astype(np.float32)
    for name, array in (("c.npy", labels), ("f.npy", np.asfortranarray(labels))):
        np.save(tmp_path / name, array)
        read = intake.read_npy_array(tmp_path / name, SHAPE, kinds="biuf")
        assert np.array_equal(read, np.load(tmp_path / name)) and read.dtype == np.float32
    with pytest.raises(intake.IntakeError, match=r"c\.npy has dtype float32; expected an integer label map"):
        intake.read_npy_array(tmp_path / "c.npy", SHAPE)
    for name, head, message in (
        ("huge.npy", _npy_header((4000, 4000, 4000)), r"has shape \(4000, 4000, 4000\); expected \(6, 7, 8\)"),
        ("objects.npy", _npy_header(SHAPE, "|O"), r"has dtype object; expected a numeric label map"),
        ("short.npy", _npy_header(SHAPE), r"ends 236 bytes short of the 336 its header implies"),
    ):
        (tmp_path / name).write_bytes(head + bytes(100))
        with pytest.raises(intake.IntakeError, match=re.escape(str(tmp_path / name)) + ".*" + message):
            intake.read_npy_array(tmp_path / name, SHAPE, kinds="biuf")


@pytest.mark.parametrize("kind", ["absolute symlink", "relative symlink", "symlink into another team's folder", "FIFO", "folder", "hard link"])
def test_anything_but_a_regular_file_is_refused_unread(tmp_path: Path, kind: str) -> None:
    other_team = tmp_path / "teama" / "segs"
    other_team.mkdir(parents=True)
    np.savez(other_team / "c.npz", segs=np.ones(SHAPE, np.uint8))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    target = outputs / "c.npz"
    {
        "absolute symlink": lambda: target.symlink_to(other_team / "c.npz"),
        "relative symlink": lambda: target.symlink_to(Path("..") / "teama" / "segs" / "c.npz"),
        "symlink into another team's folder": lambda: target.symlink_to(other_team / "c.npz"),
        "FIFO": lambda: os.mkfifo(target),
        "folder": lambda: target.mkdir(),
        "hard link": lambda: os.link(other_team / "c.npz", target),
    }[kind]()
    with pytest.raises(cases.CaseError) as error:
        cases.read_step_output(target, SHAPE, 1)  # a FIFO would block an open without O_NONBLOCK: returning at all is the check
    message = str(error.value)
    assert message.startswith(f"{target}: ") and "\n" not in message and "refused unread" in message, message
    assert {"FIFO": "a FIFO", "folder": "a folder", "hard link": "a hard link"}.get(kind, "a symlink") in message


def test_a_missing_output_and_a_dangling_symlink_differ(tmp_path: Path) -> None:
    assert cases.read_step_output(tmp_path / "absent.npz", SHAPE, 1) == (None, "missing", None)
    (tmp_path / "dangling.npz").symlink_to("/nonexistent/segs.npz")
    with pytest.raises(cases.CaseError, match="a symlink"):
        cases.read_step_output(tmp_path / "dangling.npz", SHAPE, 1)


def _peak_rss_mb(code: str) -> tuple[str, float]:
    """Run ``code`` in a child python (this checkout's segbench) and return its output and its peak RSS in MB (the child's
    own getrusage: RUSAGE_CHILDREN of this process would keep the largest of every child it ever waited for)."""
    code = textwrap.dedent(code) + "\nimport resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(Path(intake.__file__).parents[2])}
    )
    *printed, peak_kb = result.stdout.strip().splitlines()
    return "\n".join(printed), int(peak_kb) / 1024


@pytest.fixture(scope="module")
def import_rss_mb() -> float:
    return _peak_rss_mb("from segbench.interactive import cases")[1]


READ = """
from segbench.interactive import cases
try:
    segs, status, flag = cases.read_step_output({path!r}, {shape!r}, 4)
    print(status, int(segs.sum()), flag)
except cases.CaseError as exc:
    print(exc)
"""


@pytest.mark.parametrize(
    ("attack", "members", "expected"),
    [
        # a valid segs and an extra member whose header claims 30 GB: only segs is read, scored and flagged with the member's
        # sizes from the zip directory (the member itself never inflated)
        (
            "header bomb",
            {"segs": (_segs(), 0), "bomb": (_npy_header((30_000, 1000, 1000)), 0)},
            rf"extra_members {np.prod(SHAPE)} {{path}}: extra members not read: 'bomb\.npy' \(claims 128 bytes, \d+ compressed\); scored from 'segs'",
        ),
        # a valid segs and 256 MiB of deflated zeros under another key: never inflated, flagged
        (
            "extra huge member",
            {"segs": (_segs(), 0), "zeros": (_npy_header((1 << 28,)), 1 << 28)},
            rf"extra_members {np.prod(SHAPE)} {{path}}: extra members not read: 'zeros\.npy' \(claims 268435584 bytes, \d+ compressed\); scored from 'segs'",
        ),
        # segs whose header names the right shape but which inflates 256 MiB past it: refused while streaming
        ("deflate bomb", {"segs": (_segs(), 1 << 28)}, "key 'segs': inflates past the 336 bytes its header implies; refused while streaming"),
        # segs whose header claims 30 GB: refused on its header, nothing allocated
        ("segs header bomb", {"segs": (_npy_header((30_000, 1000, 1000)), 0)}, "key 'segs' has shape (30000, 1000, 1000); expected (6, 7, 8)"),
        ("object dtype", {"segs": (_npy_header(SHAPE, "|O"), 0)}, "key 'segs' has dtype object; expected an integer label map"),
        ("short segs", {"segs": (_segs()[:-10], 0)}, "key 'segs': ends 10 bytes short of the 336 its header implies"),
    ],
)
def test_crafted_npz_members_never_inflate_past_segs(tmp_path: Path, attack: str, members: dict, expected: str, import_rss_mb: float) -> None:
    path = tmp_path / "c.npz"
    _write_npz(path, members)
    assert path.stat().st_size < 2_000_000  # the attack is small on disk
    printed, peak_mb = _peak_rss_mb(READ.format(path=str(path), shape=SHAPE))
    if expected.startswith("extra_members"):  # a pattern: the compressed size is zlib's to choose
        assert re.fullmatch(expected.format(path=re.escape(str(path))), printed), printed
    else:
        assert printed == f"{path}: {expected}", printed
    assert peak_mb < import_rss_mb + RSS_MARGIN_MB, f"{attack}: the reader's peak RSS was {peak_mb:.0f} MB, {import_rss_mb:.0f} MB after imports"
    print(f"{attack}: peak RSS {peak_mb:.0f} MB ({import_rss_mb:.0f} MB after imports)")


def _nifti(path: Path, shape: tuple[int, ...], dtype: type = np.uint8, data_bytes: int | None = None) -> None:
    """A NIfTI file whose header says ``shape``/``dtype``; its voxel bytes ``data_bytes`` long (default: what the header implies)."""
    header = nib.Nifti1Header()
    header.set_data_shape(shape)
    header.set_data_dtype(dtype)
    header.set_data_offset(352)
    n_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize if data_bytes is None else data_bytes
    with gzip.open(path, "wb", compresslevel=1) as stream:
        header.write_to(stream)
        zeros = bytes(1 << 20)
        for start in range(0, n_bytes, len(zeros)):
            stream.write(zeros[: min(len(zeros), n_bytes - start)])


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("honest", None),
        ("symlink", "a symlink, not a regular file; refused unread"),
        ("header lying huge", "header says shape (4000, 4000, 4000), over 8 times the reference grid (6, 7, 8); refused unread"),
        ("float datatype", "header says datatype float32; expected an integer label map"),
        ("4D", "header says shape (6, 7, 8, 2); a 3D label map is needed"),
        ("fewer voxels than its header", "voxels: ends 100 bytes short of the 336 its header implies"),
        ("deflate bomb", "voxels: inflates past the 336 bytes its header implies; refused while streaming"),
        ("symlinked folder on the way", "a symlink or not a folder on the way to"),
    ],
)
def test_container_nifti_outputs_are_checked_before_a_voxel_is_read(tmp_path: Path, case: str, message: str | None) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    native = outputs / "c.nii.gz"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if case == "symlink":
        _nifti(elsewhere / "c.nii.gz", SHAPE)
        native.symlink_to(elsewhere / "c.nii.gz")
    elif case == "symlinked folder on the way":
        _nifti(elsewhere / "c.nii.gz", SHAPE)
        (outputs / "case").symlink_to(elsewhere)
        native = outputs / "case" / "c.nii.gz"
    else:
        shape = {"header lying huge": (4000, 4000, 4000), "4D": (*SHAPE, 2)}.get(case, SHAPE)
        data_bytes = {"header lying huge": 1000, "fewer voxels than its header": 236, "deflate bomb": 1 << 27}.get(case)
        _nifti(native, shape, np.float32 if case == "float datatype" else np.uint8, data_bytes)
    if message is None:
        check_container_output(native, outputs, SHAPE, "multilabel")
        assert nib.load(native).shape == SHAPE
        return
    with pytest.raises(intake.IntakeError) as error:
        check_container_output(native, outputs, SHAPE, "multilabel")
    assert message in str(error.value) and "\n" not in str(error.value), error.value


#: a model that answers every step with the reference in ``segs`` and one more member beside it
EXTRA_MEMBER_MODEL = """
import sys
import numpy as np
np.savez(sys.argv[2], segs=np.load(sys.argv[1])["gts"], notes=np.zeros(3, np.uint8))
"""


def test_a_step_with_extra_members_is_scored_from_segs_and_flagged(tmp_path: Path) -> None:
    gts = np.zeros((4, 6, 6), np.uint8)
    gts[1:4, 3:6, 3:6] = 1
    for kind, array in (("imgs", {"imgs": np.arange(gts.size, dtype=np.int16).reshape(gts.shape), "spacing": np.ones(3)}), ("gts", {"gts": gts})):
        (tmp_path / "cases" / kind).mkdir(parents=True)
        cases.save_npz_atomic(tmp_path / "cases" / kind / "toy.npz", **array)
    case = cases.load_case("toy", tmp_path / "cases" / "imgs" / "toy.npz", tmp_path / "cases" / "gts" / "toy.npz")
    output = tmp_path / "w" / "outputs" / "toy.npz"
    call = harness.host_call([sys.executable, "-c", EXTRA_MEMBER_MODEL, str(tmp_path / "cases" / "gts" / "toy.npz"), str(output)], {})
    record, _, _ = harness.run_case(case, call, tmp_path / "w", limit_s=600.0)
    flag = f"{output}: extra members not read: 'notes.npy' (claims {128 + 3} bytes, {128 + 3} compressed); scored from 'segs'"
    assert [(s["output"], s.get("reason"), s["dsc"]) for s in record["steps"]] == [("no_boxes", None, 0.0)] + [("extra_members", flag, 1.0)] * 5
    row, _ = harness._row(case, record, 600.0, "wall", "manual", protocol.Scoring())
    assert row["failed_steps"] == "2;3;4;5;6" and row["DSC_Final"] == 1.0


def _write_zip(path: Path, members: list[tuple[str, bytes]]) -> None:
    """A zip of ``members`` in order, names repeated as given (zipfile warns, and writes them)."""
    import warnings

    with warnings.catch_warnings(), zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        warnings.simplefilter("ignore")
        for name, data in members:
            archive.writestr(name, data)


def test_a_zip_directory_claiming_too_many_members_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """A million empty entries (47 MB) cost the reader 974 MB of RSS and 97 s per step; the claim is capped first."""
    path = tmp_path / "many.npz"
    _write_zip(path, [("segs.npy", _segs()), *((f"e{i}", b"") for i in range(70_000))])  # past 65,535 entries: zip64's record
    with pytest.raises(
        intake.IntakeError,
        match=rf"many.npz: its zip directory claims 70,001 members in [\d,]+ bytes, more than {intake.MAX_NPZ_MEMBERS} "
        r"members or 65,536 bytes; refused unparsed",
    ):
        intake.read_npz_array(path, "segs", SHAPE)
    _write_zip(path, [("segs.npy", _segs()), *((f"{i:02000d}", b"") for i in range(40))])  # few members, long names
    with pytest.raises(intake.IntakeError, match=r"claims 41 members in [\d,]+ bytes"):
        intake.read_npz_array(path, "segs", SHAPE)
    _write_zip(path, [("segs.npy", _segs()), *((f"e{i}", b"") for i in range(10))])  # an honest number of extras: read, flagged
    assert intake.read_npz_array(path, "segs", SHAPE)[1][0] == "'e0' (claims 0 bytes, 0 compressed)"


def test_two_members_of_one_name_are_refused(tmp_path: Path) -> None:
    """Two members named segs.npy: the last was read, the first never flagged."""
    path = tmp_path / "twice.npz"
    _write_zip(path, [("segs.npy", _segs(value=0)), ("segs.npy", _segs(value=1))])
    with pytest.raises(intake.IntakeError, match=r"twice.npz: members named twice: 'segs.npy'; refused"):
        intake.read_npz_array(path, "segs", SHAPE)
    with pytest.raises(cases.CaseError, match="members named twice"):  # the step is refused with that reason
        cases.read_step_output(path, SHAPE, 2)
