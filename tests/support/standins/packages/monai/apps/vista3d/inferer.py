"""STAND-IN for monai.apps.vista3d.inferer (tests only): point_based_window_inferer's signature and output layout.

Returns (1, 1, *spatial) logits: NaN outside the roi_size windows centred on the points (as the real
inferer leaves voxels no window covers), -1 inside them, then +1 / -1 in a ball of radius 2.5 around
each point with label 1 / 0 (coordinates in the input's array order).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from _standin_log import ball, log_event

TOOL = "monai"


def point_based_window_inferer(
    inputs: Any,
    roi_size: list,
    predictor: Any,
    point_coords: Any,
    point_labels: Any,
    class_vector: Any = None,
    prompt_class: Any = None,
    prev_mask: Any = None,
    point_start: int = 0,
    center_only: bool = True,
    margin: int = 5,
    **kwargs: Any,
) -> Any:
    image = np.asarray(inputs)
    coords, labels = np.asarray(point_coords), np.asarray(point_labels)
    if image.ndim != 5 or coords.shape[0] != 1 or coords.shape[2] != 3 or labels.shape != coords.shape[:2]:
        raise ValueError(f"stand-in: inputs (1, 1, H, W, D), point_coords (1, N, 3), point_labels (1, N); got {image.shape}, {coords.shape}, {labels.shape}")
    log_event(
        TOOL,
        "point_based_window_inferer",
        point_coords=coords[0].tolist(),
        point_labels=labels[0].tolist(),
        roi_size=list(roi_size),
        transpose=kwargs.get("transpose"),
        with_coord=kwargs.get("with_coord"),
        center_only=center_only,
        prev_mask=prev_mask is not None,
        intensity=[float(image.min()), float(image.max())],
    )
    spatial = image.shape[2:]
    logits = np.full(spatial, np.nan, dtype=np.float32)
    for point in coords[0]:
        window = tuple(slice(max(0, int(p) - r // 2), int(p) + r // 2) for p, r in zip(point, roi_size, strict=True))
        logits[window] = np.where(np.isnan(logits[window]), -1.0, logits[window])
    for point, label in zip(coords[0], labels[0], strict=True):
        logits[ball(spatial, point, radius=2.5)] = 1.0 if label == 1 else -1.0
    return torch.from_numpy(logits[None, None])
