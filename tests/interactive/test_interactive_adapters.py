"""The four GPU interactive adapters (nnInteractive, SAM-Med3D-turbo, VISTA3D, MedSAM2), proven by contract.

1. Prompt translation, numpy only: a step file written by the harness's own writer is parsed by the
   entry points' functions, and the box and the clicks must come out in each model's convention
   (expectations written here from each project's API: nnInteractive's half-open (z, y, x) boxes and
   points, SAM-Med3D's (x, y, z) crop indices at 1.5 mm, VISTA3D's (1, N, 3) point_coords and
   point_labels, MedSAM2's per-frame (x, y) points and [x0, y0, x1, y1] boxes).
2. Round trip: ``segbench interact`` (its CLI entry, in the test's process) with each model's real config (command, venv wrapping, weights
   folder, device) on a hand-built two-class case. Only the environment is a stand-in: its
   ``bin/python`` runs the real entry point with tests/support/standins/packages first on the path, where
   packages named like the real ones (torch, nnInteractive, medim, monai, sam2) log every call. The
   clicks the harness recorded must reach the model API, in order, in the model's convention.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repo_paths import ROOT, STANDINS
from segbench import cli
from segbench.config.params import model_from_conf
from segbench.interactive import cases, protocol
from segbench.models.envs import create_commands

ENTRYPOINTS = ROOT / "src" / "segbench" / "models" / "entrypoints"
sys.path.insert(0, str(ENTRYPOINTS))  # the entry points import their shared step module from their own folder

import interactive_step  # noqa: E402
import medsam2_interactive  # noqa: E402
import nninteractive_interactive  # noqa: E402
import sammed3d_interactive  # noqa: E402
import vista3d_interactive  # noqa: E402

MODELS = ["nninteractive", "sammed3d_turbo", "vista3d", "medsam2"]
#: where each config's command expects its weights (under the model's weights.dir)
WEIGHTS_FILE = {
    "nninteractive": "models/nnInteractive_v1.0/fold_0/checkpoint_final.pth",
    "sammed3d_turbo": "sam_med3d_turbo.pth",
    "vista3d": "model_final.pth",
    "medsam2": "MedSAM2_latest.pt",
}
BOX_1 = {"z_min": 1, "z_max": 5, "z_mid": 3, "z_mid_y_min": 2, "z_mid_y_max": 9, "z_mid_x_min": 4, "z_mid_x_max": 12}


def _gts() -> np.ndarray:
    gts = np.zeros((10, 24, 24), np.uint8)
    gts[2:7, 4:11, 4:11] = 1
    gts[3:8, 13:21, 12:21] = 2
    return gts


def _step_file(tmp_path: Path, clicks: list[dict] | None, order: list[list] | None, spacing: tuple = (2.0, 1.0, 1.0)) -> interactive_step.Step:
    """A step input written by the harness's writer (segbench.interactive.cases), read by the entry points' reader."""
    gts = _gts()
    boxes = [BOX_1, {"z_min": 3, "z_max": 7, "z_mid": 5, "z_mid_y_min": 12, "z_mid_y_max": 21, "z_mid_x_min": 11, "z_mid_x_max": 21}]
    case = cases.Case("toy", tmp_path / "toy.npz", np.arange(gts.size, dtype=np.int16).reshape(gts.shape), spacing, boxes, gts, 2)
    prev = None if clicks is None else np.where(gts == 2, 2, 0).astype(np.uint8)
    path = tmp_path / "step.npz"
    cases.write_step_input(path, case, clicks, order, prev)
    return interactive_step.read_step(path)


# clicks of class 1 over three click rounds: fg, none (no error), bg; class 2: fg in the last round only
CLICKS = [{"fg": [[4, 6, 7]], "bg": [[5, 3, 11]]}, {"fg": [[5, 16, 15]], "bg": []}]
ORDER = [["fg", None, "bg"], [None, None, "fg"]]


def test_step_reader_orders_clicks_and_keeps_classes_without_a_new_click(tmp_path: Path) -> None:
    step = _step_file(tmp_path, CLICKS, ORDER)
    assert [(k.kind, k.zyx, k.round) for k in step.class_clicks(1)] == [("fg", (4, 6, 7), 0), ("bg", (5, 3, 11), 2)]
    assert step.new_click(1).zyx == (5, 3, 11) and step.new_click(2).zyx == (5, 16, 15)
    two_rounds = _step_file(tmp_path, [{"fg": [[4, 6, 7]], "bg": []}, {"fg": [], "bg": []}], [[None, "fg"], [None, None]])
    assert two_rounds.keeps_previous(2) and not two_rounds.keeps_previous(1)
    calls = []
    segs = interactive_step.assemble(two_rounds, lambda c: calls.append(c) or np.zeros(two_rounds.imgs.shape, bool))
    assert calls == [1] and np.array_equal(segs == 2, _gts() == 2), "class 2 had no error: its previous voxels stand, the model is not asked"
    box_step = _step_file(tmp_path, None, None)
    assert box_step.rounds == 0 and box_step.prev_pred is None and not box_step.keeps_previous(1)


def test_step_reader_refuses_clicks_that_clicks_order_does_not_name(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    np.savez_compressed(
        path,
        imgs=np.zeros((2, 3, 3)),
        spacing=np.ones(3),
        clicks=[{"fg": [[0, 0, 0]], "bg": []}],
        clicks_order=[["bg"]],
        prev_pred=np.zeros((2, 3, 3), np.uint8),
    )
    with pytest.raises(interactive_step.StepError, match="class 1: clicks_order names a 'bg' click"):
        interactive_step.read_step(path)


def test_nninteractive_gets_the_mid_slice_box_and_zyx_points_in_order(tmp_path: Path) -> None:
    step = _step_file(tmp_path, CLICKS, ORDER)
    calls = nninteractive_interactive.interactions(step, 1)
    assert [name for name, _ in calls] == ["add_initial_seg_interaction", "add_bbox_interaction", "add_point_interaction", "add_point_interaction"]
    assert not calls[0][1]["initial_seg"].any(), "class 1 has no voxel in prev_pred"
    # half-open, one slice thick at z_mid: nnInteractive_v1.0 takes 2D boxes only
    assert calls[1][1] == {"bbox_coords": [[3, 4], [2, 10], [4, 13]], "include_interaction": True}
    assert [c[1] for c in calls[2:]] == [{"coordinates": (4, 6, 7), "include_interaction": True}, {"coordinates": (5, 3, 11), "include_interaction": False}]
    assert np.array_equal(nninteractive_interactive.interactions(step, 2)[0][1]["initial_seg"], (_gts() == 2).astype(np.uint8))
    assert [name for name, _ in nninteractive_interactive.interactions(_step_file(tmp_path, None, None), 1)] == ["add_bbox_interaction"]


def test_sammed3d_points_are_crop_indices_in_xyz_order_at_1_5_mm(tmp_path: Path) -> None:
    step = _step_file(tmp_path, CLICKS, ORDER, spacing=(3.0, 0.75, 1.5))
    crop = sammed3d_interactive.Crop(sammed3d_interactive.focus(step, 1), step.spacing)
    assert crop.focus == (5.0, 3.0, 11.0), "a click step centres the crop on the class's new click"
    points, labels = sammed3d_interactive.point_prompts(step, 1, crop)
    # crop index = 64 + (voxel - focus) * spacing / 1.5, axes (x, y, z); the box centre is ((1+5)/2, (2+9)/2, (4+12)/2) = (3, 5.5, 8)
    box_centre = [64 + (8 - 11) * 1.5 / 1.5, 64 + (5.5 - 3) * 0.75 / 1.5, 64 + (3 - 5) * 3.0 / 1.5]
    fg = [64 + (7 - 11) * 1.5 / 1.5, 64 + (6 - 3) * 0.75 / 1.5, 64 + (4 - 5) * 3.0 / 1.5]
    assert points.tolist() == [box_centre, fg, [64.0, 64.0, 64.0]] and labels.tolist() == [1, 1, 0]
    # the crop's axes: a voxel's intensity lands at its (x, y, z) crop index
    assert crop.sample(step.imgs.astype(np.float32), order=1)[64, 64, 64] == step.imgs[5, 3, 11]
    assert crop.sample(step.imgs.astype(np.float32), order=1)[61, 66, 62] == step.imgs[4, 7, 8]
    # and back: 32^3 logits rising along one low-res axis; upsampled (align_corners=False) they are > 0 from crop index 64 on,
    # i.e. crop x = 53 + x >= 64 <=> x >= 11 and crop z = 54 + 2 z >= 64 <=> z >= 5
    zz, _, xx = np.indices(step.imgs.shape)
    ramp = np.arange(32.0) - 15.5
    for low_logits, expected in ((np.broadcast_to(ramp[:, None, None], (32, 32, 32)), xx >= 11), (np.broadcast_to(ramp, (32, 32, 32)), zz >= 5)):
        region, inside, mask = crop.paste(np.ascontiguousarray(low_logits), step.imgs.shape)
        hit = np.zeros(step.imgs.shape, bool)
        hit[region] = mask & inside
        assert np.array_equal(hit, expected)
    box_crop = sammed3d_interactive.Crop(sammed3d_interactive.focus(_step_file(tmp_path, None, None), 1), (2.0, 1.0, 1.0))
    assert box_crop.focus == (3.0, 5.5, 8.0), "the box step centres the crop on the box's centre"


def test_vista3d_gets_zyx_point_coords_and_labels(tmp_path: Path) -> None:
    coords, labels = vista3d_interactive.point_prompts(_step_file(tmp_path, CLICKS, ORDER), 1)
    assert coords.tolist() == [[[3, 5, 8], [4, 6, 7], [5, 3, 11]]] and labels.tolist() == [[1, 1, 0]]
    scaled = vista3d_interactive.scale_intensity(np.arange(101, dtype=np.int16).reshape(1, 1, 101))
    assert scaled.min() == 0.0 and scaled.max() == 1.0 and np.isclose(scaled[0, 0, 50], 0.5)


def test_medsam2_gets_the_box_on_frame_z_mid_and_xy_points_per_frame(tmp_path: Path) -> None:
    clicks = [{"fg": [[3, 6, 7], [4, 6, 9]], "bg": [[3, 2, 11]]}, {"fg": [[5, 16, 15]], "bg": []}]
    order = [["fg", "bg", "fg"], [None, None, "fg"]]
    prompts = medsam2_interactive.frame_prompts(_step_file(tmp_path, clicks, order), 1)
    assert sorted(prompts) == [3, 4]
    assert prompts[3]["box"].tolist() == [4, 2, 12, 9]  # [x_min, y_min, x_max, y_max] on z_mid = 3
    assert prompts[3]["points"].tolist() == [[7, 6], [11, 2]] and prompts[3]["labels"].tolist() == [1, 0]
    assert prompts[4]["box"] is None and prompts[4]["points"].tolist() == [[9, 6]] and prompts[4]["labels"].tolist() == [1]
    assert medsam2_interactive.z_range(_step_file(tmp_path, clicks, order), 1) == (1, 5)
    frames = medsam2_interactive.video_frames(np.arange(2 * 4 * 6, dtype=np.int16).reshape(2, 4, 6))
    assert frames.shape == (2, 3, 512, 512) and frames.dtype == np.float32


class _Logits(np.ndarray):
    """Logits as the predictor yields them: indexable, with .float().cpu().numpy()."""

    def float(self) -> _Logits:
        return self

    def cpu(self) -> _Logits:
        return self

    def numpy(self) -> np.ndarray:
        return np.asarray(self)


def test_medsam2_takes_the_forward_pass_from_the_first_prompted_frame_and_keeps_the_box_z_range(tmp_path: Path) -> None:
    step = _step_file(tmp_path, None, None)  # class 1: box on z_mid 3, z range 1..5, volume of 10 slices
    calls: list = []

    class Predictor:
        def add_new_points_or_box(self, inference_state: dict, frame_idx: int, obj_id: int, points: object, labels: object, box: object) -> None:
            calls.append(("prompt", frame_idx, None if box is None else box.tolist()))

        def propagate_in_video(self, inference_state: dict, reverse: bool = False) -> object:
            calls.append(("propagate", reverse))
            for frame in range(3, -1, -1) if reverse else range(3, 10):  # reverse is negative on the prompted frame 3
                value = -1.0 if reverse and frame == 3 else 1.0
                yield frame, [1], np.full((1, 1, 24, 24), value).view(_Logits)

        def reset_state(self, inference_state: dict) -> None:
            calls.append(("reset",))

    mask = medsam2_interactive.segment_class(step, 1, Predictor(), {})
    assert calls == [("prompt", 3, [4, 2, 12, 9]), ("propagate", False), ("reset",), ("prompt", 3, [4, 2, 12, 9]), ("propagate", True), ("reset",)]
    assert [bool(mask[z].all()) for z in range(10)] == [z in range(1, 6) for z in range(10)]


@pytest.mark.parametrize("model", MODELS)
def test_environment_is_built_from_exact_pins(model: str) -> None:
    config = model_from_conf(ROOT / "conf", model)
    packages = [str(p) for p in config.environment["packages"]]
    assert all("==" in p or re.search(r"\.git@[0-9a-f]{40}$", p) for p in packages), packages
    assert any(command[-len(packages) :] == packages and "install" in command for command in create_commands(config))
    assert config.is_interactive and config.device == "cuda" and config.weights["pin"] == f"models/{model}.dvc"


# --- round trip through `segbench interact` ----------------------------------------------------------


def _case_folder(tmp_path: Path) -> Path:
    """Two round classes off the diagonal (y != x): no stand-in's box answer is exact, so the harness clicks on every model."""
    z, y, x = np.ogrid[:10, :24, :24]
    gts = np.zeros((10, 24, 24), np.uint8)
    gts[((z - 4) * 2) ** 2 + (y - 7) ** 2 + (x - 9) ** 2 <= 16] = 1
    gts[((z - 5) * 2) ** 2 + (y - 16) ** 2 + (x - 13) ** 2 <= 25] = 2
    boxes, _ = protocol.boxes_of_labels(gts, np.random.RandomState(2025))
    imgs = np.where(gts > 0, 200, 20).astype(np.int16) + np.arange(gts.shape[2], dtype=np.int16)
    folder = tmp_path / "cases"
    cases.save_npz_atomic(folder / "imgs" / "toy.npz", imgs=imgs, spacing=np.array([2.0, 1.0, 1.0]), boxes=boxes)
    cases.save_npz_atomic(folder / "gts" / "toy.npz", gts=gts)
    return folder


