"""Cluster inference: a stage's cases as a Slurm array job on a real one-node cluster (slurmctld + slurmd).

The simulated models run through Slurm write the same bytes as locally; a shard whose task fails is resubmitted;
a shard that keeps failing stops the stage with an error naming it, after the other shards' predictions are kept.
LiteMedSAM, a real model, runs the interactive protocol through Slurm and reproduces the committed local run.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from projects import SMALL, Projects
from projects import SMALL_CASES as CASES
from projects import SMALL_MODELS as MODELS
from repo_paths import ROOT
from segbench.config.params import ConfigError
from segbench.models.slurm import executor_from_environ, options_from_environ, shard_runner_from_environ
from services import SlurmCluster, slurm_cluster, wait_until
from tests_support import command_env, commit_all, interruptible, lock_outs
from tests_support import run_command as run

PREDICT = [f"predict@kits23-{model}" for model in MODELS]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture(scope="module")
def local_copy(projects: Projects) -> tuple[Path, dict[str, dict[str, str]]]:
    """A project whose predict stages ran locally (a copy of the small experiment reproduced: this module's tests
    change it), with the sha256 of every file each wrote."""
    proj = projects.copy(SMALL)
    return proj, {model: _digests(proj, model) for model in MODELS}


def _digests(project: Path, model: str) -> dict[str, str]:
    """sha256 of every file in the model's predictions folder (the run stamp and manifest included)."""
    folder = project / "predictions" / "kits23" / model
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir()) if path.is_file()}


def _on_slurm(monkeypatch: pytest.MonkeyPatch, cluster: SlurmCluster, **options: str) -> None:
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.setenv("SEGBENCH_EXECUTOR", "slurm")
    monkeypatch.setenv("SEGBENCH_SLURM_PARTITION", cluster.partition)
    monkeypatch.setenv("SEGBENCH_SLURM_CPUS_PER_TASK", "1")
    for name, value in options.items():
        monkeypatch.setenv(f"SEGBENCH_SLURM_{name.upper()}", value)


def _wrapped(project: Path, model: str, script: str, first_argument: str) -> Path:
    """A params file whose ``model`` runs its own command through ``sh -c script first_argument command...``."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["model"][model]["command"] = ["sh", "-c", script, first_argument, *params["model"][model]["command"]]
    path = project / f"params-{model}-wrapped.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_predict_stage_on_slurm_writes_the_local_bytes(local_copy: tuple[Path, dict], cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dvc repro` of the predict stages with SEGBENCH_EXECUTOR=slurm, shards of 3 and 1 cases: every file (predictions,
    manifest, run stamp) has the local run's sha256, and dvc.lock is rewritten byte for byte."""
    proj, local = local_copy
    lock = (proj / "dvc.lock").read_bytes()
    shutil.rmtree(proj / "predictions")
    _on_slurm(monkeypatch, cluster, cases_per_task="3")
    out = run(["dvc", "repro", "--force", "--no-run-cache", *PREDICT], proj)
    assert out.count(": 2 shard(s): sbatch") == len(MODELS), out
    assert {model: _digests(proj, model) for model in MODELS} == local
    assert len(local["sim_dilate_1mm"]) == len(CASES) + 2  # the cases, manifest.json and .inputs.json
    assert (proj / "dvc.lock").read_bytes() == lock
    assert not (proj / "predictions" / "kits23" / ".sim_dilate_1mm.staging").exists()


