"""Area-weighted surface distances between two boolean masks (segauge's definition)."""

from __future__ import annotations

import numpy as np
from segauge.metrics.distance import SurfaceDistances, compute_surface_distances


def surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: tuple[float, float, float]) -> SurfaceDistances:
    """Directed area-weighted distances pred->ref and ref->pred (both masks non-empty)."""
    return compute_surface_distances(pred, ref, spacing)