def _project(tmp_path: Path, model: str) -> Path:
    """A project folder: the pins, stand-in weights where the config points, and the environment whose python is the stand-in's."""
    config = model_from_conf(ROOT / "conf", model)
    project = tmp_path / "project"
    shutil.copytree(ROOT / "models", project / "models", ignore=shutil.ignore_patterns("*/"))
    weights = project / config.weights["dir"] / WEIGHTS_FILE[model]
    weights.parent.mkdir(parents=True)
    weights.write_text("stand-in weights\n", encoding="utf-8")
    python = project / config.environment["path"] / "bin" / "python"
    python.parent.mkdir(parents=True)
    packages = f"{STANDINS / 'packages'}"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{packages}" exec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    return project


def _processes(log: Path) -> list[list[dict]]:
    """The stand-ins' calls grouped by model process (one process per step)."""
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return [list(group) for _, group in groupby(events, key=lambda e: e["pid"])]


def _expected_clicks(record: dict, c: int) -> list[tuple[str, list[int]]]:
    """Class ``c``'s clicks in the order the harness gave them, from its own record."""
    return [(s["clicks"][c - 1]["kind"], s["clicks"][c - 1]["zyx"]) for s in record["steps"][1:] if s["clicks"] and s["clicks"][c - 1]]


def _check_nninteractive(calls: list[dict], record: dict, c: int, first: bool) -> None:
    box = record["boxes"][c - 1]
    calls = [e for e in calls if e["call"].startswith("add_")]
    assert calls[0]["call"] == ("add_bbox_interaction" if first else "add_initial_seg_interaction")
    bbox = next(e for e in calls if e["call"] == "add_bbox_interaction")
    assert bbox["bbox_coords"] == [[box["z_mid"], box["z_mid"] + 1], [box["z_mid_y_min"], box["z_mid_y_max"] + 1], [box["z_mid_x_min"], box["z_mid_x_max"] + 1]]
    points = [(("fg" if e["include_interaction"] else "bg"), e["coordinates"]) for e in calls if e["call"] == "add_point_interaction"]
    assert points == ([] if first else _expected_clicks(record, c))
    assert [e["run_prediction"] for e in calls if "run_prediction" in e][-1] is True and sum(e.get("run_prediction", False) for e in calls) == 1


