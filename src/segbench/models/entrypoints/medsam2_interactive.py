"""MedSAM2 on one step of segbench's interactive contract; runs INSIDE the MedSAM2 environment.

API read from github.com/bowang-lab/MedSAM2 @ 332f30d4: medsam2_infer_3D_CT.py (3D inference),
sam2/build_sam.py ``build_sam2_video_predictor_npz(config, checkpoint, device=...)`` and
sam2/sam2_video_predictor_npz.py. MedSAM2 treats the volume as a video of z slices: prompts go on
frames, ``add_new_points_or_box(inference_state, frame_idx, obj_id, points, labels, box)``, with
``box`` = [x_min, y_min, x_max, y_max] and ``points`` (N, 2) as (x, y) in the slice's pixels, labels
1 foreground / 0 background; ``propagate_in_video`` carries the mask to the other frames.

As medsam2_infer_3D_CT.py: the image is made 0..255 (here: the 0.5th..99.5th percentile, clipped,
as MedSAM does for images without a DICOM window), each slice resized to 512 x 512 RGB with PIL,
scaled to 0..1 and normalised with the ImageNet mean and std; ``init_state(images, H, W)``; the
prompts are added, the video propagated forward, the state reset, the prompts added again and the
video propagated in reverse.

Prompts of class ``c``: the box's 2D box on frame z_mid; each click on its own frame (z) as an
(x, y) point; all prompts of one frame go in one call (a box must come with its frame's points).
Each step re-segments from the box and all clicks so far; ``prev_pred`` is not given to the model.
Frames from the first prompted frame on take the forward pass, the frames before it the reverse
pass. With a box, frames outside z_min..z_max are background (the 3D box's z extent). Not done: the
script's largest-connected-component filter (it would drop a region a foreground click added). A
class without a new click in a click step keeps its ``prev_pred`` voxels (interactive_step.py).

    python medsam2_interactive.py --input step.npz --output segs.npz --checkpoint models/medsam2/MedSAM2_latest.pt \
        --config configs/sam2.1_hiera_t512.yaml --device cuda
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
from interactive_step import Step, assemble, run
from PIL import Image

IMAGE_SIZE = 512
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def frame_prompts(step: Step, c: int) -> dict[int, dict[str, Any]]:
    """Per frame (z): ``points`` (N, 2) as (x, y) float32 or None, ``labels`` (N,) int32 or None, ``box`` [x0, y0, x1, y1] or None."""
    frames: dict[int, dict[str, Any]] = {}
    box = step.box(c)
    if box is not None:
        corners = [box["z_mid_x_min"], box["z_mid_y_min"], box["z_mid_x_max"], box["z_mid_y_max"]]
        frames[box["z_mid"]] = {"points": [], "labels": [], "box": np.array(corners, np.float32)}
    for click in step.class_clicks(c):
        z, y, x = click.zyx
        entry = frames.setdefault(z, {"points": [], "labels": [], "box": None})
        entry["points"].append([x, y])
        entry["labels"].append(int(click.positive))
    return {
        z: {
            "points": np.array(e["points"], np.float32) if e["points"] else None,
            "labels": np.array(e["labels"], np.int32) if e["labels"] else None,
            "box": e["box"],
        }
        for z, e in sorted(frames.items())
    }


def z_range(step: Step, c: int) -> tuple[int, int] | None:
    box = step.box(c)
    return None if box is None else (box["z_min"], box["z_max"])


def to_uint8(imgs: np.ndarray) -> np.ndarray:
    """0.5th..99.5th percentile -> 0..255, clipped."""
    low, high = np.percentile(imgs, [0.5, 99.5])
    if high == low:
        return np.zeros(imgs.shape, dtype=np.uint8)
    return np.round(np.clip((imgs.astype(np.float32) - low) / (high - low), 0, 1) * 255).astype(np.uint8)


def video_frames(imgs: np.ndarray) -> np.ndarray:
    """(z, y, x) -> (z, 3, 512, 512) float32: each slice as RGB resized by PIL, / 255, ImageNet-normalised."""
    out = np.empty((imgs.shape[0], 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    for z, plane in enumerate(to_uint8(imgs)):
        rgb = np.asarray(Image.fromarray(plane).convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE)), dtype=np.float32) / 255.0
        out[z] = ((rgb - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)
    return out


def segment_class(step: Step, c: int, predictor: Any, state: Any) -> np.ndarray:
    """Class ``c``: prompts on their frames, forward then reverse propagation."""
    prompts = frame_prompts(step, c)
    start = min(prompts)
    mask = np.zeros(step.imgs.shape, dtype=bool)
    for reverse in (False, True):
        for frame, prompt in prompts.items():
            predictor.add_new_points_or_box(inference_state=state, frame_idx=frame, obj_id=1, **prompt)
        for frame, _, logits in predictor.propagate_in_video(state, reverse=reverse):
            if reverse == (frame < start):
                mask[frame] = logits[0, 0].float().cpu().numpy() > 0
        predictor.reset_state(state)
    if (span := z_range(step, c)) is not None:
        mask[: span[0]] = False
        mask[span[1] + 1 :] = False
    return mask


def predict(step: Step, args: argparse.Namespace) -> np.ndarray:
    import torch
    from sam2.build_sam import build_sam2_video_predictor_npz

    device = torch.device(args.device)
    predictor = build_sam2_video_predictor_npz(args.config, str(args.checkpoint), device=device)
    images = torch.from_numpy(video_frames(step.imgs)).to(device)
    precision = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), precision:
        state = predictor.init_state(images, step.imgs.shape[1], step.imgs.shape[2])
        return assemble(step, lambda c: segment_class(step, c, predictor, state))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=Path, help="MedSAM2_latest.pt")
    parser.add_argument("--config", default="configs/sam2.1_hiera_t512.yaml", help="model config inside the sam2 package")
    parser.add_argument("--device", default="cuda")


if __name__ == "__main__":
    sys.exit(run(__doc__.splitlines()[0], predict, _arguments))
