"""Interruption: SIGKILL during predict, score and compare; the rerun finishes only what was not done.

Real dvc repro on real KiTS23 cases (3 cases, one simulated model). Every file is written atomically,
so a killed stage never leaves a half-written file; predictions already written survive the kill
(predict outputs persist) and are not recomputed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from segbench.config import compose_params

CASES = ["case_00030", "case_00110", "case_00210"]
MODEL = "sim_dilate_1mm"

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SEGBENCH_TRACKING_URI"}


def _run(args: list[str], cwd: Path) -> str:
    result = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


@pytest.fixture
def project(root: Path, tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("dvc.yaml", "data.dvc", ".gitignore"):
        (proj / name).write_bytes((root / name).read_bytes())
    subprocess.run(["cp", "-r", str(root / "conf"), str(root / "src"), str(proj)], check=True)
    _run(["git", "init", "-q"], proj)
    _run(["dvc", "init", "-q"], proj)
    _run(["dvc", "remote", "add", "-d", "shared", str((root.parent / "shared" / "dvc-remote").resolve())], proj)
    _run(["dvc", "pull", "-q", "data.dvc"], proj)
    raw = compose_params(proj / "conf", [f"model=[{MODEL}]", f"dataset.kits23.cases=[{','.join(CASES)}]", "stats.n_resamples=200", "published=[]"])
    (proj / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return proj


def _kill_when(proj: Path, ready, timeout: float = 600) -> None:
    """Start `dvc repro` and SIGKILL its whole process group as soon as ``ready()`` is true."""
    process = subprocess.Popen(["dvc", "repro"], cwd=proj, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert process.poll() is None, "dvc repro finished before the moment to kill it"
            assert time.monotonic() < deadline, "timed out waiting for the moment to kill"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _no_temp_files(proj: Path) -> None:
    leftovers = [p for p in (proj / "results").rglob("*.tmp")] if (proj / "results").exists() else []
    leftovers += [p for p in (proj / "scores").rglob("*.tmp")] if (proj / "scores").exists() else []
    for path in leftovers:  # a killed writer may leave its temp file, never a half-written target
        assert path.name.startswith("."), path


def _running(command: str) -> bool:
    out = subprocess.run(["pgrep", "-f", command], capture_output=True, text=True, check=False).stdout
    return bool(out.strip())


def test_kill_during_predict_resumes_without_recomputing_finished_cases(project: Path) -> None:
    out_dir = project / "predictions" / "kits23" / MODEL
    _kill_when(project, lambda: out_dir.is_dir() and len(list(out_dir.glob("case_*.nii.gz"))) >= 1)
    done = {p.name: p.stat().st_mtime_ns for p in out_dir.glob("case_*.nii.gz")}
    assert 1 <= len(done) < len(CASES) + 1
    log = _run(["dvc", "repro"], project)
    assert "Running stage 'compare@kits23'" in log
    for name, mtime in done.items():
        assert (out_dir / name).stat().st_mtime_ns == mtime, f"{name} was recomputed"
    assert sorted(p.name for p in out_dir.glob("case_*.nii.gz")) == [f"{c}.nii.gz" for c in CASES]
    assert "Running stage" not in _run(["dvc", "repro"], project)


def test_kill_during_score_and_compare_reruns_to_the_same_results(project: Path, tmp_path: Path) -> None:
    _kill_when(project, lambda: _running(f"segbench score --dataset kits23 --model {MODEL}"))
    assert not (project / "scores" / "kits23" / MODEL / "per_case.csv").exists()
    _no_temp_files(project)
    _kill_when(project, lambda: _running("segbench compare --dataset kits23"))
    _no_temp_files(project)
    log = _run(["dvc", "repro"], project)
    assert "Running stage 'predict" not in log and "Running stage 'score" not in log
    results = (project / "results" / "kits23.json").read_bytes()
    with sqlite3.connect(project / "mlruns" / "mlflow.db") as db:
        runs = db.execute("SELECT name, status FROM runs").fetchall()
    assert runs == [(MODEL, "FINISHED")]
    _run(["dvc", "repro", "-f", "compare@kits23"], project)
    assert (project / "results" / "kits23.json").read_bytes() == results
