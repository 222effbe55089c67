"""SAM-Med3D-turbo on one step of segbench's interactive contract; runs INSIDE the SAM-Med3D environment.

API read from github.com/uni-medical/SAM-Med3D @ f3de1fa1 (readme.md, medim_val_single.py,
utils/infer_utils.py ``sam_model_infer``) and the authors' CVPR 2025 baseline (branch CVPR25_3DFM @
e7e7c6ca, medim_infer.py), with the model from the PyPI package ``medim`` 0.1.2
(``medim.create_model("SAM-Med3D", pretrained=True, checkpoint_path=...)``). SAM-Med3D sees a 128^3
crop at 1.5 mm and takes points only (no box prompt), as voxel indices of that crop in the crop
tensor's axis order, with labels 1 (foreground) and 0 (background), plus a 32^3 mask prompt.

Per class, on every step that needs the model:

* the crop: 128^3 voxels of 1.5 mm centred on the class's focus (the box step: the box's centre
  ((z_min + z_max) / 2, y centre, x centre); a click step: the class's new click, as the baseline
  centres its crop on the last click), sampled from the volume by trilinear interpolation (outside:
  0), axes ordered (x, y, z): the NIfTI voxel order that SAM-Med3D-turbo was trained on through
  torchio (the npz arrays are that order reversed); z-score normalised over voxels > 0, as
  ``tio.ZNormalization(masking_method=lambda x: x > 0)`` does;
* the points: the box's centre as a foreground point (the baseline's use of the box), then every
  click so far in the order given, each mapped into the crop and written (x, y, z); points outside
  the crop are left out;
* the mask prompt: ``prev_pred == c`` sampled into the crop (nearest) and taken at every 4th voxel
  (32^3), binary, as the baseline passes it; zeros in the box step;
* the result: the 32^3 logits interpolated trilinearly at each volume voxel's crop position (what
  the baseline's upsampling to 128^3 gives there) and thresholded at 0 (sigmoid 0.5) inside the crop; outside the crop the class keeps its
  ``prev_pred`` voxels. (The baseline instead adds the new mask to the previous one, which makes a
  background click unable to remove anything; segbench replaces the crop.)

    python sammed3d_interactive.py --input step.npz --output segs.npz --checkpoint models/sammed3d/sam_med3d_turbo.pth --device cuda
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from interactive_step import Step, assemble, run
from scipy import ndimage

SIZE = 128
LOW = 32
TARGET_MM = 1.5


@dataclass(frozen=True)
class Crop:
    """The 128^3 grid at 1.5 mm centred on ``focus`` (z, y, x voxel of the volume, may be fractional)."""

    focus: tuple[float, float, float]
    spacing: tuple[float, float, float]

    def to_crop(self, zyx: np.ndarray) -> np.ndarray:
        """Volume voxels (z, y, x) -> crop indices in the crop's (x, y, z) axis order."""
        grid = SIZE // 2 + (np.asarray(zyx, float) - self.focus) * np.asarray(self.spacing) / TARGET_MM
        return grid[..., ::-1]

    def to_volume(self, xyz: np.ndarray) -> np.ndarray:
        """Crop indices (x, y, z) -> volume voxels (z, y, x)."""
        return np.asarray(self.focus) + (np.asarray(xyz, float)[..., ::-1] - SIZE // 2) * TARGET_MM / np.asarray(self.spacing)

    def sample(self, volume: np.ndarray, order: int, stride: int = 1) -> np.ndarray:
        """The crop of ``volume`` (z, y, x), indexed (x, y, z); ``stride`` 4 gives crop voxels 0, 4, 8, ... (the 32^3 grid)."""
        scale = TARGET_MM / np.asarray(self.spacing)
        matrix = np.fliplr(np.diag(scale * stride))  # crop axis (x, y, z)[j] -> volume axis (z, y, x)[2 - j]
        offset = np.asarray(self.focus) - SIZE // 2 * scale
        return ndimage.affine_transform(volume, matrix, offset=offset, output_shape=(SIZE // stride,) * 3, order=order, mode="constant", cval=0.0)

    def paste(self, low_logits: np.ndarray, shape: tuple[int, ...]) -> tuple[tuple[slice, ...], np.ndarray, np.ndarray]:
        """32^3 logits (x, y, z) back onto the volume: (a region of the volume, which of its voxels the crop covers, logits > 0 there).

        Each voxel's value is the trilinear interpolation of the 32^3 logits at its crop position, which is what
        upsampling them to 128^3 (``F.interpolate(..., mode='trilinear', align_corners=False)``) gives at that position.
        """
        half = SIZE / 2 * TARGET_MM / np.asarray(self.spacing)
        lo = np.maximum(np.floor(np.asarray(self.focus) - half).astype(int), 0)
        hi = np.minimum(np.ceil(np.asarray(self.focus) + half).astype(int) + 1, shape)
        region = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))
        voxels = np.stack(np.meshgrid(*[np.arange(s.start, s.stop) for s in region], indexing="ij"), axis=-1)
        grid = self.to_crop(voxels)
        inside = np.all((grid >= -0.5) & (grid <= SIZE - 0.5), axis=-1)
        low = (grid + 0.5) * LOW / SIZE - 0.5
        logits = ndimage.map_coordinates(low_logits, np.moveaxis(low, -1, 0), order=1, mode="nearest")
        return region, inside, logits > 0


def focus(step: Step, c: int) -> tuple[float, float, float]:
    """Where the crop of class ``c`` is centred: its new click, else its box's centre."""
    click = step.new_click(c)
    if click is not None:
        return tuple(float(v) for v in click.zyx)  # type: ignore[return-value]
    box = step.box(c)
    if box is None:
        raise ValueError(f"class {c}: no box and no click to centre the crop on")
    return (box["z_min"] + box["z_max"]) / 2, (box["z_mid_y_min"] + box["z_mid_y_max"]) / 2, (box["z_mid_x_min"] + box["z_mid_x_max"]) / 2


def point_prompts(step: Step, c: int, crop: Crop) -> tuple[np.ndarray, np.ndarray]:
    """Points (N, 3) in crop (x, y, z) indices and labels (N,) 1/0: the box's centre, then the clicks; outside the crop left out."""
    points, labels = [], []
    box = step.box(c)
    if box is not None:
        points.append(((box["z_min"] + box["z_max"]) / 2, (box["z_mid_y_min"] + box["z_mid_y_max"]) / 2, (box["z_mid_x_min"] + box["z_mid_x_max"]) / 2))
        labels.append(1)
    for click in step.class_clicks(c):
        points.append(click.zyx)
        labels.append(int(click.positive))
    grid = crop.to_crop(np.array(points, float).reshape(-1, 3))
    keep = np.all((grid >= 0) & (grid <= SIZE - 1), axis=1)
    return grid[keep].astype(np.float32), np.array(labels, dtype=np.int64)[keep]


def normalise(crop: np.ndarray) -> np.ndarray:
    """z-score over the voxels > 0 (torchio ZNormalization with masking_method x > 0)."""
    values = crop[crop > 0]
    if values.size == 0 or values.std() == 0:
        return crop.astype(np.float32)
    return ((crop - values.mean()) / values.std()).astype(np.float32)


def model_logits(model: Any, device: Any, image: np.ndarray, points: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One SAM-Med3D forward pass: crop (x, y, z) 128^3, points, labels, 32^3 mask -> 32^3 logits."""
    import torch

    with torch.no_grad():
        embeddings = model.image_encoder(torch.from_numpy(image[None, None]).to(device))
        sparse, dense = model.prompt_encoder(
            points=[torch.from_numpy(points[None]).to(device), torch.from_numpy(labels[None]).to(device)],
            boxes=None,
            masks=torch.from_numpy(mask[None, None]).to(device),
        )
        low_res, _ = model.mask_decoder(
            image_embeddings=embeddings, image_pe=model.prompt_encoder.get_dense_pe(), sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense
        )
    return low_res.float().cpu().numpy()[0, 0]


def segment_class(step: Step, c: int, forward: Any) -> np.ndarray:
    """Class ``c``: crop, prompts, one forward pass (``forward(image, points, labels, mask)``), pasted back."""
    crop = Crop(focus(step, c), step.spacing)
    image = normalise(crop.sample(step.imgs.astype(np.float32), order=1))
    points, labels = point_prompts(step, c, crop)
    mask = crop.sample(step.previous(c).astype(np.float32), order=0, stride=SIZE // LOW)
    region, inside, new = crop.paste(forward(image, points, labels, mask), step.imgs.shape)
    out = step.previous(c)
    out[region] = np.where(inside, new, out[region])
    return out


def predict(step: Step, args: argparse.Namespace) -> np.ndarray:
    import medim
    import torch

    device = torch.device(args.device)
    model = medim.create_model("SAM-Med3D", pretrained=True, checkpoint_path=str(args.checkpoint))
    model = model.to(device)
    model.eval()
    return assemble(step, lambda c: segment_class(step, c, lambda *inputs: model_logits(model, device, *inputs)))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=Path, help="sam_med3d_turbo.pth")
    parser.add_argument("--device", default="cuda")


if __name__ == "__main__":
    sys.exit(run(__doc__.splitlines()[0], predict, _arguments))
