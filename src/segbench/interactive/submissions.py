"""``segbench interact --submissions``: evaluate a folder of CVPR 2025 Docker submissions as the challenge's script does.

Each ``<team>.tar.gz`` or ``<team>.tar`` of the folder (a ``docker save`` archive; the team is the file name before its
first dot, lower case, as the script names it), in file-name order, is loaded, run through the box step and the 5
click steps of every case (one isolated container call per step, timed on the wall clock: segbench.models.container),
then removed from the runtime. Its outputs go to ``<out>/<team>/``: ``<team>_metrics.csv`` (the script's per-case
columns, ``num_class`` and ``runtime_upperbound`` included, then segbench's), ``segs/``, ``records/`` and ``run.json``.

Failures follow segbench's policy rather than the script's: a step without a usable output is scored as an empty
prediction and named in ``failed_steps``, a case over its time limit scores 0, and no case is dropped from a team's
table (the script lists only cases whose final prediction exists). A submission that cannot be loaded is listed in the
leaderboard with the reason and contributes no rows.

The evaluated teams' rows (per case, and per case and class) then go through segbench's statistics protocol:
``<out>/leaderboard.json`` in the results layout (``segbench show``, ``segbench report`` and ``segbench reanalyze``
read it), with a CI per team and metric, ranking stability, pairwise verdicts and the step curves (DSC_1..6, NSD_1..6).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from segbench import __version__, stats
from segbench.base.io import file_digest, write_json_atomic
from segbench.interactive import protocol
from segbench.interactive.cases import list_cases, reference_kind
from segbench.interactive.harness import interact
from segbench.interactive.schema import REFERENCE_LABELS
from segbench.interactive.scores import METRICS, interactive_rows, summary
from segbench.models import container
from segbench.models.runner import ModelRunError
from segbench.models.schema import image_model

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
#: the longest team name (UTF-8 bytes): its folder, ``<team>_metrics.csv`` and the temporary names of atomic writes stay far
#: below the 255 bytes a file name may take
MAX_TEAM_BYTES = 100
#: what a team name may hold besides letters and digits (of any script)
TEAM_PUNCTUATION = "_- "
LEADERBOARD_FILE = "leaderboard.json"
#: one file per finished team: what its evaluation depended on and its entry, so that a restarted run skips it
DONE_DIR = ".finished"


@dataclass(frozen=True)
class Submission:
    """One team's archive: ``team`` is the file name before its first dot, lower case (the challenge script's rule)."""

    team: str
    archive: Path
    problem: str | None = None  # why the team name cannot name its files: the team is not evaluated, the others are


def team_name_problem(team: str) -> str | None:
    """Why ``team`` cannot be a team's name (its folder, table and resume file are named after it), or None.

    Letters and digits of any script, ``_``, ``-`` and inner spaces are valid (``Équipe Zoë`` is a team, as a user expects);
    a control character, a path separator or any other punctuation, a leading or trailing space, or more than
    MAX_TEAM_BYTES bytes is not."""
    if not team:
        return "the team name (the file name before its first dot) is empty"
    odd = sorted({c for c in team if not (c.isalnum() or c in TEAM_PUNCTUATION)})
    if odd:
        return (
            f"team name {team[:120]!r} holds {', '.join(repr(c) for c in odd[:5])}: a team name is letters and digits (any script), '_', '-' and inner spaces"
        )
    if not team[0].isalnum() or team[-1] == " ":
        return f"team name {team!r} must begin with a letter or digit and not end with a space"
    if len(team.encode("utf-8")) > MAX_TEAM_BYTES:
        return f"team name {team[:40]!r}... is {len(team.encode('utf-8'))} bytes (UTF-8), more than {MAX_TEAM_BYTES}"
    return None


def find_submissions(folder: Path) -> list[Submission]:
    """The folder's image archives in file-name order; an error names a team taken twice, or an archive's name on something
    that is no file (a folder, a FIFO, a dangling link): a team is never dropped unsaid. A team whose name cannot name its
    files is listed with its ``problem`` (that team is not evaluated; the others are)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--submissions {folder}: not a folder")
    found: dict[str, Submission] = {}
    for path in sorted(folder.iterdir()):
        if not path.name.lower().endswith(ARCHIVE_SUFFIXES):
            continue
        if not path.is_file():
            raise ValueError(
                f"{path}: named as a team's archive but not a regular file (a folder, FIFO, device or dangling link); "
                "replace it with the team's archive or remove it"
            )
        team = unicodedata.normalize("NFC", path.name.split(".")[0].lower())  # one spelling of é, as the file systems differ
        if team in found:
            raise ValueError(f"{path}: team {team!r} has a second archive, {found[team].archive.name}; keep one per team")
        problem = team_name_problem(team)
        found[team] = Submission(team, path, f"{path}: {problem}; rename the archive" if problem else None)
    if not found:
        raise ValueError(f"--submissions {folder}: no <team>.tar.gz or <team>.tar archives")
    return list(found.values())


