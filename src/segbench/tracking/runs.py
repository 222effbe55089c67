"""Moving per-case rows in and out of MLflow, and the leaderboard the compare stage publishes there.

One MLflow run per (dataset, model) pair, in an embedded store: a SQLite database and an artifact
folder under ``<project>/mlruns/`` (no server; a tracking server is a configuration change through
``SEGBENCH_TRACKING_URI``). Runs are identified by a content fingerprint of the score bundle, so
logging is idempotent: logging the same bundle twice finds the first run, and a run left unfinished
by an interrupted process is marked FAILED before the bundle is logged again. The compare stage adds
one leaderboard run per dataset, fingerprinted by its content in the same way, and saves the experiment's runs
view (the headline columns MLflow's runs table shows; MLflow 3.17 shows no metric column unless chosen).

Each run is shaped for MLflow's UI: the experiment is of MLflow's model-training kind, the run has the
dataset as an MLflow dataset input (name, data.dvc md5, source, one row per case), the source tags with
the git commit it was logged at (kept out of the score bundle, so no DVC output depends on the commit),
and the per-case table as an MLflow table besides the CSV and the run record (``run.json``) that compare reads: the
rows compare analyses come from the store only (``read_runs``), a bundle is read only to log a run the store lacks
(``missing_runs``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import html
import io
import json
import logging
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from segbench.base.io import UNREADABLE, changed_since_recorded, file_digest, read_json, recorded, write_json_atomic, write_text_atomic
from segbench.base.rows import check_rows

log = logging.getLogger(__name__)

FINGERPRINT_TAG = "segbench.fingerprint"
KIND_TAG = "segbench.kind"
LEADERBOARD_KIND = "leaderboard"
# MLflow 3's experiment kind for model training ("Machine learning" in its UI, value of its ExperimentKind enum).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# MLflow draws a progress bar per artifact download; compare downloads one small table per run.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
PER_CASE_ARTIFACT = "per_case.csv"
PER_CASE_TABLE = "per_case.json"
#: the score bundle's run record (tags, params, metrics and what its stage adds, e.g. a published set's import summary),
#: kept as a file of the bundle and an artifact of its run: compare reads it back with the rows
RECORD_ARTIFACT = "run.json"
#: the leaderboard run's table of every leaderboard (an MLflow table: mean, CI, ranks, verdicts per model)
LEADERBOARD_TABLE = "leaderboard.json"
#: the experiment's saved runs view, opened by ``?viewStateShareKey=segbench`` (MLflow's shared-view tag)
VIEW_KEY = "segbench"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
#: the same cases scored under the other metric-definition profiles (``scoring.sensitivity_profiles``), when asked for
PROFILES_ARTIFACT = "per_case_profiles.csv"
#: lesion-wise scores (``scoring.lesions``): one row per case x lesion structure x lesion profile, and one per lesion
LESIONS_ARTIFACT = "per_case_lesions.csv"
INSTANCES_ARTIFACT = "instances.csv"
#: the tables a score bundle may add to its per-case table, in the order its fingerprint reads them
OPTIONAL_ARTIFACTS: tuple[str, ...] = (PROFILES_ARTIFACT, LESIONS_ARTIFACT, INSTANCES_ARTIFACT)
#: what a score bundle's run.json must hold: the dataset's identity becomes the run's MLflow dataset input
REQUIRED_RECORD = {"tags": ("segbench.dataset", "segbench.model", "segbench.kind", "segbench.dataset_version"), "params": ("dataset.source",)}


class TrackingError(RuntimeError):
    """The tracking store does not hold what the pipeline expects (missing or duplicate runs)."""


@dataclass(frozen=True)
class ScoreBundle:
    """What the score stage writes for one (dataset, model): the per-case table, the run record and the optional
    tables it was asked for (``OPTIONAL_ARTIFACTS`` name -> CSV bytes): the per-case rows under the other
    metric-definition profiles, the lesion-wise scores and the per-lesion table."""

    per_case_csv: bytes
    record: dict[str, Any]
    tables: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.tables) - set(OPTIONAL_ARTIFACTS))
        if unknown:
            raise TrackingError(f"score bundle: unknown table(s) {unknown}; known: {list(OPTIONAL_ARTIFACTS)}")

    @property
    def fingerprint(self) -> str:
        """Content hash of the bundle: equal bundles are the same run."""
        digest = hashlib.sha256(self.per_case_csv)
        digest.update(json.dumps(self.record, sort_keys=True).encode())
        for name in OPTIONAL_ARTIFACTS:
            if name in self.tables:
                digest.update(self.tables[name])
        return digest.hexdigest()

    @classmethod
    def read(cls, folder: Path) -> ScoreBundle:
        """The bundle in ``folder``, checked where its rows enter the pipeline: each file is the one its stage wrote
        (the md5 ``dvc.lock`` records), the run record has the fields every run needs and each metric keeps its range
        (``segbench.base.rows``); any fault is an error naming the file and how to write it again."""
        folder = Path(folder)
        for name in ("run.json", PER_CASE_ARTIFACT, *OPTIONAL_ARTIFACTS):
            if (folder / name).is_file():
                _check_recorded(folder / name)
        fix = _rewrite_advice(folder / PER_CASE_ARTIFACT)
        record = read_json(folder / "run.json", "score bundle's run record")
        missing = [f"{section}.{key}" for section, keys in REQUIRED_RECORD.items() for key in keys if key not in record.get(section, {})]
        if missing:
            raise TrackingError(f"{folder / 'run.json'}: missing {', '.join(missing)}; {fix}")
        tables = {name: (folder / name).read_bytes() for name in OPTIONAL_ARTIFACTS if (folder / name).is_file()}
        bundle = cls(per_case_csv=(folder / PER_CASE_ARTIFACT).read_bytes(), record=record, tables=tables)
        for name, content in ((PER_CASE_ARTIFACT, bundle.per_case_csv), *tables.items()):
            check_rows(_read_table(content, folder / name), str(folder / name), fix)
        return bundle

    @classmethod
    def write(cls, folder: Path, rows: pd.DataFrame, record: dict[str, Any], tables: Mapping[str, pd.DataFrame] = {}) -> ScoreBundle:
        """Write the bundle of ``rows`` (the per-case table), ``record`` (the run record) and ``tables`` (of
        ``OPTIONAL_ARTIFACTS``) into ``folder`` atomically, each file at once; an optional table not given is removed.
        Every table is checked first (``segbench.base.rows``): a value out of its metric's range is never written."""
        folder = Path(folder)
        fault = "a fault of the stage that scored them, not of the inputs: please report it with this line"
        for name, table in ((PER_CASE_ARTIFACT, rows), *tables.items()):
            check_rows(table, str(folder / name), fault)
        bundle = cls(per_case_csv=_csv_bytes(rows), record=record, tables={name: _csv_bytes(table) for name, table in tables.items()})
        write_text_atomic(folder / PER_CASE_ARTIFACT, bundle.per_case_csv.decode())
        for name in OPTIONAL_ARTIFACTS:
            if name in bundle.tables:
                write_text_atomic(folder / name, bundle.tables[name].decode())
            else:
                (folder / name).unlink(missing_ok=True)
        write_json_atomic(folder / "run.json", record)
        return bundle


