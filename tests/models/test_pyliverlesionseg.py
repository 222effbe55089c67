"""pyliverlesionseg 0.3's whole-liver CNN, ported to PyTorch, run for real in its own venv on the bundle's 3 mm CT.

The reference is TotalSegmentator's own output on that CT (``seg_total.nii.gz``, liver id 5): a PSEUDO-REFERENCE, a
model's output and not a manual annotation. The first port measured liver Dice 0.964 against it; the test holds the port
to that within 0.01. The model tests need ``envs/pyliverlesionseg`` (``segbench env create pyliverlesionseg``) and skip,
saying so, only when it is absent; the resampling rules, the network's sizes and the config are checked everywhere.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from repo_paths import ROOT
from segbench.config.params import model_from_conf
from segbench.models.envs import create_commands
from segbench.models.weights import weights_status

SCRIPT = ROOT / "src" / "segbench" / "models" / "entrypoints" / "pyliverlesionseg_segment.py"
ENV_PYTHON = ROOT / "envs" / "pyliverlesionseg" / "bin" / "python"
WEIGHTS = ROOT / "models" / "pyliverlesionseg"
EXAMPLE = ROOT / "data" / "totalseg_example"
TOTAL_LIVER = 5  # TotalSegmentator v2 'total' id of the liver
PUBLISHED_DICE = 0.964  # the first port's liver Dice on the 3 mm CT against TotalSegmentator's liver

needs_env = pytest.mark.skipif(
    not ENV_PYTHON.exists(),
    reason="envs/pyliverlesionseg is absent: build it with `segbench env create "
    "pyliverlesionseg` (about 2 min here: torch 2.13.0 CPU, scipy, h5py, nibabel, the pyliverlesionseg 0.3 wheel)",
)


@pytest.fixture(scope="module")
def port():
    """The entrypoint script as a module (its heavy imports are inside its functions)."""
    spec = importlib.util.spec_from_file_location("pyliverlesionseg_segment", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_environment_is_cpu_torch_and_the_wheel_without_its_dependencies() -> None:
    """`segbench env create pyliverlesionseg`: the CPU torch wheel (no CUDA index), the 0.3 wheel with --no-deps and
    --ignore-requires-python (its metadata says Python < 3.7; TensorFlow 1.12 is never installed), then the weights copied
    out of it and checked."""
    model = model_from_conf(ROOT / "conf", "pyliverlesionseg")
    commands = [" ".join(c) for c in create_commands(model, ROOT)]
    assert any("torch==2.13.0" in c and "download.pytorch.org" not in c for c in commands)
    assert any(c.endswith("pip install --no-deps --ignore-requires-python pyliverlesionseg==0.3") for c in commands)
    assert commands[-1].endswith(f"{SCRIPT.name} --install-weights --weights {ROOT / 'models' / 'pyliverlesionseg'}")
    assert model.device == "cpu" and model.label_map == {1: "liver"}


def test_resampling_is_pymirc_zoom3d(port) -> None:
    """Upwards: linear between the two neighbouring centres, zero beyond the edge; downwards: each new voxel the mean of
    the old ones it covers (by overlap), the volume's centre kept, ceil(n * zoom) voxels."""
    line = np.array([0.0, 4.0, 8.0]).reshape(3, 1, 1)
    up = port.resample_axis(line, 2.0, 0).ravel()
    # new centres at -0.25, 0.25, 0.75, 1.25, 1.75, 2.25 in old voxels: 0.75*0 + 0 beyond, then linear
    np.testing.assert_allclose(up, [0.0, 1.0, 3.0, 5.0, 7.0, 6.0])
    down = port.resample_axis(np.arange(6.0).reshape(1, 6, 1), 0.5, 1).ravel()
    np.testing.assert_allclose(down, [0.5, 2.5, 4.5])
    odd = port.resample_axis(np.ones((1, 1, 5)), 0.5, 2).ravel()  # 3 new voxels, the outer two half covered
    np.testing.assert_allclose(odd, [0.75, 1.0, 0.75])
    assert port.resample(np.zeros((10, 9, 4)), np.array([2.0, 0.651, 1.0])).shape == (20, 6, 4)


def test_network_sizes_are_the_published_segment_sizes(port) -> None:
    """unet_liver_predict's output segment 163 x 136 x 136 comes from a 189 x 162 x 162 input through three poolings by 3
    and three 'linear' upsamplings (3n - 2); the skip paths are cropped to 19, 55 and 163 (16, 46, 136)."""
    assert port.upsampled_sizes(port.INPUT_SIZE) == [(19, 16, 16), (55, 46, 46), port.OUTPUT_SIZE]