def _reason(exc: BaseException) -> str:
    """One line: the error's own message, prefixed by its kind when that is not one of segbench's (MemoryError, OSError...)."""
    text = " ".join(str(exc).split()) or "no message"
    return text if isinstance(exc, (container.ContainerError, ModelRunError)) else f"{type(exc).__name__}: {text}"


def evaluate_team(
    submission: Submission,
    cases_dir: Path,
    out_dir: Path,
    runtime: container.Runtime,
    *,
    limits: dict[str, Any],
    seconds_per_class: float,
    scoring: protocol.Scoring,
    reference: str | None,
    device: str,
) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """Load one team's image into a podman image store of its own, run it, remove the store; returns its
    entry of the leaderboard's ``submissions`` (status, reason, times) and its rows for the statistics (None when it was
    not evaluated). Any error inside the team's evaluation, MemoryError included, ends only this team, its reason in the
    entry; an interrupt (KeyboardInterrupt) or SIGTERM still stops the run, once the team's store is removed."""
    start = time.perf_counter()
    sha256 = file_digest(submission.archive, "sha256")
    entry: dict[str, Any] = {"archive": submission.archive.name, "sha256": sha256}
    team_dir = out_dir / submission.team

    def not_evaluated(exc: BaseException) -> tuple[dict[str, Any], None]:
        log.error("team %s: not evaluated: %s", submission.team, _reason(exc))
        shutil.rmtree(team_dir, ignore_errors=True)  # nothing half-written
        return {**entry, "status": "not_evaluated", "reason": _reason(exc), "seconds": time.perf_counter() - start}, None

    table_file = team_dir / f"{submission.team}_metrics.csv"
    try:
        model = image_model(submission.team, {"archive": str(submission.archive), "sha256": sha256, **limits})
        # a store of the team's own, removed with everything in it on every way out: an error, an interrupt, a `kill`
        with _terminate_as_exit(), container.private_store(runtime) as team_runtime:
            container.load_image(team_runtime, submission.archive, sha256)
            interact(
                cases_dir,
                model,
                team_dir,
                reference=reference,
                seconds_per_class=seconds_per_class,
                time_limit_clock="wall",
                scoring=scoring,
                device=device,
                table_file=table_file,
                runtime=team_runtime,
            )
        table, rows = team_rows(submission.team, team_dir, scoring)
    except Exception as exc:  # noqa: BLE001 - one team's failure, whatever its kind, must not end the others' evaluation
        return not_evaluated(exc)
    counts = summary(rows)
    log.info(
        "team %s: %d cases, %d with failed steps, %d over time, mean DSC_AUC %.3f, NSD_AUC %.3f (%.0f s)",
        submission.team,
        counts["n_cases"],
        counts["n_failed_steps"],
        counts["n_over_time"],
        table["DSC_AUC"].mean(),
        table["NSD_AUC"].mean(),
        time.perf_counter() - start,
    )
    return {
        **entry,
        "status": "evaluated",
        "n_cases": counts["n_cases"],
        "n_cases_with_failed_steps": counts["n_failed_steps"],
        "n_over_time": counts["n_over_time"],
        "seconds": time.perf_counter() - start,
    }, rows


def team_rows(team: str, team_dir: Path, scoring: protocol.Scoring) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A team's table and statistics rows, read back from the files its evaluation wrote (a resumed run reads the same)."""
    table_file = team_dir / f"{team}_metrics.csv"
    table = pd.read_csv(table_file)
    return table, interactive_rows(table, team_dir / "records", team, str(table_file), scoring)


