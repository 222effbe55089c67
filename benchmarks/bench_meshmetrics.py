"""The meshmetrics profile against MeshMetrics itself on whole real KiTS23 cases: agreement and time per region.

MeshMetrics is not on PyPI: its published source (a ``fetch`` of its repository, given as a git
directory) is exported and pip-installed, with pinned numpy, vtk, SimpleITK and SimpleITKUtilities
from PyPI, into its own venv (``--venv``, default ``envs/meshmetrics``, gitignored; made if absent),
never into segbench's environment. ``meshmetrics_worker.py`` runs there, in one subprocess.

For each case: its reference label map and a prediction from segbench's simulated error components
(``segbench.models.simulated``: boundary moved out or in, a shift, a missed lesion, a spurious blob;
one mix per case, seeded by the case id); every KiTS region's masks cropped to their box as the
engine does. The profile (``surfacenets_surface_distances`` + ``deepmind_metrics``, in this
process) and MeshMetrics (``DistanceMetrics``: hd, hd(95), assd, masd, nsd(tau)) measure the same
masks, each on one thread, timed around the measurement only (not file I/O).

Tolerance: |difference| <= 1e-4 mm on hd, hd95, assd and masd, <= 1e-4 on nsd. VTK keeps mesh
points in float32: a coordinate of a few hundred mm carries a rounding of ~1e-5 mm, so a distance
from VTK differs from the exact one by that much, and an area-weighted mean inherits it. NSD counts
distances <= tau: a distance that equals tau exactly (a grid distance coinciding with the
tolerance) may fall either side in float32; KiTS' tolerances are not such distances.

    python benchmarks/bench_meshmetrics.py --meshmetrics-git /path/to/MeshMetrics.git > benchmarks/results_bench_meshmetrics.txt
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import nibabel as nib  # noqa: E402
import numpy as np  # noqa: E402

from segbench.models.simulated import add_blob, case_rng, displace_boundary, miss_largest_lesion, shift  # noqa: E402
from segbench.scoring.labelmaps import nonzero_box  # noqa: E402
from segbench.scoring.profiles import get_profile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REGIONS = {"kidney_and_mass": ((1, 2, 3), 1.0331), "mass": ((2, 3), 1.1329), "tumor": ((2,), 1.1498)}
METRICS = ("hd", "hd95", "assd", "masd", "nsd")
TOLERANCE = dict.fromkeys(METRICS, 1e-4)
#: What MeshMetrics' venv gets from PyPI besides MeshMetrics' own source (its setup.py pins none).
PINS = ("numpy==2.4.6", "vtk==9.7.1", "SimpleITK==2.5.7", "SimpleITKUtilities==0.3.0")
#: 5 mm, 3 mm, 2.5 mm, 2 mm, 1 mm and 0.5 mm slice cases.
CASES = (
    "case_00011",
    "case_00012",
    "case_00017",
    "case_00020",
    "case_00021",
    "case_00024",
    "case_00028",
    "case_00006",
    "case_00007",
    "case_00008",
    "case_00015",
    "case_00016",
    "case_00018",
    "case_00025",
    "case_00040",
    "case_00084",
    "case_00002",
    "case_00003",
    "case_00014",
    "case_00000",
    "case_00001",
    "case_00005",
    "case_00022",
)


def meshmetrics_python(venv: Path, git_dir: Path) -> tuple[Path, str]:
    """The venv's python with MeshMetrics installed from ``git_dir``'s HEAD (made if absent), and that commit."""
    commit = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    python = venv / "bin" / "python"
    marker = venv / "meshmetrics-commit"
    if python.exists() and marker.exists() and marker.read_text().strip() == commit:
        return python, commit
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "HEAD"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS, tmp], check=True)
    marker.write_text(commit + "\n")
    return python, commit


def prediction(ref: np.ndarray, spacing: tuple[float, ...], case: str, k: int) -> tuple[str, np.ndarray]:
    """The ``k % 4``-th mix of simulated errors on this case, seeded by its id."""
    rng = case_rng(0, case)
    mixes = (
        ("out1mm+shift2mm", lambda: shift(displace_boundary(ref, spacing, 1.0), spacing, 2.0, rng)),
        ("in1.5mm", lambda: displace_boundary(ref, spacing, -1.5)),
        ("out0.5mm+blob8mm", lambda: add_blob(displace_boundary(ref, spacing, 0.5), spacing, 8.0, rng)),
        ("miss_lesion+shift1.5mm", lambda: shift(miss_largest_lesion(ref), spacing, 1.5, rng)),
    )
    name, make = mixes[k % len(mixes)]
    return name, make()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--meshmetrics-git", type=Path, required=True, help="git directory of a fetch of MeshMetrics' repository")
    ap.add_argument("--venv", type=Path, default=ROOT / "envs" / "meshmetrics")
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    args = ap.parse_args(argv)
    python, commit = meshmetrics_python(args.venv, args.meshmetrics_git)
    profile = get_profile("meshmetrics")
    cube = np.pad(np.ones((2, 2, 2), bool), 2)
    profile.metrics(profile.measure(cube, cube, (1.0, 1.0, 1.0)), 1.0)  # warm up
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, case in enumerate(args.cases):
            img = nib.load(ROOT / "data" / "kits23" / "labels" / f"{case}.nii.gz")
            ref = np.asanyarray(img.dataobj)
            spacing = tuple(float(z) for z in img.header.get_zooms())
            mix, pred = prediction(ref, spacing, case, k)
            for region, (labels, tolerance) in REGIONS.items():
                g, p = np.isin(ref, labels), np.isin(pred, labels)
                if not (g.any() and p.any()):
                    continue
                box = nonzero_box(g, p)
                g, p = g[box], p[box]
                t0 = time.perf_counter()
                ours = profile.metrics(profile.measure(p, g, spacing), tolerance)
                seconds = time.perf_counter() - t0
                path = Path(tmp) / f"{case}_{region}.npz"
                np.savez(path, pred=p, ref=g, spacing=spacing, tolerance=tolerance)
                rows.append({"case": case, "spacing": spacing, "mix": mix, "region": region, "path": str(path), "ours": ours, "seconds": seconds})
        env = os.environ | {"OMP_NUM_THREADS": "1", "VTK_SMP_MAX_THREADS": "1", "VTK_SMP_BACKEND_IN_USE": "Sequential"}
        done = subprocess.run(
            [str(python), str(ROOT / "benchmarks" / "meshmetrics_worker.py"), *(r["path"] for r in rows)], check=True, capture_output=True, text=True, env=env
        ).stdout.splitlines()
    theirs = {d["path"]: d for d in map(json.loads, done)}
    worst = dict.fromkeys(METRICS, 0.0)
    t_ours = t_theirs = 0.0
    print(f"# MeshMetrics {commit} (venv: {' '.join(PINS)}); one thread each; tolerance {TOLERANCE}")
    print("case spacing prediction region ours_s meshmetrics_s speedup " + " ".join(f"diff_{m}" for m in METRICS))
    for r in rows:
        th = theirs[r["path"]]
        diffs = {m: abs(r["ours"][m] - th[m]) for m in METRICS}
        worst = {m: max(worst[m], diffs[m]) for m in METRICS}
        t_ours += r["seconds"]
        t_theirs += th["seconds"]
        print(
            f"{r['case']} {'x'.join(f'{s:.3g}' for s in r['spacing'])} {r['mix']} {r['region']} {r['seconds']:.3f} {th['seconds']:.3f} "
            f"{th['seconds'] / r['seconds']:.1f}x " + " ".join(f"{diffs[m]:.1e}" for m in METRICS)
        )
    within = all(worst[m] <= TOLERANCE[m] for m in METRICS)
    n = len({r["case"] for r in rows})
    print(
        f"{n} cases, {len(rows)} regions: profile {t_ours / n:.3f} s/case, MeshMetrics {t_theirs / n:.3f} s/case, {t_theirs / t_ours:.1f}x; "
        f"max abs diff {', '.join(f'{m} {v:.1e}' for m, v in worst.items())}; {'within' if within else 'OUTSIDE'} tolerance"
    )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
