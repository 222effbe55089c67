"""Cluster inference through Slurm: a stage's cases in shards, one ``sbatch --array`` task per shard.

No scheduler of our own: Slurm queues, places and runs the tasks. :func:`run_shards` cuts the cases into shards,
submits one array job and waits until it left the queue (polling ``squeue``), resubmits the shards that failed (a
bounded number of times), then hands each finished shard's folder to the caller's ``assemble``. Two stages use it:

- predict (:func:`predict_on_slurm`): a task runs :func:`segbench.models.runner.predict_cases`, the local path's own
  code, on its shard: same adapter command, same post-processing, so the files are byte for byte a local run's;
- interact (:func:`segbench.interactive.harness.interact`): a task runs the harness's box and click steps on its
  shard's cases, the very function a local run calls.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from segbench.base.schema import ConfigError
from segbench.datasets.schema import DatasetConfig
from segbench.models.runner import Executor, ModelRunError, predict_cases
from segbench.models.schema import ModelConfig

log = logging.getLogger(__name__)

JOB_FILE = "job.pickle"
#: seconds between two looks at the queue while the array job runs
POLL_SECONDS = 5
#: written into a shard's folder by its task once every case of the shard is done
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


#: runs one shard: (its cases, an empty folder for everything it writes); must pickle (a module-level function or a
#: functools.partial of one), since each array task unpickles it
ShardTask = Callable[[list[str], Path], None]
#: brings a finished shard's outputs into place: (its cases, its folder)
Assemble = Callable[[list[str], Path], None]


@dataclass(frozen=True)
class ShardJob:
    """What every array task of one submission needs, pickled into the staging folder."""

    task: ShardTask
    shards: list[list[str]]


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


def options_for(environ: Mapping[str, str] = os.environ) -> SlurmOptions | None:
    """The Slurm options when ``SEGBENCH_EXECUTOR=slurm``, None when the stage runs here (``local``, the default)."""
    kind = environ.get("SEGBENCH_EXECUTOR") or "local"
    if kind == "local":
        return None
    if kind != "slurm":
        raise ConfigError(f"SEGBENCH_EXECUTOR={kind!r}: expected local or slurm")
    return options_from_environ(environ)


def executor_from_environ(environ: Mapping[str, str] = os.environ) -> Executor | None:
    """The predict stage's executor: None (local) unless ``SEGBENCH_EXECUTOR=slurm``."""
    options = options_for(environ)
    return None if options is None else functools.partial(predict_on_slurm, options=options)


def shard_runner_from_environ(environ: Mapping[str, str] = os.environ) -> Callable[..., None] | None:
    """The interact stage's shard runner: None (local) unless ``SEGBENCH_EXECUTOR=slurm``, then :func:`run_shards`."""
    options = options_for(environ)
    return None if options is None else functools.partial(run_shards, options=options)


def shard_dir(staging: Path, index: int) -> Path:
    return staging / f"shard-{index:05d}"


def run_shards(task: ShardTask, cases: list[str], staging: Path, *, name: str, options: SlurmOptions, assemble: Assemble) -> None:
    """Run ``task`` over ``cases`` as one Slurm array job, ``options.cases_per_task`` cases a task, in the empty folder ``staging``.

    Shards that failed are resubmitted up to ``options.retries`` times. Every shard that finished is handed to
    ``assemble`` in shard order, even when others failed for good; then the failure is raised naming the shards,
    their cases and the logs.
    """
    size = options.cases_per_task
    shards = [cases[i : i + size] for i in range(0, len(cases), size)]
    job_file = (staging / JOB_FILE).resolve()
    job_file.write_bytes(pickle.dumps(ShardJob(task, shards)))
    logs = job_file.parent / "logs"
    logs.mkdir()
    pending = list(range(len(shards)))
    try:
        for attempt in range(options.retries + 1):
            _wait(_submit(job_file, pending, logs / f"shard-%a.attempt-{attempt}.log", name, options))
            failed = [k for k in pending if not (shard_dir(job_file.parent, k) / DONE).is_file()]
            log.info("%s: %d of %d shard(s) done on attempt %d", name, len(pending) - len(failed), len(pending), attempt)
            if failed and attempt < options.retries:
                log.warning("%s: shard(s) %s failed (logs in %s); resubmitting them", name, failed, logs)
            pending = failed
            if not pending:
                break
    finally:  # whatever happened, the finished shards' outputs are kept
        for index, shard in enumerate(shards):
            if (shard_dir(job_file.parent, index) / DONE).is_file():
                assemble(shard, shard_dir(job_file.parent, index))
    if pending:
        raise ModelRunError(
            f"{name}: shard(s) {pending} failed {options.retries + 1} time(s) on Slurm "
            f"(cases {', '.join(c for k in pending for c in shards[k])}); logs in {logs}"
        )


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

    The shards that succeeded are moved into ``out_dir`` even when others failed for good (the stage then fails
    naming their logs, and a rerun resumes from them).
    """
    task = functools.partial(_predict_shard, dataset, model, device=device, weights_dir=weights_dir)
    run_shards(
        task,
        cases,
        staging,
        name=f"segbench-predict-{dataset.name}-{model.name}",
        options=options,
        assemble=functools.partial(_move_predictions, out_dir=out_dir),
    )


def _predict_shard(dataset: DatasetConfig, model: ModelConfig, cases: list[str], folder: Path, *, device: str, weights_dir: Path | None) -> None:
    """One predict shard: the local path's code into ``folder/predictions``."""
    (folder / "staging").mkdir()
    (folder / "predictions").mkdir()
    predict_cases(dataset, model, cases, folder / "staging", folder / "predictions", device=device, weights_dir=weights_dir)


def _move_predictions(shard: list[str], folder: Path, *, out_dir: Path) -> None:
    """Move a finished shard's predictions into ``out_dir`` (same filesystem: each move is atomic)."""
    for case_id in shard:
        source = folder / "predictions" / f"{case_id}.nii.gz"
        if source.is_file():
            os.replace(source, out_dir / source.name)


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


def run_task(job_file: Path, index: int) -> None:
    """One array task: run the job's task on shard ``index`` in its own new folder, then mark the shard done."""
    job: ShardJob = pickle.loads(job_file.read_bytes())
    folder = shard_dir(job_file.parent, index)
    shutil.rmtree(folder, ignore_errors=True)  # a resubmitted shard starts over
    folder.mkdir()
    cases = job.shards[index]
    log.info("shard %d: %d case(s): %s", index, len(cases), " ".join(cases))
    job.task(cases, folder)
    (folder / DONE).write_text("\n".join(cases) + "\n", encoding="utf-8")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_task(Path(sys.argv[1]), int(os.environ["SLURM_ARRAY_TASK_ID"]))
