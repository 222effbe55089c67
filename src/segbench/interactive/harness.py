"""``segbench interact``: run a promptable model through the box step and 5 click steps of every case.

The model is a command run as a subprocess once per step, in its own environment, or one isolated
call of its challenge-format image (a model config's ``image:`` block; segbench.models.container), on one npz
input (the case's ``imgs``, ``spacing``, ``boxes``; from the first click step on also ``clicks``,
``clicks_order`` and ``prev_pred``); it writes one npz with ``segs``. The harness never imports it.
Outputs in ``--out``: ``metrics.csv`` (the challenge's columns, one row per case), ``segs/<case>.npz``
(``segs`` and every step's prediction ``all_segs``), ``records/<case>.json`` (the clicks, times,
per-class scores of every step: enough to replay and audit a run) and ``run.json``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from segbench import __version__
from segbench.base.io import write_json_atomic, write_text_atomic
from segbench.interactive import protocol
from segbench.interactive.cases import (
    Case,
    CaseError,
    class_names,
    list_cases,
    load_case,
    read_step_output,
    reference_kind,
    save_npz_atomic,
    write_step_input,
)
from segbench.interactive.schema import PSEUDO_LABEL, REFERENCE_LABELS
from segbench.models import container
from segbench.models.runner import ADAPTERS_DIR, ModelRunError, model_command
from segbench.models.schema import ModelConfig
from segbench.models.weights import PUBLISHABLE, weights_dir, weights_status

log = logging.getLogger(__name__)

STEPS = 1 + protocol.CLICK_STEPS
COLUMNS: tuple[str, ...] = (
    "CaseName",
    "TotalRunningTime",
    *(f"RunningTime_{i}" for i in range(1, STEPS + 1)),
    "DSC_AUC",
    "NSD_AUC",
    "DSC_Final",
    "NSD_Final",
    *(f"DSC_{i}" for i in range(1, STEPS + 1)),
    *(f"NSD_{i}" for i in range(1, STEPS + 1)),
    "num_class",
    "runtime_upperbound",
)
#: segbench's columns after the challenge's: the model processes' CPU seconds, the clock the time limit ran on, the
#: time-limit flag, the steps without a usable output, the reference's kind, the protocol version and NSD's profile
EXTRA_COLUMNS: tuple[str, ...] = ("TotalCPUTime", "time_limit_clock", "over_time", "failed_steps", "reference", "protocol_version", "nsd_profile")
#: how often a running model call is checked against its budget (seconds)
POLL_S = 0.05


def _session_cpu_seconds(session: int) -> float:
    """CPU seconds (user + system) of the live processes of ``session`` and of the children they have reaped (Linux /proc)."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        # after "(command)": state ppid pgrp session ... utime stime cutime cstime are fields 0, 1, 2, 3, ..., 11-14
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == session:
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _call(argv: list[str], variables: dict[str, str], budget: float, clock: str) -> tuple[float, float, int | None]:
    """Run one model call; (wall seconds, CPU seconds, exit status), status None when it was stopped at ``budget``
    seconds on ``clock`` (protocol.TIME_LIMIT_CLOCKS; the cpu clock also stops a call at CPU_CLOCK_WALL_FACTOR times
    ``budget`` wall seconds). CPU seconds are the command's and its waited-for descendants'. On the cpu clock the call's
    OpenMP threads wait passively (OMP_WAIT_POLICY=PASSIVE unless the user or the model sets it): a spinning thread's
    wait would be charged to the model, and more of it the busier the machine."""
    env = {**os.environ, **variables}
    if clock == "cpu":
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    wall_budget = budget if clock == "wall" else budget * protocol.CPU_CLOCK_WALL_FACTOR
    while True:
        pid, wait_status, usage = os.wait4(process.pid, os.WNOHANG)
        wall = time.perf_counter() - start
        if pid:
            process.returncode = os.waitstatus_to_exitcode(wait_status)
            return wall, usage.ru_utime + usage.ru_stime, process.returncode
        cpu = _session_cpu_seconds(process.pid) if clock == "cpu" else 0.0
        if wall > wall_budget or cpu > budget:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the command and what it started
            _, _, usage = os.wait4(process.pid, 0)
            process.returncode = -signal.SIGKILL
            # the kernel's count holds only what the command reaped; the last poll saw its killed descendants too
            return time.perf_counter() - start, max(cpu, usage.ru_utime + usage.ru_stime), None
        time.sleep(POLL_S)


