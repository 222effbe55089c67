"""Real services the scaling tests start themselves, on loopback, in a temp dir, and tear down after.

Each starter is a context manager that owns its process tree: nothing is installed system-wide
beyond what the daemon cannot run without (said where it happens).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(ready: Callable[[], bool], what: str, timeout: float, log: Path | None = None) -> None:
    """Poll ``ready`` until true; fail naming ``what`` (and the daemon's log) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s\n{tail}")
        time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def _daemon(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """Run a foreground daemon with its output in ``log``; terminate (then kill) it on exit."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class SshServer:
    """A running sshd: where it listens, who may log in, the client's key and a known_hosts line for it."""

    host: str
    port: int
    user: str
    key: Path
    known_hosts_line: str

    def url(self, path: Path) -> str:
        """The ssh:// URL of an absolute path on this server (the form `dvc remote add` takes)."""
        return f"ssh://{self.user}@{self.host}:{self.port}{path}"


@contextlib.contextmanager
def sshd(workdir: Path) -> Iterator[SshServer]:
    """OpenSSH's sshd on 127.0.0.1 from ``workdir``: its own host key and config, SFTP, public-key login only,
    for the current user with a key generated here (no password is ever accepted)."""
    workdir.mkdir(parents=True, exist_ok=True)
    host_key, user_key = workdir / "host_ed25519", workdir / "user_ed25519"
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (workdir / "authorized_keys").write_text(user_key.with_suffix(".pub").read_text())
    user, port = getpass.getuser(), free_port()
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress 127.0.0.1:{port}",
                f"HostKey {host_key}",
                f"PidFile {workdir / 'sshd.pid'}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                f"AllowUsers {user}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",  # key only, when the tests run as root (CI containers)
                "UsePAM no",
                "StrictModes no",  # the key files live in a temp dir, not in a home directory
                "Subsystem sftp internal-sftp",
                "LogLevel VERBOSE",
            ]
        )
        + "\n"
    )
    if os.geteuid() == 0:
        # sshd started as root insists on its privilege-separation directory (the package's service creates
        # it at boot); the only change outside workdir, and an empty directory the package owns anyway
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = workdir / "sshd.log"
    with _daemon(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], log) as proc:
        wait_until(lambda: proc.poll() is None and _listening(port), "sshd", 20, log)
        host_pub = host_key.with_suffix(".pub").read_text().split()
        yield SshServer("127.0.0.1", port, user, user_key, f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}")

