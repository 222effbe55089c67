"""Wall time and peak memory of the real model run here (pyliverlesionseg's whole-liver CNN, PyTorch port, CPU) on the
bundle's 3 mm CT, and whether its reruns write the same bytes (issue #67: about 80 s and 5 GB on 2 cores for a first port).

Runs the model's entrypoint in its own venv (``envs/pyliverlesionseg``: ``segbench env create pyliverlesionseg``) ``--runs``
times, each in a fresh process into a fresh folder, and takes each process's wall time and peak resident memory from the
kernel (``os.wait4``). Prints every run, whether the masks are byte-identical, the machine's load average before and after
and the committed figures beside today's with their ratio (``results_bench_realmodel.txt``, written by ``--write``).

Usage: python benchmarks/bench_realmodel.py [--runs N] [--write]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results_bench_realmodel.txt"
SCRIPT = ROOT / "src" / "segbench" / "models" / "entrypoints" / "pyliverlesionseg_segment.py"
ENV_PYTHON = ROOT / "envs" / "pyliverlesionseg" / "bin" / "python"
CT = ROOT / "data" / "totalseg_example" / "ct_sm.nii.gz"


def run_once(folder: Path) -> tuple[float, float, str]:
    """One run of the model on the CT: (wall seconds, peak resident GB, sha256 of the mask file)."""
    (folder / "in").mkdir(parents=True)
    (folder / "in" / "ct.nii.gz").symlink_to(CT)
    (folder / "cases.txt").write_text("ct\n", encoding="utf-8")
    argv = [
        str(ENV_PYTHON),
        str(SCRIPT),
        "--input",
        str(folder / "in"),
        "--output",
        str(folder / "out"),
        "--cases",
        str(folder / "cases.txt"),
        "--weights",
        str(ROOT / "models" / "pyliverlesionseg"),
    ]
    start = time.perf_counter()
    process = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited with {process.returncode}")
    digest = hashlib.sha256((folder / "out" / "ct.nii.gz").read_bytes()).hexdigest()
    return wall, usage.ru_maxrss / 2**20, digest


def committed() -> tuple[float, float] | None:
    """The committed median wall time and peak memory (the results file's 'median' line), None without one."""
    if not RESULTS.is_file():
        return None
    match = re.search(r"^median\s+([0-9.]+) s\s+([0-9.]+) GB", RESULTS.read_text(encoding="utf-8"), re.M)
    return (float(match.group(1)), float(match.group(2))) if match else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs, each in a fresh process (default 2: the byte check needs two)")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    if not ENV_PYTHON.exists():
        sys.exit(f"{ENV_PYTHON} is absent: build it with `segbench env create pyliverlesionseg`")
    load_before = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            runs.append(run_once(Path(tmp) / str(i)))
    load_after = os.getloadavg()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    walls = sorted(r[0] for r in runs)
    peaks = sorted(r[1] for r in runs)
    median_wall, median_peak = walls[len(walls) // 2], peaks[len(peaks) // 2]
    lines = [
        f"# python benchmarks/bench_realmodel.py --runs {args.runs}  (commit {commit}, {len(os.sched_getaffinity(0))} cores, "
        f"load average {load_before:.1f} before, {load_after:.1f} after)"
    ]
    lines += [f"run {i + 1}    {wall:6.1f} s  {peak:5.2f} GB  mask sha256 {digest[:16]}" for i, (wall, peak, digest) in enumerate(runs)]
    lines.append(f"median   {median_wall:6.1f} s  {median_peak:5.2f} GB")
    lines.append(f"reruns byte-identical: {'yes' if len({r[2] for r in runs}) == 1 else 'NO'} ({args.runs} runs)")
    lines.append("issue #67's first port: about 80 s and 5 GB on 2 cores")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    before = committed()
    if before:
        print(
            f"committed: {before[0]:.1f} s, {before[1]:.2f} GB; today / committed: {median_wall / before[0]:.2f}x time, {median_peak / before[1]:.2f}x memory"
        )
    if args.write:
        RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