#: one model call of a step: (budget seconds, clock) -> (wall seconds, CPU seconds, exit status or None when stopped at
#: the budget, why the call failed or None)
StepCall = Callable[[float, str], tuple[float, float, int | None, str | None]]


def host_call(argv: list[str], variables: dict[str, str]) -> StepCall:
    """A step's call of a command on this machine (its own session; see :func:`_call`)."""
    return lambda budget, clock: (*_call(argv, variables, budget, clock), None)


def container_call(runtime: container.Runtime, image: str, spec: container.ContainerSpec, workdir: Path, case_id: str, device: str) -> StepCall:
    """A step's call of a loaded image, isolated (segbench.models.container.run): ``workdir``'s inputs and outputs
    mounted, ``<case>.npz`` expected and nothing else. Its processes are not this machine's children: only the wall clock is measured
    (CPU seconds NaN), so the cpu clock is refused."""

    def call(budget: float, clock: str) -> tuple[float, float, int | None, str | None]:
        if clock != "wall":
            raise ModelRunError(f"image {image}: a container's CPU seconds are not measured; run it with time_limit_clock wall, not {clock!r}")
        result = container.run(
            runtime, image, spec, workdir / "inputs", workdir / "outputs", budget, expected=[f"{case_id}.npz"], exclusive=True, device=device
        )
        return result.seconds, math.nan, result.exit_status, result.reason

    return call


def _scores(steps: list[dict], version: str) -> dict[str, float]:
    dsc = [s["dsc"] for s in steps]
    nsd = [s["nsd"] for s in steps]
    box_step = steps[0]["output"] != "no_boxes"
    return {
        "DSC_AUC": protocol.auc(dsc, version, box_step),
        "NSD_AUC": protocol.auc(nsd, version, box_step),
        "DSC_Final": dsc[-1],
        "NSD_Final": nsd[-1],
        **{f"DSC_{i}": v for i, v in enumerate(dsc, 1)},
        **{f"NSD_{i}": v for i, v in enumerate(nsd, 1)},
    }


def _step(step: int, prompt: str, n_classes: int, **fields: Any) -> dict[str, Any]:
    zeros = [0.0] * n_classes
    return {
        "step": step,
        "prompt": prompt,
        "clicks": None,
        "running_time_s": 0.0,
        "exit_status": None,
        "output": "not_run",
        "dsc_per_class": zeros,
        "nsd_per_class": zeros,
        "nsd_computed": False,
        "dsc": 0.0,
        "nsd": 0.0,
        **fields,
    }