def _csv_bytes(rows: pd.DataFrame) -> bytes:
    """A per-case table as the bundle stores it: CSV without the index, one newline per row."""
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue().encode()


def _read_table(content: bytes, where: Path | str) -> pd.DataFrame:
    """A per-case CSV table from its bytes (case ids as text); bytes that are no CSV are an error naming ``where``."""
    try:
        return pd.read_csv(io.BytesIO(content), dtype={"case_id": str})
    except UNREADABLE as exc:
        raise TrackingError(f"{where}: not a readable per-case CSV table ({exc})") from None


def _rewrite_advice(path: Path) -> str:
    """How to write a score bundle's file again: the stage ``dvc.lock`` names as its producer, whose output is the
    authoritative copy (never the changed file, and never the track stage, which would log it as it is)."""
    record = recorded(path)
    if record is None:
        return "the score (or import) stage's output is the authoritative copy: rerun that stage to write the bundle again"
    return f"stage {record.stage}'s output is the authoritative copy: `dvc repro -f -s {record.stage}` writes it again (then `dvc repro`)"


def _check_recorded(path: Path) -> None:
    """A TrackingError when ``path`` is not the file its stage wrote (md5 against ``dvc.lock``)."""
    record = changed_since_recorded(path)
    if record is not None:
        raise TrackingError(
            f"{path}: not the file stage {record.stage} wrote (md5 {file_digest(path, 'md5')}, {record.lock} "
            f"records {record.md5}); refused: {_rewrite_advice(path)}, or `dvc checkout {path.parent}` "
            f"restores DVC's copy"
        )


