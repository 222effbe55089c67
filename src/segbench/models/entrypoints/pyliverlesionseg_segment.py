"""pyliverlesionseg 0.3's whole-liver CNN (Tang et al. 2020) on CT, ported to PyTorch; run by its own venv's Python.

The package (github.com/KUL-recon-lab/pyliverlesionseg, Apache-2.0) runs the network in Keras 2.2 on TensorFlow 1.12,
which no current Python installs. This script rebuilds the same network in PyTorch, loads the HDF5 weights its wheel
bundles with h5py (every layer's shape checked against the file before a voxel is read) and reproduces the package's
CT pipeline, as ``cnn_liver_lesion_seg_CT_MR_main(seg_liver=True)`` runs it, rule by rule (reimplemented, not copied):

1. orientation: the image as LPS voxels (x to the left, y to the back, z from the feet to the head);
2. crop (``crop_ct_image``): the largest body component above -150 HU in x and y; in z from 20 mm below the hip
   (found on the bone profile, > 500 HU) to 70 mm above the liver dome (found on the air profile, < -600 HU, and the
   lower lung's top), at most 400 mm of liver height, then the box clipped to 489 x 408 x 408 mm;
3. resampling (pymirc's ``zoom3d``: linear interpolation upwards, overlap-weighted averaging downwards, centres kept,
   zero outside) to half the network's voxel size (1.5 mm), a 3x3x3 median filter, resampling to its voxel size
   (``header/voxel_size`` of the HDF5: 3 mm);
4. intensity: HU / 1000 clipped to [-0.2, 0.2], times 2.5 (a [-200, 200] HU window onto [-0.5, 0.5]);
5. patching (DeepVoxNet's ``predict`` with center sampling): one input segment of 189 x 162 x 162 voxels centred on
   the volume (zero outside it), its central 163 x 136 x 136 output placed back; voxels it does not cover take the
   nearest covered voxel's value (a Euclidean distance transform);
6. postprocessing (``cnn_liver_pred_postprocess``): probability > 0.5, erosion, the largest 6-connected component,
   dilation (both with the 18-neighbourhood), linear zoom back onto the crop's voxels (> 0), pasted into the image.

The network (``create_unet_like_model`` as ``unet_liver_predict`` configures it): a 4-level U-Net, max pooling by 3,
'same' zero padding, instance normalisation (per channel over space, (x - mean) / (std + 1e-7), no parameters) and
leaky ReLU (0.01) before every convolution but the first, 'linear' upsampling (each voxel repeated 3 times along each
axis, then a 3-voxel box mean with stride 1), the skip paths cropped to the upsampled path's size and concatenated in
front of it, a 1x1x1 convolution and a sigmoid at the end. Runs on CPU with a fixed thread count and PyTorch's
deterministic algorithms, so a rerun writes the same bytes.

``--install-weights`` copies the HDF5 out of the installed wheel into ``--weights`` and checks its SHA-256; a run checks
it again before the network is built, so a changed file never runs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

#: the whole-liver model the package's DICOM server and main function use (trained_models/ of the wheel)
WEIGHTS_FILE = "model_unet_ct_mr_liv_seg_resize_1.5mm_med_3_resize_3mm_20201011_dice_loss_val_binary_dice_mean.hdf5"
#: SHA-256 of that file as pyliverlesionseg-0.3-py3-none-any.whl ships it (wheel sha256 ffe1576a...)
WEIGHTS_SHA256 = "591ea17ca58630bc5c972d58e8600068c46a4d56a5ca45af52c1c1277a41c662"
#: the network's output segment (unet_liver_predict's segment_size) and the input segment it implies
OUTPUT_SIZE = (163, 136, 136)
INPUT_SIZE = (189, 162, 162)
#: the convolutions in the HDF5's order (conv3d_1 ... conv3d_15): (input channels, output channels, kernel size)
CONVOLUTIONS = (
    (1, 20, (3, 3, 1)),
    (20, 40, (3, 3, 3)),  # level 1 down (full resolution)
    (40, 40, (3, 3, 1)),
    (40, 80, (3, 3, 3)),  # level 2 down (1/3)
    (80, 80, (3, 3, 1)),
    (80, 160, (3, 3, 3)),  # level 3 down (1/9)
    (160, 160, (3, 3, 3)),
    (160, 160, (3, 3, 3)),  # level 4 (1/27)
    (320, 160, (3, 3, 3)),
    (160, 80, (3, 3, 1)),  # level 3 up
    (160, 80, (3, 3, 3)),
    (80, 40, (3, 3, 1)),  # level 2 up
    (80, 40, (3, 3, 3)),
    (40, 20, (3, 3, 1)),  # level 1 up
    (20, 1, (1, 1, 1)),  # the common pathway: one 1x1x1 convolution, sigmoid
)
#: the crop's limits (crop_ct_image as the main function calls it for CT), in HU and mm
TISSUE_HU, LUNG_HU, BONE_HU = -150.0, -600.0, 500.0
BONE_HIP_RATIO, LIVER_HEIGHT_MAX_MM, LIVER_DOME_MARGIN_MM, HIP_MARGIN_MM = 0.7, 400.0, 70.0, 20.0
SIZE_MM_MAX = (489.0, 408.0, 408.0)
THREADS = 2


class PortError(RuntimeError):
    """The weights or an input are not what the port needs; the message names the file and the fix."""


class CropError(PortError):
    """The package's abdomen crop finds no lungs, liver dome or hip in an image (a scan of a few centimetres, say): the
    package fails on such an image too, so the case gets no output and is scored as the harness scores a missing one."""


def sha256(path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def install_weights(folder: Path) -> Path:
    """Copy the HDF5 out of the installed pyliverlesionseg wheel into ``folder`` (atomically) and check its SHA-256.

    The package is located without importing it (its ``__init__`` imports Keras and TensorFlow, absent here)."""
    spec = importlib.util.find_spec("pyliverlesionseg")
    if spec is None or not spec.submodule_search_locations:
        raise PortError(
            "pyliverlesionseg is not installed in this environment: `pip install --no-deps --ignore-requires-python "
            "pyliverlesionseg==0.3` (segbench env create pyliverlesionseg does)"
        )
    source = Path(list(spec.submodule_search_locations)[0]) / "trained_models" / WEIGHTS_FILE
    if not source.is_file():
        raise PortError(f"{source}: not in the installed package; reinstall pyliverlesionseg==0.3")
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{WEIGHTS_FILE}.partial"
    shutil.copyfile(source, partial)
    if sha256(partial) != WEIGHTS_SHA256:
        partial.unlink()
        raise PortError(f"{source}: SHA-256 differs from the 0.3 wheel's {WEIGHTS_SHA256}; reinstall pyliverlesionseg==0.3")
    target = folder / WEIGHTS_FILE
    os.replace(partial, target)
    return target


def checked_weights(folder: Path) -> Path:
    """The weights file in ``folder``, refused unless its SHA-256 is the wheel's."""
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise PortError(f"{path}: missing; run `segbench env create pyliverlesionseg` (it copies the file out of the wheel)")
    actual = sha256(path)
    if actual != WEIGHTS_SHA256:
        raise PortError(
            f"{path}: SHA-256 {actual} is not the pyliverlesionseg 0.3 wheel's {WEIGHTS_SHA256}; "
            "refusing to run (reinstall with `segbench env create pyliverlesionseg`)"
        )
    return path