def run_case(
    case: Case, call: StepCall, workdir: Path, limit_s: float, clock: str = "wall", nsd_profile: str = protocol.NSD_PROFILE
) -> tuple[dict[str, Any], list[np.ndarray], list[int]]:
    """The box step (or its skip) and the 5 click steps of one case, each one ``call`` of the model.

    Returns the record of every step, the predictions of the steps the model was called for, and
    those steps' numbers. A step without a usable output (none, not an npz, or ``segs`` of the wrong
    shape, dtype or labels: ``reason`` names the file and key) counts as all-zero; one whose npz carries members
    besides ``segs`` is scored from ``segs`` and flagged (output "extra_members", ``reason`` naming them). Once the model calls
    exceed ``limit_s`` seconds on ``clock`` the running call is stopped and no further step runs (the case scores 0).
    NSD is ``nsd_profile``'s (protocol.NSD_DEFINITIONS).
    """
    inputs, outputs = workdir / "inputs", workdir / "outputs"
    for folder in (inputs, outputs):
        folder.mkdir(parents=True, exist_ok=True)
    step_in, step_out = inputs / f"{case.case_id}.npz", outputs / f"{case.case_id}.npz"
    clicks: list[dict[str, list]] = [{"fg": [], "bg": []} for _ in range(case.n_classes)]
    order: list[list] = [[] for _ in range(case.n_classes)]
    segs = np.zeros(case.gts.shape, dtype=np.uint8)
    steps: list[dict[str, Any]] = []
    predictions, called = [], []
    elapsed = wall_s = cpu_s = 0.0  # elapsed: on the time limit's clock
    stopped = False
    for step in range(1, STEPS + 1):
        if step == 1 and case.boxes is None:
            steps.append(_step(1, "skipped", case.n_classes, output="no_boxes"))
            continue
        if stopped or elapsed > limit_s:
            steps.append(_step(step, "box" if step == 1 else "click", case.n_classes))
            continue
        added = _write_step_input(step_in, step, case, segs, clicks, order)
        step_out.unlink(missing_ok=True)
        seconds, cpu_seconds, status, reason = call(limit_s - elapsed, clock)
        wall_s, cpu_s = wall_s + seconds, cpu_s + cpu_seconds
        elapsed = wall_s if clock == "wall" else cpu_s
        stopped = status is None
        segs, output, reason = _step_output(step_out, case, status, reason)
        predictions.append(segs)
        called.append(step)
        steps.append(_scored_step(step, case, segs, added, seconds, status, output, reason, nsd_profile))
    record = {
        "steps": steps,
        "clicks": clicks,
        "clicks_order": order,
        "total_running_time_s": wall_s,
        "total_cpu_time_s": cpu_s,
        "stopped_at_time_limit": stopped,
    }
    return record, predictions, called


def _write_step_input(
    step_in: Path, step: int, case: Case, segs: np.ndarray, clicks: list[dict[str, list]], order: list[list]
) -> list[protocol.Click | None] | None:
    """Write the step's model input: the box step's case keys, or a click step's with this step's clicks (added to
    ``clicks`` and ``order``) and the previous prediction; returns the clicks added (None for the box step)."""
    if step == 1:
        write_step_input(step_in, case, None, None, None)
        return None
    added = protocol.step_clicks(segs, case.gts, case.n_classes)
    for i, click in enumerate(added):
        order[i].append(None if click is None else click.kind)
        if click is not None:
            clicks[i][click.kind].append(list(click.zyx))
    write_step_input(step_in, case, clicks, order, segs)
    return added


def _step_output(step_out: Path, case: Case, status: int | None, reason: str | None) -> tuple[np.ndarray, str, str | None]:
    """The step's prediction (all-zero when there is no usable one), its output status and its reason with any flag
    appended: the model's npz read and checked, unless the call was stopped at the time limit (``status`` None)."""
    try:
        segs, output, flag = read_step_output(step_out, case.gts.shape, case.n_classes) if status is not None else (None, "stopped_at_time_limit", None)
    except CaseError as exc:
        segs, output, reason, flag = None, "invalid", str(exc), None
    if flag:
        reason = f"{reason}; {flag}" if reason else flag
    if segs is None:
        segs = np.zeros(case.gts.shape, dtype=np.uint8)
    return segs, output, reason


def _scored_step(
    step: int,
    case: Case,
    segs: np.ndarray,
    added: list[protocol.Click | None] | None,
    seconds: float,
    status: int | None,
    output: str,
    reason: str | None,
    nsd_profile: str,
) -> dict[str, Any]:
    """The record of a step the model was called for: its clicks, time, exit status and output, and its per-class
    Dice and NSD (NSD only when the step's mean Dice > 0.2, else zeros) against the reference."""
    dice, nsd = protocol.class_scores(segs, case.gts, case.n_classes, case.spacing, nsd_profile)
    nsd_computed = nsd is not None  # only when the step's mean Dice > 0.2
    nsd = nsd if nsd is not None else [0.0] * case.n_classes
    return _step(
        step,
        "box" if step == 1 else "click",
        case.n_classes,
        clicks=None if added is None else [None if c is None else {"kind": c.kind, "zyx": list(c.zyx)} for c in added],
        running_time_s=seconds,
        exit_status=status,
        output=output,
        dsc_per_class=dice,
        nsd_per_class=nsd,
        nsd_computed=nsd_computed,
        dsc=float(np.mean(dice)),
        nsd=float(np.mean(nsd)),
        **({"reason": reason} if reason else {}),
    )


