"""One model call in a container (docker or podman): load a pinned image archive, run it isolated, clean up.

The contract is the CVPR 2025 challenge's: the image is a ``docker save`` archive, run with the case's
files in ``/workspace/inputs`` and writing its results to ``/workspace/outputs``, its command
``/bin/bash -c "sh predict.sh"`` (the challenge script's). segbench adds isolation and bounds:

* no network (``--network none``), the inputs mounted read-only, the outputs the only writable mount
  (the image's own filesystem is read-only; ``/tmp`` and every VOLUME the image declares are in-memory scratches of at
  most ``max_output_bytes`` each, never volumes on the host's disk), no privileged mode,
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

import bz2
import contextlib
import dataclasses
import gzip
import io
import json
import logging
import lzma
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from segbench.base.io import file_digest, write_json_atomic
from segbench.models import intake
from segbench.models.schema import ContainerSpec as ContainerSpec  # the spec a model's image: block becomes

if TYPE_CHECKING:
    from segbench.models.schema import ModelImage

RUNTIME_ENV = "SEGBENCH_CONTAINER_RUNTIME"
GLOBAL_FLAGS_ENV = "SEGBENCH_CONTAINER_GLOBAL_FLAGS"
RUN_FLAGS_ENV = "SEGBENCH_CONTAINER_RUN_FLAGS"
RUNTIMES = ("docker", "podman")
#: the name of a team's image store in TMPDIR begins so (private_store); the file in it that names the process owning it
STORE_PREFIX = "segbench-store-"
STORE_OWNER = "owner"
#: how often a running call's outputs folder is measured against its caps (seconds)
OUTPUT_POLL_S = 0.5
#: an image id as the runtimes print it and docker save's manifest names it (without ``sha256:``)
IMAGE_DIGEST = re.compile(r"[0-9a-f]{64}")
#: the members (headers included) an image archive may hold (docker save writes a few per layer, at most 127 layers)
MAX_ARCHIVE_MEMBERS = 10_000
#: the largest GNU long name or pax header of a member (Go's archive/tar, which the runtimes read with, takes at most 1 MiB)
MAX_EXTENDED_HEADER_BYTES = 1 << 20
#: a tar block
BLOCK = 512
#: bytes inflated per read
CHUNK = 1 << 20
#: the magic bytes of each compression a runtime's load accepts
COMPRESSIONS = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd"}
#: the largest manifest.json read (one is a few hundred bytes per image)
MAX_MANIFEST_BYTES = 1 << 20
#: the largest plain tar an image archive may be or decompress to (the runtime copies it into its store; a few MB of gzip
#: can hold terabytes)
MAX_IMAGE_BYTES = 64 << 30
#: what decompressing an archive leaves free on the temporary folder's file system
FREE_SPACE_RESERVE_BYTES = 1 << 30
#: the longest wait the operating system's timers take (a larger limit is no limit: about 116 days)
MAX_TIMEOUT_S = 1e7

log = logging.getLogger(__name__)


class ContainerError(RuntimeError):
    """An image that cannot be used (archive missing, sha256 mismatch, load failed) or a runtime that is missing."""


@dataclass(frozen=True)
class Runtime:
    """The container program and this machine's flags for it (from the environment: :meth:`from_environment`)."""

    program: str
    global_flags: tuple[str, ...] = ()
    run_flags: tuple[str, ...] = ()
    call_timeout_s: float = 900.0  # load, inspect, kill, rm: bounded too
    #: the TMPDIR of its calls (podman load copies the archive there first); None: this process's
    tmpdir: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Runtime:
        """The runtime named by ``SEGBENCH_CONTAINER_RUNTIME`` (else docker or podman, whichever is on PATH) with its flags."""
        environ = os.environ if environ is None else environ
        program = environ.get(RUNTIME_ENV) or next((p for p in RUNTIMES if shutil.which(p)), "")
        if program not in RUNTIMES:
            raise ContainerError(
                f"{RUNTIME_ENV}={program!r}: set it to one of {RUNTIMES} (and install it)"
                if program
                else f"no container runtime: install docker or podman, or set {RUNTIME_ENV}"
            )
        if shutil.which(program) is None:
            raise ContainerError(f"{RUNTIME_ENV}={program}: {program} is not on PATH")
        return cls(program, tuple(shlex.split(environ.get(GLOBAL_FLAGS_ENV, ""))), tuple(shlex.split(environ.get(RUN_FLAGS_ENV, ""))))

    def argv(self, *args: str) -> list[str]:
        """A runtime call: the program, the machine's global flags, then ``args``."""
        return [self.program, *self.global_flags, *args]

    def environ(self) -> dict[str, str] | None:
        """The environment of its calls: this process's, with ``tmpdir`` as TMPDIR when set (None: this process's as it is)."""
        return None if self.tmpdir is None else {**os.environ, "TMPDIR": self.tmpdir}

    def call(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a short runtime call (never a model) with a timeout; its output captured."""
        argv = self.argv(*args)
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                check=False,
                env=self.environ(),
                timeout=self.call_timeout_s if timeout is None else timeout,
            )
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
    """The image id (its config's sha256, 64 hex digits) recorded in a ``docker save`` archive's manifest.json, the archive
    read within the bounds of :func:`read_archive`."""
    with read_archive(archive) as (_, image):
        return image


@contextlib.contextmanager
def read_archive(archive: Path) -> Iterator[tuple[Path, str]]:
    """A team's image archive as a plain tar the runtime may load, and its image id; every byte read within bounds.

    The archive is a team's, so nothing in it is taken on trust. Compressed (gzip, xz, bzip2), it is inflated here into a
    temporary file with the size cap (:func:`_uncompressed`), never by the runtime; zstd, which segbench cannot inflate
    with a bound, is refused. The plain tar's member headers are read one by one (:func:`_scan_tar`): GNU long names and pax
    headers at most ``MAX_EXTENDED_HEADER_BYTES``, at most ``MAX_ARCHIVE_MEMBERS`` members, a manifest.json of at most
    ``MAX_MANIFEST_BYTES`` (the claim in its header checked before a byte is read), each compressed layer inflated here and
    counted, the members' inflated sizes summed under the cap. The image id must be a digest: it goes to the runtime's
    commands as an argument, where a config named ``--all.json`` would make a removal ``rmi --force --all``.
    """
    archive = Path(archive)
    with _uncompressed(archive) as (plain, limit, bound):
        try:
            with open(plain, "rb") as stream:
                manifest = json.loads(_scan_tar(stream, archive, limit, bound))
        except (ValueError, RecursionError, EOFError, zlib.error, lzma.LZMAError) as exc:  # ValueError: JSON, UTF-8
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
        yield plain, image


def _compression(head: bytes) -> str | None:
    """The compression whose magic bytes begin ``head`` (one of COMPRESSIONS' values), or None."""
    return next((kind for magic, kind in COMPRESSIONS.items() if head.startswith(magic)), None)


def _inflating(kind: str, raw: BinaryIO, where: Path) -> BinaryIO:
    """A reader of ``raw`` inflated (``kind`` from :func:`_compression`); zstd is refused with the reason."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    raise ContainerError(
        f"{where}: {kind}-compressed, which segbench cannot inflate with a size cap; refusing it (send the plain `docker save` tar, or gzip it)"
    )


class _Window(io.RawIOBase):
    """The next ``size`` bytes of ``stream`` as a stream of their own (a tar member's data)."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self.stream, self.left = stream, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        data = self.stream.read(min(len(buffer), self.left))
        self.left -= len(data)
        buffer[: len(data)] = data
        return len(data)


def _tar_number(field: bytes) -> int:
    """A tar header's numeric field: octal digits, or GNU's base-256 (first byte's high bit set)."""
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _pax_records(data: bytes) -> dict[str, str]:
    """The ``key=value`` records of a pax header (``<length> <key>=<value>\\n`` each)."""
    records, at = {}, 0
    while at < len(data) and data[at : at + 1] not in (b"", b"\0"):
        length = int(data[at : data.index(b" ", at)])
        if length <= 0:
            raise ValueError("a pax record of length 0")
        key, _, value = data[data.index(b" ", at) + 1 : at + length - 1].partition(b"=")
        records[key.decode("utf-8")] = value.decode("utf-8", "replace")
        at += length
    return records


def _scan_tar(stream: BinaryIO, archive: Path, limit: int, bound: str) -> bytes:
    """The bytes of the manifest.json of the plain tar ``stream``, every member header read within the bounds of
    :func:`read_archive`; a compressed member (a layer) inflated here, chunk by chunk, and counted toward ``limit``."""
    members = total = 0
    name = size_override = None
    manifest = None
    while True:
        block = stream.read(BLOCK)
        if not block.strip(b"\0"):
            break  # the end blocks (or the file's end)
        if len(block) < BLOCK:
            raise EOFError("a member header cut short")
        stored = _tar_number(block[148:156])
        if stored != sum(block[:148]) + 8 * 32 + sum(block[156:]):
            raise ValueError("a member header whose checksum does not match")
        size, kind = _tar_number(block[124:136]), block[156:157]
        members += 1
        if members > MAX_ARCHIVE_MEMBERS:
            raise ContainerError(f"{archive}: more than {MAX_ARCHIVE_MEMBERS:,} members (headers included); refusing the archive")
        if kind in (b"L", b"K", b"x", b"g"):  # a GNU long name or link, a pax header: data the next member's header uses
            if size > MAX_EXTENDED_HEADER_BYTES:
                raise ContainerError(
                    f"{archive}: member {members}'s {'GNU long name' if kind in b'LK' else 'pax'} header claims {size:,} bytes, "
                    f"more than {MAX_EXTENDED_HEADER_BYTES:,}; refusing the archive"
                )
            data = stream.read(-(-size // BLOCK) * BLOCK)[:size]
            if kind == b"L":
                name = data.split(b"\0", 1)[0].decode("utf-8", "replace")
            elif kind == b"x":
                records = _pax_records(data)
                if any(key.startswith("GNU.sparse") for key in records):
                    raise ContainerError(f"{archive}: a sparse member (pax GNU.sparse), which no docker save archive holds; refusing the archive")
                name = records.get("path", name)
                size_override = int(records["size"]) if "size" in records else None
            continue
        if kind == b"S":
            raise ContainerError(f"{archive}: a GNU sparse member, which no docker save archive holds; refusing the archive")
        if name is None:
            prefix = block[345:500].split(b"\0", 1)[0] if block[257:262] == b"ustar" else b""
            name = ((prefix + b"/" if prefix else b"") + block[:100].split(b"\0", 1)[0]).decode("utf-8", "replace")
        size = size if size_override is None else size_override
        start = stream.tell()
        if kind in (b"0", b"\0", b"7"):  # a regular file
            if name.lstrip("./") == "manifest.json":
                if manifest is not None or size > MAX_MANIFEST_BYTES:
                    what = "a second manifest.json" if manifest is not None else f"its manifest.json claims {size:,} bytes, more than {MAX_MANIFEST_BYTES:,}"
                    raise ContainerError(f"{archive}: {what}; refusing the archive")
                manifest = stream.read(size)
            else:
                head = stream.read(8)
                stream.seek(start)
                compressed = _compression(head)
                total += _inflated_size(stream, size, compressed, limit - total, archive, name, bound) if compressed else size
                if total > limit:
                    raise ContainerError(f"{archive}: its members take more than {limit:,} bytes ({bound}); refusing it")
        stream.seek(start + -(-size // BLOCK) * BLOCK)
        name = size_override = None
    if manifest is None:
        raise ValueError("no manifest.json")
    return manifest


def _inflated_size(stream: BinaryIO, size: int, kind: str, room: int, archive: Path, name: str, bound: str) -> int:
    """How many bytes the compressed member of ``size`` bytes at ``stream``'s position inflates to, counted chunk by chunk
    and refused past ``room``: the runtime would inflate the layer into its store."""
    inflated = 0
    where = Path(f"{archive}:{name[:200]}")
    try:
        with _inflating(kind, _Window(stream, size), where) as layer:  # type: ignore[arg-type]
            while chunk := layer.read(CHUNK):
                inflated += len(chunk)
                if inflated > room:
                    raise ContainerError(f"{archive}: layer {name[:200]!r} ({kind}) inflates past the room left under {bound}; refusing it")
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise ContainerError(f"{archive}: layer {name[:200]!r} is not a whole {kind} stream ({exc}); refusing it") from exc
    return inflated


@contextlib.contextmanager
def _uncompressed(archive: Path) -> Iterator[tuple[Path, int, str]]:
    """``archive`` itself, or a compressed one (``docker save | gzip``, the challenge's ``.tar.gz``; xz, bzip2) inflated into a
    temporary file, with the cap every byte of it is counted against and the cap's words: docker loads either, podman
    only the plain tar. The plain tar may take at most ``MAX_IMAGE_BYTES`` (the runtime copies it into its store) and,
    inflated here, must leave ``FREE_SPACE_RESERVE_BYTES`` free: a compression bomb is refused before it fills the disk
    other work shares."""
    with open(archive, "rb") as stream:
        kind = _compression(stream.read(8))
        size = os.fstat(stream.fileno()).st_size
    if kind is None:
        if size > MAX_IMAGE_BYTES:
            raise ContainerError(f"image archive {archive}: {size:,} bytes, more than the cap of {MAX_IMAGE_BYTES:,}; refusing it")
        yield archive, MAX_IMAGE_BYTES, f"the cap of {MAX_IMAGE_BYTES:,} bytes"
        return
    with tempfile.TemporaryDirectory(prefix="segbench-image-") as folder:
        limit = min(MAX_IMAGE_BYTES, shutil.disk_usage(folder).free - FREE_SPACE_RESERVE_BYTES)
        bound = (
            f"the cap of {MAX_IMAGE_BYTES:,} bytes"
            if limit == MAX_IMAGE_BYTES
            else f"the free space of {folder}'s file system less {FREE_SPACE_RESERVE_BYTES:,} bytes"
        )
        plain = Path(folder) / "image.tar"
        written = 0
        try:
            with open(archive, "rb") as raw, _inflating(kind, raw, archive) as source, open(plain, "wb") as target:
                while chunk := source.read(CHUNK):
                    written += len(chunk)
                    if written > limit:
                        raise ContainerError(f"image archive {archive}: decompresses to more than {max(limit, 0):,} bytes ({bound}); refusing it")
                    target.write(chunk)
        except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:  # gzip.BadGzipFile and bz2's errors are OSErrors
            raise ContainerError(f"image archive {archive}: not a whole {kind} stream ({exc})") from exc
        yield plain, limit, bound


def load_image(runtime: Runtime, archive: Path, sha256: str) -> str:
    """Check ``archive`` against its pinned ``sha256``, load it unless the runtime has that image already; returns the image id.
    A team's archive is loaded into an empty store (:func:`private_store`), where an image it names but does not bring is
    no image."""
    archive = Path(archive)
    if not archive.is_file():
        raise ContainerError(f"image archive {archive} does not exist")
    actual = file_digest(archive, "sha256")
    if actual != sha256.removeprefix("sha256:"):
        raise ContainerError(f"image archive {archive}: sha256 {actual}, pinned {sha256}; refusing to load it")
    with read_archive(archive) as (tar, image):
        if runtime.call("image", "inspect", image).returncode == 0:
            return image
        result = runtime.call("load", "-i", str(tar))
    if result.returncode != 0:
        raise ContainerError(f"image archive {archive}: {runtime.program} load exited with status {result.returncode}: {result.stderr.strip()[-1000:]}")
    if runtime.call("image", "inspect", image).returncode != 0:
        raise ContainerError(f"image archive {archive}: loaded, but {runtime.program} has no image {image}")
    return image


@contextlib.contextmanager
def private_store(runtime: Runtime) -> Iterator[Runtime]:
    """``runtime`` (podman) with an image store of its own, new and empty, removed with everything in it on the way out:
    ``--root``, ``--runroot`` and ``--tmpdir`` in a ``segbench-store-*`` folder of TMPDIR, so what a team's archive
    loads can neither name an image it did not bring nor outlive the team, and no tag of the organiser's store can be
    re-pointed. The folder records its owner (:func:`store_owner`), so that a run killed before its way out leaves a store
    the next run removes (:func:`remove_orphaned_stores`). docker has one store per daemon, so no store of a team's own."""
    if runtime.program != "podman":
        raise ContainerError(f"{runtime.program} has one image store per daemon: an image store of a team's own needs podman")
    folder = Path(tempfile.mkdtemp(prefix=STORE_PREFIX))
    try:
        write_json_atomic(folder / STORE_OWNER, store_owner())
        yield _in_store(runtime, folder)
    finally:
        _remove_store(runtime, folder)


def _in_store(runtime: Runtime, folder: Path) -> Runtime:
    """``runtime`` working on the image store in ``folder``: podman's ``--root``, ``--runroot`` and ``--tmpdir`` there, and its
    TMPDIR too, where ``load`` copies the whole archive before it unpacks it (a run killed while loading leaves that copy
    in the store, not beside it)."""
    return dataclasses.replace(
        runtime,
        global_flags=(*runtime.global_flags, "--root", str(folder / "root"), "--runroot", str(folder / "run"), "--tmpdir", str(folder / "tmp")),
        tmpdir=str(folder / "tmp"),
    )


def _remove_store(runtime: Runtime, folder: Path) -> None:
    """Remove the image store in ``folder`` with everything in it: its containers and images (podman on that store), then
    whatever is still mounted below it (a killed run's overlays), then the folder. The unmounting and the folder's removal
    happen even when podman does not answer."""
    store = _in_store(runtime, folder)
    try:
        store.call("rm", "--all", "--force", timeout=120.0)
        store.call("rmi", "--all", "--force", timeout=300.0)
    finally:
        _unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _boot_id() -> str:
    """This boot of this machine (a process's start time counts from the boot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after the boot (/proc/<pid>/stat's 22nd field), or None when there is
    no such process (or no /proc)."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return int(line.rpartition(")")[2].split()[19])  # after the command's name, which may hold spaces and parentheses


def store_owner(pid: int | None = None) -> dict[str, object]:
    """What a store records of the process that owns it (this one, or ``pid``): the host, the boot, the pid and the pid's
    start time, so that a pid the system reused for another process is not taken for the owner."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "start": _process_start(pid)}


def _owner_gone(folder: Path) -> bool:
    """Whether the process that made the store ``folder`` has ended. False whenever that cannot be told: no readable owner
    file (a store a moment old, or an older segbench's), or another host's (a TMPDIR shared between machines)."""
    try:
        descriptor = os.open(folder / STORE_OWNER, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as stream:
            owner = json.loads(stream.read(4096))
        host, boot, pid, start = owner["host"], owner["boot"], int(owner["pid"]), owner["start"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return False
    return boot != _boot_id() or _process_start(pid) != start


def remove_orphaned_stores(runtime: Runtime) -> list[Path]:
    """Remove every image store of TMPDIR (``segbench-store-*``, :func:`private_store`) whose owner has ended, as its own
    way out would have (:func:`_remove_store`): a run killed with SIGKILL, or a machine that lost power, leaves its store,
    the overlays mounted in it and its containers. A store whose owner lives (another run, this organiser's or another's)
    is left alone; so is anything that is not a folder of this user's that only it may enter (as mkdtemp makes it): a
    link is never followed, another user's folder never entered. Returns the stores removed."""
    if runtime.program != "podman":
        return []
    removed = []
    with os.scandir(tempfile.gettempdir()) as entries:
        candidates = sorted(Path(entry.path) for entry in entries if entry.name.startswith(STORE_PREFIX))
    for folder in candidates:
        try:
            info = folder.lstat()
        except OSError:  # removed meanwhile (by its owner, or another run sweeping)
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077 or not _owner_gone(folder):
            continue
        log.warning("removing the image store %s: the run that made it has ended without removing it", folder)
        try:
            _remove_store(runtime, folder)
        except ContainerError as exc:  # podman did not answer; the folder is removed all the same
            log.warning("%s: %s", folder, exc)
        removed.append(folder)
    return removed


def _unmount_below(folder: Path) -> None:
    """Unmount whatever is still mounted under ``folder`` (a store's overlay), deepest first: rmtree must not descend into it."""
    try:
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()]
    except OSError:
        return
    for point in sorted((m for m in mounts if m == str(folder) or m.startswith(f"{folder}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False, timeout=60)


def find_reference(runtime: Runtime, reference: str) -> str:
    """The id of the image ``reference`` already in the runtime's store (``segbench env create`` pulls it); an error says how to get it."""
    result = runtime.call("image", "inspect", "--format", "{{.Id}}", reference)
    if result.returncode != 0:
        raise ContainerError(
            f"image {reference} is not in {runtime.program}'s store: pull it (segbench env create <model>, or {runtime.program} pull {reference})"
        )
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


def image_volumes(runtime: Runtime, image: str) -> list[str]:
    """The paths an image declares as VOLUMEs (each would become a volume on the host's disk, uncapped)."""
    result = runtime.call("image", "inspect", "--format", "{{json .Config.Volumes}}", image)
    if result.returncode != 0:
        raise ContainerError(f"{runtime.program} image inspect {image} exited with status {result.returncode}: {result.stderr.strip()[-500:]}")
    try:
        volumes = json.loads(result.stdout or "null")
    except ValueError as exc:
        raise ContainerError(f"{runtime.program} image inspect {image}: unreadable volumes {result.stdout[:200]!r}") from exc
    return sorted(str(path) for path in volumes or {})


@contextlib.contextmanager
def capped_folder(folder: Path, max_bytes: int, max_files: int) -> Iterator[bool]:
    """``folder`` as a file system of its own while inside: a tmpfs of ``max_bytes`` and ``max_files`` entries, so what a
    container writes there is bounded even when it unlinks a file it keeps open (the polled cap never sees that one).
    Mounting needs root; elsewhere ``folder`` stays a plain folder (yields False) and only the polled cap applies."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={max(max_bytes, 1 << 16)},nr_inodes={max_files + 16},mode=0755", "tmpfs", str(folder)],
            capture_output=True,
            check=False,
            timeout=60,
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False, timeout=60)


def run_argv(
    runtime: Runtime, image: str, spec: ContainerSpec, inputs: Path, outputs: Path, name: str, device: str = "cpu", volumes: Sequence[str] = ()
) -> list[str]:
    """The ``run`` command line of one isolated call (see the module's docstring for what each flag guards). ``volumes``:
    the image's VOLUMEs, each an in-memory file system of at most ``max_output_bytes`` instead of a volume on the host's disk."""
    variables = [arg for key, value in sorted(spec.variables.items()) for arg in ("-e", f"{key}={value}")]
    return runtime.argv(
        "run",
        "--rm",
        "--name",
        name,
        "--network",
        "none",
        "--read-only",
        *(arg for path in ("/tmp", *(v for v in volumes if v != "/tmp")) for arg in ("--tmpfs", f"{path}:size={spec.max_output_bytes}")),
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
        "--memory",
        spec.memory,
        "--cpus",
        str(spec.cpus),
        "--pids-limit",
        str(spec.pids_limit),
        "--shm-size",
        spec.shm_size,
        *(("--user", spec.user) if spec.user is not None else ()),
        *gpu_flags(runtime, device),
        "-v",
        f"{Path(inputs).resolve()}:{spec.inputs_mount}:ro",
        "-v",
        f"{Path(outputs).resolve()}:{spec.outputs_mount}:rw",
        *(arg for host, inside in spec.mounts for arg in ("-v", f"{Path(host).resolve()}:{inside}:ro")),
        *variables,
        *runtime.run_flags,
        image,
        *spec.command,
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


def _extra_problem(outputs: Path, expected: Sequence[str], mount: str) -> str | None:
    """Why ``outputs`` holds entries besides the ``expected`` ones (named, at most five), or None."""
    extra = sorted(entry.name for entry in os.scandir(outputs) if entry.name not in expected)
    if not extra:
        return None
    shown = ", ".join(repr(name[:100]) for name in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    return f"wrote {shown} in {mount} besides {', '.join(expected)}; the step's outputs are refused"


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
    exclusive: bool = False,
    device: str = "cpu",
    name_prefix: str = "segbench",
) -> ContainerRun:
    """Run ``image`` once on the files in ``inputs``; ``outputs`` (empty, created if needed) gets what it writes.

    ``expected``: names of files the call must leave in ``outputs``; ``exclusive``: and nothing else (a stray file fails the
    call, with its name in the reason, and the next call still gets an empty folder). On any failure ``outputs`` is left
    empty and ``reason`` says what went wrong; the container never outlives the call (on a time limit
    or an interrupt it is killed and removed before this returns or raises).
    """
    outputs = Path(outputs)
    outputs.mkdir(parents=True, exist_ok=True)
    if any(outputs.iterdir()):
        raise ContainerError(f"outputs folder {outputs} is not empty; a container writes into an empty folder")
    _writable_by(outputs, spec.user)
    name = f"{name_prefix}-{uuid.uuid4().hex[:12]}"
    argv = run_argv(runtime, image, spec, inputs, outputs, name, device, image_volumes(runtime, image))
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=runtime.environ())
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
    reason: str | None
    if status is None:
        what = capped or f"stopped at the time limit of {timeout_s:.1f} s"
        reason = f"{what}; container {name} killed and removed"
    elif status != 0:
        reason = f"exited with status {status}: {log.strip().splitlines()[-1] if log.strip() else 'no output'}"
        if spec.user is not None and any(word in log for word in ("Permission denied", "Operation not permitted")):
            reason += f" (it ran as user {spec.user}, not root; an image that needs root runs only if the organiser allows it)"
    else:
        capped = over_cap(outputs, spec.max_output_bytes, spec.max_output_files)
        reason = (
            capped or _expected_problem(outputs, expected, spec.outputs_mount) or (_extra_problem(outputs, expected, spec.outputs_mount) if exclusive else None)
        )
    if reason is not None:
        _empty(outputs)
    return ContainerRun(name, seconds, status, reason, log)
