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
import sqlite3
from pathlib import Path
from urllib.parse import urlparse

import pytest

from projects import Projects
from segbench.base.io import PARTIAL_MARK, SCRATCH
from tests_support import gate_env, kill_at_gate, run_command

CASES = ["case_00030", "case_00110", "case_00210"]
MODEL = "sim_dilate_1mm"

pytestmark = pytest.mark.slow


@pytest.fixture
def fresh_project(projects: Projects) -> Path:
    return projects.new([f"model=[{MODEL}]", f"dataset.kits23.cases=[{','.join(CASES)}]", "stats.n_resamples=200", "published=[]"])


def _kill_at(proj: Path, gate: Path, pattern: str, on: str = "write", passes: int = 0) -> str:
    """Start `dvc repro`, wait until one of its processes is held at the gate (it opened a path matching ``pattern``;
    tests/support/gate/sitecustomize.py), SIGKILL the whole process group there; returns the held path."""
    return kill_at_gate(["dvc", "repro"], proj, gate_env(gate, pattern, on, passes), pattern)


def _no_temp_files(proj: Path) -> None:
    leftovers = [p for p in (proj / "results").rglob("*.tmp")] if (proj / "results").exists() else []
    leftovers += [p for p in (proj / "scores").rglob("*.tmp")] if (proj / "scores").exists() else []
    for path in leftovers:  # a killed writer may leave its temp file, never a half-written target
        assert path.name.startswith("."), path


def test_kill_during_predict_resumes_without_recomputing_finished_cases(fresh_project: Path, tmp_path: Path) -> None:
    """Killed while predict reads the model's output for the second case: the first case's prediction is in place
    and the rerun predicts only the other two."""
    out_dir = fresh_project / "predictions" / "kits23" / MODEL
    _kill_at(fresh_project, tmp_path / "gate", f"*/.{MODEL}.staging/out/{CASES[1]}.nii.gz", on="read")
    done = {p.name: p.stat().st_mtime_ns for p in out_dir.glob("case_*.nii.gz")}
    assert sorted(done) == [f"{CASES[0]}.nii.gz"]
    log = run_command(["dvc", "repro"], fresh_project)
    assert "Running stage 'compare@kits23'" in log
    for name, mtime in done.items():
        assert (out_dir / name).stat().st_mtime_ns == mtime, f"{name} was recomputed"
    assert sorted(p.name for p in out_dir.glob("case_*.nii.gz")) == [f"{c}.nii.gz" for c in CASES]
    assert "Running stage" not in run_command(["dvc", "repro"], fresh_project)


def test_kill_during_score_and_compare_reruns_to_the_same_results(fresh_project: Path, tmp_path: Path) -> None:
    """Score killed while writing its per-case table (its temporary file open, the table absent); compare killed
    while its leaderboard run is RUNNING (logging the results artifact): the rerun finishes both, the same bytes."""
    scores = fresh_project / "scores" / "kits23" / MODEL
    # passes=1: the first open creates the temporary file (mkstemp), the second one writes the table into it
    held = _kill_at(fresh_project, tmp_path / "gate-score", f"*/{SCRATCH}/.per_case.csv{PARTIAL_MARK}*", passes=1)
    assert Path(held).parent == (fresh_project / SCRATCH).resolve() and Path(held).is_file(), held  # DVC's scratch folder
    assert not (scores / "per_case.csv").exists()
    _no_temp_files(fresh_project)
    _kill_at(fresh_project, tmp_path / "gate-compare", "*/artifacts/kits23.json")
    _no_temp_files(fresh_project)
    log = run_command(["dvc", "repro"], fresh_project)
    assert "Running stage 'predict" not in log and "Running stage 'score" not in log
    results = (fresh_project / "results" / "kits23.json").read_bytes()
    with sqlite3.connect(fresh_project / "mlruns" / "mlflow.db") as db:
        runs = db.execute("SELECT name, status FROM runs").fetchall()
    # the leaderboard run the kill left RUNNING is FAILED now, and logged again
    assert sorted(r for r in runs if r[1] != "FAILED") == [("leaderboard", "FINISHED"), (MODEL, "FINISHED")]
    assert [name for name, status in runs if status == "FAILED"] == ["leaderboard"]
    run_command(["dvc", "repro", "-f", "compare@kits23"], fresh_project)
    assert (fresh_project / "results" / "kits23.json").read_bytes() == results


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


def test_kill_during_track_leaves_no_finished_run_for_an_incomplete_table(projects: Projects, tmp_path: Path) -> None:
    proj = projects.new([f"model=[{MODEL}]", f"dataset.kits23.cases=[{CASES[0]}]", "stats.n_resamples=100", f"published=[{PUBLISHED}]"])
    # killed while the 6th published model's run is RUNNING (copying its table into the run's artifacts): each
    # process passes its first 5 such copies, so the import stage has logged 5 runs, the track stage at most its 1
    _kill_at(proj, tmp_path / "gate", "*/artifacts/per_case.csv", passes=5)
    before = _published_runs(proj)
    assert [status for _, status, _, _ in before].count("FINISHED") == 5 and len(before) == 6, before
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