def _row(case: Case, record: dict[str, Any], limit_s: float, clock: str, reference: str, scoring: protocol.Scoring) -> tuple[dict[str, Any], dict[str, float]]:
    """The case's CSV row: scores set to 0 when the model calls exceeded the time limit on ``clock`` (or a call was
    stopped at it: on the cpu clock, also one that spent no CPU for 10x the budget)."""
    steps = record["steps"]
    measured = _scores(steps, scoring.version)
    over_time = record["stopped_at_time_limit"] or record["total_running_time_s" if clock == "wall" else "total_cpu_time_s"] > limit_s
    return {
        "CaseName": case.image_file.name,
        "TotalRunningTime": record["total_running_time_s"],
        **{f"RunningTime_{s['step']}": s["running_time_s"] for s in steps},
        **({k: 0.0 for k in measured} if over_time else measured),
        "num_class": case.n_classes,
        "runtime_upperbound": limit_s,
        "TotalCPUTime": record["total_cpu_time_s"],
        "time_limit_clock": clock,
        "over_time": over_time,
        "failed_steps": ";".join(str(s["step"]) for s in steps if s["output"] not in ("ok", "no_boxes")),
        "reference": REFERENCE_LABELS[reference],
        "protocol_version": scoring.version,
        "nsd_profile": scoring.nsd_profile,
    }, measured


def _clear_outputs(out_dir: Path) -> None:
    """Remove what an earlier run wrote into ``out_dir`` (only segbench's own outputs; first the outputs file systems a
    killed run left mounted in its staging folder)."""
    container._unmount_below((out_dir / ".staging").resolve())  # noqa: SLF001 - the store's unmounting, reused
    for name in ("segs", "records", ".staging"):
        shutil.rmtree(out_dir / name, ignore_errors=True)
    for name in ("metrics.csv", "run.json"):
        (out_dir / name).unlink(missing_ok=True)


#: runs a stage's cases in shards and hands each finished shard's folder to ``assemble``:
#: (task, cases, empty staging folder, name=, assemble=); :func:`segbench.models.slurm.run_shards` with its options bound
ShardRunner = Callable[..., None]
ROWS_FILE = "rows.pickle"


def _run_here(task: Callable[[list[str], Path], None], cases: list[str], staging: Path, *, name: str, assemble: Callable[[list[str], Path], None]) -> None:
    """The local shard runner: every case in one shard, in this process."""
    folder = staging / "local"
    folder.mkdir(parents=True)
    task(cases, folder)
    assemble(cases, folder)


def interact_cases(
    cases_dir: Path,
    model: ModelConfig,
    kind: str,
    seconds_per_class: float,
    clock: str,
    scoring: protocol.Scoring,
    device: str,
    runtime: container.Runtime | None,
    case_ids: list[str],
    folder: Path,
) -> None:
    """Run ``case_ids`` of ``cases_dir``, one after the other; ``folder`` gets each case's ``segs/`` and ``records/``
    file and the cases' table rows (``rows.pickle``). A shard task: locally and on Slurm the same code runs. ``runtime``:
    the container runtime of an image model (None: the environment's)."""
    sources = {case_id: (image_file, gts_file) for case_id, image_file, gts_file in list_cases(cases_dir)}
    image = None
    if model.image is not None:  # loaded once per shard, on the machine that runs it
        runtime = runtime or container.Runtime.from_environment()
        image = (runtime, container.ready_image(runtime, model.image), model.image.spec)
    rows = []
    for case_id in case_ids:
        image_file, gts_file = sources[case_id]
        case = load_case(case_id, image_file, gts_file)
        limit_s = protocol.time_limit(case.n_classes, seconds_per_class)
        workdir = folder / "work" / case_id
        substitutions = _command_substitutions(model, workdir, case_id, device)
        (workdir / "inputs").mkdir(parents=True, exist_ok=True)
        (workdir / "inputs" / "cases.txt").write_text(case_id + "\n", encoding="utf-8")
        call = container_call(*image, workdir, case_id, device) if image else host_call(*model_command(model, substitutions))
        with container.capped_folder(workdir / "outputs", image[2].max_output_bytes, image[2].max_output_files) if image else contextlib.nullcontext():
            record, predictions, called = run_case(case, call, workdir, limit_s, clock, scoring.nsd_profile)
        row, measured = _row(case, record, limit_s, clock, kind, scoring)
        _log_case(case, row, record, kind, clock, limit_s, seconds_per_class)
        save_npz_atomic(
            folder / "segs" / f"{case_id}.npz",
            segs=predictions[-1] if predictions else np.zeros_like(case.gts),
            all_segs=np.stack(predictions) if predictions else np.zeros((0, *case.gts.shape), np.uint8),
            steps=np.array(called),
        )
        write_json_atomic(folder / "records" / f"{case_id}.json", _case_record(cases_dir, case, record, row, measured, kind, limit_s, clock))
        rows.append(row)
        shutil.rmtree(workdir, ignore_errors=True)
    (folder / ROWS_FILE).write_bytes(pickle.dumps(rows))


