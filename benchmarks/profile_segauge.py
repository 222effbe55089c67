"""Where segauge 0.1.0's surface_metrics spends its time, stage by stage, on real KiTS masks.

Usage: PYTHONPATH=src python benchmarks/profile_segauge.py data/kits23/labels/case_00030.nii.gz [...]
Prediction = the kidney_and_mass region dilated by one voxel (a typical small error).
"""

from __future__ import annotations

import sys
import time

import nibabel as nib
import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree
from segauge.metrics.distance import _directed, _extract_mesh, _surface_samples


def profile(path: str) -> None:
    img = nib.load(path)
    labels = np.asanyarray(img.dataobj)
    spacing = tuple(float(z) for z in img.header.get_zooms())
    ref = labels > 0
    pred = ndimage.binary_dilation(ref)
    box = ndimage.find_objects(pred.astype(np.uint8))[0]
    ref, pred = ref[box], pred[box]
    t = {}
    t0 = time.perf_counter()
    mp, mg = _extract_mesh(pred, spacing), _extract_mesh(ref, spacing)
    t["marching_cubes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sp, sg = mp.subdivide_to_size(min(spacing)), mg.subdivide_to_size(min(spacing))
    t["subdivide"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tp, tg = cKDTree(_surface_samples(sp)), cKDTree(_surface_samples(sg))
    t["kdtree_build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    _directed(sp, tg), _directed(sg, tp)
    t["kdtree_query"] = time.perf_counter() - t0
    total = sum(t.values())
    print(
        f"{path.split('/')[-1]} spacing={tuple(round(s, 3) for s in spacing)} crop={ref.shape} "
        f"faces {len(mg.faces)}->{len(sg.faces)} total {total:.2f}s: " + ", ".join(f"{k} {v:.2f}s ({100 * v / total:.0f}%)" for k, v in t.items())
    )


if __name__ == "__main__":
    for p in sys.argv[1:]:
        profile(p)