# --- the network ------------------------------------------------------------------------------------------------------


def read_keras_weights(path: Path) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Every convolution's (kernel, bias) from the Keras HDF5 in layer order, each shape checked against
    :data:`CONVOLUTIONS`, and the network's voxel size (``header/voxel_size``, mm)."""
    import h5py

    with h5py.File(path, "r") as f:
        group = f["model_weights"] if "model_weights" in f else f
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in group.attrs["layer_names"]]
        convs = [n for n in names if n.startswith("conv3d_")]
        if len(convs) != len(CONVOLUTIONS):
            raise PortError(f"{path}: {len(convs)} Conv3D layers, the whole-liver U-Net has {len(CONVOLUTIONS)}")
        weights = []
        for number, (name, (c_in, c_out, kernel)) in enumerate(zip(convs, CONVOLUTIONS, strict=True), start=1):
            if name != f"conv3d_{number}":
                raise PortError(f"{path}: layer {number} of the convolutions is {name!r}, expected 'conv3d_{number}'")
            layer = group[name]
            held = [w.decode() if isinstance(w, bytes) else str(w) for w in layer.attrs["weight_names"]]
            kernel_name = next((w for w in held if w.endswith("kernel:0")), None)
            bias_name = next((w for w in held if w.endswith("bias:0")), None)
            if kernel_name is None or bias_name is None:
                raise PortError(f"{path}: layer {name} lacks a kernel or bias (has {held})")
            k, b = np.asarray(layer[kernel_name], dtype=np.float32), np.asarray(layer[bias_name], dtype=np.float32)
            if k.shape != (*kernel, c_in, c_out) or b.shape != (c_out,):
                raise PortError(
                    f"{path}: layer {name} has kernel {k.shape} and bias {b.shape}; the published architecture needs {(*kernel, c_in, c_out)} and {(c_out,)}"
                )
            weights.append((k, b))
        voxel_size = np.asarray(f["header/voxel_size"], dtype=float)
    return weights, voxel_size


