"""MeshMetrics' own metrics of the masks in .npz files, timed: run by bench_meshmetrics.py in MeshMetrics' venv.

Each file holds ``pred``, ``ref`` (boolean arrays), ``spacing`` and ``tolerance``; one JSON line per
file on stdout: its path, the seconds MeshMetrics took (meshing, distances and all five metrics)
and hd, hd95, assd, masd, nsd. Imports only numpy and MeshMetrics (the venv has nothing else).

    python meshmetrics_worker.py a.npz b.npz ...
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from MeshMetrics import DistanceMetrics


def measure(path: str) -> dict:
    """MeshMetrics' hd, hd95 (its percentile 95), assd, masd and nsd of one file's masks, and their time."""
    with np.load(path) as f:
        pred, ref, spacing, tolerance = f["pred"], f["ref"], tuple(float(s) for s in f["spacing"]), float(f["tolerance"])
    t0 = time.perf_counter()
    dm = DistanceMetrics(verbose=False)
    dm.set_input(ref=ref, pred=pred, spacing=spacing)
    out = {"hd": dm.hd(), "hd95": dm.hd(percentile=95), "assd": dm.assd(), "masd": dm.masd(), "nsd": dm.nsd(tau=tolerance)}
    seconds = time.perf_counter() - t0
    return {"path": path, "seconds": seconds} | {k: float(v) for k, v in out.items()}


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(measure(p)), flush=True)
