"""One model call in a container (docker or podman): load a pinned image archive, run it isolated, clean up.

The contract is the CVPR 2025 challenge's: the image is a ``docker save`` archive, run with the case's
files in ``/workspace/inputs`` and writing its results to ``/workspace/outputs``, its command
``/bin/bash -c "sh predict.sh"`` (the challenge script's). segbench adds isolation and bounds:

* no network (``--network none``), the inputs mounted read-only, the outputs the only writable mount
  (the image's own filesystem is read-only; ``/tmp`` is an in-memory scratch), no privileged mode,
  no capabilities, no new privileges; memory, CPU and process limits; a GPU only when asked;
* every runtime call has a timeout; a run past its limit, or interrupted, is killed and removed
  (``--rm`` plus an explicit ``kill``/``rm -f`` of the name segbench gave it);
* a failed run (non-zero exit, time limit, an expected output missing) leaves its outputs folder empty:
  nothing half-written is ever read, and the result says why;
* the container runs as an unprivileged user (``--user 65534:65534``, nobody, on podman and docker alike; its outputs
  folder made writable by that user), so uid 0 inside is never host root; ``user: null`` runs the image's own user;
* what it leaves in its outputs folder is capped (total bytes, number of entries), checked while it runs: over a cap
  the call is stopped and flagged like one past its time limit.

Which runtime, and the flags a machine needs (podman here: ``--ulimit`` values its runtime can set),
come from the environment, never from a model's config or params: ``SEGBENCH_CONTAINER_RUNTIME``
(``docker`` or ``podman``; default the first on PATH, docker first), ``SEGBENCH_CONTAINER_GLOBAL_FLAGS``
(before the subcommand, every call: e.g. ``--runtime runc --cgroup-manager=cgroupfs``) and
``SEGBENCH_CONTAINER_RUN_FLAGS`` (after ``run``: e.g. ``--ulimit nofile=4096:4096 --ulimit nproc=4096:4096``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from segbench.io import file_digest
from segbench.models import intake
from segbench.models.schema import ContainerSpec as ContainerSpec  # the spec a model's image: block becomes

if TYPE_CHECKING:
    from segbench.models.schema import ModelImage

RUNTIME_ENV = "SEGBENCH_CONTAINER_RUNTIME"
GLOBAL_FLAGS_ENV = "SEGBENCH_CONTAINER_GLOBAL_FLAGS"
RUN_FLAGS_ENV = "SEGBENCH_CONTAINER_RUN_FLAGS"
RUNTIMES = ("docker", "podman")
#: how often a running call's outputs folder is measured against its caps (seconds)
OUTPUT_POLL_S = 0.5
#: an image id as the runtimes print it and docker save's manifest names it (without ``sha256:``)
IMAGE_DIGEST = re.compile(r"[0-9a-f]{64}")
#: the members :func:`archive_image_id` reads looking for manifest.json (docker save writes a few per layer, at most 127 layers)
MAX_ARCHIVE_MEMBERS = 10_000
#: the largest manifest.json read (one is a few hundred bytes per image)
MAX_MANIFEST_BYTES = 1 << 20
#: the largest plain tar an image archive may be or decompress to (the runtime copies it into its store; a few MB of gzip
#: can hold terabytes)
MAX_IMAGE_BYTES = 64 << 30
#: what decompressing an archive leaves free on the temporary folder's file system
FREE_SPACE_RESERVE_BYTES = 1 << 30
#: the longest wait the operating system's timers take (a larger limit is no limit: about 116 days)
MAX_TIMEOUT_S = 1e7


class ContainerError(RuntimeError):
    """An image that cannot be used (archive missing, sha256 mismatch, load failed) or a runtime that is missing."""


@dataclass(frozen=True)
class Runtime:
    """The container program and this machine's flags for it (from the environment: :meth:`from_environment`)."""

    program: str
    global_flags: tuple[str, ...] = ()
    run_flags: tuple[str, ...] = ()
    call_timeout_s: float = 900.0  # load, inspect, kill, rm: bounded too

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Runtime:
        """The runtime named by ``SEGBENCH_CONTAINER_RUNTIME`` (else docker or podman, whichever is on PATH) with its flags."""
        environ = os.environ if environ is None else environ
        program = environ.get(RUNTIME_ENV) or next((p for p in RUNTIMES if shutil.which(p)), "")
        if program not in RUNTIMES:
            raise ContainerError(f"{RUNTIME_ENV}={program!r}: set it to one of {RUNTIMES} (and install it)" if program
                                 else f"no container runtime: install docker or podman, or set {RUNTIME_ENV}")
        if shutil.which(program) is None:
            raise ContainerError(f"{RUNTIME_ENV}={program}: {program} is not on PATH")
        return cls(program, tuple(shlex.split(environ.get(GLOBAL_FLAGS_ENV, ""))), tuple(shlex.split(environ.get(RUN_FLAGS_ENV, ""))))

    def argv(self, *args: str) -> list[str]:
        """A runtime call: the program, the machine's global flags, then ``args``."""
        return [self.program, *self.global_flags, *args]

    def call(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a short runtime call (never a model) with a timeout; its output captured."""
        argv = self.argv(*args)
        try:
            return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False,
                                  timeout=self.call_timeout_s if timeout is None else timeout)
        except subprocess.TimeoutExpired as exc:
            raise ContainerError(f"{shlex.join(argv)}: no answer within {exc.timeout:.0f} s") from exc


@dataclass(frozen=True)
class ContainerRun:
    """The outcome of one container call: ``reason`` is None when it exited 0 and wrote what was expected."""

    name: str
    seconds: float
    exit_status: int | None  # None: stopped at the time limit
    reason: str | None
    log: str  # the tail of what the container printed

    @property
    def ok(self) -> bool:
        return self.reason is None


def archive_image_id(archive: Path) -> str:
    """The image id (its config's sha256, 64 hex digits) recorded in a ``docker save`` archive's manifest.json.

    The archive is a team's, so nothing in it is taken on trust: it is read as a stream, at most
    ``MAX_ARCHIVE_MEMBERS`` members; a manifest.json whose header claims more than ``MAX_MANIFEST_BYTES`` is refused
    before a byte of it is read; and the id must be a digest: it goes to the runtime's commands as an argument, where a
    config named ``--all.json`` would make the removal of the team's image ``rmi --force --all``, every image of the store.
    """
    try:
        manifest = _manifest(archive)
    except (tarfile.TarError, ValueError, RecursionError, EOFError, zlib.error) as exc:  # ValueError: JSON, UTF-8, gzip
        raise ContainerError(f"{archive}: not a docker save archive (no readable manifest.json)") from exc
    except OSError as exc:
        raise ContainerError(f"{archive}: cannot be read: {exc}") from exc
    first = manifest[0] if isinstance(manifest, list) and manifest else None
    config = first.get("Config") if isinstance(first, dict) else None
    if not isinstance(config, str):
        raise ContainerError(f"{archive}: manifest.json names no image config")
    image = Path(config).name.removesuffix(".json").removeprefix("sha256:")
    if not IMAGE_DIGEST.fullmatch(image):
        raise ContainerError(f"{archive}: manifest.json's image config {config[:100]!r} is not a sha256 digest; refusing the archive")
    return image


def _manifest(archive: Path) -> object:
    """The parsed manifest.json of a tar archive (any compression tarfile reads), within the bounds of :func:`archive_image_id`."""
    with tarfile.open(archive, "r|*") as tar:
        for count, member in enumerate(tar, 1):
            if count > MAX_ARCHIVE_MEMBERS:
                raise ContainerError(f"{archive}: no manifest.json among its first {MAX_ARCHIVE_MEMBERS:,} members; refusing the archive")
            if member.name != "manifest.json":
                continue
            if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
                what = f"claims {member.size:,} bytes, more than {MAX_MANIFEST_BYTES:,}" if member.isfile() else "is not a file"
                raise ContainerError(f"{archive}: its manifest.json {what}; refusing the archive")
            stream = tar.extractfile(member)
            return json.loads(stream.read(MAX_MANIFEST_BYTES)) if stream else None
    raise ValueError("no manifest.json")


@contextlib.contextmanager
def _uncompressed(archive: Path) -> Iterator[Path]:
    """``archive`` itself, or a gzip'd one (``docker save | gzip``, the challenge's ``.tar.gz``) decompressed into a temporary
    file: docker loads either, podman only the plain tar. The plain tar may take at most ``MAX_IMAGE_BYTES`` (the runtime
    copies it into its store) and, decompressed here, must leave ``FREE_SPACE_RESERVE_BYTES`` free: a gzip bomb is refused
    before it fills the disk other work shares."""
    with open(archive, "rb") as stream:
        gzipped = stream.read(2) == b"\x1f\x8b"
        size = os.fstat(stream.fileno()).st_size
    if not gzipped:
        if size > MAX_IMAGE_BYTES:
            raise ContainerError(f"image archive {archive}: {size:,} bytes, more than the cap of {MAX_IMAGE_BYTES:,}; refusing it")
        yield archive
        return
    with tempfile.TemporaryDirectory(prefix="segbench-image-") as folder:
        limit = min(MAX_IMAGE_BYTES, shutil.disk_usage(folder).free - FREE_SPACE_RESERVE_BYTES)
        bound = (f"the cap of {MAX_IMAGE_BYTES:,} bytes" if limit == MAX_IMAGE_BYTES
                 else f"the free space of {folder}'s file system less {FREE_SPACE_RESERVE_BYTES:,} bytes")
        plain = Path(folder) / "image.tar"
        written = 0
        try:
            with gzip.open(archive, "rb") as source, open(plain, "wb") as target:
                while chunk := source.read(1 << 20):
                    written += len(chunk)
                    if written > limit:
                        raise ContainerError(f"image archive {archive}: decompresses to more than {max(limit, 0):,} bytes ({bound}); refusing it")
                    target.write(chunk)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise ContainerError(f"image archive {archive}: not a whole gzip stream ({exc})") from exc
        yield plain


def load_image(runtime: Runtime, archive: Path, sha256: str) -> str:
    """Check ``archive`` against its pinned ``sha256``, load it unless the runtime has that image already; returns the image id."""
    archive = Path(archive)
    if not archive.is_file():
        raise ContainerError(f"image archive {archive} does not exist")
    actual = file_digest(archive, "sha256")
    if actual != sha256.removeprefix("sha256:"):
        raise ContainerError(f"image archive {archive}: sha256 {actual}, pinned {sha256}; refusing to load it")
    image = archive_image_id(archive)
    if runtime.call("image", "inspect", image).returncode == 0:
        return image
    with _uncompressed(archive) as tar:
        result = runtime.call("load", "-i", str(tar))
    if result.returncode != 0:
        raise ContainerError(f"image archive {archive}: {runtime.program} load exited with status {result.returncode}: {result.stderr.strip()[-1000:]}")
    if runtime.call("image", "inspect", image).returncode != 0:
        raise ContainerError(f"image archive {archive}: loaded, but {runtime.program} has no image {image}")
    return image


def find_reference(runtime: Runtime, reference: str) -> str:
    """The id of the image ``reference`` already in the runtime's store (``segbench env create`` pulls it); an error says how to get it."""
    result = runtime.call("image", "inspect", "--format", "{{.Id}}", reference)
    if result.returncode != 0:
        raise ContainerError(f"image {reference} is not in {runtime.program}'s store: pull it (segbench env create <model>, "
                             f"or {runtime.program} pull {reference})")
    return result.stdout.strip()


def ready_image(runtime: Runtime, image: ModelImage) -> str:
    """The runtime's id of a model's image: its archive checked and loaded, or its reference found in the store."""
    if image.archive is not None:
        return load_image(runtime, image.archive, str(image.sha256))
    return find_reference(runtime, str(image.reference))


def image_record(image: ModelImage) -> dict[str, str]:
    """What a run's record says of the image it ran: the archive and its sha256, or the reference."""
    return {"archive": str(image.archive), "sha256": str(image.sha256)} if image.archive is not None else {"reference": str(image.reference)}


def with_values(spec: ContainerSpec, values: Mapping[str, str]) -> ContainerSpec:
    """``spec`` with the placeholders of its command, variables and mount sources filled from ``values``."""
    try:
        return dataclasses.replace(
            spec,
            command=tuple(part.format(**values) for part in spec.command),
            variables={key: value.format(**values) for key, value in spec.variables.items()},
            mounts=tuple((host.format(**values), inside) for host, inside in spec.mounts),
        )
    except (KeyError, IndexError) as exc:
        raise ContainerError(f"image command, variables or mounts: unknown placeholder {exc}; known {sorted(values)}") from exc


def remove_image(runtime: Runtime, image: str) -> None:
    """Remove a loaded image (the challenge removes each team's image after its cases)."""
    result = runtime.call("rmi", "--force", image)
    if result.returncode != 0 and "no such image" not in result.stderr.lower() and "image not known" not in result.stderr.lower():
        raise ContainerError(f"{runtime.program} rmi {image} exited with status {result.returncode}: {result.stderr.strip()}")


def gpu_flags(runtime: Runtime, device: str) -> list[str]:
    """``cpu`` -> none; ``cuda`` / ``cuda:N`` -> docker's ``--gpus`` or podman's CDI device for all GPUs / GPU N."""
    if device == "cpu":
        return []
    kind, _, index = device.partition(":")
    if kind != "cuda" or not (index == "" or index.isdigit()):
        raise ContainerError(f"device {device!r}: expected cpu, cuda or cuda:N")
    if runtime.program == "docker":
        return ["--gpus", f"device={index}" if index else "all"]
    return ["--device", f"nvidia.com/gpu={index or 'all'}"]


def run_argv(runtime: Runtime, image: str, spec: ContainerSpec, inputs: Path, outputs: Path, name: str, device: str = "cpu") -> list[str]:
    """The ``run`` command line of one isolated call (see the module's docstring for what each flag guards)."""
    variables = [arg for key, value in sorted(spec.variables.items()) for arg in ("-e", f"{key}={value}")]
    return runtime.argv(
        "run", "--rm", "--name", name,
        "--network", "none", "--read-only", "--tmpfs", "/tmp",
        "--cap-drop", "all", "--security-opt", "no-new-privileges",
        "--memory", spec.memory, "--cpus", str(spec.cpus), "--pids-limit", str(spec.pids_limit), "--shm-size", spec.shm_size,
        *(("--user", spec.user) if spec.user is not None else ()),
        *gpu_flags(runtime, device),
        "-v", f"{Path(inputs).resolve()}:{spec.inputs_mount}:ro",
        "-v", f"{Path(outputs).resolve()}:{spec.outputs_mount}:rw",
        *(arg for host, inside in spec.mounts for arg in ("-v", f"{Path(host).resolve()}:{inside}:ro")),
        *variables, *runtime.run_flags,
        image, *spec.command,
    )


def stop_and_remove(runtime: Runtime, name: str) -> None:
    """Kill and remove the container ``name`` if it still exists (bounded; a container already gone is fine)."""
    runtime.call("kill", name, timeout=60.0)
    runtime.call("rm", "-f", name, timeout=60.0)


def container_exists(runtime: Runtime, name: str) -> bool:
    """Whether a container named exactly ``name`` exists, running or not."""
    listed = runtime.call("ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Names}}", timeout=60.0)
    return name in listed.stdout.split()


def over_cap(folder: Path, max_bytes: int, max_files: int) -> str | None:
    """Why ``folder`` holds more than ``max_bytes`` or ``max_files`` entries (never following a link; stops counting at
    the first cap passed), or None."""
    n_bytes = n_files = 0
    stack = [Path(folder)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:  # removed meanwhile, or unreadable: the reader refuses it later
            continue
        for entry in entries:
            n_files += 1
            if n_files > max_files:
                return f"wrote more than {max_files} files and folders into its outputs folder (the cap)"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            n_bytes += info.st_blocks * 512 if info.st_blocks else info.st_size
            if n_bytes > max_bytes:
                return f"wrote more than {max_bytes} bytes into its outputs folder (the cap)"
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return None


def _expected_problem(outputs: Path, expected: Sequence[str], mount: str) -> str | None:
    """Why the ``expected`` outputs are not all regular files directly in ``outputs`` (segbench.models.intake), or None."""
    missing = []
    for name in expected:
        try:
            intake.check_regular(outputs / name)
        except FileNotFoundError:
            missing.append(name)
        except intake.IntakeError as exc:
            return str(exc)
    return f"exited 0 but wrote no {', '.join(missing)} in {mount}" if missing else None


def _writable_by(folder: Path, user: str | None) -> None:
    """Let ``user`` (``uid:gid``) write into ``folder``: its owner when segbench runs as root, else writable by all."""
    if user is None:
        return
    if os.geteuid() == 0:
        uid, _, gid = user.partition(":")
        os.chown(folder, int(uid), int(gid or uid))
    else:  # rootless: the user inside maps to a subordinate id of the host's, which only the others' bits reach
        folder.chmod(0o777)


def _empty(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def run(
    runtime: Runtime,
    image: str,
    spec: ContainerSpec,
    inputs: Path,
    outputs: Path,
    timeout_s: float,
    *,
    expected: Sequence[str] = (),
    device: str = "cpu",
    name_prefix: str = "segbench",
) -> ContainerRun:
    """Run ``image`` once on the files in ``inputs``; ``outputs`` (empty, created if needed) gets what it writes.

    ``expected``: names of files the call must leave in ``outputs``. On any failure ``outputs`` is left
    empty and ``reason`` says what went wrong; the container never outlives the call (on a time limit
    or an interrupt it is killed and removed before this returns or raises).
    """
    outputs = Path(outputs)
    outputs.mkdir(parents=True, exist_ok=True)
    if any(outputs.iterdir()):
        raise ContainerError(f"outputs folder {outputs} is not empty; a container writes into an empty folder")
    _writable_by(outputs, spec.user)
    name = f"{name_prefix}-{uuid.uuid4().hex[:12]}"
    argv = run_argv(runtime, image, spec, inputs, outputs, name, device)
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    out = b""  # what the container printed; empty when an interrupt came before it ended
    capped = None
    status: int | None = None
    deadline = start + min(max(timeout_s, 0.0), MAX_TIMEOUT_S)
    try:
        while True:  # wait in slices, measuring the outputs folder against its caps between them
            try:
                out, _ = process.communicate(timeout=max(0.0, min(OUTPUT_POLL_S, deadline - time.perf_counter())))
                status = process.returncode
                break
            except subprocess.TimeoutExpired:
                capped = over_cap(outputs, spec.max_output_bytes, spec.max_output_files)
                if capped is not None or time.perf_counter() >= deadline:
                    break
    finally:
        if process.returncode is None:  # the time limit, a cap, or an interrupt (KeyboardInterrupt, SystemExit) on the way out
            stop_and_remove(runtime, name)
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the client, if the container's end did not end it
            except ProcessLookupError:
                pass
            out += process.communicate()[0] or b""
            _empty(outputs)
    seconds = time.perf_counter() - start
    log = out.decode("utf-8", "replace")[-4000:]
    if status is None:
        what = capped or f"stopped at the time limit of {timeout_s:.1f} s"
        reason = f"{what}; container {name} killed and removed"
    elif status != 0:
        reason = f"exited with status {status}: {log.strip().splitlines()[-1] if log.strip() else 'no output'}"
        if spec.user is not None and any(word in log for word in ("Permission denied", "Operation not permitted")):
            reason += f" (it ran as user {spec.user}, not root; an image that needs root runs only if the organiser allows it)"
    else:
        capped = over_cap(outputs, spec.max_output_bytes, spec.max_output_files)
        reason = capped or _expected_problem(outputs, expected, spec.outputs_mount)
    if reason is not None:
        _empty(outputs)
    return ContainerRun(name, seconds, status, reason, log)
