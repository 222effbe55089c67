"""Real services the tests start on loopback in a temp dir and tear down: PostgreSQL and an MLflow tracking server on it.

No mocks: a PostgreSQL 15 cluster from Debian's `postgresql` (``initdb`` as an unprivileged user) and MLflow's own
``mlflow server`` with proxied artifact storage, as a team would run them. The database password exists only in
the server's environment (``PGPASSWORD``); clients know nothing but ``http://127.0.0.1:<port>``.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path(os.environ.get("SEGBENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: the unprivileged account PostgreSQL runs as when the tests run as root (initdb refuses root)
PG_USER = "postgres"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the service binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        _run(_as_postgres_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", pg.user, f"--pwfile={pwfile}", "--auth=scram-sha-256",
                                "-E", "UTF8", "--no-sync", "--no-instructions"]))
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


def _wait_healthy(uri: str, process: subprocess.Popen, log: Path, timeout: float = 120) -> None:
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
def mlflow_server(pg: Postgres, workdir: Path, workers: int = 2) -> Iterator[TrackingServer]:
    """``mlflow server`` on ``pg`` with proxied artifacts under ``workdir/artifacts`` on a free loopback port; stopped after.

    The password reaches the server only through its environment (libpq's ``PGPASSWORD``).
    """
    artifacts, log = workdir / "artifacts", workdir / "mlflow-server.log"
    artifacts.mkdir(parents=True, exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "SEGBENCH_TRACKING_URI"}
    env["PGPASSWORD"] = pg.password
    args = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", pg.uri, "--artifacts-destination", str(artifacts),
            "--serve-artifacts", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
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
    with postgres() as pg, mlflow_server(pg, workdir, workers) as server:
        yield server
