"""`segbench predict` for every real adapter, GPU-free: only the model's executable is replaced.

Each model runs through its real config (command line, environment wrapping, input layout, output
pattern and reader, label map); its environment is a folder whose bin/ holds a stand-in named like
the real executable (tests/support/standins/). The stand-ins write TotalSegmentator's real recorded outputs
(data/totalseg_example), or, for the other models, that recording rewritten into the model's
published label ids and written in its documented layout. Case ct2's image and reference sit on a
flipped grid while the model writes the original one, so the resampling path runs; the second run
checks the cache. Scores come from the real scoring engine (segauge).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import yaml

from adapters_support import MODEL_CLASS_LIST, REAL_MODELS, ROOT, classes, flipped, load, to_schema, translate
from repo_paths import STANDINS
from segbench.config.params import load_params, model_from_conf
from segbench.config.validation import compose_params
from segbench.models.image_build import REGION_GROWING, build_image, default_cache
from segbench.models.runner import ModelRunError
from segbench.models.runner import predict as runner_predict
from segbench.scoring.engine import score_cases
from tests_support import podman_runtime, use_runtime

#: model -> its executable (argv[0] of its command) and the recording it replays
EXECUTABLE = {
    "totalsegmentator": "TotalSegmentator",
    "totalsegmentator_fast": "TotalSegmentator",
    "totalsegmentator_roi": "TotalSegmentator",
    "totalsegmentator_mr": "TotalSegmentator",
    "moose_organs": "moosez",
    "monai_wholebody": "python",
    "ctfm_wholebody": "python",
    "stunet_base": "nnUNet_predict",
}
RECORDING = {"totalsegmentator_fast": "seg_total_fast.nii.gz", "totalsegmentator_roi": "seg_roi_subset.nii.gz", "totalsegmentator_mr": "seg_mr.nii.gz"}
CT_CASES, MR_CASES = ["ct1", "ct2"], ["mr1"]


def _write(path: Path, image: nib.Nifti1Image) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(image, path)


@pytest.fixture(scope="module")
def adapters_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose amos22 (CT) and btcv (MR) datasets are built from data/totalseg_example."""
    proj = tmp_path_factory.mktemp("adapters") / "proj"
    shutil.copytree(ROOT / "models", proj / "models", ignore=shutil.ignore_patterns("*/"))
    shutil.copy(ROOT / "data.dvc", proj / "data.dvc")  # predictions record the data bundle version they were made from
    raw = compose_params(ROOT / "conf", [f"model=[{','.join(REAL_MODELS)}]", "dataset=[amos22,btcv]"])
    total = classes("totalsegmentator_total")
    ct, ct_image = load("ct_sm.nii.gz")
    seg, seg_image = load("seg_total.nii.gz")
    mr, mr_image = load("mr_sm.nii.gz")
    seg_mr, seg_mr_image = load("seg_mr.nii.gz")
    for name, cases in (("amos22", CT_CASES), ("btcv", MR_CASES)):
        spec = raw["dataset"][name]
        spec.update(reference_dir=f"data/{name}/labels", image_dir=f"data/{name}/images", file_pattern="{case}.nii.gz", image_pattern="{case}.nii.gz")
    raw["dataset"]["btcv"]["modality"] = "MR"  # the MR case stands in for an MR dataset in BTCV's schema
    amos_labels = raw["dataset"]["amos22"]["labels"]
    reference = to_schema(seg, total, amos_labels)
    _write(proj / "data/amos22/images/ct1.nii.gz", ct_image)
    _write(proj / "data/amos22/labels/ct1.nii.gz", nib.Nifti1Image(reference, seg_image.affine))
    _write(proj / "data/amos22/images/ct2.nii.gz", flipped(ct_image, ct))
    _write(proj / "data/amos22/labels/ct2.nii.gz", flipped(seg_image, reference))
    _write(proj / "data/btcv/images/mr1.nii.gz", mr_image)
    mr_reference = to_schema(seg_mr, classes("totalsegmentator_total_mr"), raw["dataset"]["btcv"]["labels"])
    _write(proj / "data/btcv/labels/mr1.nii.gz", nib.Nifti1Image(mr_reference, seg_mr_image.affine))
    for model in REAL_MODELS:
        # the environment is a folder whose bin/ holds the stand-in; everything else is the real config
        raw["model"][model]["environment"]["path"] = f"envs/{model}"
        bin_dir = proj / "envs" / model / "bin"
        bin_dir.mkdir(parents=True)
        exe = bin_dir / EXECUTABLE[model]
        exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDINS / (EXECUTABLE[model] + ".py")}" "$@"\n', encoding="utf-8")
        exe.chmod(0o755)
        # recordings: the real TotalSegmentator output, or it rewritten into the model's published ids
        native, native_image = load(RECORDING.get(model, "seg_total.nii.gz"))
        if MODEL_CLASS_LIST[model] != "totalsegmentator_total" and model != "totalsegmentator_mr":
            native = translate(native, total, classes(MODEL_CLASS_LIST[model]))
        for case in CT_CASES + MR_CASES:
            _write(proj / "recordings" / model / f"{case}.nii.gz", nib.Nifti1Image(native, native_image.affine))
    (proj / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return proj


def predict(project: Path, model: str, dataset: str, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "SEGBENCH_STANDIN_RECORDINGS": str(project / "recordings" / model),
        "SEGBENCH_STANDIN_LOG": str(project / f"calls_{model}.jsonl"),
    }
    argv = [sys.executable, "-m", "segbench.cli", "predict", "--dataset", dataset, "--model", model, "--device", "cuda:0", *extra]
    return subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, check=False)


