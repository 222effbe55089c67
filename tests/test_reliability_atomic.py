"""Atomic writes: a writer killed mid-file leaves the old target and a hidden partial file, which
the pipeline neither reads as a prediction nor keeps."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from segbench.cli import main
from segbench.config import compose_params
from segbench.io import PARTIAL_MARK, remove_partial_files
from tests_support import in_directory

CASE = "case_00110"
MODEL = "sim_dilate_1mm"


def test_a_writer_killed_mid_file_leaves_the_old_target(tmp_path: Path) -> None:
    target = tmp_path / f"{CASE}.nii.gz"
    target.write_bytes(b"the previous, complete file")
    # the writer writes half its bytes and waits, so the kill lands mid-file every time
    write = (
        "import sys, time; from segbench.io import atomic_path\n"
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


@pytest.fixture
def project(root: Path, tmp_path: Path, tracking_store: str) -> Path:
    raw = compose_params(root / "conf", [f"model=[{MODEL}]", f"dataset.kits23.cases=[{CASE}]", "stats.n_resamples=100", "published=[]"])
    for key in ("reference_dir", "metadata_file"):
        raw["dataset"]["kits23"][key] = str(root / raw["dataset"]["kits23"][key])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    shutil.copy(root / "data.dvc", tmp_path / "data.dvc")
    return tmp_path


def test_partial_prediction_is_not_scored_and_is_removed_on_resume(project: Path) -> None:
    predictions = project / "predictions" / "kits23" / MODEL
    partial = predictions / f".{CASE}.nii.gz{PARTIAL_MARK}k1ll3d.nii.gz"  # as a postprocess killed mid-save leaves it
    with in_directory(project):
        assert main(["predict", "--dataset", "kits23", "--model", MODEL]) == 0
        partial.write_bytes(b"\x1f\x8b half a label map")
        assert main(["score", "--dataset", "kits23", "--model", MODEL, "--workers", "1"]) == 0  # not an unknown case
        (predictions / f"{CASE}.nii.gz").unlink()
        assert main(["predict", "--dataset", "kits23", "--model", MODEL]) == 0  # resumes: the missing case only
    assert not partial.exists()
    assert sorted(p.name for p in predictions.iterdir()) == [".inputs.json", f"{CASE}.nii.gz", "manifest.json"]
