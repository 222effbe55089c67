"""Real services the tests start themselves on loopback, in a temp dir, and tear down after: PostgreSQL with an
MLflow tracking server on it (or an MLflow server on a project's own store), sshd, and a one-node Slurm cluster.

No mocks: Debian's `postgresql` (``initdb`` as an unprivileged user), MLflow's own ``mlflow server`` with proxied
artifact storage, OpenSSH's sshd and Slurm's slurmctld and slurmd, as a team would run them. Each starter is a
context manager that owns its process tree; nothing is installed system-wide beyond what a daemon cannot run
without (said where it happens). The database password exists only in the MLflow server's environment
(``PGPASSWORD``); clients know nothing but ``http://127.0.0.1:<port>``.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path(os.environ.get("SEGBENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: the unprivileged account PostgreSQL runs as when the tests run as root (initdb refuses root)
PG_USER = "postgres"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the service binds it right after)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that are free now: all held open while chosen, since a port just
    closed may be handed out again (two daemons once got the same one)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


@dataclass(frozen=True)
class Postgres:
    """A running cluster: where it listens, its superuser, the password (for the server's environment only)."""

    port: int
    user: str
    password: str
    database: str

    @property
    def uri(self) -> str:
        """The SQLAlchemy URI without the password: libpq takes it from ``PGPASSWORD``."""
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"


def _as_postgres_user(args: list[str]) -> list[str]:
    """``args`` run as PG_USER when we are root (PostgreSQL refuses to run as root), else as ourselves."""
    if os.geteuid() != 0:
        return args
    pwd.getpwnam(PG_USER)  # KeyError names the missing account
    return ["runuser", "-u", PG_USER, "--", *args]


def _run(args: list[str], env: dict[str, str] | None = None) -> None:
    result = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


@contextlib.contextmanager
def postgres(database: str = "mlflow") -> Iterator[Postgres]:
    """A fresh PostgreSQL cluster on 127.0.0.1 (TCP only, password auth) with ``database`` created; stopped and removed after."""
    if not (PG_BIN / "initdb").exists():
        raise FileNotFoundError(f"{PG_BIN}/initdb missing: install Debian's `postgresql` (or set SEGBENCH_PG_BIN)")
    home = Path(tempfile.mkdtemp(prefix="segbench-pg-"))  # not under pytest's tmp_path: root-only, PG_USER must enter it
    if os.geteuid() == 0:
        account = pwd.getpwnam(PG_USER)
        os.chown(home, account.pw_uid, account.pw_gid)
    data, pwfile = home / "data", home / "pwfile"
    pg = Postgres(port=free_port(), user="segbench", password=secrets.token_hex(16), database=database)
    pwfile.write_text(pg.password + "\n", encoding="utf-8")
    if os.geteuid() == 0:
        os.chown(pwfile, account.pw_uid, account.pw_gid)
    pwfile.chmod(0o600)
    started = False
    try:
        _run(
            _as_postgres_user(
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    pg.user,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
        )
        pwfile.unlink()
        options = f"-c listen_addresses=127.0.0.1 -p {pg.port} -c unix_socket_directories='' -c fsync=off"
        _run(_as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(home / "postgres.log"), "-o", options, "-w", "start"]))
        started = True
        _run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, database], env={**os.environ, "PGPASSWORD": pg.password})
        yield pg
    finally:
        if started:
            _run(_as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]))
        shutil.rmtree(home, ignore_errors=True)


@dataclass(frozen=True)
class TrackingServer:
    """A running MLflow server: the only thing clients are told is its URI."""

    uri: str
    artifacts: Path
    log: Path


def _wait_healthy(uri: str, process: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {process.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {uri} not healthy after {timeout:.0f} s:\n{log.read_text(errors='replace')[-4000:]}")


@contextlib.contextmanager
def mlflow_server(backend_uri: str, workdir: Path, workers: int = 2, secrets_env: dict[str, str] | None = None) -> Iterator[TrackingServer]:
    """``mlflow server`` on the store ``backend_uri`` (PostgreSQL, or a project's SQLite store) with proxied artifacts
    under ``workdir/artifacts`` (for experiments created through it) on a free loopback port; stopped after.

    ``secrets_env``: what only the server may know, in its environment (libpq's ``PGPASSWORD``). MLflow's job runner
    is off: no test submits jobs, and its workers would be more processes on a busy machine.
    """
    artifacts, log = workdir / "artifacts", workdir / "mlflow-server.log"
    artifacts.mkdir(parents=True, exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "SEGBENCH_TRACKING_URI"}
    env.update(secrets_env or {}, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    args = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_uri,
        "--artifacts-destination",
        str(artifacts),
        "--serve-artifacts",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_healthy(uri, process, log)
        yield TrackingServer(uri=uri, artifacts=artifacts, log=log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # the server and the workers it started, in their own session
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def tracking_server(workdir: Path, workers: int = 2) -> Iterator[TrackingServer]:
    """PostgreSQL and an MLflow server on it, both on loopback; both stopped after."""
    with postgres() as pg, mlflow_server(pg.uri, workdir, workers, {"PGPASSWORD": pg.password}) as server:
        yield server


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
        wait_until(lambda: proc.poll() is None and _listening(port), "sshd", 120, log)
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
    machine; a real cluster uses ``auth/munge`` with one key on every node (docs/guide.md, "Cluster inference").
    Jobs run as the current user, processes tracked by ``/proc`` (no cgroups, nothing system-wide).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("state", "spool"):
        (workdir / name).mkdir(exist_ok=True)
    user = getpass.getuser()
    ctld_port, slurmd_port = free_ports(2)
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
        wait_until(lambda: ctld.poll() is None and slurmd.poll() is None and _node_idle(conf), "slurm node localhost idle", 300, workdir / "slurmctld.log")
        yield SlurmCluster(conf, "test")