def _run_port(folder: Path, weights: Path) -> subprocess.CompletedProcess[str]:
    """The model's script in its own venv on ``folder``'s in/ and cases.txt, writing out/, with ``weights``."""
    argv = [str(ENV_PYTHON), str(SCRIPT), "--input", str(folder / "in"), "--output", str(folder / "out"), "--cases", str(folder / "cases.txt")]
    return subprocess.run([*argv, "--weights", str(weights)], capture_output=True, text=True, check=False)


@needs_env
def test_weights_are_the_wheels_and_a_changed_file_never_runs(tmp_path: Path) -> None:
    """The installed weights match the pin's md5 (the predict stage's check) and the script's sha256; a copy with one byte
    changed is refused by the script before the network is built (exit 2, naming the file and both digests)."""
    status = weights_status(model_from_conf(ROOT / "conf", "pyliverlesionseg"), ROOT)
    assert status["status"] == "verified", status
    changed = tmp_path / "weights"
    changed.mkdir()
    target = changed / Path(status["file"]).name
    shutil.copyfile(status["file"], target)
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    (tmp_path / "in").mkdir()
    (tmp_path / "cases.txt").write_text("ct\n", encoding="utf-8")
    result = _run_port(tmp_path, changed)
    assert result.returncode == 2, result.stderr
    assert str(target) in result.stderr and "591ea17c" in result.stderr and "refusing to run" in result.stderr
    assert not (tmp_path / "out").exists()


@needs_env
def test_layer_shapes_are_checked_against_the_file(tmp_path: Path) -> None:
    """Every Conv3D's kernel and bias in the HDF5 must have the shape of the published architecture: a file whose
    conv3d_9 kernel lost its skip-path half (160 input channels instead of 320) is refused, naming the layer."""
    source = WEIGHTS / "model_unet_ct_mr_liv_seg_resize_1.5mm_med_3_resize_3mm_20201011_dice_loss_val_binary_dice_mean.hdf5"
    probe = (
        "import sys, shutil, h5py, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('port', {str(SCRIPT)!r}); port = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(port)\n"
        f"weights, voxel = port.read_keras_weights(__import__('pathlib').Path({str(source)!r}))\n"
        "print(len(weights), voxel.tolist())\n"
        f"bad = {str(tmp_path / 'bad.hdf5')!r}; shutil.copyfile({str(source)!r}, bad)\n"
        "with h5py.File(bad, 'r+') as f:\n"
        "    g = f['conv3d_9']['conv3d_9']\n"
        "    k = g['kernel:0'][()]; del g['kernel:0']; g['kernel:0'] = k[:, :, :, :160]\n"
        "try:\n    port.read_keras_weights(__import__('pathlib').Path(bad))\nexcept port.PortError as exc:\n    print(exc)\n"
    )
    result = subprocess.run([str(ENV_PYTHON), "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    first, refusal = result.stdout.strip().splitlines()
    assert first == "15 [3.0, 3.0, 3.0]"
    assert "conv3d_9" in refusal and "(3, 3, 3, 160, 160)" in refusal and "(3, 3, 3, 320, 160)" in refusal


@needs_env
def test_liver_dice_on_the_3mm_ct(tmp_path: Path) -> None:
    """The real network on the bundle's 3 mm CT (about 90 s, 3.5 GB on 2 cores): liver Dice within 0.01 of 0.964 against
    TotalSegmentator's liver, the mask on the CT's grid as uint8 0/1."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "ct.nii.gz").symlink_to(EXAMPLE / "ct_sm.nii.gz")
    (tmp_path / "cases.txt").write_text("ct\n", encoding="utf-8")
    result = _run_port(tmp_path, WEIGHTS)
    assert result.returncode == 0, result.stderr
    prediction = nib.load(tmp_path / "out" / "ct.nii.gz")
    ct = nib.load(EXAMPLE / "ct_sm.nii.gz")
    assert prediction.shape == ct.shape and np.allclose(prediction.affine, ct.affine)
    mask = np.asarray(prediction.dataobj)
    assert mask.dtype == np.uint8 and set(np.unique(mask)) == {0, 1}
    reference = np.asarray(nib.load(EXAMPLE / "seg_total.nii.gz").dataobj) == TOTAL_LIVER
    dice = 2 * np.logical_and(mask > 0, reference).sum() / ((mask > 0).sum() + reference.sum())
    assert abs(dice - PUBLISHED_DICE) <= 0.01, dice
    print(f"liver Dice {dice:.4f}", file=sys.stderr)
