"""STAND-IN for MedSAM2's sam2.build_sam (tests only): build_sam2_video_predictor_npz and the predictor API the entry point uses.

A prompt on a frame draws its mask there (box: the rectangle, inclusive; point (x, y): a disk of
radius 1, set for label 1, cleared for label 0); propagation carries the last prompted frame's mask
to the following frames (or the preceding ones in reverse), from the first (last) prompted frame on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from _standin_log import ball, log_event

TOOL = "sam2"


class _Predictor:
    def init_state(self, images: Any, video_height: int, video_width: int, **kwargs: Any) -> dict:
        frames = np.asarray(images)
        if frames.ndim != 4 or frames.shape[1:] != (3, 512, 512):
            raise ValueError(f"stand-in: MedSAM2 takes (D, 3, 512, 512) frames, got {frames.shape}")
        log_event(TOOL, "init_state", frames=frames.shape[0], video_height=video_height, video_width=video_width)
        return {"depth": frames.shape[0], "height": video_height, "width": video_width, "prompts": {}}

    def add_new_points_or_box(
        self,
        inference_state: dict,
        frame_idx: int,
        obj_id: int,
        points: Any = None,
        labels: Any = None,
        clear_old_points: bool = True,
        normalize_coords: bool = True,
        box: Any = None,
    ) -> tuple:
        if (points is None) != (labels is None) or (points is None and box is None):
            raise ValueError("stand-in: points and labels together, and at least one of points or box")
        mask = np.zeros((inference_state["height"], inference_state["width"]), dtype=bool)
        if box is not None:
            x0, y0, x1, y1 = (int(v) for v in box)
            mask[y0 : y1 + 1, x0 : x1 + 1] = True
        for (x, y), label in zip(points if points is not None else [], labels if labels is not None else [], strict=True):
            mask[ball(mask.shape, (y, x))] = label == 1
        inference_state["prompts"][int(frame_idx)] = mask
        log_event(
            TOOL,
            "add_new_points_or_box",
            frame_idx=int(frame_idx),
            obj_id=obj_id,
            points=None if points is None else np.asarray(points).tolist(),
            labels=None if labels is None else np.asarray(labels).tolist(),
            box=None if box is None else np.asarray(box).tolist(),
        )
        return frame_idx, [obj_id], torch.from_numpy(np.where(mask, 1.0, -1.0)[None, None])

    def propagate_in_video(
        self, inference_state: dict, start_frame_idx: int | None = None, max_frame_num_to_track: int | None = None, reverse: bool = False
    ) -> Any:
        prompts = inference_state["prompts"]
        start = max(prompts) if reverse else min(prompts)
        frames = range(start, -1, -1) if reverse else range(start, inference_state["depth"])
        log_event(TOOL, "propagate_in_video", reverse=reverse, start=start)
        current = None
        for frame in frames:
            current = prompts.get(frame, current)
            yield frame, [1], torch.from_numpy(np.where(current, 1.0, -1.0)[None, None])

    def reset_state(self, inference_state: dict) -> None:
        inference_state["prompts"] = {}


def build_sam2_video_predictor_npz(config_file: str, ckpt_path: str | None = None, device: Any = None, **kwargs: Any) -> _Predictor:
    if not str(config_file).endswith(".yaml") or ckpt_path is None or not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"stand-in: config {config_file!r} and an existing checkpoint are needed, got {ckpt_path!r}")
    log_event(TOOL, "build_sam2_video_predictor_npz", config_file=config_file, ckpt_path=str(Path(ckpt_path).resolve()), device=str(device))
    return _Predictor()