def upsampled_sizes(size: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The decoder's sizes for an input segment of ``size``: after each 'linear' upsampling by 3 (3n - 2) from the
    bottom level (three poolings by 3, floored); the last is the output segment's."""
    bottom = [s // 27 for s in size]
    sizes = []
    for _ in range(3):
        bottom = [3 * s - 2 for s in bottom]
        sizes.append(tuple(bottom))
    return sizes


def build_network(weights: list[tuple[np.ndarray, np.ndarray]]):  # -> torch.nn.Module
    """The U-Net in PyTorch with the Keras weights (channels-last kernels transposed to PyTorch's layout)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class LiverUNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv3d(c_in, c_out, kernel, padding="same") for c_in, c_out, kernel in CONVOLUTIONS)

        @staticmethod
        def norm_act(x: torch.Tensor) -> torch.Tensor:
            """Keras' instance normalisation Lambda, then LeakyReLU(0.01)."""
            mean = x.mean(dim=(2, 3, 4), keepdim=True)
            std = x.var(dim=(2, 3, 4), keepdim=True, unbiased=False).sqrt_().add_(1e-7)
            return F.leaky_relu_(x.sub_(mean).div_(std), 0.01)

        def conv(self, i: int, x: torch.Tensor, first: bool = False) -> torch.Tensor:
            return self.convs[i](x if first else self.norm_act(x))

        @staticmethod
        def upsample(x: torch.Tensor, factor: int) -> torch.Tensor:
            """'linear' upsampling: nearest repetition, then a box mean of the factor's width, stride 1 (valid)."""
            for axis in (2, 3, 4):
                x = x.repeat_interleave(factor, dim=axis)
            return F.avg_pool3d(x, factor, stride=1)

        @staticmethod
        def cropped(skip: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
            """Keras' Cropping3D: the same margin off both sides, (skip - path) / 2 along each axis."""
            m = [(s - p) // 2 for s, p in zip(skip.shape[2:], size, strict=True)]
            return skip[:, :, m[0] : m[0] + size[0], m[1] : m[1] + size[1], m[2] : m[2] + size[2]].contiguous()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # each skip path is cut to the size it is concatenated at as soon as it is pooled, so the full-resolution
            # 40-channel map is not held through the decoder
            sizes = upsampled_sizes(tuple(x.shape[2:]))
            skip1 = self.conv(1, self.conv(0, x, first=True))
            pooled = F.max_pool3d(skip1, 3)
            skip1 = self.cropped(skip1, sizes[2])
            skip2 = self.conv(3, self.conv(2, pooled))
            pooled = F.max_pool3d(skip2, 3)
            skip2 = self.cropped(skip2, sizes[1])
            skip3 = self.conv(5, self.conv(4, pooled))
            pooled = F.max_pool3d(skip3, 3)
            skip3 = self.cropped(skip3, sizes[0])
            path = self.upsample(self.conv(7, self.conv(6, pooled)), 3)
            del pooled
            for i, skip in ((8, skip3), (10, skip2), (12, skip1)):
                path = torch.cat([skip, path], dim=1)
                path = self.conv(i + 1, self.conv(i, path))
                if i != 12:
                    path = self.upsample(path, 3)
            return torch.sigmoid(self.conv(14, path))

    network = LiverUNet()
    with torch.no_grad():
        for conv, (kernel, bias) in zip(network.convs, weights, strict=True):
            conv.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.transpose(4, 3, 0, 1, 2))))  # type: ignore[operator]  # a Conv3d's, typed Module
            conv.bias.copy_(torch.from_numpy(bias))  # type: ignore[operator]  # as above
    return network.eval()


# --- preprocessing ----------------------------------------------------------------------------------------------------


def resample_axis(volume: np.ndarray, zoom: float, axis: int) -> np.ndarray:
    """pymirc's zoom3d along one axis: ``ceil(n * zoom)`` voxels with the volume's centre kept; upwards each new voxel
    interpolates linearly between its two neighbours (zero beyond the edge), downwards each old voxel adds its overlap
    with each new one (the mean over the new voxel). Slab by slab, in a fixed order: the same bytes on every run."""
    if zoom == 1:
        return volume
    source = np.moveaxis(volume, axis, 0)
    n = source.shape[0]
    delta = 1.0 / zoom
    size = math.ceil(n / delta)
    out = np.zeros((size, *source.shape[1:]), dtype=np.float64)
    if zoom > 1:
        for i in range(size):
            centre = delta * (i - 0.5 * size + 0.5) + 0.5 * n - 0.5
            left = math.floor(centre)
            if left >= 0:
                out[i] += source[left] * (left + 1 - centre)
            if left + 1 < n:
                out[i] += source[left + 1] * (centre - left)
    else:
        scale = 1.0 / delta
        for i in range(n):
            start = scale * (i - 0.5 * n) + 0.5 * size
            stop = scale * (i + 1 - 0.5 * n) + 0.5 * size
            first, last = math.floor(start), math.ceil(stop) - 1
            if first == last:
                out[first] += source[i] / delta
            else:
                edge = math.ceil(start)
                out[first] += source[i] * (edge - start)
                out[last] += source[i] * (stop - edge)
    return np.moveaxis(out, 0, axis)


def resample(volume: np.ndarray, zoom: np.ndarray) -> np.ndarray:
    """:func:`resample_axis` along x, then y, then z (pymirc's order)."""
    for axis in range(3):
        volume = resample_axis(volume, float(zoom[axis]), axis)
    return volume


def _largest_component_box(mask: np.ndarray) -> tuple[slice, ...]:
    """The bounding box of the largest (6-connected) component of ``mask``; the first label wins a tie."""
    from scipy import ndimage

    labels, count = ndimage.label(mask)
    if count == 0:
        raise CropError("no body above -150 HU in the image: is it a CT in Hounsfield units?")
    sizes = np.bincount(labels.ravel(), minlength=count + 1)[1:]
    return ndimage.find_objects((labels == int(np.argmax(sizes)) + 1).astype(np.int8))[0]


def _extrema(profile: np.ndarray, comparator, order: int, step: int) -> np.ndarray:
    """Relative extrema of ``profile``, the order lowered by ``step`` (not below 1) until there are some."""
    from scipy.signal import argrelextrema

    while True:
        found = argrelextrema(profile, comparator, order=order)[0]
        if len(found) or order == 1:
            if not len(found):
                raise CropError("the bone profile has no relative extremum: the crop cannot find the hip")
            return found
        order = max(1, order - step)


def liver_dome_slice(ct: np.ndarray, body: tuple[slice, ...], voxel: np.ndarray) -> tuple[int, tuple[int, int]]:
    """The slice of the liver dome and the (x, y) centre of the air inside the body (crop_ct_image's lung rules).

    Outside the body's box the image is set to its minimum; the top slice is set to 0 HU (so lungs cut by the field of
    view do not join the outside air), the air below -600 HU is opened with a 5x5x5 cube (but on the top slice) and
    labelled with the x and y borders padded by 3 voxels of air; the largest component is the outside. The dome is the
    later of two slices: where the inner air's 7-slice smoothed profile first exceeds half its range (the second such
    run when the profile falls below a fifth of its range before it), and the lowest slice of the lower of the two
    next-largest air components (the lungs)."""
    from scipy import ndimage
    from scipy.signal import convolve

    inside = np.full(ct.shape, ct.min(), dtype=ct.dtype)
    inside[body] = ct[body]
    inside[:, :, -1] = 0
    air = inside < LUNG_HU
    air[:, :, :-1] = ndimage.binary_opening(air[:, :, :-1], np.ones((5, 5, 5)))
    padded, _count = ndimage.label(np.pad(air, ((3, 3), (3, 3), (0, 0)), mode="constant", constant_values=1))
    labels = padded[3:-3, 3:-3, :]
    counts = np.bincount(labels.ravel(), minlength=_count + 1)[1:]
    if len(counts) < 3:
        raise CropError("fewer than three air regions (outside air and two lungs): the scan must reach the lungs")
    volumes = counts * float(np.prod(voxel))
    ranked = np.sort(volumes)
    ids = np.arange(1, len(counts) + 1)
    outside = ids[volumes == ranked[-1]][0]
    inner_air = (labels != outside) & air
    profile = convolve(inner_air.sum(0).sum(0), np.ones(7), "same")
    low, high = profile.min(), profile.max()
    above = np.where(profile > low + 0.5 * (high - low))[0]
    steps = convolve(above, np.array([1, -1]), "same")
    starts = np.where(steps != 1)[0]
    dome_air = above[0]
    if len(starts) > 1 and np.any(profile[above[starts[1] - 1] : above[starts[1]]] < low + 0.2 * (high - low)):
        dome_air = above[starts[1]]
    box = ndimage.find_objects(inner_air.astype(np.int8))[0]
    centre = ((box[0].start + box[0].stop + 1) // 2, (box[1].start + box[1].stop + 1) // 2)
    lungs = [ids[volumes == ranked[-2]][0], ids[volumes == ranked[-3]][0]]
    bottoms = [ndimage.find_objects((labels == lung).astype(np.int8))[0][2].start for lung in lungs]
    lung_box = ndimage.find_objects((labels == lungs[int(np.argmax(bottoms))]).astype(np.int8))[0]
    return max(int(dome_air), int(lung_box[2].start)), centre


def hip_slice(ct: np.ndarray, dome: int, voxel: np.ndarray) -> int:
    """The hip's slice below the dome (crop_ct_image's bone rules): on the 7-slice smoothed count of voxels above
    500 HU, the lowest relative minimum (order 15, lowered by 3), moved up past the second-highest maximum when it lies
    below both the highest and that one; the hip is the last relative maximum (order 5, lowered by 1) below it whose
    value exceeds ``BONE_HIP_RATIO`` of the way from that minimum to the highest (the ratio lowered by 0.1 until one is
    found), 0 when fewer than two are; at most 400 mm below the dome."""
    from scipy.signal import convolve

    if dome < 1:
        raise CropError(
            f"the liver dome is found on slice {dome}: no slice below it to look for the hip in (the scan does not reach from the lungs to the pelvis)"
        )
    profile = convolve((ct > BONE_HU).astype(np.int16).sum(0).sum(0), np.ones(7), "same")[:dome]
    top = int(np.argmax(profile))
    minima = _extrema(profile, np.less, 15, 3)
    bottom = int(minima[np.argsort(profile[minima])[0]])
    maxima = _extrema(profile, np.greater, 15, 3)
    ranked = np.argsort(profile[maxima])
    second = int(maxima[ranked[-2]] if len(ranked) >= 2 else maxima[ranked[-1]])
    if bottom < top and bottom < second:
        bottom = second + int(np.argmin(profile[second:]))
    peaks = _extrema(profile, np.greater, 5, 1)
    ratio = BONE_HIP_RATIO
    while True:
        high_enough = np.where(profile > ratio * (profile[top] - profile[bottom]) + profile[bottom])[0]
        candidates = np.intersect1d(peaks, high_enough)
        if len(high_enough) and len(candidates):
            break
        if ratio <= 0.05:
            raise CropError("no bone maximum above the hip threshold: the crop cannot find the hip")
        ratio = max(ratio - 0.1, 0.05)
    below = candidates[candidates < bottom]
    hip = 0 if len(below) < 2 else int(below[-1])
    if (dome - hip) * voxel[2] > LIVER_HEIGHT_MAX_MM:
        hip = dome - int(LIVER_HEIGHT_MAX_MM / voxel[2])
    return hip


def abdomen_box(ct: np.ndarray, voxel: np.ndarray) -> tuple[slice, slice, slice]:
    """crop_ct_image as the package calls it for CT: the box (LPS voxels) from below the hip to above the liver dome
    around the body, at most ``SIZE_MM_MAX`` (x and y trimmed around the inner air's centre, z from below)."""
    from scipy import ndimage

    body = _largest_component_box(ndimage.binary_erosion(ct > TISSUE_HU))
    dome, centre = liver_dome_slice(ct, body, voxel)
    hip = hip_slice(ct, dome, voxel)
    z = slice(max(0, hip - int(HIP_MARGIN_MM / voxel[2])), min(ct.shape[2], dome + int(LIVER_DOME_MARGIN_MM / voxel[2])))
    cropped = ct[body[0], body[1], z]
    inner = _largest_component_box(ndimage.binary_erosion(cropped > TISSUE_HU, np.ones((5, 5, 5))).astype(np.int16))
    box = [slice(body[a].start + inner[a].start, body[a].start + inner[a].stop) for a in (0, 1)] + [z]
    for axis in (0, 1):
        size = box[axis].stop - box[axis].start
        excess = size * voxel[axis] - SIZE_MM_MAX[axis]
        if excess > 0:
            cut_start = int(np.ceil((centre[axis] - box[axis].start) / size * excess / voxel[axis]))
            cut_stop = int(np.ceil((box[axis].stop - centre[axis]) / size * excess / voxel[axis]))
            box[axis] = slice(box[axis].start + cut_start, box[axis].stop - cut_stop)
    size = box[2].stop - box[2].start
    if size * voxel[2] > SIZE_MM_MAX[2]:
        box[2] = slice(box[2].start + int(np.ceil((size * voxel[2] - SIZE_MM_MAX[2]) / voxel[2])), box[2].stop)
    return box[0], box[1], box[2]


def network_input(cropped: np.ndarray, voxel: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The crop resampled to half the network's voxel size, median filtered (3x3x3), resampled to its voxel size,
    windowed to [-200, 200] HU and scaled to [-0.5, 0.5]."""
    from scipy.ndimage import median_filter

    fine = resample(cropped.astype(np.float64), voxel / (target / 2.0))
    coarse = resample(median_filter(fine, size=3), (target / 2.0) / target)
    return np.clip(coarse / 1000.0, -0.2, 0.2) * 2.5


def predict_probability(network, volume: np.ndarray) -> np.ndarray:
    """DeepVoxNet's center-sampled prediction: one ``INPUT_SIZE`` segment around the volume's centre voxel
    (ceil((n - 1) / 2) per axis; zeros outside the volume), its ``OUTPUT_SIZE`` centre placed back; voxels outside that
    take the value of the nearest placed voxel."""
    import torch
    from scipy import ndimage

    segment = np.zeros(INPUT_SIZE, dtype=np.float32)
    origin = []  # the volume index of the segment's first voxel, per axis
    source, target = [], []
    for n, d in zip(volume.shape, INPUT_SIZE, strict=True):
        centre = math.ceil((n - 1) / 2)
        first = centre - d // 2
        origin.append(first)
        lo, hi = max(first, 0), min(first + d, n)
        source.append(slice(lo, hi))
        target.append(slice(lo - first, hi - first))
    segment[tuple(target)] = volume[tuple(source)]
    with torch.no_grad():
        output = network(torch.from_numpy(segment)[None, None])[0, 0].numpy().astype(np.float64)
    probability = np.full(volume.shape, np.nan)
    placed_from, placed_to = [], []
    for n, first, d, o in zip(volume.shape, origin, INPUT_SIZE, OUTPUT_SIZE, strict=True):
        start = first + (d - o) // 2
        lo, hi = max(start, 0), min(start + o, n)
        placed_to.append(slice(lo, hi))
        placed_from.append(slice(lo - start, hi - start))
    probability[tuple(placed_to)] = output[tuple(placed_from)]
    missing = np.isnan(probability)
    if missing.any():
        nearest = ndimage.distance_transform_edt(missing, return_distances=False, return_indices=True)
        probability = probability[tuple(nearest)]
    return probability


def liver_mask(probability: np.ndarray, crop_shape: tuple[int, ...]) -> np.ndarray:
    """cnn_liver_pred_postprocess: > 0.5, eroded, its largest 6-connected component, dilated (18-neighbourhood both),
    zoomed linearly onto the crop's voxels and kept where > 0."""
    from scipy import ndimage

    neighbourhood = ndimage.generate_binary_structure(3, 2)
    eroded = ndimage.binary_erosion(probability > 0.5, structure=neighbourhood)
    labels, count = ndimage.label(eroded, structure=ndimage.generate_binary_structure(3, 1))
    sizes = ndimage.sum(eroded, labels, range(count + 1))
    largest = labels == np.argsort(sizes)[-1]
    if count == 0:
        largest[...] = False  # nothing above 0.5: no liver (the package would keep the background's label)
    dilated = ndimage.binary_dilation(largest, structure=neighbourhood).astype(np.int16)
    zoom = np.array(crop_shape) / np.array(dilated.shape)
    return ndimage.zoom(dilated, zoom, order=1, prefilter=False) > 0


def segment_image(network, image, target_voxel: np.ndarray):
    """One NIfTI image -> its liver mask (uint8 0/1) as a NIfTI image on the input's grid."""
    import nibabel as nib

    canonical = nib.as_closest_canonical(image)
    voxel = np.array(canonical.header.get_zooms()[:3], dtype=float)
    lps = np.flip(np.asarray(canonical.dataobj, dtype=np.float64), (0, 1))  # RAS voxels -> LPS voxels
    box = abdomen_box(lps, voxel)
    ras_input = np.flip(network_input(lps[box], voxel, target_voxel), (0, 1))  # the network takes RAS voxels
    probability_lps = np.flip(predict_probability(network, ras_input), (0, 1))
    mask_lps = np.zeros(lps.shape, dtype=np.uint8)
    mask_lps[box] = liver_mask(probability_lps, lps[box].shape)
    mask = nib.Nifti1Image(np.ascontiguousarray(np.flip(mask_lps, (0, 1))), canonical.affine)
    original = nib.orientations.io_orientation(image.affine)
    back = nib.orientations.ornt_transform(nib.orientations.io_orientation(canonical.affine), original)
    result = mask.as_reoriented(back)
    result = nib.Nifti1Image(np.asarray(result.dataobj, dtype=np.uint8), image.affine)
    result.header.set_data_dtype(np.uint8)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, help="folder of <case>.nii.gz CT images")
    parser.add_argument("--output", type=Path, help="folder for <case>.nii.gz liver masks (1 = liver)")
    parser.add_argument("--cases", type=Path, help="file listing the case ids, one a line")
    parser.add_argument("--weights", type=Path, required=True, help=f"folder holding {WEIGHTS_FILE}")
    parser.add_argument("--device", default="cpu", help="cpu only: the port is checked on CPU")
    parser.add_argument("--install-weights", action="store_true", help="only copy and verify the weights into --weights, then exit")
    args = parser.parse_args(argv)
    try:
        if args.install_weights:
            print(f"pyliverlesionseg weights verified at {install_weights(args.weights)}", file=sys.stderr)
            return 0
        if args.input is None or args.output is None or args.cases is None:
            parser.error("--input, --output and --cases are required")
        if args.device != "cpu":
            raise PortError(f"--device {args.device}: the port runs on cpu only (its determinism is checked there)")
        weights_path = checked_weights(args.weights)  # before anything is built: a changed file never runs
        import nibabel as nib
        import torch

        torch.set_num_threads(THREADS)
        torch.use_deterministic_algorithms(True)
        weights, target_voxel = read_keras_weights(weights_path)
        network = build_network(weights)
        cases = [line.strip() for line in args.cases.read_text(encoding="utf-8").splitlines() if line.strip()]
        args.output.mkdir(parents=True, exist_ok=True)
        for case in cases:
            source = args.input / f"{case}.nii.gz"
            if not source.is_file():
                raise PortError(f"{source}: no such image (the harness links <case>.nii.gz for each listed case)")
            start = time.perf_counter()
            try:
                mask = segment_image(network, nib.load(source), target_voxel)
            except CropError as exc:
                print(f"pyliverlesionseg: {case}: no output, the package's crop fails on this image: {exc}", file=sys.stderr)
                continue
            partial = args.output / f".{case}.partial.nii.gz"
            nib.save(mask, partial)
            os.replace(partial, args.output / f"{case}.nii.gz")  # a stopped run leaves no truncated output
            print(f"pyliverlesionseg: {case}: {int(mask.get_fdata().sum())} liver voxels, {time.perf_counter() - start:.1f} s", file=sys.stderr)
    except PortError as exc:
        print(f"pyliverlesionseg: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