def calls(project: Path, model: str) -> list[dict]:
    log = project / f"calls_{model}.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


def scored(project: Path, model: str, dataset: str) -> tuple[dict, dict[str, list[float]]]:
    """The manifest and the Dice per scored region over the dataset's cases (real scoring engine)."""
    params = load_params(project / "params.yaml")
    ds = params.dataset(dataset)
    ds = type(ds)(**{**ds.__dict__, "reference_dir": project / ds.reference_dir.relative_to(project)})
    out = project / "predictions" / dataset / model
    manifest = json.loads((out / "manifest.json").read_text())
    regions = [r for r in ds.regions if manifest["regions"][r.name]["status"] == "scored"]
    cases = [(c, ds.reference_dir / f"{c}.nii.gz", out / f"{c}.nii.gz") for c in manifest["cases"]]
    rows = score_cases(cases, regions, workers=2, progress=False)
    dice: dict[str, list[float]] = {}
    for _, row in rows[rows["reference_present"]].iterrows():
        dice.setdefault(row["structure"], []).append(float(row["dice"]))
    return manifest, dice


def test_unverified_weights_are_refused_without_the_flag(adapters_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(adapters_folder)
    params = load_params(adapters_folder / "params.yaml")
    with pytest.raises(ModelRunError, match="weights are unpinned .*--allow-unverified-weights"):
        runner_predict(params.dataset("amos22"), params.model("totalsegmentator"), adapters_folder / "predictions" / "refused")
    assert not calls(adapters_folder, "totalsegmentator") and not (adapters_folder / "predictions" / "refused").exists(), "the model must not run"


@pytest.mark.parametrize("model", [m for m in REAL_MODELS if m != "totalsegmentator_mr"])
def test_predict_remaps_resamples_and_scores(adapters_folder: Path, model: str) -> None:
    result = predict(adapters_folder, model, "amos22", "--allow-unverified-weights")
    assert result.returncode == 0, result.stderr
    made = calls(adapters_folder, model)
    assert len(made) == (2 if model.startswith("totalsegmentator") else 1)  # per-case tool vs one call per dataset
    manifest, dice = scored(adapters_folder, model, "amos22")
    assert manifest["missing"] == [] and not manifest["weights"]["publishable"]
    assert manifest["weights"]["status"] in ("unpinned", "missing")
    na = sorted(r for r, v in manifest["regions"].items() if v["status"] == "not_applicable")
    assert "prostate_or_uterus" in na
    for region, values in dice.items():
        assert len(values) == len(CT_CASES)
        assert values[0] == values[1], f"{model} {region}: resampled case ct2 differs from ct1"
    if model == "totalsegmentator_fast":  # the real 3 mm model against the real full-resolution output
        assert all(np.mean(dice[r]) > 0.7 for r in ("liver", "spleen", "kidney_left", "kidney_right")), dice
        return
    if model == "totalsegmentator_roi":  # the recording holds the liver only: the rest must be flagged, not published as 0
        assert min(dice["liver"]) > 0.95  # roi_subset runs on a crop: 0.99 against the full run
        flagged = sorted(r for r, v in manifest["regions"].items() if v["status"] == "flagged")
        assert flagged == ["kidney_left", "kidney_right", "pancreas", "spleen"], manifest["regions"]
        return
    assert all(v == 1.0 for values in dice.values() for v in values), dice
    assert {"liver", "spleen", "kidney_left", "kidney_right", "aorta" if model != "moose_organs" else "stomach"} <= set(dice)
    if model == "moose_organs":
        assert {"aorta", "inferior_vena_cava", "esophagus", "duodenum"} <= set(na)


def test_mr_adapter_on_an_mr_dataset(adapters_folder: Path) -> None:
    params = load_params(adapters_folder / "params.yaml")
    with pytest.raises(ModelRunError, match="segments MR images; dataset 'amos22' is CT"):
        runner_predict(params.dataset("amos22"), params.model("totalsegmentator_mr"), adapters_folder / "predictions" / "refused_mr")
    result = predict(adapters_folder, "totalsegmentator_mr", "btcv", "--allow-unverified-weights")
    assert result.returncode == 0, result.stderr
    manifest, dice = scored(adapters_folder, "totalsegmentator_mr", "btcv")
    assert manifest["regions"]["portal_vein_and_splenic_vein"]["status"] == "scored"
    assert dice and all(v == 1.0 for values in dice.values() for v in values), dice


def test_cached_predictions_are_not_rerun_and_a_lost_case_resumes(adapters_folder: Path) -> None:
    model = "stunet_base"
    assert predict(adapters_folder, model, "amos22", "--allow-unverified-weights").returncode == 0
    before = len(calls(adapters_folder, model))
    assert predict(adapters_folder, model, "amos22", "--allow-unverified-weights").returncode == 0
    assert len(calls(adapters_folder, model)) == before, "a fully cached dataset must not run the model"
    (adapters_folder / "predictions" / "amos22" / model / "ct2.nii.gz").unlink()
    assert predict(adapters_folder, model, "amos22", "--allow-unverified-weights").returncode == 0
    last = calls(adapters_folder, model)[-1]["argv"]
    staged = Path(last[last.index("-i") + 1])
    assert len(calls(adapters_folder, model)) == before + 1
    assert (adapters_folder / "predictions" / "amos22" / model / "ct2.nii.gz").is_file() and not staged.exists()


def test_the_published_image_config_runs_through_the_container_path(adapters_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conf/model/totalsegmentator_roi_image.yaml as configured (command, variables, invocation per case, output pattern, label
    map), its image replaced by a stand-in: Debian with python3 and the TotalSegmentator stand-in, pinned as any archive is.
    Every call is one isolated podman run; the case's staged image must be readable inside (a symlink's target is not mounted)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc debootstrap)")
    monkeypatch.chdir(adapters_folder)
    params = load_params(adapters_folder / "params.yaml")
    dataset, configured = params.dataset("amos22"), model_from_conf(ROOT / "conf", "totalsegmentator_roi_image")
    with pytest.raises(ModelRunError, match="image docker.io/wasserth/totalsegmentator:2.18.0 is not pinned by digest.*--allow-unverified-weights"):
        runner_predict(dataset, configured, adapters_folder / "predictions" / "refused_image")
    wrapper = tmp_path / "TotalSegmentator"
    wrapper.write_text('#!/bin/sh\nexec python3 /workspace/TotalSegmentator.py "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    recipe = dataclasses.replace(
        REGION_GROWING,
        tag="segbench-test-totalsegmentator-standin:latest",
        packages=("python3",),
        files={"TotalSegmentator": wrapper, "TotalSegmentator.py": STANDINS / "TotalSegmentator.py", "_recording.py": STANDINS / "_recording.py"},
    )
    built = build_image(recipe, default_cache())
    assert configured.image is not None
    spec = dataclasses.replace(
        configured.image.spec,
        memory="2g",
        cpus=1.0,
        shm_size="64m",
        variables={
            **configured.image.spec.variables,
            "PATH": "/workspace:/usr/bin:/bin",
            "SEGBENCH_STANDIN_RECORDINGS": "/recordings",
            "SEGBENCH_STANDIN_LOG": "/tmp/calls.jsonl",
        },
        mounts=(("{weights_dir}/totalsegmentator_roi", "/recordings"),),
    )
    model = dataclasses.replace(configured, image=dataclasses.replace(configured.image, archive=built.archive, sha256=built.sha256, reference=None, spec=spec))
    runtime = podman_runtime()
    use_runtime(monkeypatch, runtime)
    out = adapters_folder / "predictions" / "amos22" / "totalsegmentator_roi_image"
    manifest = runner_predict(dataset, model, out, device="cpu", weights_dir=adapters_folder / "recordings")
    assert manifest["missing"] == [] and manifest["weights"]["status"] == "verified" and manifest["weights"]["publishable"]
    assert sorted(p.name for p in out.glob("*.nii.gz")) == ["ct1.nii.gz", "ct2.nii.gz"]
    _, dice = scored(adapters_folder, "totalsegmentator_roi_image", "amos22")
    assert min(dice["liver"]) > 0.95 and dice["liver"][0] == dice["liver"][1]  # as the venv adapter's run (the recording holds the liver)
    flagged = sorted(r for r, v in manifest["regions"].items() if v["status"] == "flagged")
    assert flagged == ["kidney_left", "kidney_right", "pancreas", "spleen"], manifest["regions"]
    leftover = runtime.call("ps", "-a", "--filter", "name=^segbench-totalsegmentator_roi_image", "--format", "{{.Names}}").stdout.split()
    assert leftover == []
    # the same image answering with a symlink to a file of the host: refused unread, the case missing with its reason
    linking = dataclasses.replace(spec, command=("/bin/sh", "-c", "ln -s /etc/hostname {output_dir}/{case}.nii.gz"))
    hostile = dataclasses.replace(model, image=dataclasses.replace(model.image, spec=linking))
    manifest = runner_predict(
        dataset, hostile, adapters_folder / "predictions" / "amos22" / "hostile", device="cpu", weights_dir=adapters_folder / "recordings"
    )
    assert manifest["missing"] == ["ct1", "ct2"] and sorted(manifest["refused"]) == ["ct1", "ct2"]
    assert manifest["refused"]["ct1"].endswith("out/ct1/ct1.nii.gz: a symlink, not a regular file; refused unread"), manifest["refused"]