@dataclass(frozen=True)
class Leaderboard:
    """What the compare stage logs for one dataset: the results file, the model runs it was computed
    from, headline metrics, tags (the verdicts in words) and parameters, the leaderboard table, the columns the
    runs view shows, and pages made from the results (drawn only for a new run)."""

    dataset: str
    results_name: str
    results: bytes
    model_runs: dict[str, str]  # model -> MLflow run id
    metrics: dict[str, float]
    tags: dict[str, str]
    params: dict[str, str]
    table: pd.DataFrame
    view: list[str]  # the runs table's columns, as MLflow names them: metrics.`<name>`, tags.`<name>`
    pages: Callable[[], dict[str, bytes]]  # artifact name -> content

    @property
    def fingerprint(self) -> str:
        """Content hash of the results and the runs they came from (everything else is made from them)."""
        return leaderboard_fingerprint(self.dataset, self.results_name, self.results, self.model_runs)


def leaderboard_fingerprint(dataset: str, results_name: str, results: bytes, model_runs: dict[str, str]) -> str:
    """The fingerprint a leaderboard run carries: a content hash of its results file and the model runs it came from."""
    digest = hashlib.sha256(json.dumps([dataset, results_name, model_runs], sort_keys=True).encode())
    digest.update(results)
    return digest.hexdigest()


@dataclass(frozen=True)
class TrackedRuns:
    """What compare reads back from MLflow: every model's per-case rows, segbench tags, run id and run record (the
    bundle's ``run.json``, as logged), and the optional tables of the runs that have them (empty otherwise): the rows
    under the other metric-definition profiles, the lesion-wise scores and the per-lesion table."""

    rows: pd.DataFrame
    tags: dict[str, dict[str, str]]
    run_ids: dict[str, str]
    profile_rows: pd.DataFrame
    lesion_rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    instance_rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


def git_commit() -> str:
    """HEAD's commit, ``<sha>-dirty`` if tracked files differ from it, 'unknown' without a commit.

    The pipeline's own lock file is left out of the comparison: `dvc repro` rewrites it between stages.
    """
    head = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode != 0:
        return "unknown"
    changes = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)dvc.lock"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = changes.returncode != 0 or bool(changes.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


def project_root(start: Path | None = None) -> Path:
    """The project's root, also from inside the temporary workspace of a queued ``dvc exp run``.

    DVC runs queued experiments in copies under ``<project>/.dvc/tmp/exps/``; the store must be the
    project's own, so such paths are cut at ``.dvc``.
    """
    path = Path(start or Path.cwd()).resolve()
    parts = path.parts
    if ".dvc" in parts:
        path = Path(*parts[: parts.index(".dvc")])
    for candidate in (path, *path.parents):
        if (candidate / ".dvc").is_dir() or (candidate / "dvc.yaml").is_file():
            return candidate
    return path


def tracking_uri(root: Path | None = None) -> str:
    """``SEGBENCH_TRACKING_URI`` if set, else the embedded SQLite store under ``<project>/mlruns/``."""
    if os.environ.get("SEGBENCH_TRACKING_URI"):
        return os.environ["SEGBENCH_TRACKING_URI"]
    store = (root or project_root()) / "mlruns"
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path | None:
    """The SQLite file of an embedded store's ``uri``, else None (a tracking server)."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


def _store_lock(uri: str) -> contextlib.AbstractContextManager:
    """A file lock beside an embedded store: two workers creating it at once must not race."""
    from filelock import FileLock

    db = sqlite_path(uri)
    return FileLock(f"{db}.lock") if db else contextlib.nullcontext()


#: the tag naming the process that logs a run (``<host>:<pid>``): a run still RUNNING whose process is gone was interrupted
WRITER_TAG = "segbench.writer"
#: the embedded stores this process has checked, relocated and swept of interrupted runs (once each)
_OPENED: set[str] = set()


def _writer() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _store_fix(db: Path) -> str:
    """How to get a working embedded store back: every run is logged again from the score bundles by compare."""
    return f"move it aside (`mv {db} {db}.damaged`) and run `dvc repro -f -s --glob 'compare*'`: compare logs every run again from the score bundles"


def _check_store(db: Path) -> None:
    """A TrackingError naming ``db`` when the SQLite file of an embedded store cannot be read (truncated, overwritten)."""
    import sqlite3

    if not db.exists() or db.stat().st_size == 0:
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as connection:
            verdict = connection.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.Error as error:
        verdict = str(error)
    if verdict != "ok":
        raise TrackingError(f"{db}: the MLflow tracking store cannot be read ({verdict}); {_store_fix(db)}")


def _relocate(db: Path) -> None:
    """Point the artifact locations an embedded store keeps (absolute ``file:`` URIs) at the artifact folder beside
    ``db`` when they name the one of another project folder: a copied or moved project then writes and reads only its
    own artifacts (``cp -a``, ``mv``), never the original's."""
    import sqlite3

    if not db.exists() or db.stat().st_size == 0:
        return
    ours = (db.parent / "artifacts").as_uri()
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as connection, connection:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"experiments", "runs"} <= tables:
            return
        for experiment_id, location in connection.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall():
            if not location or location == ours or not location.startswith("file:") or not location.endswith(f"/{db.parent.name}/artifacts"):
                continue
            connection.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (ours, experiment_id))
            connection.execute(
                "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                (ours, len(location) + 1, experiment_id, len(location), location),
            )
            log.info("%s: experiment %s's artifacts moved from %s to %s (a copied or moved project)", db, experiment_id, location, ours)


