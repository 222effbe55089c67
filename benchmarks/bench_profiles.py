"""The deepmind profile against DeepMind's surface-distance on whole real KiTS23 cases: agreement and time per case.

For each case: the reference label map, a prediction with its boundary moved 1 mm outward
(``segbench.models.simulated.displace_boundary``), every KiTS region's masks cropped to their box as
the engine does; the profile
(``deepmind_surface_distances`` + ``deepmind_metrics``) and the package (``compute_surface_distances``
and its metric functions) on the same masks, timed on one thread each, best of ``--repeat``.

    python benchmarks/bench_profiles.py --cases case_00030 case_00040 case_00015 > benchmarks/results_bench_profiles.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the package's metrics, which the tests check the profile against

import nibabel as nib  # noqa: E402
import numpy as np  # noqa: E402

from segbench.models.simulated import displace_boundary  # noqa: E402
from segbench.scoring.labelmaps import nonzero_box  # noqa: E402
from segbench.scoring.profiles import deepmind_metrics, deepmind_surface_distances  # noqa: E402
from surface_distance_reference import package_metrics  # noqa: E402

REGIONS = {"kidney_and_mass": ((1, 2, 3), 1.0331), "mass": ((2, 3), 1.1329), "tumor": ((2,), 1.1498)}
METRICS = ("hd", "hd95", "assd", "masd", "nsd")


def best_of(repeat: int, fn, *args) -> tuple[float, dict[str, float]]:
    times, out = [], {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", required=True)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    deepmind_metrics(deepmind_surface_distances(*(np.pad(np.ones((2, 2, 2), bool), 2),) * 2, (1.0, 1.0, 1.0)), 1.0)  # compile
    worst = dict.fromkeys(METRICS, 0.0)
    totals = [0.0, 0.0]
    print("case spacing region surfels(ref) profile_s package_s speedup " + " ".join(f"diff_{m}" for m in METRICS))
    for case in args.cases:
        img = nib.load(ROOT / "data" / "kits23" / "labels" / f"{case}.nii.gz")
        ref = np.asanyarray(img.dataobj)
        spacing = tuple(float(z) for z in img.header.get_zooms())
        pred = displace_boundary(ref, spacing, 1.0)
        for region, (labels, tolerance) in REGIONS.items():
            g, p = np.isin(ref, labels), np.isin(pred, labels)
            if not (g.any() and p.any()):
                continue
            box = nonzero_box(g, p)  # the engine measures each region on its own box; the package gets the same arrays
            g, p = g[box], p[box]
            t_ours, ours = best_of(args.repeat, lambda p=p, g=g, t=tolerance: deepmind_metrics(deepmind_surface_distances(p, g, spacing), t))
            t_pkg, theirs = best_of(args.repeat, package_metrics, p, g, spacing, tolerance)
            diffs = {m: abs(ours[m] - theirs[m]) for m in METRICS}
            worst = {m: max(worst[m], diffs[m]) for m in METRICS}
            totals[0] += t_ours
            totals[1] += t_pkg
            n_surfels = len(deepmind_surface_distances(g, g, spacing).d_gp)
            print(
                f"{case} {'x'.join(f'{s:.3g}' for s in spacing)} {region} {n_surfels} {t_ours:.3f} {t_pkg:.3f} {t_pkg / t_ours:.1f}x "
                + " ".join(f"{diffs[m]:.1e}" for m in METRICS)
            )
    n = len(args.cases)
    print(
        f"per case (all regions): profile {totals[0] / n:.3f} s, package {totals[1] / n:.3f} s, {totals[1] / totals[0]:.1f}x; "
        f"max abs diff {', '.join(f'{m} {v:.1e}' for m, v in worst.items())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
