"""Cluster inference through Slurm: the predict stage's cases in shards, one ``sbatch --array`` task per shard.

No scheduler of our own: Slurm queues, places and runs the tasks. This module cuts the cases into shards,
submits one array job and waits until it left the queue (polling ``squeue``), resubmits the shards that failed (a bounded number
of times), then moves each shard's predictions into the predictions folder. A task runs
:func:`segbench.models.runner.predict_cases`, the local path's own code, on its shard: same adapter command,
same post-processing, so the files are byte for byte the ones a local run writes.

Chosen by the environment, never by params.yaml (where a model runs changes no output, so no DVC stage):

- ``SEGBENCH_EXECUTOR``: ``local`` (default) or ``slurm``
- ``SEGBENCH_SLURM_CASES_PER_TASK``: cases per array task (default 20)
- ``SEGBENCH_SLURM_RETRIES``: times a failed shard is resubmitted (default 2)
- ``SEGBENCH_SLURM_PARTITION``, ``SEGBENCH_SLURM_TIME``, ``SEGBENCH_SLURM_CPUS_PER_TASK``: sbatch's options
- ``SEGBENCH_SLURM_GRES``: generic resources per task, ``gpu:1`` for one GPU each (run the model with device ``cuda``:
  Slurm sets ``CUDA_VISIBLE_DEVICES`` to the task's GPU)
- ``SEGBENCH_SLURM_ARGS``: further sbatch options as shell words (``--account=x --mem=32G``)

The staging folder (inside the project) and the Python environment must be on a filesystem every node sees.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from segbench.config import ConfigError, DatasetConfig, ModelConfig
from segbench.models.runner import Executor, ModelRunError, predict_cases

log = logging.getLogger(__name__)

JOB_FILE = "job.pickle"
#: seconds between two looks at the queue while the array job runs
POLL_SECONDS = 5
#: written into a shard's folder by its task once every case of the shard is predicted
DONE = "done"


@dataclass(frozen=True)
class SlurmOptions:
    """How the shards are cut and what each array task asks Slurm for."""

    cases_per_task: int = 20
    retries: int = 2
    partition: str | None = None
    time: str | None = None
    cpus_per_task: int | None = None
    gres: str | None = None
    extra_args: tuple[str, ...] = ()

    def sbatch_args(self) -> list[str]:
        """The resource options of every submission."""
        named = {"--partition": self.partition, "--time": self.time, "--cpus-per-task": self.cpus_per_task, "--gres": self.gres}
        return [f"{flag}={value}" for flag, value in named.items() if value is not None] + list(self.extra_args)


@dataclass(frozen=True)
class ShardJob:
    """What every array task of one predict needs, pickled into the staging folder."""

    dataset: DatasetConfig
    model: ModelConfig
    shards: list[list[str]]
    device: str
    weights_dir: Path | None


def _int_option(environ: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = environ.get(name, "")
    if not raw:
        return None
    if not raw.strip().isdigit() or int(raw) < minimum:
        raise ConfigError(f"{name}={raw!r}: expected a whole number >= {minimum}")
    return int(raw)


def options_from_environ(environ: Mapping[str, str]) -> SlurmOptions:
    """The ``SEGBENCH_SLURM_*`` options (module docstring); a malformed one is an error naming it."""
    defaults = SlurmOptions()
    cases_per_task = _int_option(environ, "SEGBENCH_SLURM_CASES_PER_TASK", 1)
    retries = _int_option(environ, "SEGBENCH_SLURM_RETRIES", 0)
    return SlurmOptions(
        cases_per_task=defaults.cases_per_task if cases_per_task is None else cases_per_task,
        retries=defaults.retries if retries is None else retries,
        partition=environ.get("SEGBENCH_SLURM_PARTITION") or None,
        time=environ.get("SEGBENCH_SLURM_TIME") or None,
        cpus_per_task=_int_option(environ, "SEGBENCH_SLURM_CPUS_PER_TASK", 1),
        gres=environ.get("SEGBENCH_SLURM_GRES") or None,
        extra_args=tuple(shlex.split(environ.get("SEGBENCH_SLURM_ARGS", ""))),
    )


def executor_from_environ(environ: Mapping[str, str] = os.environ) -> Executor | None:
    """The predict stage's executor: None (local) unless ``SEGBENCH_EXECUTOR=slurm``."""
    kind = environ.get("SEGBENCH_EXECUTOR") or "local"
    if kind == "local":
        return None
    if kind != "slurm":
        raise ConfigError(f"SEGBENCH_EXECUTOR={kind!r}: expected local or slurm")
    return functools.partial(predict_on_slurm, options=options_from_environ(environ))


def shard_dir(staging: Path, index: int) -> Path:
    return staging / f"shard-{index:05d}"


