"""The test suite (or a pytest selection) beside an artificial CPU load: proof that no test depends on timing.

    python benchmarks/suite_under_load.py                          # the whole suite, 2 busy processes beside it
    python benchmarks/suite_under_load.py tests/pipeline/test_slurm.py -k interrupting

Starts ``--busy`` processes that spin on the CPU (each one stops itself after ``--limit-min`` minutes, even if this
script is killed), runs ``python -m pytest -q --durations=25`` with the given arguments (``tests`` by default) in
its own process group, printing its output as it comes, stops the load, and prints the pytest summary line and the
wall time. The pytest run is bounded by the same limit (then killed: exit status 124). Exits with pytest's status.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

#: one busy process: spin until its deadline (so the load ends even if this script dies without cleaning up)
SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def _stop(process: subprocess.Popen) -> None:
    """SIGKILL the process group ``process`` leads (each was started in its own session), then reap it."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _echo(stream: IO[str], lines: list[str]) -> None:
    """Print the test run's output as it comes, and keep it."""
    for line in stream:
        print(line, end="", flush=True)
        lines.append(line)


def _summary(output: str) -> str:
    """pytest's last line (``N passed, M failed in T s``), or a note that it printed none."""
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(pytest printed nothing)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the tests (default 2)")
    parser.add_argument("--limit-min", type=float, default=120.0, help="bound on the run and on the load, minutes (default 120)")
    args, pytest_args = parser.parse_known_args(argv)
    limit_s = args.limit_min * 60
    command = [sys.executable, "-m", "pytest", "-q", "--durations=25", *(pytest_args or ["tests"])]
    load = [subprocess.Popen([sys.executable, "-c", SPIN, str(limit_s)], start_new_session=True) for _ in range(args.busy)]
    start = time.monotonic()
    status, output = 124, ""
    try:
        print(f"load: {args.busy} busy process(es) {[p.pid for p in load]}; running: {' '.join(command)}", flush=True)
        tests = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines: list[str] = []
        pump = threading.Thread(target=_echo, args=(tests.stdout, lines), daemon=True)  # progress as it comes
        pump.start()
        try:
            status = tests.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            lines.append(f"killed after the {args.limit_min:g} min limit\n")
        finally:
            _stop(tests)
            pump.join(timeout=60)
        output = "".join(lines)
    finally:
        load_1min = os.getloadavg()[0]
        for process in load:
            _stop(process)
    wall = time.monotonic() - start
    print(f"summary: {_summary(output)}")
    print(f"wall time: {wall:.0f} s ({wall / 60:.1f} min) with {args.busy} busy process(es); load average at the end {load_1min:.1f}")
    return status


if __name__ == "__main__":
    sys.exit(main())
