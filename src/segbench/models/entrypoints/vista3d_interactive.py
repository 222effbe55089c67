"""VISTA3D (MONAI's CVPR 2025 baseline) on one step of segbench's interactive contract; runs INSIDE the VISTA3D environment.

API read from github.com/Project-MONAI/VISTA @ f73d7c20, vista3d/cvpr_workshop/infer_cvpr.py (the
challenge baseline) and train_cvpr.py (ROI 128^3), with MONAI 1.4's
``monai.networks.nets.vista3d.vista3d132`` and ``monai.apps.vista3d.inferer.point_based_window_inferer``.
The inferer takes the image as (1, 1, z, y, x) and ``point_coords`` (1, N, 3) in the same array
order, i.e. (z, y, x), with ``point_labels`` (1, N): 1 foreground, 0 background (2/3 are VISTA3D's
tumour/vessel codes, not used; -1 pads). It crops a 128^3 window centred on each point and
stitches the windows; voxels no window covers come back NaN and count as background.

As the baseline: the image is scaled from its 1st..99th percentile to 0..1 (clipped,
``ScaleIntensityRangePercentiles``), each class is one inferer call with ``transpose=True,
with_coord=True, mode='gaussian', center_only=True``, and ``prev_pred`` is not given to the model
(every step re-segments from all prompts so far). VISTA3D takes no box: the baseline ignores it; segbench
gives the box as one foreground point at its centre on slice z_mid, before the clicks (in the order
given). A class without a new click in a click step keeps its ``prev_pred`` voxels (interactive_step.py).

    python vista3d_interactive.py --input step.npz --output segs.npz --checkpoint models/vista3d/model_final.pth --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from interactive_step import Step, assemble, box_centre, run

ROI_SIZE = [128, 128, 128]


def point_prompts(step: Step, c: int) -> tuple[np.ndarray, np.ndarray]:
    """``point_coords`` (1, N, 3) as (z, y, x) and ``point_labels`` (1, N) of class ``c``: the box's centre (label 1), then the clicks."""
    points, labels = [], []
    box = step.box(c)
    if box is not None:
        points.append(box_centre(box))
        labels.append(1)
    for click in step.class_clicks(c):
        points.append(click.zyx)
        labels.append(int(click.positive))
    return np.array(points, dtype=np.int64).reshape(1, -1, 3), np.array(labels, dtype=np.int64).reshape(1, -1)


def scale_intensity(imgs: np.ndarray) -> np.ndarray:
    """1st..99th percentile -> 0..1, clipped (monai ScaleIntensityRangePercentiles(lower=1, upper=99, b_min=0, b_max=1, clip=True))."""
    low, high = np.percentile(imgs, [1, 99])
    if high == low:
        return np.zeros(imgs.shape, dtype=np.float32)
    return np.clip((imgs.astype(np.float32) - low) / (high - low), 0.0, 1.0).astype(np.float32)


def segment_class(step: Step, c: int, model: Any, image: Any, device: Any) -> np.ndarray:
    """One inferer call for class ``c``: logits > 0 (NaN, no window there, is background)."""
    import torch
    from monai.apps.vista3d.inferer import point_based_window_inferer

    coords, labels = point_prompts(step, c)
    with torch.no_grad():
        logits = point_based_window_inferer(
            inputs=image,
            roi_size=ROI_SIZE,
            transpose=True,
            with_coord=True,
            predictor=model,
            mode="gaussian",
            sw_device=device,
            device=device,
            center_only=True,
            point_coords=torch.from_numpy(coords).to(device),
            point_labels=torch.from_numpy(labels).to(device),
        )
    values = logits[0, 0].float().cpu().numpy()
    return np.nan_to_num(values, nan=0.0) > 0


def predict(step: Step, args: argparse.Namespace) -> np.ndarray:
    import torch
    from monai.networks.nets.vista3d import vista3d132

    device = torch.device(args.device)
    model = vista3d132(in_channels=1)
    model.load_state_dict(torch.load(str(args.checkpoint), map_location=device), strict=True)
    model = model.to(device)
    model.eval()
    image = torch.from_numpy(scale_intensity(step.imgs)[None, None]).to(device)
    return assemble(step, lambda c: segment_class(step, c, model, image, device))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=Path, help="VISTA3D state dict (the CVPR 2025 fine-tuned model_final.pth)")
    parser.add_argument("--device", default="cuda")


if __name__ == "__main__":
    sys.exit(run(__doc__.splitlines()[0], predict, _arguments))
