"""Concurrency: two workers on a fresh MLflow store, and queued dvc experiments logging to one store."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
from pathlib import Path

import pytest

from projects import Projects
from segbench.tracking import runs as tracking
from tests_support import commit_all, gate_env, run_command, run_queue, score_bundle


def _log(uri: str, model: str, barrier) -> str:
    os.environ["SEGBENCH_TRACKING_URI"] = uri
    barrier.wait()
    return tracking.log_bundle(score_bundle(model))


def test_two_workers_create_a_fresh_store_at_once(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    (tmp_path / "mlruns").mkdir()
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            run_ids = pool.starmap(_log, [(uri, "sim_a", barrier), (uri, "sim_b", barrier)])
    assert len(set(run_ids)) == 2
    with sqlite3.connect(tmp_path / "mlruns" / "mlflow.db") as db:
        assert db.execute("SELECT name, status FROM runs ORDER BY name").fetchall() == [("sim_a", "FINISHED"), ("sim_b", "FINISHED")]
        assert db.execute("SELECT COUNT(*) FROM experiments WHERE name = 'segbench/toy'").fetchone() == (1,)


@pytest.mark.slow
def test_queued_experiments_log_each_run_once_to_the_project_store(projects: Projects, tmp_path: Path) -> None:
    small = ["-S", "dataset.kits23.cases=[case_00110]", "-S", "stats.n_resamples=100", "-S", "published=[]"]
    proj = projects.new(["model=[sim_dilate_1mm]", *small[1::2]])
    commit_all(proj, "base")
    for model in ("sim_erode_1mm", "sim_shift_3mm"):  # Hydra recomposes params.yaml from conf/ with these overrides
        run_command(["dvc", "exp", "run", "--queue", "-S", f"model=[{model}]", *small], proj)
    gate = tmp_path / "gate"  # both workers' first `segbench track` held until both are there, then let go together
    status = run_queue(proj, 2, 900, meet=gate_env(gate, "*/scores/kits23/*/run.json", on="read", argv="track"))
    assert "Failed" not in status, status
    assert len(list(gate.glob("started.*"))) >= 2  # they met: the two logged to the store at once
    with sqlite3.connect(proj / "mlruns" / "mlflow.db") as db:
        runs = db.execute("SELECT name, status FROM runs ORDER BY name").fetchall()
    assert runs == [("leaderboard", "FINISHED"), ("leaderboard", "FINISHED"), ("sim_erode_1mm", "FINISHED"), ("sim_shift_3mm", "FINISHED")]
