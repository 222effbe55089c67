"""Shared by the stand-in packages: append one call to $SEGBENCH_STANDIN_LOG, and draw prompts."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np


def log_event(tool: str, call: str, **fields: Any) -> None:
    with open(os.environ["SEGBENCH_STANDIN_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"pid": os.getpid(), "tool": tool, "call": call, **fields}) + "\n")


def ball(shape: tuple[int, ...], centre: Any, radius: float = 1.0) -> np.ndarray:
    """Voxels within ``radius`` of ``centre`` (any dimension)."""
    grids = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum((g - float(c)) ** 2 for g, c in zip(grids, centre, strict=True)) <= radius**2