def _alive(writer: str) -> bool:
    """Whether the process ``<host>:<pid>`` still runs; a process of another host is taken as running."""
    host, _, pid = writer.rpartition(":")
    if host != _writer().rpartition(":")[0] or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mark_interrupted(client) -> None:
    """Mark FAILED (as :func:`_log_once` marks an interrupted run it meets) every RUNNING run whose writing process
    (``WRITER_TAG``) no longer runs: a stage killed mid-run (SIGKILL, a full disk) left it; a run another live process
    is writing is left alone."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    for start in range(0, len(experiments), 100):
        for run in client.search_runs(experiments[start : start + 100], filter_string="attributes.status = 'RUNNING'", max_results=1000):
            writer = run.data.tags.get(WRITER_TAG)
            if writer and not _alive(writer):
                client.set_terminated(run.info.run_id, status="FAILED")
                log.warning(
                    "MLflow run %s (%s) was left RUNNING by process %s, which no longer runs: marked FAILED", run.info.run_id, run.info.run_name, writer
                )


def store_client(uri: str):
    """An MLflow client on ``uri`` whose store exists (schema created and migrated under the lock). An embedded store
    is checked, relocated into its project and swept of interrupted runs the first time this process opens it; one
    that cannot be read is an error naming its file and the fix."""
    from mlflow.tracking import MlflowClient

    db = sqlite_path(uri)
    with _store_lock(uri):
        if db is not None and uri not in _OPENED:
            _check_store(db)
            _relocate(db)
        client = MlflowClient(tracking_uri=uri)
        try:
            client.search_experiments(max_results=1)
        except Exception as error:  # MLflow raises SQLAlchemy's and its own errors, many lines each
            where = db if db is not None else uri
            fix = _store_fix(db) if db is not None else "check the tracking server (SEGBENCH_TRACKING_URI)"
            raise TrackingError(f"{where}: the MLflow tracking store cannot be opened ({str(error).splitlines()[0][:200]}); {fix}") from error
        if uri not in _OPENED:
            _mark_interrupted(client)
            _OPENED.add(uri)
    return client


def experiment_name(dataset: str) -> str:
    return f"segbench/{dataset}"


def _experiment_id(client, uri: str, dataset: str) -> str:
    """The dataset's experiment, created once, of MLflow's model-training kind (also set on older
    experiments); its artifacts live beside an embedded database, and on a server where the server
    keeps them (``mlflow-artifacts:`` with proxied artifact storage)."""
    from mlflow.exceptions import MlflowException

    with _store_lock(uri):
        found = client.get_experiment_by_name(experiment_name(dataset))
        if found is not None:
            if found.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                _set_experiment_tag(client, found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return found.experiment_id
        db = sqlite_path(uri)
        artifacts = (db.parent / "artifacts").as_uri() if db else None
        try:
            return client.create_experiment(experiment_name(dataset), artifact_location=artifacts, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException as error:  # a server has no file lock: another worker created it first (names are unique there)
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return client.get_experiment_by_name(experiment_name(dataset)).experiment_id


def _runs_with_fingerprint(client, experiment_id: str, fingerprint: str) -> list:
    return client.search_runs([experiment_id], filter_string=f"tags.`{FINGERPRINT_TAG}` = '{fingerprint}'", max_results=100)


def _source_tags(entry_point: str) -> dict[str, str]:
    """MLflow's source tags: the segbench command that logged the run and the git commit it ran at."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE

    return {MLFLOW_SOURCE_NAME: entry_point, MLFLOW_SOURCE_TYPE: "LOCAL", MLFLOW_GIT_COMMIT: git_commit()}


def _run_order(run) -> tuple[int, str]:
    """The order every worker agrees on among runs of one fingerprint: earliest start, then run id."""
    return run.info.start_time or 0, run.info.run_id


