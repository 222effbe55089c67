"""Atomic writes: a writer killed mid-file leaves the old target and a hidden partial file, which
the pipeline neither reads as a prediction nor keeps."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from projects import working_folder
from segbench.base.io import PARTIAL_MARK, atomic_dir, remove_partial_files, write_json_atomic
from segbench.cli import main
from tests_support import in_directory

CASE = "case_00110"
MODEL = "sim_dilate_1mm"


def test_a_writer_killed_mid_file_leaves_the_old_target(tmp_path: Path) -> None:
    target = tmp_path / f"{CASE}.nii.gz"
    target.write_bytes(b"the previous, complete file")
    # the writer writes half its bytes and waits, so the kill lands mid-file every time
    write = (
        "import sys, time; from segbench.base.io import atomic_path\n"
        "with atomic_path(sys.argv[1], suffix='.nii.gz') as tmp:\n"
        "    tmp.write_bytes(b'half of a new file'); time.sleep(600)"
    )
    writer = subprocess.Popen([sys.executable, "-c", write, str(target)])
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in tmp_path.glob(f".*{PARTIAL_MARK}*")):
        assert writer.poll() is None and time.monotonic() < deadline, "the writer never started writing"
        time.sleep(0.01)
    writer.kill()
    writer.wait()
    assert target.read_bytes() == b"the previous, complete file"
    leftovers = remove_partial_files(tmp_path)
    assert [p.name.startswith(f".{target.name}{PARTIAL_MARK}") for p in leftovers] == [True]
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_folder_write_replaces_the_folder_whole_or_not_at_all(tmp_path: Path) -> None:
    """`atomic_dir` (a leaderboard's metrics folder): a failed writer leaves the old folder; a killed one's partial
    folder goes with the next write, which drops the files the old folder had and it has not."""
    target = tmp_path / "kits23"
    (target / "tumor").mkdir(parents=True)
    (target / "tumor" / "dice.json").write_text("old")
    (target / "tumor" / "hd95.json").write_text("old, a cell the next run lacks")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "tumor").mkdir()
        (tmp / "tumor" / "dice.json").write_text("new, half")
        raise RuntimeError("the writer fails")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "kits23",
        "kits23/tumor",
        "kits23/tumor/dice.json",
        "kits23/tumor/hd95.json",
    ]
    (tmp_path / f".kits23{PARTIAL_MARK}killed").mkdir()  # what a killed writer leaves
    with atomic_dir(target) as tmp:
        write_json_atomic(tmp / "tumor" / "dice.json", {"mean": 0.9})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["kits23", "kits23/tumor", "kits23/tumor/dice.json"]
    assert (target / "tumor" / "dice.json").read_text() == '{\n "mean": 0.9\n}\n'
    (tmp_path / "plain").mkdir()
    assert target.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777  # not mkdtemp's 0700


@pytest.fixture
def one_case_folder(root: Path, tmp_path: Path, tracking_store: str) -> Path:
    return working_folder(root, tmp_path, [f"model=[{MODEL}]", f"dataset.kits23.cases=[{CASE}]", "stats.n_resamples=100", "published=[]"])


def test_partial_prediction_is_not_scored_and_is_removed_on_resume(one_case_folder: Path) -> None:
    predictions = one_case_folder / "predictions" / "kits23" / MODEL
    partial = predictions / f".{CASE}.nii.gz{PARTIAL_MARK}k1ll3d.nii.gz"  # as a postprocess killed mid-save leaves it
    with in_directory(one_case_folder):
        assert main(["predict", "--dataset", "kits23", "--model", MODEL]) == 0
        partial.write_bytes(b"\x1f\x8b half a label map")
        assert main(["score", "--dataset", "kits23", "--model", MODEL, "--workers", "1"]) == 0  # not an unknown case
        (predictions / f"{CASE}.nii.gz").unlink()
        assert main(["predict", "--dataset", "kits23", "--model", MODEL]) == 0  # resumes: the missing case only
    assert not partial.exists()
    assert sorted(p.name for p in predictions.iterdir()) == [".inputs.json", f"{CASE}.nii.gz", "manifest.json"]
