"""nnInteractive on one step of segbench's interactive contract; runs INSIDE the nnInteractive environment.

API read from github.com/MIC-DKFZ/nnInteractive @ v2.5.0 (b437bd9e): ``nnInteractive.inference.
inference_session.nnInteractiveInferenceSession`` (readme.md "Getting Started" and the authors' CVPR
2025 baseline ``nnInteractive/inference/cvpr2025_challenge_baseline/predict.py``). The session takes
the raw image as (1, z, y, x) and every coordinate in the image's own array order, i.e. (z, y, x)
here (the readme calls the axes "x, y, z" but indexes ``GetArrayFromImage(...)[None]``).

Per class, one session run (``reset_interactions`` and a fresh target buffer between classes):

1. click steps: ``add_initial_seg_interaction(prev_pred == c)`` (this resets the interactions, so it
   comes first), as the authors' baseline does;
2. the box: ``add_bbox_interaction([[z_mid, z_mid + 1], [y_min, y_max + 1], [x_min, x_max + 1]],
   include_interaction=True)``: the 2D box on slice z_mid, half-open. The released weights
   (nnInteractive_v1.0) only accept 2D boxes (v2 raises ValueError on a 3D box), so the box's
   z_min..z_max extent is not given to the model;
3. every click so far, in the order given: ``add_point_interaction((z, y, x), include_interaction=
   kind == 'fg')``.

All interactions but the last are added with ``run_prediction=False``; the last one runs the
prediction. nnInteractive (v2.5) predicts around the last interaction's centre, which is what the
baseline forces by truncating ``new_interaction_centers``. A class without a new click in a click step
keeps its ``prev_pred`` voxels (interactive_step.py).

    python nninteractive_interactive.py --input step.npz --output segs.npz --checkpoint models/nninteractive/models/nnInteractive_v1.0 --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from interactive_step import Step, assemble, run


def interactions(step: Step, c: int) -> list[tuple[str, dict[str, Any]]]:
    """The session calls for class ``c``, in order: (method name, keyword arguments without run_prediction)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    if step.prev_pred is not None:
        calls.append(("add_initial_seg_interaction", {"initial_seg": step.previous(c).astype(np.uint8)}))
    box = step.box(c)
    if box is not None:
        bbox = [[box["z_mid"], box["z_mid"] + 1], [box["z_mid_y_min"], box["z_mid_y_max"] + 1], [box["z_mid_x_min"], box["z_mid_x_max"] + 1]]
        calls.append(("add_bbox_interaction", {"bbox_coords": bbox, "include_interaction": True}))
    for click in step.class_clicks(c):
        calls.append(("add_point_interaction", {"coordinates": click.zyx, "include_interaction": click.positive}))
    return calls


def segment_class(session: Any, shape: tuple[int, ...], calls: list[tuple[str, dict[str, Any]]]) -> np.ndarray:
    """Run one class's interactions on a fresh target buffer; the prediction runs with the last one."""
    buffer = np.zeros(shape, dtype=np.uint8)
    session.set_target_buffer(buffer)
    session.reset_interactions()
    for i, (method, kwargs) in enumerate(calls):
        getattr(session, method)(**kwargs, run_prediction=i == len(calls) - 1)
    return buffer > 0


def predict(step: Step, args: argparse.Namespace) -> np.ndarray:
    import torch
    from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

    session = nnInteractiveInferenceSession(
        device=torch.device(args.device), use_torch_compile=False, verbose=False, torch_n_threads=os.cpu_count() or 1, do_autozoom=True
    )
    session.initialize_from_trained_model_folder(str(args.checkpoint))
    session.set_image(step.imgs[None].astype(np.float32))  # raw intensities: nnInteractive normalises itself
    return assemble(step, lambda c: segment_class(session, step.imgs.shape, interactions(step, c)))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=Path, help="model folder holding plans.json, dataset.json and fold_0/checkpoint_final.pth")
    parser.add_argument("--device", default="cuda")


if __name__ == "__main__":
    sys.exit(run(__doc__.splitlines()[0], predict, _arguments))
