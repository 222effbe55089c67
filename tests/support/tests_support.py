"""Helpers shared by tests (not fixtures): working directories, commands, score bundles and label maps.
(Projects, new or reproduced: tests/support/projects.py.)"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import resource
import shlex
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pandas as pd
import yaml
from scipy import ndimage

from repo_paths import GATE
from segbench.models import container
from segbench.tracking import runs as tracking


@contextlib.contextmanager
def in_directory(path: Path) -> Iterator[None]:
    """Run the block with ``path`` as the working directory (stages use project-relative paths)."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def published_pipeline(project: Path, name: str) -> dict[str, Any]:
    """Import, track and compare the published set ``name`` in ``project`` through the CLI; its results."""
    from segbench.cli import main

    with in_directory(project):
        for argv in (["import", "--published", name], ["track", "--dataset", name], ["compare", "--dataset", name]):
            assert main(argv) == 0, argv
    return json.loads((project / "results" / f"{name}.json").read_text())


def command_env() -> dict[str, str]:
    """The environment for pipeline subprocesses: a project's own store, never a test's temporary one."""
    return {k: v for k, v in os.environ.items() if k != "SEGBENCH_TRACKING_URI"}


def interruptible(args: list[str], **popen: object) -> subprocess.Popen:
    """Start ``args`` with SIGINT at its default, as a foreground process has it, so the test's SIGINT is a Ctrl-C: a
    suite started in the background of a non-interactive shell inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt."""
    return subprocess.Popen(args, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)  # type: ignore[call-overload]


def gate_env(folder: Path, pattern: str, on: str = "write", passes: int = 0, argv: str = "") -> dict[str, str]:
    """``command_env()`` for a command whose Python process that opens a path matching ``pattern`` for ``on``
    (write or read), after ``passes`` such opens, writes ``folder/started.<pid>`` and waits for ``folder/release``
    (tests/support/gate/sitecustomize.py). ``argv``: only processes with this word among their arguments (e.g. ``track``
    for `segbench track`, not the dvc that hashes the same files)."""
    env = command_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GATE), env.get("PYTHONPATH", "")) if p)
    env.update(
        SEGBENCH_TEST_GATE=pattern,
        SEGBENCH_TEST_GATE_ON=on,
        SEGBENCH_TEST_GATE_PASS=str(passes),
        SEGBENCH_TEST_GATE_DIR=str(folder),
        SEGBENCH_TEST_GATE_ARGV=argv,
    )
    folder.mkdir(parents=True, exist_ok=True)
    return env


def kill_at_gate(args: list[str], cwd: Path, env: dict[str, str], what: str) -> str:
    """Start ``args`` in a process group of its own with ``env`` (a ``gate_env``), wait until one of its processes is
    held at the gate (``what`` names it in a failure), SIGKILL the whole group there; returns the held path.

    The moment is the test's own, not a race: the held process can go no further until killed. The 600 s only
    bound a hang."""
    from services import wait_until

    gate = Path(env["SEGBENCH_TEST_GATE_DIR"])
    process = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: process.poll() is not None or any(gate.glob("started.*")), f"a process at the gate {what}", 600)
        assert process.poll() is None, f"{' '.join(args)} exited ({process.returncode}) without reaching the gate {what}"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    (held,) = gate.glob("started.*")
    return held.read_text().strip()


