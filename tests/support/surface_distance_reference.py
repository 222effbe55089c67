"""DeepMind's surface-distance package on one pair of masks: the reference the deepmind profile must equal
(tests/scoring/test_scoring_profiles.py) and is timed beside (benchmarks/bench_profiles.py)."""

from __future__ import annotations

import numpy as np
import surface_distance as sd


def package_metrics(pred: np.ndarray, ref: np.ndarray, spacing: tuple[float, ...], tolerance: float) -> dict[str, float]:
    """The metrics by surface-distance's functions (ASSD: its two directions' sums pooled)."""
    s = sd.compute_surface_distances(ref, pred, spacing)
    mean_gp, mean_pg = sd.compute_average_surface_distance(s)
    pooled = np.sum(s["distances_gt_to_pred"] * s["surfel_areas_gt"]) + np.sum(s["distances_pred_to_gt"] * s["surfel_areas_pred"])
    return {
        "hd": sd.compute_robust_hausdorff(s, 100),
        "hd95": sd.compute_robust_hausdorff(s, 95),
        "assd": pooled / (np.sum(s["surfel_areas_gt"]) + np.sum(s["surfel_areas_pred"])),
        "masd": 0.5 * (mean_gp + mean_pg),
        "nsd": sd.compute_surface_dice_at_tolerance(s, tolerance),
    }
