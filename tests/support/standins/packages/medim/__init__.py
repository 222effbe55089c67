"""STAND-IN for medim (tests only): create_model("SAM-Med3D", ...) returning a model with SAM-Med3D's three parts.

The 'mask decoder' returns 32^3 logits: +4 where the 32^3 mask prompt is set, -4 elsewhere, then a
ball of radius 1 (low-resolution voxels) around each point, +4 for label 1 and -4 for label 0,
points taken as crop indices / 4 in the crop's axis order. Every prompt is logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from _standin_log import ball, log_event

TOOL = "medim"


class _PromptEncoder:
    def __call__(self, points: list, boxes: Any, masks: Any) -> tuple:
        coords, labels = np.asarray(points[0]), np.asarray(points[1])
        if coords.ndim != 3 or coords.shape[2] != 3 or labels.shape != coords.shape[:2]:
            raise ValueError(f"stand-in: points must be (1, N, 3) with labels (1, N), got {coords.shape}, {labels.shape}")
        if np.asarray(masks).shape != (1, 1, 32, 32, 32):
            raise ValueError(f"stand-in: mask prompt must be (1, 1, 32, 32, 32), got {np.asarray(masks).shape}")
        log_event(TOOL, "prompt_encoder", points=coords[0].tolist(), labels=labels[0].tolist(), boxes=boxes, mask_voxels=int(np.count_nonzero(masks)))
        return (coords[0], labels[0]), np.asarray(masks)[0, 0]

    def get_dense_pe(self) -> None:
        return None


class _SAMMed3D:
    def __init__(self) -> None:
        self.prompt_encoder = _PromptEncoder()

    def to(self, device: Any) -> _SAMMed3D:
        log_event(TOOL, "to", device=str(device))
        return self

    def eval(self) -> _SAMMed3D:
        return self

    def image_encoder(self, image: Any) -> Any:
        if np.asarray(image).shape != (1, 1, 128, 128, 128):
            raise ValueError(f"stand-in: SAM-Med3D takes a (1, 1, 128, 128, 128) crop, got {np.asarray(image).shape}")
        return image

    def mask_decoder(
        self, image_embeddings: Any, image_pe: Any, sparse_prompt_embeddings: tuple, dense_prompt_embeddings: np.ndarray, multimask_output: bool = False
    ) -> tuple:
        logits = np.where(dense_prompt_embeddings > 0, 4.0, -4.0).astype(np.float32)
        for point, label in zip(*sparse_prompt_embeddings, strict=True):
            logits[ball(logits.shape, np.asarray(point) / 4)] = 4.0 if label == 1 else -4.0
        return torch.from_numpy(logits[None, None]), None


def create_model(model_name: str, pretrained: bool = False, checkpoint_path: str = "", **kwargs: Any) -> _SAMMed3D:
    if model_name != "SAM-Med3D":
        raise ValueError(f"stand-in: only SAM-Med3D, not {model_name!r}")
    if pretrained and not Path(checkpoint_path).is_file():
        raise FileNotFoundError(f"stand-in: checkpoint {checkpoint_path} does not exist")
    log_event(TOOL, "create_model", model_name=model_name, pretrained=pretrained, checkpoint_path=str(Path(checkpoint_path).resolve()))
    return _SAMMed3D()