def run_command(args: list[str], cwd: Path, tracking_uri: str | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command, fail the test with its output if it fails; returns stdout and stderr.

    ``tracking_uri``: a tracking server the command logs to (``SEGBENCH_TRACKING_URI``), else the project's own store.
    ``env``: the command's environment (default ``command_env()``).
    """
    env = env if env is not None else command_env()
    env = {**env, "SEGBENCH_TRACKING_URI": tracking_uri} if tracking_uri else env
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def run_queue(project: Path, jobs: int, timeout: float, tracking_uri: str | None = None, meet: dict[str, str] | None = None) -> str:
    """`dvc queue start -j jobs`, then wait until nothing is queued or running; returns `dvc queue status`.

    ``meet``: a ``gate_env`` the workers run with: once ``jobs`` of their processes are held at the gate, all are
    released together, so those steps run side by side however fast or busy the machine is. (The wait for them
    watches the gate folder only: `dvc queue status` answers only once the workers are free.) ``timeout`` only
    bounds a hang: past it the test fails with the queue's status."""
    env = meet if meet is not None else command_env()
    env = {**env, "SEGBENCH_TRACKING_URI": tracking_uri} if tracking_uri else env
    # the workers dvc leaves running inherit the command's output: a file, not a pipe run_command would wait on
    with open(project / ".dvc" / "tmp" / "queue-start.log", "ab") as log:
        subprocess.run(["dvc", "queue", "start", "-j", str(jobs)], cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    deadline = time.monotonic() + timeout
    if meet is not None:
        folder = Path(meet["SEGBENCH_TEST_GATE_DIR"])
        while len(list(folder.glob("started.*"))) < jobs and time.monotonic() < deadline:
            time.sleep(0.5)
        (folder / "release").touch()  # past the deadline too: the gated processes then go on, and the status tells
    while True:
        status = run_command(["dvc", "queue", "status"], project)
        if "Queued" not in status and "Running" not in status:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"dvc queue still busy after {timeout:.0f} s:\n{status}")
        time.sleep(5)


def commit_all(repo: Path, message: str) -> None:
    """Commit everything in ``repo`` (a throwaway identity: CI machines may have none)."""
    run_command(["git", "add", "-A"], repo)
    run_command(["git", "-c", "user.name=segbench tests", "-c", "user.email=tests@segbench.invalid", "commit", "-qm", message], repo)


def score_bundle(model: str = "sim_a", dataset: str = "toy", dice: Sequence[float] = (0.9, 0.8)) -> tracking.ScoreBundle:
    """A score bundle of SIMULATED rows, as the score stage hands one to tracking: a kidney Dice per case
    (case_00000, case_00001, ...), their mean the run's headline metric."""
    rows = pd.DataFrame(
        {"model": model, "case_id": [f"case_{i:05d}" for i in range(len(dice))], "structure": "kidney", "reference_present": True, "dice": list(dice)}
    )
    record = {
        "tags": {"segbench.dataset": dataset, "segbench.model": model, "segbench.kind": "simulated", "segbench.dataset_version": "0123abcd"},
        "params": {"model.command": "simulated rows", "dataset.source": f"data/{dataset}/labels"},
        "metrics": {"kidney.dice.mean": float(np.mean(dice))},
    }
    return tracking.ScoreBundle(rows.to_csv(index=False, lineterminator="\n").encode(), record)


def lock_outs(lock_file: Path) -> dict[str, str]:
    """path -> md5 of every output recorded in a dvc.lock."""
    lock = yaml.safe_load(lock_file.read_text(encoding="utf-8"))
    return {o["path"]: o["md5"] for stage in lock["stages"].values() for o in stage.get("outs", [])}


def tumour_crop(labels_dir: Path, case: str, margin: int = 6) -> nib.Nifti1Image:
    """A real label map cropped around its tumour (keeps reference libraries fast), affine shifted to match."""
    img = nib.load(labels_dir / f"{case}.nii.gz")
    lab = np.asanyarray(img.dataobj)
    box = ndimage.find_objects((lab == 2).astype(np.uint8))[0]
    box = tuple(slice(max(s.start - margin, 0), min(s.stop + margin, n)) for s, n in zip(box, lab.shape, strict=True))
    affine = img.affine.copy()
    affine[:3, 3] = img.affine[:3, :3] @ [s.start for s in box] + img.affine[:3, 3]
    return nib.Nifti1Image(lab[box].copy(), affine, img.header)


def podman_runtime() -> container.Runtime:
    """Podman with this machine's flags from the environment; where none are set, the limits this process has
    (podman's runc cannot raise them, and fails on its defaults here: 'error setting rlimit ... operation not permitted')."""
    found = container.Runtime.from_environment({**dict(os.environ), container.RUNTIME_ENV: "podman"})
    if found.run_flags:
        return found
    (_, nofile), (_, nproc) = resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_NPROC)
    limits = ("--ulimit", f"nofile={min(nofile, 4096)}:{min(nofile, 4096)}", "--ulimit", f"nproc={min(nproc, 4096)}:{min(nproc, 4096)}")
    return container.Runtime(found.program, found.global_flags, limits)


def use_runtime(monkeypatch: object, runtime: container.Runtime) -> None:
    """Make ``runtime`` the one segbench finds in the environment (``monkeypatch``: pytest's fixture)."""
    monkeypatch.setenv(container.RUNTIME_ENV, runtime.program)
    monkeypatch.setenv(container.GLOBAL_FLAGS_ENV, shlex.join(runtime.global_flags))
    monkeypatch.setenv(container.RUN_FLAGS_ENV, shlex.join(runtime.run_flags))


def write_tar(path: Path, members: dict[str, bytes], gzipped: bool = False) -> Path:
    """A tar archive (gzip'd if asked) of regular files named as ``members``' keys: a hand-made image archive."""
    with tarfile.open(path, "w:gz" if gzipped else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _tar_header(name: str, size: int, kind: bytes) -> bytes:
    """One raw ustar member header (what tarfile would refuse to write for a lying size)."""
    block = bytearray(512)
    block[: len(name)] = name.encode()
    block[100:108], block[108:116], block[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    block[124:136], block[136:148] = f"{size:011o}\0".encode(), b"00000000000\0"
    block[156:157], block[257:263] = kind, b"ustar\0"
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block)


def header_bomb(path: Path, kind: bytes, claimed: int) -> Path:
    """A gzip'd tar whose first member header is a GNU long name (``kind`` b"L") or pax header (b"x") claiming ``claimed``
    bytes, followed by them (zeros): a team archive of well under 1 MB for 256 MiB claimed."""
    with gzip.open(path, "wb", compresslevel=9) as target:
        target.write(_tar_header("././@LongLink", claimed, kind))
        for _ in range(claimed >> 24):
            target.write(bytes(1 << 24))
    return path
