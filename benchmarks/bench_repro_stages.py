"""Wall time of the default `dvc repro` on a fresh clone, stage by stage (issue #44: the default run within 5 minutes).

Clones this repository (its committed HEAD) beside `../shared`, pulls the data bundle, runs `dvc repro` with the clone's
own source and an empty numba cache (as on a fresh machine: the first score stage compiles) and stamps every line DVC
prints: a stage's time runs from its "Running stage" line to the next stage's (or the end). Prints each stage's seconds,
the total, the machine's load average before and after, and the committed total beside today's with their ratio
(`results_bench_repro_stages.txt`, written by `--write`).

Usage: python benchmarks/bench_repro_stages.py [--keep DIR] [--write]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results_bench_repro_stages.txt"
STAGE = re.compile(r"Running stage '([^']+)'")


def stage_seconds(lines: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds per stage from time-stamped output lines: each "Running stage" line to the next one, the last to ``end``."""
    starts = [(t, m.group(1)) for t, line in lines if (m := STAGE.search(line))]
    bounds = [t for t, _ in starts[1:]] + [end]
    return {name: stop - start for (start, name), stop in zip(starts, bounds)}


def committed_total() -> float | None:
    """The total of the committed results file (its 'total' line), None without one."""
    if not RESULTS.is_file():
        return None
    match = re.search(r"^total\s+([0-9.]+) s", RESULTS.read_text(encoding="utf-8"), re.M)
    return float(match.group(1)) if match else None


def run_repro(project: Path) -> tuple[dict[str, float], float]:
    """`dvc repro` in ``project``, its output stamped line by line; (seconds per stage, total seconds).

    As on a fresh machine: the clone's own source (``src`` first on PYTHONPATH, ahead of whichever checkout the
    editable install points to) and an empty numba cache in the clone, so the first stage that compiles pays it."""
    start = time.perf_counter()
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(project / "src"), os.environ.get("PYTHONPATH")])),
        "NUMBA_CACHE_DIR": str(project / ".numba-cache"),
    }
    process = subprocess.Popen(["dvc", "repro"], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, env=env)
    assert process.stdout is not None
    lines = [(time.perf_counter() - start, line) for line in process.stdout]
    if process.wait() != 0:
        sys.exit("dvc repro failed:\n" + "".join(line for _, line in lines[-40:]))
    total = time.perf_counter() - start
    return stage_seconds(lines, total), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="clone into this new folder and keep it (default: a temporary one)")
    parser.add_argument("--write", action="store_true", help=f"write the figures to {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="segbench-repro-", dir=ROOT.parent))
    project = base / "proj" if args.keep is None else base
    shared = project.parent / "shared"
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(project)], check=True)
        if not shared.exists():
            shared.symlink_to((ROOT.parent / "shared").resolve())
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=project, check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["dvc", "pull", "-q", "data.dvc"], cwd=project, check=True)
        load_before = os.getloadavg()[0]
        seconds, total = run_repro(project)
        load_after = os.getloadavg()[0]
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    lines = [
        f"# python benchmarks/bench_repro_stages.py  (commit {head}, {os.cpu_count()} cores, load average {load_before:.1f} before, {load_after:.1f} after)"
    ]
    lines += [f"{name:<48} {s:7.1f} s" for name, s in sorted(seconds.items(), key=lambda item: -item[1])]
    committed = committed_total()
    ratio = f"; committed {committed:.0f} s, today / committed {total / committed:.2f}" if committed else ""
    lines.append(f"total {total:.1f} s (target <= 300 s on 2 cores, quiet){ratio}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.write:
        RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