def predict_on_slurm(
    dataset: DatasetConfig,
    model: ModelConfig,
    cases: list[str],
    staging: Path,
    out_dir: Path,
    *,
    device: str,
    weights_dir: Path | None,
    options: SlurmOptions,
) -> None:
    """An executor for :func:`segbench.models.runner.predict`: the cases as a Slurm array job, one shard per task.

    Shards that failed are resubmitted up to ``options.retries`` times. The shards that succeeded are moved into
    ``out_dir`` even when others failed for good (the stage then fails naming their logs, and a rerun resumes).
    """
    size = options.cases_per_task
    shards = [cases[i : i + size] for i in range(0, len(cases), size)]
    job_file = (staging / JOB_FILE).resolve()
    job_file.write_bytes(pickle.dumps(ShardJob(dataset, model, shards, device, weights_dir)))
    logs = job_file.parent / "logs"
    logs.mkdir()
    pending = list(range(len(shards)))
    try:
        for attempt in range(options.retries + 1):
            name, log_pattern = f"segbench-predict-{dataset.name}-{model.name}", logs / f"shard-%a.attempt-{attempt}.log"
            _wait(_submit(job_file, pending, log_pattern, name, options))
            failed = [k for k in pending if not (shard_dir(job_file.parent, k) / DONE).is_file()]
            log.info("%s on %s: %d of %d shard(s) done on attempt %d", model.name, dataset.name, len(pending) - len(failed), len(pending), attempt)
            if failed and attempt < options.retries:
                log.warning("%s on %s: shard(s) %s failed (logs in %s); resubmitting them", model.name, dataset.name, failed, logs)
            pending = failed
            if not pending:
                break
    finally:  # whatever happened, the finished shards' predictions are kept: a rerun resumes from them
        for index, shard in enumerate(shards):
            if (shard_dir(job_file.parent, index) / DONE).is_file():
                _assemble(shard, shard_dir(job_file.parent, index) / "predictions", out_dir)
    if pending:
        raise ModelRunError(
            f"model {model.name!r} on {dataset.name!r}: shard(s) {pending} failed {options.retries + 1} time(s) on Slurm "
            f"(cases {', '.join(c for k in pending for c in shards[k])}); logs in {logs}"
        )


def _slurm(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise ModelRunError(f"SEGBENCH_EXECUTOR=slurm but {argv[0]} is not on PATH: run the stage on a Slurm submit host") from exc


def _submit(job_file: Path, indices: list[int], log_pattern: Path, name: str, options: SlurmOptions) -> str:
    """Submit one array job over shard ``indices``; returns its job id."""
    argv = [
        "sbatch",
        "--parsable",
        f"--array={','.join(map(str, indices))}",
        f"--job-name={name}",
        f"--output={log_pattern}",
        f"--chdir={Path.cwd()}",
        *options.sbatch_args(),
        "--wrap",
        shlex.join([sys.executable, "-m", "segbench.models.slurm", str(job_file)]),
    ]
    result = _slurm(argv)
    job_id = result.stdout.strip().split(";")[0]
    if result.returncode != 0 or not job_id:
        raise ModelRunError(f"sbatch refused the job (status {result.returncode}): {result.stderr.strip()}\n{shlex.join(argv)}")
    log.info("Slurm job %s: %d shard(s): %s", job_id, len(indices), shlex.join(argv))
    return job_id


def _wait(job_id: str) -> None:
    """Poll squeue until no task of ``job_id`` is pending or running; cancel the job if we are interrupted."""
    try:
        while True:
            result = _slurm(["squeue", "--noheader", "--jobs", job_id, "--format=%i"])
            if result.returncode != 0 and "Invalid job id" not in result.stderr:
                raise ModelRunError(f"squeue failed on Slurm job {job_id} (status {result.returncode}): {result.stderr.strip()}")
            if result.returncode != 0 or not result.stdout.strip():  # gone from the queue: every task ended
                return
            time.sleep(POLL_SECONDS)
    except BaseException:
        _slurm(["scancel", job_id])
        raise


def _assemble(shard: list[str], predictions: Path, out_dir: Path) -> None:
    """Move a finished shard's predictions into ``out_dir`` (same filesystem: each move is atomic)."""
    for case_id in shard:
        source = predictions / f"{case_id}.nii.gz"
        if source.is_file():
            os.replace(source, out_dir / source.name)


def run_task(job_file: Path, index: int) -> None:
    """One array task: predict shard ``index`` of the job into its own folder with the local path's code."""
    job: ShardJob = pickle.loads(job_file.read_bytes())
    folder = shard_dir(job_file.parent, index)
    shutil.rmtree(folder, ignore_errors=True)  # a resubmitted shard starts over
    (folder / "staging").mkdir(parents=True)
    (folder / "predictions").mkdir()
    cases = job.shards[index]
    log.info("shard %d: %d case(s) of %s for %s", index, len(cases), job.dataset.name, job.model.name)
    predict_cases(job.dataset, job.model, cases, folder / "staging", folder / "predictions", device=job.device, weights_dir=job.weights_dir)
    (folder / DONE).write_text("\n".join(cases) + "\n", encoding="utf-8")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_task(Path(sys.argv[1]), int(os.environ["SLURM_ARRAY_TASK_ID"]))
