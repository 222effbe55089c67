"""STAND-IN for monai.networks.nets.vista3d (tests only): vista3d132 returning an object that takes a state dict."""

from __future__ import annotations

from typing import Any

from _standin_log import log_event

TOOL = "monai"


class _VISTA3D:
    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        log_event(TOOL, "load_state_dict", checkpoint=state["stand_in_checkpoint"], map_location=state["map_location"], strict=strict)

    def to(self, device: Any) -> _VISTA3D:
        return self

    def eval(self) -> _VISTA3D:
        return self


def vista3d132(encoder_embed_dim: int = 48, in_channels: int = 1) -> _VISTA3D:
    log_event(TOOL, "vista3d132", in_channels=in_channels)
    return _VISTA3D()
