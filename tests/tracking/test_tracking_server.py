"""The pipeline against a shared MLflow tracking server on PostgreSQL with proxied artifacts, started here on loopback.

Concurrent workers (separate `segbench track` processes, and `dvc queue start -j 2`) log each score bundle once,
and compare reads the rows back from the server. The services are real (tests/support/services.py).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from projects import Projects
from segbench.tracking import runs as tracking
from services import TrackingServer, tracking_server, wait_until
from tests_support import commit_all, gate_env, run_command, run_queue, score_bundle


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrackingServer]:
    with tracking_server(tmp_path_factory.mktemp("tracking-server")) as running:
        yield running


def _bundle(model: str, dataset: str = "kits23") -> tracking.ScoreBundle:
    """A score bundle of 2,000 SIMULATED rows, large enough that logging it takes a while (the race window)."""
    return score_bundle(model, dataset, [0.5 + (i % 50) / 100 for i in range(2000)])


def _finished(uri: str, dataset: str, **tags: str) -> list:
    """FINISHED, not deleted runs of the dataset's experiment with the given tag values."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(tracking.experiment_name(dataset))
    runs = client.search_runs([experiment.experiment_id], filter_string=" and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items()))
    return [r for r in runs if r.info.status == "FINISHED"]


def _log(uri: str, bundle: tracking.ScoreBundle, barrier) -> str:
    os.environ["SEGBENCH_TRACKING_URI"] = uri
    barrier.wait()
    return tracking.log_bundle(bundle)


def test_workers_released_at_once_log_a_bundle_once_on_the_server(server: TrackingServer) -> None:
    """Three processes pass a barrier together and log one bundle into a fresh experiment: one run is left, all return it."""
    bundle = _bundle("sim_barrier", dataset="barrier")
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(3)
        with ctx.Pool(3) as pool:
            run_ids = pool.starmap(_log, [(server.uri, bundle, barrier)] * 3)
    runs = _finished(server.uri, "barrier", **{tracking.FINGERPRINT_TAG: bundle.fingerprint})
    assert len(runs) == 1, [r.info.run_id for r in runs]
    assert runs[0].info.run_id in run_ids
    assert runs[0].info.artifact_uri.startswith("mlflow-artifacts:/"), runs[0].info.artifact_uri


def test_three_track_processes_on_one_bundle_leave_one_finished_run(root: Path, tmp_path: Path, server: TrackingServer) -> None:
    """`segbench track` in 3 processes at once on the same score bundle: exactly one FINISHED run, proxied artifacts."""
    shutil.copy(root / "params.yaml", tmp_path / "params.yaml")
    bundle = _bundle("sim_shift_3mm")
    folder = tmp_path / "scores" / "kits23" / "sim_shift_3mm"
    folder.mkdir(parents=True)
    (folder / tracking.PER_CASE_ARTIFACT).write_bytes(bundle.per_case_csv)
    (folder / "run.json").write_text(json.dumps(bundle.record), encoding="utf-8")
    # each process is held when it has read the bundle, and all 3 are released together (a barrier the test holds)
    gate = tmp_path / "gate"
    env = {**gate_env(gate, f"*/scores/kits23/sim_shift_3mm/{tracking.PER_CASE_ARTIFACT}", on="read"), "SEGBENCH_TRACKING_URI": server.uri}
    workers = [
        subprocess.Popen(
            ["segbench", "track", "--dataset", "kits23", "--model", "sim_shift_3mm"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        wait_until(lambda: len(list(gate.glob("started.*"))) == 3 or any(w.poll() is not None for w in workers), "3 track processes at the gate", 600)
        assert len(list(gate.glob("started.*"))) == 3, [w.poll() for w in workers]
    finally:
        (gate / "release").touch()
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], "\n".join(outputs)
    runs = _finished(server.uri, "kits23", **{tracking.FINGERPRINT_TAG: bundle.fingerprint})
    assert len(runs) == 1, [r.info.run_id for r in runs]
    assert runs[0].info.artifact_uri.startswith("mlflow-artifacts:/"), runs[0].info.artifact_uri
    assert not (tmp_path / "mlruns").exists()  # nothing went to an embedded store
    assert list(server.artifacts.rglob(f"{runs[0].info.run_id}/artifacts/{tracking.PER_CASE_ARTIFACT}"))  # stored by the server
    os.environ["SEGBENCH_TRACKING_URI"] = server.uri
    try:
        back = tracking.read_runs("kits23", {"sim_shift_3mm": bundle.fingerprint})
    finally:
        del os.environ["SEGBENCH_TRACKING_URI"]
    assert len(back.rows) == 2000 and back.run_ids == {"sim_shift_3mm": runs[0].info.run_id}


@pytest.mark.slow
def test_queued_experiments_log_each_pair_once_and_compare_reads_the_server(projects: Projects, tmp_path: Path, server: TrackingServer) -> None:
    """Two queued experiments with the same parameters run at once against the server, so their workers log the
    same score bundles concurrently: each (dataset, model) is one run, and compare's leaderboard of both models
    comes from the server's rows. (Experiments with other stats settings would be other bundles: the score
    stage's run record holds bootstrap CIs.)"""
    models = ["sim_dilate_1mm", "sim_erode_1mm"]
    small = ["dataset.kits23.cases=[case_00030,case_00110]", f"model=[{','.join(models)}]", "published=[]"]
    small.append("stats.n_resamples=200")
    proj = projects.new(small)
    commit_all(proj, "base")
    for _ in range(2):
        run_command(["dvc", "exp", "run", "--queue", *(a for s in small for a in ("-S", s))], proj)
    gate = tmp_path / "gate"  # both workers' first `segbench track` held until both are there, then let go together
    meet = gate_env(gate, "*/scores/kits23/*/run.json", on="read", argv="track")
    status = run_queue(proj, 2, 1200, tracking_uri=server.uri, meet=meet)
    assert "Failed" not in status and "Success" in status, status
    assert len(list(gate.glob("started.*"))) >= 2  # they met: both logged the same bundle to the server at once
    assert not (proj / "mlruns" / "mlflow.db").exists()  # the queued workers got the server's URI from the environment
    for model in models:
        runs = _finished(server.uri, "kits23", **{"segbench.model": model})
        assert len(runs) == 1, (model, [r.info.run_id for r in runs])
    boards = _finished(server.uri, "kits23", **{tracking.KIND_TAG: tracking.LEADERBOARD_KIND})
    assert len(boards) == 1  # same results from the same model runs: one leaderboard
    client = MlflowClient(server.uri)
    for board in boards:
        results = json.loads(Path(client.download_artifacts(board.info.run_id, "kits23.json", str(tmp_path))).read_text())
        assert sorted(results["models"]) == models
        assert {t.removeprefix("segbench.run.") for t in board.data.tags if t.startswith("segbench.run.")} == set(models)
