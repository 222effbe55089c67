"""Concurrency: two workers on a fresh MLflow store, and queued dvc experiments logging to one store."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from segbench import tracking
from segbench.config import compose_params
from test_tracking import _bundle


def _log(uri: str, model: str, barrier) -> str:
    os.environ["SEGBENCH_TRACKING_URI"] = uri
    barrier.wait()
    return tracking.log_bundle(_bundle(model))


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


def _run(args: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SEGBENCH_TRACKING_URI"}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_queued_experiments_log_each_run_once_to_the_project_store(root: Path, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("dvc.yaml", "data.dvc", ".gitignore"):
        (proj / name).write_bytes((root / name).read_bytes())
    subprocess.run(["cp", "-r", str(root / "conf"), str(root / "src"), str(proj)], check=True)
    _run(["git", "init", "-q"], proj)
    _run(["dvc", "init", "-q"], proj)
    _run(["dvc", "remote", "add", "-d", "shared", str((root.parent / "shared" / "dvc-remote").resolve())], proj)
    _run(["dvc", "pull", "-q", "data.dvc"], proj)
    raw = compose_params(proj / "conf", ["model=[sim_dilate_1mm]", "dataset.kits23.cases=[case_00110]", "stats.n_resamples=100", "published=[]"])
    (proj / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    _run(["git", "add", "-A"], proj)
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"], proj)
    for model in ("sim_erode_1mm", "sim_shift_3mm"):
        _run(["dvc", "exp", "run", "--queue", "-S", f"model=[{model}]"], proj)
    _run(["dvc", "queue", "start", "-j", "2"], proj)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        status = _run(["dvc", "queue", "status"], proj)
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(5)
    assert "Failed" not in status, status
    with sqlite3.connect(proj / "mlruns" / "mlflow.db") as db:
        runs = db.execute("SELECT name, status FROM runs ORDER BY name").fetchall()
    assert runs == [("sim_erode_1mm", "FINISHED"), ("sim_shift_3mm", "FINISHED")]
