"""STAND-IN for nnInteractive.inference.inference_session (tests only): the session API the entry point uses.

Each interaction is drawn into the target buffer (box: its half-open region; point: a ball of radius
1) and logged; no network runs. A 3D box is refused as nnInteractive 2.5 refuses it for the released weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from _standin_log import ball, log_event

TOOL = "nnInteractive"


class nnInteractiveInferenceSession:  # noqa: N801 - the real class name
    def __init__(
        self,
        device: Any,
        use_torch_compile: bool = False,
        verbose: bool = False,
        torch_n_threads: int = 8,
        do_autozoom: bool = True,
        interactions_storage: str = "auto",
    ) -> None:
        log_event(TOOL, "__init__", device=str(device), do_autozoom=do_autozoom)
        self.buffer: np.ndarray | None = None

    def initialize_from_trained_model_folder(self, model_training_output_dir: str, use_fold: Any = None, checkpoint_name: str = "checkpoint_final.pth") -> None:
        folder = Path(model_training_output_dir)
        folds = sorted(folder.glob(f"fold_*/{checkpoint_name}"))
        if len(folds) != 1:
            raise FileNotFoundError(f"stand-in: expected one fold_*/{checkpoint_name} in {folder}, found {folds}")
        log_event(TOOL, "initialize_from_trained_model_folder", folder=str(folder.resolve()))

    def set_image(self, image: np.ndarray, image_properties: dict | None = None) -> None:
        if image.ndim != 4 or image.shape[0] != 1:
            raise ValueError(f"stand-in: image must be (1, z, y, x), got {image.shape}")
        self.shape = image.shape[1:]
        log_event(TOOL, "set_image", shape=list(image.shape), dtype=str(image.dtype))

    def set_target_buffer(self, target_buffer: np.ndarray) -> None:
        if tuple(target_buffer.shape) != tuple(self.shape):
            raise ValueError(f"stand-in: target buffer {target_buffer.shape} for image {self.shape}")
        self.buffer = target_buffer

    def reset_interactions(self) -> None:
        self.buffer[:] = 0
        log_event(TOOL, "reset_interactions")

    def add_initial_seg_interaction(self, initial_seg: np.ndarray, run_prediction: bool = False, override_capability_checks: bool = False) -> None:
        self.buffer[:] = initial_seg
        log_event(TOOL, "add_initial_seg_interaction", voxels=int(np.count_nonzero(initial_seg)), run_prediction=run_prediction)

    def add_bbox_interaction(self, bbox_coords: list, include_interaction: bool, run_prediction: bool = True, override_capability_checks: bool = False) -> None:
        sizes = [int(b) - int(a) for a, b in bbox_coords]
        if 1 not in sizes:
            raise ValueError(f"stand-in: {bbox_coords} is a 3D box; nnInteractive_v1.0 supports 2D boxes only")
        self.buffer[tuple(slice(int(a), int(b)) for a, b in bbox_coords)] = int(include_interaction)
        log_event(
            TOOL,
            "add_bbox_interaction",
            bbox_coords=[[int(a), int(b)] for a, b in bbox_coords],
            include_interaction=include_interaction,
            run_prediction=run_prediction,
        )

    def add_point_interaction(
        self, coordinates: tuple, include_interaction: bool, run_prediction: bool = True, override_capability_checks: bool = False
    ) -> None:
        self.buffer[ball(self.buffer.shape, coordinates)] = int(include_interaction)
        log_event(
            TOOL, "add_point_interaction", coordinates=[int(c) for c in coordinates], include_interaction=include_interaction, run_prediction=run_prediction
        )
