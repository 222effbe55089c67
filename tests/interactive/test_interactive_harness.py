"""``segbench interact`` step by step, with a stand-in model that replays planned predictions.

Two classes in parallel on a hand-built volume; the clicks, scores and areas are derived by hand in
the comments. Also: a case without boxes, an over-time case, missing and all-zero outputs, and the
bad inputs that must stop with an error naming the file and key.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from repo_paths import ROOT, STANDINS
from segbench.config.params import model_from_conf
from segbench.interactive import cases, harness, protocol

STANDIN = STANDINS / "interactive_plan.py"


def _gts() -> np.ndarray:
    # class 1: a bar of 3 voxels along x (all tie at EDT 1; the seed-42 draw among 3 is index 2 ->
    # (0, 0, 2)); class 2: a 3x3x3 cube whose centre (2, 4, 4) is the unique EDT maximum
    gts = np.zeros((4, 6, 6), np.uint8)
    gts[0, 0, 0:3] = 1
    gts[1:4, 3:6, 3:6] = 2
    return gts


def _case_folder(tmp_path: Path, *, boxes: bool = True, gts: np.ndarray | None = None) -> Path:
    gts = _gts() if gts is None else gts
    folder = tmp_path / "cases"
    arrays = {"imgs": np.arange(gts.size, dtype=np.int16).reshape(gts.shape), "spacing": np.array([1.0, 1.0, 1.0])}
    if boxes:
        arrays["boxes"] = [
            {"z_min": 0, "z_max": 0, "z_mid": 0, "z_mid_x_min": 0, "z_mid_y_min": 0, "z_mid_x_max": 2, "z_mid_y_max": 0},
            {"z_min": 1, "z_max": 3, "z_mid": 2, "z_mid_x_min": 3, "z_mid_y_min": 3, "z_mid_x_max": 5, "z_mid_y_max": 5},
        ]
    cases.save_npz_atomic(folder / "imgs" / "toy.npz", **arrays)
    cases.save_npz_atomic(folder / "gts" / "toy.npz", gts=gts)
    return folder


def _model(tmp_path: Path, plan: dict[str, np.ndarray], wait_for: Path | None = None, busy: bool = False, via_shell: bool = False):
    """A kind-interactive model config in a copy of conf/, running the stand-in on ``plan`` (each call first
    waits until ``wait_for`` exists, when given: sleeping, or ``busy`` computing). ``via_shell``: the stand-in is a
    child of a shell, as in a model's `sh predict.sh`."""
    np.savez(tmp_path / "plan.npz", **plan)
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    command = [
        "{python}",
        str(STANDIN),
        "--input",
        "{input}",
        "--output",
        "{output}",
        "--plan",
        str(tmp_path / "plan.npz"),
        "--log",
        str(tmp_path / "calls.jsonl"),
        *(["--wait-for", str(wait_for)] if wait_for else []),
        *(["--busy"] if busy else []),
    ]
    if via_shell:
        command = ["sh", "-c", '"$0" "$@"; exit $?', *command]
    spec = {"plan": {"kind": "interactive", "environment": {"type": "harness"}, "command": command, "weights": None, "device": "cpu"}}
    (conf / "model" / "plan.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return model_from_conf(conf, "plan")


def _calls(tmp_path: Path) -> list[dict]:
    log = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


def test_two_classes_in_parallel_missing_output_and_auc(tmp_path: Path) -> None:
    gts = _gts()
    only_1 = np.where(gts == 1, 1, 0).astype(np.uint8)
    # step 1: class 1 right, class 2 empty -> DSC (1 + 0)/2 = 0.5 > 0.2, NSD (1 + 0)/2 = 0.5
    # step 2: no output -> all zero: DSC 0, NSD 0 (not computed)
    # steps 3-6: perfect -> 1, 1. AUC over steps 2..6 = (0+1)/2 + 1 + 1 + 1 = 3.5
    plan = {"step_1": only_1, "step_3": gts, "step_4": gts, "step_5": gts, "step_6": gts}
    out = tmp_path / "out"
    table = harness.interact(_case_folder(tmp_path), _model(tmp_path, plan), out, reference="manual")
    row = table.iloc[0]
    assert [row[f"DSC_{i}"] for i in range(1, 7)] == [0.5, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert [row[f"NSD_{i}"] for i in range(1, 7)] == [0.5, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert row["DSC_AUC"] == row["NSD_AUC"] == 3.5 and row["DSC_Final"] == row["NSD_Final"] == 1.0
    assert row["num_class"] == 2 and row["runtime_upperbound"] == 180.0 and row["CaseName"] == "toy.npz"
    assert row["failed_steps"] == "2" and not row["over_time"] and row["reference"] == "manual"
    assert list(pd.read_csv(out / "metrics.csv").columns) == [*harness.COLUMNS, *harness.EXTRA_COLUMNS]
    record = json.loads((out / "records" / "toy.json").read_text())
    clicks = [s["clicks"] for s in record["steps"]]
    # before step 2 (after step 1): class 1 has no error -> None; class 2 all missed -> fg at the cube's centre
    assert clicks[1] == [None, {"kind": "fg", "zyx": [2, 4, 4]}]
    # before step 3 (step 2 was all zero): class 1 fg at the tie draw (0, 0, 2), class 2 again at the centre
    assert clicks[2] == [{"kind": "fg", "zyx": [0, 0, 2]}, {"kind": "fg", "zyx": [2, 4, 4]}]
    assert clicks[3] == clicks[4] == clicks[5] == [None, None]
    assert record["clicks"] == [{"fg": [[0, 0, 2]], "bg": []}, {"fg": [[2, 4, 4], [2, 4, 4]], "bg": []}]
    assert record["clicks_order"] == [[None, "fg", None, None, None], ["fg", "fg", None, None, None]]
    # the model saw the box step's keys, then the click steps' keys
    calls = _calls(tmp_path)
    assert [c["step"] for c in calls] == [1, 2, 3, 4, 5, 6]
    assert calls[0]["keys"] == ["boxes", "imgs", "spacing"]
    assert calls[1]["keys"] == ["boxes", "clicks", "clicks_order", "imgs", "prev_pred", "spacing"]
    with np.load(out / "segs" / "toy.npz") as saved:
        assert saved["all_segs"].shape == (6, *gts.shape) and saved["steps"].tolist() == [1, 2, 3, 4, 5, 6]
        assert not saved["all_segs"][1].any() and np.array_equal(saved["segs"], gts)


def test_case_without_boxes_skips_the_box_step(tmp_path: Path) -> None:
    gts = _gts()
    plan = {f"step_{k}": gts for k in range(2, 7)}
    out = tmp_path / "out"
    row = harness.interact(_case_folder(tmp_path, boxes=False), _model(tmp_path, plan), out, reference="manual").iloc[0]
    assert row["DSC_1"] == row["NSD_1"] == row["RunningTime_1"] == 0.0
    assert row["DSC_AUC"] == 4.0 and row["failed_steps"] == ""
    calls = _calls(tmp_path)
    assert [c["step"] for c in calls] == [2, 3, 4, 5, 6]  # no call for step 1
    assert "boxes" not in calls[0]["keys"]
    record = json.loads((out / "records" / "toy.json").read_text())
    # the first clicks are taken on an empty prediction: class 1 at the tie draw, class 2 at the centre
    assert record["steps"][1]["clicks"] == [{"kind": "fg", "zyx": [0, 0, 2]}, {"kind": "fg", "zyx": [2, 4, 4]}]
    with np.load(out / "segs" / "toy.npz") as saved:
        assert saved["steps"].tolist() == [2, 3, 4, 5, 6]


def test_all_zero_output_scores_zero(tmp_path: Path) -> None:
    zeros = np.zeros_like(_gts())
    row = harness.interact(_case_folder(tmp_path), _model(tmp_path, {f"step_{k}": zeros for k in range(1, 7)}), tmp_path / "out", reference="manual").iloc[0]
    assert all(row[f"{m}_{i}"] == 0.0 for m in ("DSC", "NSD") for i in range(1, 7)) and row["DSC_AUC"] == 0.0


def test_over_time_case_scores_zero_and_is_flagged(tmp_path: Path) -> None:
    gts = _gts()
    plan = {f"step_{k}": gts for k in range(1, 7)}
    out = tmp_path / "out"
    # 2 classes x 0.5 s = 1 s for the case; the model waits for a file nobody creates: the first call is stopped at 1 s
    held = _model(tmp_path, plan, wait_for=tmp_path / "never-released")
    row = harness.interact(_case_folder(tmp_path), held, out, reference="manual", seconds_per_class=0.5).iloc[0]
    assert row["over_time"] and row["TotalRunningTime"] >= 1.0
    assert row["DSC_AUC"] == row["NSD_Final"] == row["DSC_1"] == 0.0
    record = json.loads((out / "records" / "toy.json").read_text())
    assert [s["output"] for s in record["steps"]] == ["stopped_at_time_limit", *["not_run"] * 5]
    assert _calls(tmp_path) == []  # killed before it wrote anything


def test_cpu_clock_stops_a_computing_model_at_its_cpu_seconds(tmp_path: Path) -> None:
    """On the cpu clock the budget is CPU seconds of the model's processes, its children's included (the stand-in
    runs under a shell here): a model computing without end is stopped once it has spent them, however busy the
    machine (docs/interactive.md#time-limit)."""
    gts = _gts()
    out = tmp_path / "out"
    # 2 classes x 0.5 s = 1 CPU second for the case; the model computes until a file nobody creates appears
    busy = _model(tmp_path, {f"step_{k}": gts for k in range(1, 7)}, wait_for=tmp_path / "never-released", busy=True, via_shell=True)
    row = harness.interact(_case_folder(tmp_path), busy, out, reference="manual", seconds_per_class=0.5, time_limit_clock="cpu").iloc[0]
    assert row["over_time"] and row["time_limit_clock"] == "cpu" and row["TotalCPUTime"] >= 1.0
    assert row["DSC_AUC"] == row["DSC_1"] == 0.0
    record = json.loads((out / "records" / "toy.json").read_text())
    assert record["time_limit_clock"] == "cpu" and [s["output"] for s in record["steps"]] == ["stopped_at_time_limit", *["not_run"] * 5]
    assert json.loads((out / "run.json").read_text())["time_limit_clock"] == "cpu"


def test_cpu_clock_stops_a_model_that_spends_no_cpu_at_ten_times_its_budget(tmp_path: Path) -> None:
    """A model that sleeps spends almost no CPU: on the cpu clock it is still stopped, at 10x the case's budget in
    wall seconds, and counts as over the limit, so a hung model never hangs the run."""
    out = tmp_path / "out"
    asleep = _model(tmp_path, {f"step_{k}": _gts() for k in range(1, 7)}, wait_for=tmp_path / "never-released")
    row = harness.interact(_case_folder(tmp_path), asleep, out, reference="manual", seconds_per_class=0.5, time_limit_clock="cpu").iloc[0]
    assert row["over_time"] and row["TotalRunningTime"] >= 10.0 and row["TotalCPUTime"] < 1.0
    record = json.loads((out / "records" / "toy.json").read_text())
    assert [s["output"] for s in record["steps"]] == ["stopped_at_time_limit", *["not_run"] * 5]


@pytest.mark.parametrize(("clock", "users", "seen"), [("cpu", None, "PASSIVE"), ("cpu", "ACTIVE", "ACTIVE"), ("wall", None, None)])
def test_cpu_clock_calls_wait_passively_unless_the_user_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: str, users: str | None, seen: str | None
) -> None:
    """Spinning OpenMP threads would be charged to the model on the cpu clock, the more so the busier the machine: its
    calls get OMP_WAIT_POLICY=PASSIVE; the user's own setting wins, and the wall clock leaves the environment as it is."""
    if users is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", users)
    model = _model(tmp_path, {"step_1": _gts()})
    harness.interact(_case_folder(tmp_path), model, tmp_path / "out", reference="manual", time_limit_clock=clock)
    assert [call["omp_wait_policy"] for call in _calls(tmp_path)] == [seen] * 6


def test_time_limit_clock_is_validated(tmp_path: Path) -> None:
    model = _model(tmp_path, {})
    with pytest.raises(ValueError, match="time_limit_clock must be one of wall, cpu, got 'gpu'"):
        harness.interact(_case_folder(tmp_path), model, tmp_path / "out", reference="manual", time_limit_clock="gpu")


def test_bad_inputs_stop_with_the_file_and_key(tmp_path: Path) -> None:
    gts = _gts()
    folder = _case_folder(tmp_path)
    image = folder / "imgs" / "toy.npz"
    with np.load(image, allow_pickle=True) as data:
        good = dict(data)
    # npz without imgs
    cases.save_npz_atomic(image, spacing=good["spacing"], boxes=good["boxes"])
    with pytest.raises(cases.CaseError, match=r"toy\.npz: key 'imgs' missing"):
        cases.load_case("toy", image, folder / "gts" / "toy.npz")
    # a box key missing
    boxes = [dict(b) for b in good["boxes"]]
    del boxes[1]["z_mid_x_max"]
    cases.save_npz_atomic(image, imgs=good["imgs"], spacing=good["spacing"], boxes=boxes)
    with pytest.raises(cases.CaseError, match=r"toy\.npz: key 'boxes', class 2: box key\(s\) \['z_mid_x_max'\] missing"):
        cases.load_case("toy", image, folder / "gts" / "toy.npz")
    # segs of the wrong shape, of a float dtype, out of range
    for segs, message in (
        (np.zeros((4, 6, 5), np.uint8), "has shape"),
        (gts.astype(np.float32), "has dtype float32"),
        (gts.astype(np.int16) * 300, r"has values 0..600; the case's labels are 0..2"),
        (gts * 2, r"has values 0..4; the case's labels are 0..2"),
    ):
        np.savez(tmp_path / "segs.npz", segs=segs)
        with pytest.raises(cases.CaseError, match=rf"segs\.npz: key 'segs' {message}"):
            cases.read_step_output(tmp_path / "segs.npz", gts.shape, 2)
    np.savez(tmp_path / "nosegs.npz", other=gts)
    with pytest.raises(cases.CaseError, match=r"nosegs\.npz: key 'segs' missing"):
        cases.read_step_output(tmp_path / "nosegs.npz", gts.shape, 2)
    # missing and unreadable outputs are zeros for the step, not errors
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    assert cases.read_step_output(tmp_path / "broken.npz", gts.shape, 2) == (None, "unreadable", None)
    assert cases.read_step_output(tmp_path / "absent.npz", gts.shape, 2) == (None, "missing", None)
    # clicks outside the volume
    step = tmp_path / "step.npz"
    clicks = [{"fg": [[0, 0, 2]], "bg": []}, {"fg": [[4, 4, 4]], "bg": []}]
    cases.save_npz_atomic(image, **good)
    case = cases.load_case("toy", image, folder / "gts" / "toy.npz")
    with pytest.raises(cases.CaseError, match=r"step\.npz: key 'clicks', class 2: fg click \[4, 4, 4\] is not a voxel .* inside the volume"):
        cases.write_step_input(step, case, clicks, [["fg"], ["fg"]], prev_pred=gts)
    assert not step.exists()
    # a reference that is neither declared nor recorded
    with pytest.raises(cases.CaseError, match="manual or pseudo"):
        cases.reference_kind(folder, None)


class _RunsCode:
    """A pickled object whose unpickling runs a shell command (what a hostile case file's ``boxes`` can hold)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.marker}",)


def test_a_case_file_whose_pickle_runs_code_is_refused_unrun(tmp_path: Path) -> None:
    """Case files carry pickled boxes, as the challenge's do; a downloaded case folder whose pickle names ``os.system``
    ran it on the host as the case was read. Plain data (numpy arrays, lists, dicts, numbers; numpy 1's pickles too) loads."""
    folder = _case_folder(tmp_path)
    image = folder / "imgs" / "toy.npz"
    with np.load(image, allow_pickle=True) as data:
        good = dict(data)
    plain = cases.load_case("toy", image, folder / "gts" / "toy.npz")
    # the boxes pickled as numpy 1 pickles them (the challenge's own files: numpy.core.multiarray's globals)
    numpy1 = io.BytesIO()
    np.lib.format.write_array_header_1_0(numpy1, {"descr": "|O", "fortran_order": False, "shape": good["boxes"].shape})
    numpy1.write(pickle.dumps(good["boxes"], protocol=3).replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    np.savez(image, imgs=good["imgs"], spacing=good["spacing"])
    with zipfile.ZipFile(image, "a") as archive:
        archive.writestr("boxes.npy", numpy1.getvalue())
    assert cases.load_case("toy", image, folder / "gts" / "toy.npz").boxes == plain.boxes
    marker = tmp_path / "ran"
    hostile = np.empty(1, dtype=object)
    hostile[0] = _RunsCode(marker)
    np.savez(image, imgs=good["imgs"], spacing=good["spacing"], boxes=hostile)
    with pytest.raises(cases.CaseError, match=r"toy\.npz: not a readable npz file \(its pickle names posix\.system, not plain data"):
        cases.load_case("toy", image, folder / "gts" / "toy.npz")
    assert not marker.exists(), "the case file's pickle ran"


def test_interactive_kind_runs_only_under_interact(tmp_path: Path) -> None:
    model = _model(tmp_path, {})
    assert model.is_interactive and model.label_map == {}
    automatic = model_from_conf(ROOT / "conf", "sim_dilate_1mm")
    with pytest.raises(harness.ModelRunError, match="kind 'interactive'"):
        harness.interact(_case_folder(tmp_path), automatic, tmp_path / "out", reference="manual")


def test_over_time_zeroes_the_scores_of_a_finished_case(tmp_path: Path) -> None:
    gts = _gts()
    folder = _case_folder(tmp_path)
    model = _model(tmp_path, {f"step_{k}": gts for k in range(1, 7)})
    case = cases.load_case("toy", folder / "imgs" / "toy.npz", folder / "gts" / "toy.npz")
    from segbench.models.runner import model_command

    subs = {"python": sys.executable, "input": str(tmp_path / "w" / "inputs" / "toy.npz"), "output": str(tmp_path / "w" / "outputs" / "toy.npz")}
    record, _, _ = harness.run_case(case, harness.host_call(*model_command(model, subs)), tmp_path / "w", limit_s=600.0)
    row, measured = harness._row(case, record, 600.0, "wall", "manual", protocol.Scoring())
    assert measured["DSC_AUC"] == row["DSC_AUC"] == 4.0 and not row["over_time"]
    assert (row["protocol_version"], row["nsd_profile"]) == ("2025-03-25", "deepmind")
    # the challenge's rule before 2025-03-25 put the box step in the AUC too: 5 unit steps of a perfect model
    assert harness._row(case, record, 600.0, "wall", "manual", protocol.Scoring("2025-03-04"))[0]["DSC_AUC"] == 5.0
    # the same calls judged against a limit they exceed: every score 0, the case flagged, the measured values kept
    row, measured = harness._row(case, record, record["total_running_time_s"] / 2, "wall", "pseudo", protocol.Scoring())
    assert row["over_time"] and row["DSC_AUC"] == row["DSC_Final"] == row["NSD_6"] == 0.0 and measured["DSC_AUC"] == 4.0
    assert row["reference"] == "PSEUDO-REFERENCE"
    # on the cpu clock the judge is the calls' CPU seconds (the toy model's Python processes spend some)
    assert 0.0 < record["total_cpu_time_s"]
    assert harness._row(case, record, record["total_cpu_time_s"] / 2, "cpu", "manual", protocol.Scoring())[0]["over_time"]
    assert not harness._row(case, record, record["total_cpu_time_s"] * 2, "cpu", "manual", protocol.Scoring())[0]["over_time"]
