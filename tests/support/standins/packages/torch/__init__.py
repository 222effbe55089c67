"""STAND-IN for torch (tests only): the few torch calls of segbench's interactive entry points, on numpy arrays."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

bfloat16 = "bfloat16"


class device:  # noqa: N801 - named like torch.device
    def __init__(self, spec: str) -> None:
        self.spec = str(spec)
        self.type = self.spec.split(":")[0]

    def __str__(self) -> str:
        return self.spec


class Tensor(np.ndarray):
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        return self

    def cpu(self) -> Tensor:
        return self

    def float(self) -> Tensor:
        return self.astype(np.float32)

    def numpy(self) -> np.ndarray:
        return np.asarray(self)


def from_numpy(array: np.ndarray) -> Tensor:
    return np.asarray(array).view(Tensor)


def no_grad() -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


inference_mode = no_grad


def autocast(device_type: str, dtype: Any = None) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def load(path: str, map_location: Any = None, **kwargs: Any) -> dict:
    """A 'state dict' naming the file it was read from (the file must exist, as for torch.load)."""
    return {"stand_in_checkpoint": str(Path(path).resolve()), "bytes": len(Path(path).read_bytes()), "map_location": str(map_location)}