def _keep_first(client, experiment_id: str, fingerprint: str) -> str | None:
    """The first FINISHED run with ``fingerprint`` in :func:`_run_order`; the later ones are deleted as duplicates.

    Concurrent workers (separate processes against one server, which has no lock) may each find no run and
    each log one. Every worker calls this after finishing its own run, so the last one to call it sees all
    finished runs and leaves exactly one: the first in the agreed order, which no worker ever deletes.
    """
    from mlflow.exceptions import MlflowException

    finished = sorted((r for r in _runs_with_fingerprint(client, experiment_id, fingerprint) if r.info.status == "FINISHED"), key=_run_order)
    for duplicate in finished[1:]:
        with contextlib.suppress(MlflowException):  # another worker deleted it first
            client.delete_run(duplicate.info.run_id)
            log.info("MLflow run %s (%s): deleted, a duplicate of run %s logged concurrently", duplicate.info.run_id, experiment_id, finished[0].info.run_id)
    return finished[0].info.run_id if finished else None


def _log_artifacts(client, run_id: str, folder: Path) -> None:
    """Log the files of ``folder`` into run ``run_id``; a full disk is an OSError naming the file being written and the
    bytes the folder's files need (the error of MLflow's copy names neither the bytes nor, first, the file written)."""
    try:
        client.log_artifacts(run_id, str(folder))
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        needed = sum(path.stat().st_size for path in folder.iterdir())
        raise OSError(errno.ENOSPC, f"{needed} bytes needed", error.filename2 or error.filename) from error


def _remove_local_artifacts(uri: str) -> None:
    """Remove a failed run's artifacts when they are local files (``file:``): a table half-copied into a full disk
    stays in no run (one on a server is the server's)."""
    import shutil
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    if uri.startswith("file:"):
        shutil.rmtree(url2pathname(urlparse(uri).path), ignore_errors=True)


def _log_once(client, experiment_id: str, fingerprint: str, run_name: str, tags: dict[str, str], source: str, fill: Callable[[str], None]) -> str:
    """The FINISHED run with ``fingerprint``, or a new one that ``fill`` logs into; returns the run id.

    Runs with that fingerprint in any other state were interrupted: they are marked FAILED. A new run is
    FINISHED only after ``fill`` returned, FAILED (its local artifacts removed) if it raised. Workers that logged the
    same fingerprint at once end with one FINISHED run (:func:`_keep_first`).
    """
    existing = _keep_first(client, experiment_id, fingerprint)
    if existing is not None:
        log.info("MLflow run %s (%s, %s): already logged with the same content", existing, experiment_id, run_name)
        return existing
    for run in _runs_with_fingerprint(client, experiment_id, fingerprint):
        if run.info.status != "FINISHED":
            client.set_terminated(run.info.run_id, status="FAILED")
    source_tags = _source_tags(source)
    run_id = client.create_run(experiment_id, tags={**tags, FINGERPRINT_TAG: fingerprint, WRITER_TAG: _writer(), **source_tags}, run_name=run_name).info.run_id
    try:
        fill(run_id)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        _remove_local_artifacts(client.get_run(run_id).info.artifact_uri)
        raise
    kept = None
    while kept is None:  # a worker starting meanwhile took our running run for an interrupted one and marked it FAILED
        client.set_terminated(run_id, status="FINISHED")
        kept = _keep_first(client, experiment_id, fingerprint)
    if kept != run_id:
        log.info("MLflow run %s (%s, %s): run %s holds the same content, logged concurrently", run_id, experiment_id, run_name, kept)
        return kept
    log.info("MLflow run %s (%s, %s) logged at git commit %s", run_id, experiment_id, run_name, source_tags["mlflow.source.git.commit"])
    return run_id


def _log_values(client, run_id: str, params: dict[str, Any], metrics: dict[str, float], step_metrics: dict[str, list[float]] | None = None) -> None:
    """Params and metrics in batches of MLflow's limits (100 params, 1000 entries per call).

    ``step_metrics``: name -> one value per step 1, 2, ...; logged as that metric's history, which
    MLflow's UI draws as a curve over the steps (e.g. DSC after the box and after each click).
    """
    from mlflow.entities import Metric, Param

    params_list = [Param(k, str(v)[:6000]) for k, v in sorted(params.items())]
    metrics_list = [Metric(k, float(v), 0, 0) for k, v in sorted(metrics.items())]
    metrics_list += [Metric(k, float(v), 0, step) for k, values in sorted((step_metrics or {}).items()) for step, v in enumerate(values, 1)]
    for start in range(0, len(params_list), 100):
        client.log_batch(run_id, params=params_list[start : start + 100])
    for start in range(0, len(metrics_list), 1000):
        client.log_batch(run_id, metrics=metrics_list[start : start + 1000])