def _command_substitutions(model: ModelConfig, workdir: Path, case_id: str, device: str) -> dict[str, str]:
    """The placeholders of a host model's command for one case: its step files and folders in ``workdir``, the
    interpreter, the device, and where the weights and adapters are."""
    return {
        "python": sys.executable,
        "input_dir": str(workdir / "inputs"),
        "output_dir": str(workdir / "outputs"),
        "input": str(workdir / "inputs" / f"{case_id}.npz"),
        "output": str(workdir / "outputs" / f"{case_id}.npz"),
        "case": case_id,
        "cases_file": str(workdir / "inputs" / "cases.txt"),
        "device": device,
        "device_gpu": device.replace("cuda", "gpu"),
        "weights_dir": str(weights_dir(model).resolve()),
        "adapters_dir": str(ADAPTERS_DIR),
    }


def _log_case(case: Case, row: dict[str, Any], record: dict[str, Any], kind: str, clock: str, limit_s: float, seconds_per_class: float) -> None:
    """Log the case's outcome: a warning when its model calls exceeded the time limit (scored 0), then its scores."""
    if row["over_time"]:
        log.warning(
            "case %s: model calls took %.1f s (%s clock) > %g s (%s classes x %g s): scored 0",
            case.case_id,
            row["TotalRunningTime" if clock == "wall" else "TotalCPUTime"],
            clock,
            limit_s,
            case.n_classes,
            seconds_per_class,
        )
    log.info(
        "case %s: DSC %s, DSC_AUC %.3f, NSD_AUC %.3f vs %s",
        case.case_id,
        " ".join(f"{s['dsc']:.3f}" for s in record["steps"]),
        row["DSC_AUC"],
        row["NSD_AUC"],
        REFERENCE_LABELS[kind],
    )


def _case_record(
    cases_dir: Path,
    case: Case,
    record: dict[str, Any],
    row: dict[str, Any],
    measured: dict[str, float],
    kind: str,
    limit_s: float,
    clock: str,
) -> dict[str, Any]:
    """The case's ``records/<case>.json``: its prompts, per-step scores and time limit, enough to replay and audit the
    run (the running times stay in the table)."""
    return {
        "case_id": case.case_id,
        "case_file": str(case.image_file),
        "reference": REFERENCE_LABELS[kind],
        "classes": class_names(cases_dir, case.case_id, case.n_classes),
        "spacing": list(case.spacing),
        "boxes": case.boxes,
        "time_limit_s": limit_s,
        "time_limit_clock": clock,
        "over_time": row["over_time"],
        "measured_before_time_limit": measured,
        "steps": [{k: v for k, v in s.items() if k != "running_time_s"} for s in record["steps"]],  # times: the table's
        "clicks": record["clicks"],
        "clicks_order": record["clicks_order"],
    }


