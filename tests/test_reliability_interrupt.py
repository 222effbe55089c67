"""Interruption: SIGKILL during predict, score, track and compare; the rerun finishes only what was not done.

Real dvc repro on real KiTS23 cases (3 cases, one simulated model) and on the real Touchstone scores
(19 published models, one MLflow run each). Every file is written atomically, so a killed stage never
leaves a half-written file; predictions already written survive the kill (predict outputs persist)
and are not recomputed; MLflow runs already FINISHED are reused, and a run the kill left RUNNING is
marked FAILED.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests_support import command_env, new_project, run_command

CASES = ["case_00030", "case_00110", "case_00210"]
MODEL = "sim_dilate_1mm"

pytestmark = pytest.mark.slow


@pytest.fixture
def project(root: Path, tmp_path: Path) -> Path:
    overrides = [f"model=[{MODEL}]", f"dataset.kits23.cases=[{','.join(CASES)}]", "stats.n_resamples=200", "published=[]"]
    return new_project(root, tmp_path / "proj", overrides)


def _kill_when(proj: Path, ready, timeout: float = 600) -> None:
    """Start `dvc repro` and SIGKILL its whole process group as soon as ``ready()`` is true."""
    process = subprocess.Popen(["dvc", "repro"], cwd=proj, env=command_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
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
    log = run_command(["dvc", "repro"], project)
    assert "Running stage 'compare@kits23'" in log
    for name, mtime in done.items():
        assert (out_dir / name).stat().st_mtime_ns == mtime, f"{name} was recomputed"
    assert sorted(p.name for p in out_dir.glob("case_*.nii.gz")) == [f"{c}.nii.gz" for c in CASES]
    assert "Running stage" not in run_command(["dvc", "repro"], project)


def test_kill_during_score_and_compare_reruns_to_the_same_results(project: Path, tmp_path: Path) -> None:
    _kill_when(project, lambda: _running(f"segbench score --dataset kits23 --model {MODEL}"))
    assert not (project / "scores" / "kits23" / MODEL / "per_case.csv").exists()
    _no_temp_files(project)
    _kill_when(project, lambda: _running("segbench compare --dataset kits23"))
    _no_temp_files(project)
    log = run_command(["dvc", "repro"], project)
    assert "Running stage 'predict" not in log and "Running stage 'score" not in log
    results = (project / "results" / "kits23.json").read_bytes()
    with sqlite3.connect(project / "mlruns" / "mlflow.db") as db:
        runs = db.execute("SELECT name, status FROM runs").fetchall()
    # a leaderboard run the kill left RUNNING is FAILED now, and logged again
    assert sorted(r for r in runs if r[1] != "FAILED") == [("leaderboard", "FINISHED"), (MODEL, "FINISHED")]
    assert {name for name, status in runs if status == "FAILED"} <= {"leaderboard"}
    run_command(["dvc", "repro", "-f", "compare@kits23"], project)
    assert (project / "results" / "kits23.json").read_bytes() == results


PUBLISHED = "touchstone_totalsegmentator"


def _published_runs(proj: Path) -> list[tuple[str, str, str, str]]:
    """(model, status, run id, artifact folder) of the published set's MLflow model runs; [] while the store is busy."""
    db = proj / "mlruns" / "mlflow.db"
    query = (
        "SELECT r.name, r.status, r.run_uuid, r.artifact_uri FROM runs r JOIN experiments e USING (experiment_id) "
        "WHERE e.name = ? AND r.name != 'leaderboard' ORDER BY r.name, r.start_time"
    )
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)) as connection:
            return connection.execute(query, (f"segbench/{PUBLISHED}",)).fetchall()
    except sqlite3.Error:  # not created yet, or locked by the writer
        return []


def test_kill_during_track_leaves_no_finished_run_for_an_incomplete_table(root: Path, tmp_path: Path) -> None:
    overrides = [f"model=[{MODEL}]", f"dataset.kits23.cases=[{CASES[0]}]", "stats.n_resamples=100", f"published=[{PUBLISHED}]"]
    proj = new_project(root, tmp_path / "proj", overrides)
    # kill while a run is being logged (RUNNING), or between runs if the poll misses every ~40 ms window
    _kill_when(proj, lambda: any(status == "RUNNING" for _, status, _, _ in _published_runs(proj)) or len(_published_runs(proj)) >= 10)
    before = _published_runs(proj)
    assert 1 <= len(before) < 19 and {status for _, status, _, _ in before} <= {"FINISHED", "RUNNING"}
    for model, status, _, artifacts in before:
        if status == "FINISHED":  # a FINISHED run holds its whole table
            table = Path(urlparse(artifacts).path) / "per_case.csv"
            assert table.read_bytes() == (proj / "scores" / PUBLISHED / model / "per_case.csv").read_bytes(), model
    log = run_command(["dvc", "repro"], proj)
    assert f"Running stage 'import@{PUBLISHED}'" not in log
    after = {run_id: (model, status) for model, status, run_id, _ in _published_runs(proj)}
    for model, status, run_id, _ in before:
        assert after[run_id] == (model, "FINISHED" if status == "FINISHED" else "FAILED"), (model, status)
    finished = sorted(model for model, status in after.values() if status == "FINISHED")
    assert len(finished) == len(set(finished)) == 19
    results = json.loads((proj / "results" / f"{PUBLISHED}.json").read_text())
    assert sorted(results["models"]) == finished