def _set_experiment_tag(client, experiment_id: str, key: str, value: str) -> None:
    """``client.set_experiment_tag``, tried twice (:func:`_twice`; two queued experiments' compare stages setting the
    same new tag hit ``experiment_tag_pk``)."""
    _twice(f"MLflow experiment {experiment_id}: its tag {key}", lambda: client.set_experiment_tag(experiment_id, key, value))


def _log_inputs(client, run_id: str, datasets: list) -> None:
    """``client.log_inputs``, tried twice (:func:`_twice`; two workers logging the same dataset hit ``datasets.dataset_pk``)."""
    _twice(f"MLflow run {run_id}: its dataset input", lambda: client.log_inputs(run_id, datasets=datasets))


def _twice(what: str, write: Callable[[], object]) -> None:
    """``write()``, and once more after an MLflow error: MLflow's server looks a row up, then inserts it, so two workers
    writing the same new row at once can hit its unique key; by then the row exists and the second try updates or
    links it."""
    from mlflow.exceptions import MlflowException

    try:
        write()
    except MlflowException as error:
        log.info("%s: written again after %s", what, str(error).splitlines()[0])
        write()


def _dataset_input(record: dict[str, Any], rows: pd.DataFrame):
    """The run's dataset as an MLflow dataset input: name, data.dvc md5 as digest, its source, one row per case."""
    from mlflow.data.pandas_dataset import from_pandas
    from mlflow.data.sources import LocalArtifactDatasetSource  # type: ignore[attr-defined]  # registered at import, not declared
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    cases = pd.DataFrame({"case_id": sorted(rows["case_id"].astype(str).unique())})
    dataset = from_pandas(
        cases,
        source=LocalArtifactDatasetSource(record["params"]["dataset.source"]),
        name=record["tags"]["segbench.dataset"],
        digest=record["tags"]["segbench.dataset_version"],
    )
    return DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, "evaluation")])


def log_bundle(bundle: ScoreBundle, uri: str | None = None) -> str:
    """Log a score bundle as one MLflow run (once); returns the run id.

    A FINISHED run with the same fingerprint is reused. Runs with that fingerprint in any other state
    were interrupted: they are marked FAILED, and a complete run is logged.
    """
    uri = uri or tracking_uri()
    client = store_client(uri)
    record = bundle.record
    experiment_id = _experiment_id(client, uri, record["tags"]["segbench.dataset"])

    def fill(run_id: str) -> None:
        rows = pd.read_csv(io.BytesIO(bundle.per_case_csv), dtype={"case_id": str})
        # text as Python objects: MLflow's table logging walks every text cell, which is slow on arrow strings
        rows = rows.astype({c: object for c, t in rows.dtypes.items() if isinstance(t, pd.StringDtype)})
        _log_values(client, run_id, record["params"], record["metrics"], record.get("step_metrics"))
        _log_inputs(client, run_id, [_dataset_input(record, rows)])
        client.log_table(run_id, data=rows, artifact_file=PER_CASE_TABLE)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / PER_CASE_ARTIFACT).write_bytes(bundle.per_case_csv)
            for name, content in bundle.tables.items():
                (Path(tmp) / name).write_bytes(content)
            (Path(tmp) / RECORD_ARTIFACT).write_text(json.dumps(record, sort_keys=True, indent=1), encoding="utf-8")
            _log_artifacts(client, run_id, Path(tmp))

    return _log_once(client, experiment_id, bundle.fingerprint, record["tags"]["segbench.model"], record["tags"], "segbench track", fill)


def markdown_text(text: str) -> str:
    """``text`` as plain text in Markdown: HTML's ``<``, ``>`` and ``&`` as entities, Markdown's punctuation backslashed
    (``_`` only at a word's edge, where it could start emphasis): a model named ``<img src=...>`` or ``[x](https://...)``
    is shown as typed in the MLflow note, not rendered."""
    text = html.escape(text, quote=False)
    text = re.sub(r"([\\`*{}\[\]()#+!|~])", r"\\\1", text)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)


def _note(experiment_id: str, board: Leaderboard, files: list[str]) -> str:
    """Markdown for the leaderboard run's description: what it is, a link to each model run, what its metrics mean; every
    name in it plain text (:func:`markdown_text`)."""
    links = "\n".join(f"- [{markdown_text(model)}](#/experiments/{experiment_id}/runs/{run_id})" for model, run_id in sorted(board.model_runs.items()))
    names = ", ".join(f"`{name}`" for name in sorted(files))
    return (
        f"Leaderboard of **{markdown_text(board.dataset)}**, computed by `segbench compare` from the per-case tables of these runs:\n\n{links}\n\n"
        f"Artifacts: {names}; `{LEADERBOARD_TABLE}` is every leaderboard as one table (mean, CI, P(rank 1), rank interval, "
        "co-winners and the verdict against the next ranked model). Metrics per structure and metric: `<structure>.<metric>.mean`, "
        "the #1's mean as every view rounds it, and `<structure>.<metric>.verdict`, #1 against #2 as a number for plots "
        "(1 separable, 0.5 borderline, 0 not separable, -1 the aggregation disagrees); the tag of the same name holds its words."
    )