def resume_key(submission: Submission, cases_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """What a team's finished evaluation depends on: its archive's sha256, the cases' files and every setting of the run."""
    cases = {case_id: [file_digest(image, "sha256"), file_digest(gts, "sha256")] for case_id, image, gts in list_cases(cases_dir)}
    return {"sha256": file_digest(submission.archive, "sha256"), "cases": cases, "settings": settings}


def evaluate_submissions(
    folder: Path,
    cases_dir: Path,
    out_dir: Path,
    *,
    limits: dict[str, Any] | None = None,
    seconds_per_class: float = 90.0,
    scoring: protocol.Scoring = protocol.Scoring(),
    reference: str | None = None,
    device: str = "cpu",
    settings: stats.StatsSettings | None = None,
) -> dict[str, Any]:
    """Evaluate every team of ``folder`` on ``cases_dir`` (see the module docstring); writes and returns the leaderboard.

    ``limits``: the ``image:`` keys applied to every team (``memory``, ``cpus``, ``pids_limit``; the command and mounts
    default to the challenge's). The runtime is podman (:func:`untrusted_runtime`), its machine flags from the environment
    (segbench.models.container).
    """
    runtime = untrusted_runtime()
    submissions = find_submissions(folder)
    container.remove_orphaned_stores(runtime)  # the team stores of runs killed before their way out (their owner has ended)
    kind = reference_kind(cases_dir, reference)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    limits = dict(limits or {})
    settings = settings or stats.StatsSettings()
    run_settings = {
        "limits": limits,
        "seconds_per_class": seconds_per_class,
        "protocol_version": scoring.version,
        "nsd_profile": scoring.nsd_profile,
        "reference": kind,
        "device": device,
        "segbench_version": __version__,
    }
    entries, frames = {}, []
    for i, submission in enumerate(submissions, 1):
        if submission.problem is not None:  # its folder, table and resume file cannot be named: this team alone is not evaluated
            log.error("team %r: not evaluated: %s", submission.team, submission.problem)
            entries[submission.team] = {
                "archive": submission.archive.name,
                "sha256": file_digest(submission.archive, "sha256"),
                "status": "not_evaluated",
                "reason": submission.problem,
                "seconds": 0.0,
            }
            continue
        key = resume_key(submission, cases_dir, run_settings)
        done = out_dir / DONE_DIR / f"{submission.team}.json"
        recorded = json.loads(done.read_text(encoding="utf-8")) if done.is_file() else None
        if recorded is not None and recorded["key"] == key:
            log.info(
                "team %s (%d of %d): finished in an earlier run with the same archive, cases and settings; not rerun", submission.team, i, len(submissions)
            )
            entries[submission.team] = recorded["entry"]
            rows = team_rows(submission.team, out_dir / submission.team, scoring)[1] if recorded["entry"]["status"] == "evaluated" else None
        else:
            log.info("team %s (%d of %d): %s", submission.team, i, len(submissions), submission.archive)
            entries[submission.team], rows = evaluate_team(
                submission, cases_dir, out_dir, runtime, limits=limits, seconds_per_class=seconds_per_class, scoring=scoring, reference=reference, device=device
            )
            write_json_atomic(done, {"key": key, "entry": entries[submission.team]})
        if rows is not None:
            frames.append(rows)
    results = leaderboard(entries, frames, cases_dir, kind, seconds_per_class, scoring, settings)
    results["dataset"]["container"] = container_settings(limits)
    write_json_atomic(out_dir / LEADERBOARD_FILE, results)
    return results


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """While inside, SIGTERM (a `kill`, a scheduler ending the job) raises SystemExit(143) in the main thread, as SIGINT
    raises KeyboardInterrupt, so that every way out runs: the running container stopped and removed (container.run), the
    team's store with its images and mounts removed (container.private_store). Only SIGKILL leaves a store, for the next
    run's sweep (container.remove_orphaned_stores)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may handle signals
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def untrusted_runtime(environ: Mapping[str, str] | None = None) -> container.Runtime:
    """The runtime for the teams' images: podman, unless the environment names another, which is refused. Each team's
    archive goes into a podman image store of its own (container.private_store); docker has one store per daemon, where a
    team could name an image it did not bring or re-point another image's tag."""
    environ = os.environ if environ is None else environ
    runtime = container.Runtime.from_environment({**environ, container.RUNTIME_ENV: environ.get(container.RUNTIME_ENV) or "podman"})
    if runtime.program != "podman":
        raise container.ContainerError(
            f"{container.RUNTIME_ENV}={runtime.program}: untrusted submissions run only on podman, which gives each team an image "
            f"store of its own ({runtime.program} has one store per daemon, where a team could run or re-tag another's image); set it to podman"
        )
    return runtime


def container_settings(limits: dict[str, Any]) -> dict[str, Any]:
    """The limits, caps and user every team's containers ran with (the defaults where ``limits`` names none)."""
    spec = container.ContainerSpec()
    used = {key: limits.get(key, getattr(spec, key)) for key in ("memory", "cpus", "pids_limit", "max_output_bytes", "max_output_files", "user")}
    return {**used, "root_allowed": used["user"] is None}


def leaderboard(
    entries: dict[str, dict[str, Any]],
    frames: list[pd.DataFrame],
    cases_dir: Path,
    kind: str,
    seconds_per_class: float,
    scoring: protocol.Scoring,
    settings: stats.StatsSettings,
) -> dict[str, Any]:
    """The results document over the evaluated teams (none evaluated: no analysis, the reasons listed)."""
    teams = [team for team, entry in entries.items() if entry["status"] == "evaluated"]
    analysis = None
    if frames:
        analysis = stats.analyze(pd.concat(frames, ignore_index=True), metrics=METRICS, settings=settings)
    return {
        "segbench_version": __version__,
        "dataset": {
            "name": f"submissions-{Path(cases_dir).name}",
            "title": f"CVPR 2025 submissions on {Path(cases_dir).name}",
            "interactive": True,
            "reference": REFERENCE_LABELS[kind],
            "seconds_per_class": seconds_per_class,
            "time_limit_clock": "wall",
            "protocol_version": scoring.version,
            "nsd_profile": scoring.nsd_profile,
            "nsd_definition": protocol.NSD_DEFINITIONS[scoring.nsd_profile],
            "submissions": entries,
        },
        "models": {team: stats.model_entry(team, "interactive", f"submissions-{Path(cases_dir).name}", image_sha256=entries[team]["sha256"]) for team in teams},
        "metrics": {m: {"higher_is_better": hib} for m, hib in METRICS.items()},
        "hd95_definition": "not computed",
        "metric_profile": scoring.label,
        "analysis": analysis,
    }
