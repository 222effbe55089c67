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
    """A TCP port on 127.0.0.1 that is free now (the service binds it right after)."""
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


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node Slurm cluster: its slurm.conf (give it to clients as ``SLURM_CONF``) and partition."""

    conf: Path
    partition: str

    def env(self) -> dict[str, str]:
        """The environment of a Slurm client (sbatch, squeue) talking to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}


def _node_idle(conf: Path) -> bool:
    result = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env={**os.environ, "SLURM_CONF": str(conf)}, capture_output=True, text=True, check=False)
    return result.returncode == 0 and result.stdout.strip() == "idle"


@contextlib.contextmanager
def slurm_cluster(workdir: Path, cpus: int = 2) -> Iterator[SlurmCluster]:
    """slurmctld and slurmd (Debian's slurm-wlm) for one node, ``localhost`` with ``cpus`` CPUs, one partition,
    all state, spool, logs and pid files in ``workdir``, controller and node ports free on loopback.

    This Slurm (22.05) still ships ``auth/none`` and ``cred/none``, so no munge daemon or key is needed on one
    machine; a real cluster uses ``auth/munge`` with one key on every node (README, "Cluster inference").
    Jobs run as the current user, processes tracked by ``/proc`` (no cgroups, nothing system-wide).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("state", "spool"):
        (workdir / name).mkdir(exist_ok=True)
    user = getpass.getuser()
    ctld_port, slurmd_port = free_port(), free_port()
    conf = workdir / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=segbench-test",
                "SlurmctldHost=localhost(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                f"SlurmUser={user}",
                f"SlurmdUser={user}",
                "AuthType=auth/none",
                "CredType=cred/none",
                f"StateSaveLocation={workdir / 'state'}",
                f"SlurmdSpoolDir={workdir / 'spool'}",
                f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
                f"SlurmdPidFile={workdir / 'slurmd.pid'}",
                f"SlurmctldLogFile={workdir / 'slurmctld.log'}",
                f"SlurmdLogFile={workdir / 'slurmd.log'}",
                f"PlugStackConfig={workdir / 'plugstack.conf'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "MpiDefault=none",
                "ReturnToService=2",
                "SchedulerType=sched/backfill",
                "SlurmctldTimeout=30",
                "SlurmdTimeout=30",
                "MinJobAge=300",
                f"NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} State=UNKNOWN",
                "PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    (workdir / "plugstack.conf").write_text("")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    with (
        _daemon(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(conf)], workdir / "slurmctld.out", env) as ctld,
        _daemon(["/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", str(conf)], workdir / "slurmd.out", env) as slurmd,
    ):
        wait_until(lambda: ctld.poll() is None and slurmd.poll() is None and _node_idle(conf), "slurm node localhost idle", 60, workdir / "slurmctld.log")
        yield SlurmCluster(conf, "test")