def _check_sammed3d(calls: list[dict], record: dict, c: int, first: bool) -> None:
    box = record["boxes"][c - 1]
    centre = np.array([(box["z_min"] + box["z_max"]) / 2, (box["z_mid_y_min"] + box["z_mid_y_max"]) / 2, (box["z_mid_x_min"] + box["z_mid_x_max"]) / 2])
    clicks = _expected_clicks(record, c)
    focus = centre if first else np.array(clicks[-1][1], float)
    spacing = np.array(record["spacing"])
    expected = [(64 + (np.array(p) - focus) * spacing / 1.5)[::-1].tolist() for p in [centre, *[zyx for _, zyx in ([] if first else clicks)]]]
    (prompt,) = [e for e in calls if e["call"] == "prompt_encoder"]
    assert np.allclose(prompt["points"], expected) and prompt["labels"] == [1, *[int(k == "fg") for k, _ in ([] if first else clicks)]]
    assert prompt["boxes"] is None and (prompt["mask_voxels"] == 0 or not first), "the box step has no previous mask"


def _check_vista3d(calls: list[dict], record: dict, c: int, first: bool) -> None:
    (call,) = [e for e in calls if e["call"] == "point_based_window_inferer"]
    box = record["boxes"][c - 1]
    clicks = [] if first else _expected_clicks(record, c)
    centre = [box["z_mid"], (box["z_mid_y_min"] + box["z_mid_y_max"]) // 2, (box["z_mid_x_min"] + box["z_mid_x_max"]) // 2]
    assert call["point_coords"] == [centre, *[zyx for _, zyx in clicks]] and call["point_labels"] == [1, *[int(k == "fg") for k, _ in clicks]]
    assert call["transpose"] is True and call["with_coord"] is True and call["roi_size"] == [128, 128, 128] and call["intensity"] == [0.0, 1.0]


def _check_medsam2(calls: list[dict], record: dict, c: int, first: bool) -> None:
    box = record["boxes"][c - 1]
    prompts = [e for e in calls if e["call"] == "add_new_points_or_box"]
    assert len(prompts) % 2 == 0 and prompts[: len(prompts) // 2] == prompts[len(prompts) // 2 :], "the same prompts before each propagation"
    once = prompts[: len(prompts) // 2]
    boxed = [e for e in once if e["box"] is not None]
    assert [(e["frame_idx"], e["box"]) for e in boxed] == [(box["z_mid"], [box["z_mid_x_min"], box["z_mid_y_min"], box["z_mid_x_max"], box["z_mid_y_max"]])]
    given = sorted((e["frame_idx"], tuple(p), label) for e in once for p, label in zip(e["points"] or [], e["labels"] or [], strict=True))
    clicks = [] if first else _expected_clicks(record, c)
    assert given == sorted((z, (x, y), int(k == "fg")) for k, (z, y, x) in clicks)
    assert [e["reverse"] for e in calls if e["call"] == "propagate_in_video"] == [False, True]


#: per model: the call that ends one class's run, and the check of that run's calls
PER_CLASS: dict[str, tuple[Callable[[dict], bool], Callable]] = {
    "nninteractive": (lambda e: e.get("run_prediction") is True, _check_nninteractive),
    "sammed3d_turbo": (lambda e: e["call"] == "prompt_encoder", _check_sammed3d),
    "vista3d": (lambda e: e["call"] == "point_based_window_inferer", _check_vista3d),
    "medsam2": (lambda e: e["call"] == "propagate_in_video" and e["reverse"], _check_medsam2),
}
#: per model: (call, field, expected value with {weights} = the weights file or folder) proving the config's arguments arrived
LOADED = {
    "nninteractive": ("initialize_from_trained_model_folder", "folder", "models/nninteractive/models/nnInteractive_v1.0"),
    "sammed3d_turbo": ("create_model", "checkpoint_path", "models/sammed3d/sam_med3d_turbo.pth"),
    "vista3d": ("load_state_dict", "checkpoint", "models/vista3d/model_final.pth"),
    "medsam2": ("build_sam2_video_predictor_npz", "ckpt_path", "models/medsam2/MedSAM2_latest.pt"),
}


def _per_class(process: list[dict], model: str) -> list[list[dict]]:
    """One process's calls split into its classes' runs, each ending at the model's last per-class call."""
    ends, _ = PER_CLASS[model]
    runs: list[list[dict]] = [[]]
    for event in process:
        runs[-1].append(event)
        if ends(event):
            runs.append([])
    return runs[:-1]


@pytest.mark.parametrize("model", MODELS)
def test_segbench_interact_round_trip_through_the_real_entry_point(
    tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    project = _project(tmp_path, model)
    log = tmp_path / "calls.jsonl"
    out = tmp_path / "out"
    # `segbench interact` in this process (its scoring code is compiled once for all four models); the model runs as its own process
    monkeypatch.chdir(project)
    monkeypatch.setenv("SEGBENCH_STANDIN_LOG", str(log))
    status = cli.main(
        [
            "interact",
            "--cases",
            str(_case_folder(tmp_path)),
            "--model",
            model,
            "--out",
            str(out),
            "--conf",
            str(ROOT / "conf"),
            "--reference",
            "manual",
            "--device",
            "cuda:0",
            "--allow-unverified-weights",
        ]
    )
    assert status == 0, capsys.readouterr().err[-3000:]
    row = pd.read_csv(out / "metrics.csv").iloc[0]
    record = json.loads((out / "records" / "toy.json").read_text(encoding="utf-8"))
    assert pd.isna(row["failed_steps"]) and [s["output"] for s in record["steps"]] == ["ok"] * 6
    assert row["DSC_1"] > 0, "the stand-in draws the box prompt: its answer arrived and was scored"
    given = [k for c in (1, 2) for k, _ in _expected_clicks(record, c)]
    assert "fg" in given or "bg" in given, "the case must make the harness click, or the check below is empty"
    processes = _processes(log)
    assert len(processes) == 6, "one model process per step"
    call, field, path = LOADED[model]
    for number, process in enumerate(processes, start=1):
        loaded = [e for e in process if e["call"] == call]
        assert [e[field] for e in loaded] == [str((project / path).resolve())], f"step {number}: weights from the config's path"
        assert any(str(v) == "cuda:0" for e in process for v in e.values()), f"step {number}: --device reached the model"
        step = record["steps"][number - 1]
        needed = [c for c in (1, 2) if number == 1 or step["clicks"][c - 1] is not None]
        runs = _per_class(process, model)
        assert len(runs) == len(needed), f"step {number}: one model run per class with a new prompt ({needed})"
        for c, run in zip(needed, runs, strict=True):
            PER_CLASS[model][1](run, {**record, "steps": record["steps"][:number]}, c, number == 1)
