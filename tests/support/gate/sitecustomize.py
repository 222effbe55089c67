"""A gate the interruption tests put on PYTHONPATH of the commands they start (tests/support/tests_support.py, ``gate_env``).

A Python process that opens a file matching ``SEGBENCH_TEST_GATE`` (an fnmatch pattern on the absolute path) for
``SEGBENCH_TEST_GATE_ON`` (``write``, the default, or ``read``), after ``SEGBENCH_TEST_GATE_PASS`` earlier such opens
of its own, writes ``started.<pid>`` into ``SEGBENCH_TEST_GATE_DIR`` and waits until the test creates ``release``
there. With ``SEGBENCH_TEST_GATE_ARGV`` set, only a process with that word among its arguments is gated (``track``:
`segbench track`, not the dvc that hashes the same files). So a test holds a real segbench process at a moment it
chooses (mid-write of a score table, while an MLflow run is RUNNING) and kills it there, or holds several until all
are there (a barrier), however fast or busy the machine is. Nothing is replaced: the open then goes on.
The 600 s bound only ends a hang (the process then exits with status 75, never as if it had succeeded).
"""

import fnmatch
import os
import sys
import time

BOUND_S = 600


def _install() -> None:
    pattern = os.environ.get("SEGBENCH_TEST_GATE")
    word = os.environ.get("SEGBENCH_TEST_GATE_ARGV", "")
    if not pattern or (word and word not in sys.argv[1:]):
        return
    folder = os.environ["SEGBENCH_TEST_GATE_DIR"]
    on_write = os.environ.get("SEGBENCH_TEST_GATE_ON", "write") == "write"
    state = {"passes": int(os.environ.get("SEGBENCH_TEST_GATE_PASS", "0")), "inside": False}

    def hook(event: str, args: tuple) -> None:
        if event != "open" or state["inside"] or not isinstance(args[0], str):
            return
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writes != on_write or not fnmatch.fnmatch(os.path.abspath(path), pattern):
            return
        if state["passes"] > 0:
            state["passes"] -= 1
            return
        state["inside"] = True  # the hook's own files are not gated
        with open(os.path.join(folder, f"started.{os.getpid()}"), "w") as marker:
            marker.write(path + "\n")
        release, deadline = os.path.join(folder, "release"), time.monotonic() + BOUND_S
        while not os.path.exists(release):
            if time.monotonic() > deadline:
                os._exit(75)
            time.sleep(0.05)
        state["inside"] = False

    sys.addaudithook(hook)


_install()