def interact(
    cases_dir: Path,
    model: ModelConfig,
    out_dir: Path,
    *,
    reference: str | None = None,
    seconds_per_class: float = protocol.SECONDS_PER_CLASS,
    time_limit_clock: str = "wall",
    scoring: protocol.Scoring = protocol.Scoring(),
    device: str | None = None,
    allow_unverified_weights: bool = False,
    table_file: Path | None = None,
    shard_runner: ShardRunner | None = None,
    runtime: container.Runtime | None = None,
) -> pd.DataFrame:
    """Run ``model`` on every case of ``cases_dir``; write and return the per-case table.

    ``out_dir`` gets what a rerun on the same machine reproduces byte for byte (the predictions, the
    records of prompts and scores, run.json); the table, which holds the measured running times, goes
    to ``table_file`` (default ``out_dir/metrics.csv``). ``shard_runner`` runs the cases in shards
    (Slurm: :func:`segbench.models.slurm.run_shards`); by default all of them here, one after the other. ``runtime``: the
    container runtime an image model runs in (a team's private store: segbench.models.container.private_store); None, the
    environment's.
    """
    if time_limit_clock not in protocol.TIME_LIMIT_CLOCKS:
        raise ValueError(f"time_limit_clock must be one of {', '.join(protocol.TIME_LIMIT_CLOCKS)}, got {time_limit_clock!r}")
    if not model.is_interactive:
        raise ModelRunError(f"model {model.name!r} is of kind {model.kind!r}; segbench interact runs kind 'interactive'")
    if model.image is not None and time_limit_clock != "wall":
        raise ModelRunError(
            f"model {model.name!r} runs in a container, whose CPU seconds are not measured: its time limit runs on "
            f"the wall clock; time_limit_clock is {time_limit_clock!r}"
        )
    weights = weights_status(model)
    if weights["status"] not in PUBLISHABLE and not allow_unverified_weights:
        raise ModelRunError(f"model {model.name!r}: weights are {weights['status']}; pin them or pass --allow-unverified-weights")
    kind = reference_kind(cases_dir, reference)
    sources = list_cases(cases_dir)
    if kind == "pseudo":
        log.warning("%s: the reference is a %s (a model's output, not a manual annotation); every score below is against it", cases_dir, PSEUDO_LABEL)
    out_dir = Path(out_dir)
    _clear_outputs(out_dir)
    staging = (out_dir / ".staging").resolve()
    staging.mkdir(parents=True)
    rows_by_case: dict[str, dict[str, Any]] = {}

    def assemble(shard: list[str], folder: Path) -> None:
        for name in ("segs", "records"):
            (out_dir / name).mkdir(exist_ok=True)
            for path in sorted((folder / name).iterdir()):
                os.replace(path, out_dir / name / path.name)
        rows_by_case.update(zip(shard, pickle.loads((folder / ROWS_FILE).read_bytes()), strict=True))

    task = functools.partial(interact_cases, cases_dir, model, kind, seconds_per_class, time_limit_clock, scoring, device or model.device, runtime)
    (shard_runner or _run_here)(task, [c for c, _, _ in sources], staging, name=f"segbench-interact-{cases_dir.name}-{model.name}", assemble=assemble)
    shutil.rmtree(staging, ignore_errors=True)
    table = pd.DataFrame([rows_by_case[c] for c, _, _ in sources], columns=[*COLUMNS, *EXTRA_COLUMNS])
    write_text_atomic(Path(table_file) if table_file else out_dir / "metrics.csv", table.to_csv(index=False, lineterminator="\n"))
    write_json_atomic(
        out_dir / "run.json",
        {
            "model": model.name,
            "model_version": model.version,
            "command": list(model.command),
            "environment": model.environment.get("type"),
            **({"image": container.image_record(model.image)} if model.image else {}),
            "weights": weights,
            "cases_dir": str(cases_dir),
            "cases": [c for c, _, _ in sources],
            "reference": REFERENCE_LABELS[kind],
            "seconds_per_class": seconds_per_class,
            "time_limit_clock": time_limit_clock,
            "nsd_tolerance_mm": protocol.NSD_TOLERANCE_MM,
            "protocol_version": scoring.version,
            "nsd_profile": scoring.nsd_profile,
            "nsd_definition": protocol.NSD_DEFINITIONS[scoring.nsd_profile],
            "segbench_version": __version__,
        },
    )
    return table