def _runs_view(experiment_id: str, columns: list[str]) -> tuple[str, str]:
    """The saved runs view (MLflow's shared-view state: the runs table's columns, ``metrics.`<name>``` or
    ``tags.`<name>```) and the experiment description linking it."""
    # first after the run's name and date, each wide enough for its name (the text between the backticks)
    state = {
        "selectedColumns": ["attributes.`Source`", "attributes.`Dataset`", *columns],
        "columnOrder": columns,
        "columnWidths": {column: 7 * len(column.split("`")[1]) + 24 for column in columns},
    }
    link = f"#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
    note = f"[Runs table with the headline metrics]({link}): each model's mean and, on the leaderboard run, #1's mean and its verdict in words."
    return json.dumps(state, sort_keys=True), note


def log_leaderboard(board: Leaderboard, uri: str | None = None) -> str:
    """Log a dataset's leaderboard as one MLflow run beside its model runs (once per content); returns the run id.

    Tagged ``segbench.kind=leaderboard`` and ``segbench.run.<model>`` with each model run's id, described
    by a note linking them, with the model runs' dataset input, the results and pages as artifacts, the
    leaderboard table and the metrics. The pages are drawn only when the run is new. The experiment's saved
    runs view is set to ``board.view`` and linked from the experiment's description.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    uri = uri or tracking_uri()
    client = store_client(uri)
    experiment_id = _experiment_id(client, uri, board.dataset)
    view, description = _runs_view(experiment_id, board.view)
    _set_experiment_tag(client, experiment_id, VIEW_TAG, view)
    _set_experiment_tag(client, experiment_id, MLFLOW_RUN_NOTE, description)
    tags = {**board.tags, "segbench.dataset": board.dataset, KIND_TAG: LEADERBOARD_KIND, **{f"segbench.run.{m}": r for m, r in board.model_runs.items()}}

    def fill(run_id: str) -> None:
        files = {board.results_name: board.results, **board.pages()}
        client.set_tag(run_id, MLFLOW_RUN_NOTE, _note(experiment_id, board, list(files)))
        _log_values(client, run_id, board.params, board.metrics)
        inputs: dict[tuple[str, str], Any] = {}
        for model_run in sorted(board.model_runs.values()):
            for dataset_input in client.get_run(model_run).inputs.dataset_inputs:
                inputs.setdefault((dataset_input.dataset.name, dataset_input.dataset.digest), dataset_input)
        _log_inputs(client, run_id, list(inputs.values()))
        client.log_table(run_id, data=board.table, artifact_file=LEADERBOARD_TABLE)
        with tempfile.TemporaryDirectory() as tmp:
            for name, content in files.items():
                (Path(tmp) / name).write_bytes(content)
            _log_artifacts(client, run_id, Path(tmp))

    return _log_once(client, experiment_id, board.fingerprint, LEADERBOARD_KIND, tags, "segbench compare", fill)


def _download(client, run, name: str, folder: str, size: int) -> bytes:
    """The bytes of run ``run``'s artifact ``name`` (``size`` bytes); a failure names the artifact's location and the
    cause, which MLflow's own message leaves out: a folder too full to hold it is a full disk (ENOSPC, with the bytes
    needed), anything else the artifact's location."""
    import shutil

    try:
        return Path(client.download_artifacts(run.info.run_id, name, folder)).read_bytes()
    except Exception as error:
        cause = error.__cause__ or error.__context__ or error
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            raise cause from None  # a full disk is said as one (segbench.cli)
        free = shutil.disk_usage(folder).free
        if free < size:
            raise OSError(errno.ENOSPC, f"{size} bytes needed to download {run.info.artifact_uri}/{name}", str(Path(folder) / name)) from None
        raise TrackingError(
            f"MLflow run {run.info.run_id}: cannot read its artifact {run.info.artifact_uri}/{name} "
            f"({str(cause).splitlines()[0][:200] if str(cause) else type(cause).__name__})"
        ) from error