def test_a_shard_that_fails_once_is_resubmitted_and_the_bytes_stay_the_same(
    local_copy: tuple[Path, dict], cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first task to start exits 3 (the model's command fails once); its shard alone is resubmitted and succeeds."""
    proj, local = local_copy
    marker = tmp_path / "failed-once"
    params = _wrapped(proj, "sim_dilate_1mm", 'if mkdir "$0" 2>/dev/null; then exit 3; fi; exec "$@"', str(marker))
    _on_slurm(monkeypatch, cluster, cases_per_task="2", retries="1")
    out = run(["segbench", "--params", str(params), "predict", "--dataset", "kits23", "--model", "sim_dilate_1mm"], proj)
    assert marker.is_dir(), "the injected failure never ran"
    assert "1 of 2 shard(s) done on attempt 0" in out and "1 of 1 shard(s) done on attempt 1" in out, out
    rerun = _digests(proj, "sim_dilate_1mm")
    assert rerun.pop(".inputs.json") != local["sim_dilate_1mm"][".inputs.json"]  # another command: another run stamp
    assert rerun == {name: digest for name, digest in local["sim_dilate_1mm"].items() if name != ".inputs.json"}


def test_a_shard_that_keeps_failing_stops_the_stage_and_keeps_the_others(
    local_copy: tuple[Path, dict], cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shard holding case_00110 fails on every attempt: after 1 + 1 tries the stage exits 1 naming the shard,
    its cases and logs; the other shard's predictions are in place (a rerun resumes from them)."""
    proj, local = local_copy
    params = _wrapped(proj, "sim_missed_lesion", 'if grep -q case_00110 "$0"; then exit 3; fi; exec "$@"', "{cases_file}")
    _on_slurm(monkeypatch, cluster, cases_per_task="2", retries="1")
    args = ["segbench", "--params", str(params), "predict", "--dataset", "kits23", "--model", "sim_missed_lesion"]
    result = subprocess.run(args, cwd=proj, env=command_env(), capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert "shard(s) [0] failed 2 time(s) on Slurm (cases case_00030, case_00110)" in result.stderr, result.stderr
    folder = proj / "predictions" / "kits23" / "sim_missed_lesion"
    assert sorted(p.name for p in folder.glob("*.nii.gz")) == ["case_00210.nii.gz", "case_00425.nii.gz"]
    assert all(_digests(proj, "sim_missed_lesion")[name] == local["sim_missed_lesion"][name] for name in ("case_00210.nii.gz", "case_00425.nii.gz"))
    assert sorted(p.name for p in (folder.parent / ".sim_missed_lesion.staging" / "logs").iterdir()) == [
        "shard-0.attempt-0.log",
        "shard-0.attempt-1.log",
        "shard-1.attempt-0.log",
    ]


#: a wrapped model command (``_wrapped``, ``$0`` a folder) that says it started and blocks until the test creates
#: ``$0/release``; after 600 s (a bound on a hang) it fails rather than run
HELD_UNTIL_RELEASED = 'touch "$0/started.$$"; n=0; until [ -e "$0/release" ]; do n=$((n + 1)); [ "$n" -gt 6000 ] && exit 75; sleep 0.1; done; exec "$@"'


def test_interrupting_the_stage_cancels_its_array_job(
    local_copy: tuple[Path, dict], cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C on the stage while its tasks run: the job leaves the queue (scancel), no task keeps a GPU busy.

    The model blocks in every task until the test releases it, so the interrupt lands on running tasks however
    busy the machine is, and only a cancel can empty the queue."""
    proj, _ = local_copy
    gate = tmp_path / "gate"
    gate.mkdir()
    params = _wrapped(proj, "sim_dilate_1mm", HELD_UNTIL_RELEASED, str(gate))
    shutil.rmtree(proj / "predictions" / "kits23" / "sim_dilate_1mm", ignore_errors=True)
    _on_slurm(monkeypatch, cluster, cases_per_task="2")
    args = ["segbench", "--params", str(params), "predict", "--dataset", "kits23", "--model", "sim_dilate_1mm"]
    stage = interruptible(args, cwd=proj, env=command_env())

    def queue() -> list[str]:
        return run(["squeue", "--noheader", "--format=%i %T"], proj).split()

    try:
        wait_until(lambda: stage.poll() is not None or any(gate.glob("started.*")), "a task running the model", 600)
        assert stage.poll() is None, f"the stage exited ({stage.returncode}) before any task ran the model"
        job = queue()[0].split("_")[0]
        stage.send_signal(signal.SIGINT)
        assert stage.wait(timeout=600) != 0
        wait_until(lambda: queue() == [], "the array job gone from the queue", 120)
        states = re.findall(r"JobState=(\w+)", run(["scontrol", "show", "job", job], proj))
        assert states and set(states) == {"CANCELLED"}, states
    finally:  # a failed assertion leaves no task blocked, nor the stage running
        (gate / "release").touch()
        if stage.poll() is None:
            stage.kill()
            stage.wait()


def _interact_on_slurm(root: Path, proj: Path, model: str, cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, **options: str) -> None:
    """Run ``model``'s interact stage in ``proj`` as 2 Slurm array tasks; its cases and predictions must hash to what the
    committed interactive/dvc.lock holds from a local run, in the local run's case order, with no staging left."""
    commit_all(proj, "base")
    _on_slurm(monkeypatch, cluster, cases_per_task="2", **options)
    out = run(["dvc", "repro", f"interactive/dvc.yaml:interact@totalseg_example-{model}"], proj)
    assert f"segbench-interact-totalseg_example-{model}: 2 of 2 shard(s) done on attempt 0" in out, out
    produced, committed = lock_outs(proj / "interactive" / "dvc.lock"), lock_outs(root / "interactive" / "dvc.lock")
    for path in ("interactive/cases/totalseg_example", f"interactive/predictions/totalseg_example/{model}"):
        assert produced[path] == committed[path], path
    table = (proj / "interactive" / "scores" / "totalseg_example" / model / "metrics.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in table[1:]] == ["ct.npz", "ct_dicom.npz", "mr.npz"]  # the local run's case order
    assert not (proj / "interactive" / "predictions" / "totalseg_example" / model / ".staging").exists()


def test_interact_stage_on_slurm_reproduces_the_committed_local_run(
    root: Path, projects: Projects, cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interact stage of the region-growing baseline (3 real scans x box + 5 clicks) as 2 Slurm array tasks: the
    predictions and prompt records hash to what the committed interactive/dvc.lock holds from a local run."""
    proj = projects.new(["model@interactive_model=[region_growing]", "published=[]"], interactive=True)
    _interact_on_slurm(root, proj, "region_growing", cluster, monkeypatch)


@pytest.mark.extended
@pytest.mark.skipif(
    not (ROOT / "envs" / "litemedsam" / "bin" / "python").exists(),
    reason="envs/litemedsam is absent: build it with `segbench env create litemedsam` (.ci/run does)",
)
def test_litemedsam_interact_stage_on_slurm_reproduces_the_committed_local_run(
    root: Path, projects: Projects, cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the REAL model LiteMedSAM, torch on both cores of each task (6 min quiet, 30 under load: extended,
    since the test above covers the Slurm path and .ci/run's interactive rerun LiteMedSAM's bytes)."""
    proj = projects.new(["model@interactive_model=[litemedsam]", "published=[]"], interactive=True)
    (proj / "envs").symlink_to(root / "envs")  # the model's environment and weights, as `segbench env create litemedsam` leaves them
    (proj / "models").mkdir()
    shutil.copy(root / "models" / "litemedsam.dvc", proj / "models")
    (proj / "models" / "litemedsam").symlink_to(root / "models" / "litemedsam")
    _interact_on_slurm(root, proj, "litemedsam", cluster, monkeypatch, cpus_per_task="2")  # one task at a time: torch takes both cores


def test_slurm_options_come_from_the_environment_and_bad_ones_are_named() -> None:
    assert executor_from_environ({}) is None and executor_from_environ({"SEGBENCH_EXECUTOR": "local"}) is None
    assert shard_runner_from_environ({}) is None and shard_runner_from_environ({"SEGBENCH_EXECUTOR": "slurm"}) is not None
    options = options_from_environ({"SEGBENCH_SLURM_GRES": "gpu:1", "SEGBENCH_SLURM_TIME": "2:00:00", "SEGBENCH_SLURM_ARGS": "--account=lab --mem=32G"})
    assert options.sbatch_args() == ["--time=2:00:00", "--gres=gpu:1", "--account=lab", "--mem=32G"]
    assert (options.cases_per_task, options.retries) == (20, 2)
    with pytest.raises(ConfigError, match="SEGBENCH_EXECUTOR='sge'"):
        executor_from_environ({"SEGBENCH_EXECUTOR": "sge"})
    with pytest.raises(ConfigError, match="SEGBENCH_SLURM_CASES_PER_TASK='0'"):
        executor_from_environ({"SEGBENCH_EXECUTOR": "slurm", "SEGBENCH_SLURM_CASES_PER_TASK": "0"})
    with pytest.raises(ConfigError, match="SEGBENCH_SLURM_RETRIES='two'"):
        options_from_environ({"SEGBENCH_SLURM_RETRIES": "two"})