def missing_runs(dataset: str, fingerprints: Mapping[str, str], uri: str | None = None) -> list[str]:
    """The models of ``fingerprints`` (model -> a score bundle's fingerprint) the store holds no FINISHED run of, in
    name order: the runs compare must log from their bundles before it reads them (after `dvc pull` on a new machine,
    or a store moved aside). Looked up by fingerprint as :func:`log_bundle` looks a bundle up: a run found is kept and
    its later duplicates deleted (:func:`_keep_first`), and nothing but the store is read."""
    uri = uri or tracking_uri()
    client = store_client(uri)
    experiment = client.get_experiment_by_name(experiment_name(dataset))
    if experiment is None:
        return sorted(fingerprints)
    return [model for model, fingerprint in sorted(fingerprints.items()) if _keep_first(client, experiment.experiment_id, fingerprint) is None]


def _read_record(content: bytes, where: str, fix: str) -> dict[str, Any]:
    """A run record (``run.json``) from its bytes; bytes that are no JSON object are an error naming ``where``."""
    try:
        record = json.loads(content)
    except UNREADABLE as exc:
        raise TrackingError(f"{where}: not a readable run record ({exc}); {fix}") from None
    if not isinstance(record, dict):
        raise TrackingError(f"{where}: not a run record (a JSON {type(record).__name__}, not an object); {fix}")
    return record


def read_runs(dataset: str, fingerprints: dict[str, str], uri: str | None = None) -> TrackedRuns:
    """Per-case rows, tags, run ids and run records of the FINISHED model runs with the given fingerprints (model ->
    fingerprint).

    Exactly one run per fingerprint must exist: none means the track stage has not logged it, two
    means the store holds duplicate claims for the same (dataset, model, versions). Leaderboard runs
    are never read as model runs.
    """
    uri = uri or tracking_uri()
    client = store_client(uri)
    experiment = client.get_experiment_by_name(experiment_name(dataset))
    if experiment is None:
        raise TrackingError(f"tracking store {uri} has no experiment {experiment_name(dataset)!r}; run `dvc repro` (track stage)")
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in (PER_CASE_ARTIFACT, *OPTIONAL_ARTIFACTS)}
    tags, run_ids, records = {}, {}, {}
    for model, fingerprint in sorted(fingerprints.items()):
        runs = [
            r
            for r in _runs_with_fingerprint(client, experiment.experiment_id, fingerprint)
            if r.info.status == "FINISHED" and r.data.tags.get(KIND_TAG) != LEADERBOARD_KIND
        ]
        if not runs:
            raise TrackingError(f"no FINISHED MLflow run for dataset {dataset!r}, model {model!r} (fingerprint {fingerprint[:12]}) in {uri}")
        if len(runs) > 1:
            ids = ", ".join(r.info.run_id for r in runs)
            raise TrackingError(f"{len(runs)} MLflow runs claim dataset {dataset!r}, model {model!r} with the same versions: {ids}")
        run = runs[0]
        logged = {a.path: a.file_size or 0 for a in client.list_artifacts(run.info.run_id)}
        names = [PER_CASE_ARTIFACT, *(name for name in OPTIONAL_ARTIFACTS if name in logged)]
        fix = (
            f"the score bundle is the authoritative copy: `MLFLOW_TRACKING_URI={uri} mlflow runs delete --run-id {run.info.run_id}`, "
            f"then `dvc repro -f -s compare@{dataset}` logs it again from the bundle"
        )
        with tempfile.TemporaryDirectory() as tmp:
            read = {
                name: check_rows(
                    _read_table(_download(client, run, name, tmp, logged.get(name, 0)), f"{run.info.artifact_uri}/{name}"),
                    f"MLflow run {run.info.run_id}: {run.info.artifact_uri}/{name}",
                    fix,
                )
                for name in names
            }
            where = f"MLflow run {run.info.run_id}: {run.info.artifact_uri}/{RECORD_ARTIFACT}"
            records[model] = _read_record(_download(client, run, RECORD_ARTIFACT, tmp, logged.get(RECORD_ARTIFACT, 0)), where, fix)
        if any("model" in t and (t["model"] != model).any() for t in read.values()):
            raise TrackingError(f"MLflow run {run.info.run_id}: per-case table is not model {model!r}")
        for name, table in read.items():
            tables[name].append(table)
        tags[model] = {k: v for k, v in run.data.tags.items() if k.startswith("segbench.") and k not in (FINGERPRINT_TAG, WRITER_TAG)}
        run_ids[model] = run.info.run_id
    joined = {name: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame() for name, parts in tables.items()}
    return TrackedRuns(joined[PER_CASE_ARTIFACT], tags, run_ids, joined[PROFILES_ARTIFACT], joined[LESIONS_ARTIFACT], joined[INSTANCES_ARTIFACT], records)
