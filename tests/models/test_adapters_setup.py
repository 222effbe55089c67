"""Environment creation, environment wrapping of the model command, weights pins and dataset download.

These need network on a real machine; here their command construction, verification and ingest
logic run on real files, without touching the network.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import yaml

from adapters_support import REAL_MODELS, ROOT, classes, load
from segbench.config.params import ConfigError, Params, dataset_from_conf, model_from_conf, parse_params
from segbench.config.validation import compose_params
from segbench.datasets.download import fetch
from segbench.models.envs import create_commands
from segbench.models.runner import ModelRunError, model_command
from segbench.models.weights import weights_status

SUBSTITUTIONS = {
    "python": "/usr/bin/python3",
    "input_dir": "/s/in",
    "output_dir": "/s/out",
    "cases_file": "/s/cases.txt",
    "device": "cuda:1",
    "device_gpu": "gpu:1",
    "weights_dir": "/w",
    "adapters_dir": "/a",
    "case": "c1",
}


@pytest.fixture(scope="module")
def setup_params() -> Params:
    raw = compose_params(ROOT / "conf", [f"model=[{','.join(REAL_MODELS)}]", "dataset=[kits23,amos22,totalsegmentator,btcv,msd_spleen]"])
    return parse_params(raw, ROOT)


@pytest.mark.parametrize("model", REAL_MODELS)
def test_env_create_builds_a_pinned_venv(setup_params: Params, model: str) -> None:
    config = setup_params.model(model)
    commands = create_commands(config, Path("/p"))
    venv = config.environment["path"]
    assert commands[0] == [config.environment["python"], "-m", "venv", f"/p/{venv}"]
    install = next(c for c in commands if c[1:4] == ["-m", "pip", "install"] and "--upgrade" not in c)
    assert install[0] == f"/p/{venv}/bin/python"
    packages = [a for a in install[4:] if not a.startswith("-") and "://" not in a]
    assert packages and all("==" in p for p in packages), f"unpinned packages in {model}: {packages}"
    assert not any("{" in part for command in commands for part in command), "unfilled placeholder"


def test_env_create_for_conda_and_container(setup_params: Params, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = setup_params.model("totalsegmentator")
    conda = dataclasses.replace(base, environment={**base.environment, "type": "conda", "name": "ts", "channels": ["conda-forge"]})
    commands = create_commands(conda)
    assert commands[0] == ["conda", "create", "-y", "-n", "ts", "-c", "conda-forge", "python=3.11"]
    assert commands[1][:7] == ["conda", "run", "-n", "ts", "python", "-m", "pip"]
    # an image by reference is pulled by the machine's runtime, with its flags; an archive needs nothing before it runs
    image_model = model_from_conf(ROOT / "conf", "totalsegmentator_roi_image")
    (tmp_path / "podman").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")  # creating the commands only checks the runtime exists
    (tmp_path / "podman").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SEGBENCH_CONTAINER_RUNTIME", "podman")
    monkeypatch.setenv("SEGBENCH_CONTAINER_GLOBAL_FLAGS", "--runtime runc")
    assert create_commands(image_model) == [["podman", "--runtime", "runc", "pull", "docker.io/wasserth/totalsegmentator:2.18.0"]]
    assert image_model.image is not None
    archived = dataclasses.replace(image_model, image=dataclasses.replace(image_model.image, archive=Path("t.tar"), sha256="ab" * 32, reference=None))
    assert create_commands(archived) == []


def test_cli_env_create_dry_run_prints_the_commands(tmp_path: Path) -> None:
    """Setup commands read conf/ directly: the model need not be in the current params.yaml."""
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-m", "segbench.cli", "env", "create", "monai_wholebody", "--conf", str(ROOT / "conf"), "--dry-run"]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "pip install --extra-index-url https://download.pytorch.org/whl/cu121 monai==1.4.0" in result.stderr
    assert "monai.bundle download --name wholeBody_ct_segmentation --version 0.2.7" in result.stderr


def test_model_command_wraps_the_same_argv_for_each_environment(setup_params: Params) -> None:
    base = setup_params.model("stunet_base")
    argv, variables = model_command(base, SUBSTITUTIONS)
    assert argv[0].endswith("envs/stunet/bin/nnUNet_predict") and argv[1:3] == ["-i", "/s/in"]
    assert variables["RESULTS_FOLDER"] == "/w"
    conda, _ = model_command(dataclasses.replace(base, environment={**base.environment, "type": "conda", "name": "stunet"}), SUBSTITUTIONS)
    assert conda[:5] == ["conda", "run", "--no-capture-output", "-n", "stunet"] and conda[5] == "nnUNet_predict"
    with pytest.raises(ModelRunError, match="a container model runs through its image"):
        model_command(model_from_conf(ROOT / "conf", "totalsegmentator_roi_image"), SUBSTITUTIONS)
    ts, _ = model_command(setup_params.model("totalsegmentator"), SUBSTITUTIONS)
    assert ts[1:] == ["-i", "/s/in/c1.nii.gz", "-o", "/s/out/c1.nii.gz", "--ml", "-ta", "total", "-d", "gpu:1"]


def test_weights_pins_are_import_url_files_and_verified_by_md5(tmp_path: Path, setup_params: Params) -> None:
    for model in REAL_MODELS:
        status = weights_status(setup_params.model(model), ROOT)
        assert status["url"].startswith("https://") and status["status"] in ("unpinned", "missing", "verified", "mismatch")
    monai = setup_params.model("monai_wholebody")
    (tmp_path / "models").mkdir()
    pin = yaml.safe_load((ROOT / "models" / "monai_wholebody.dvc").read_text())
    weights = tmp_path / "models" / pin["outs"][0]["path"]
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"not the weights")
    (tmp_path / "models" / "monai_wholebody.dvc").write_text(yaml.safe_dump(pin))
    assert weights_status(monai, tmp_path)["status"] == "mismatch"
    pin["outs"][0]["md5"] = hashlib.md5(b"not the weights").hexdigest()
    (tmp_path / "models" / "monai_wholebody.dvc").write_text(yaml.safe_dump(pin))
    assert weights_status(monai, tmp_path)["status"] == "verified"


def _relocated(params: Params, name: str, root: Path):
    ds = params.dataset(name)
    return dataclasses.replace(ds, reference_dir=root / ds.reference_dir.relative_to(ROOT), image_dir=root / ds.image_dir.relative_to(ROOT))


def test_manual_download_prints_steps_then_ingests_a_local_copy(tmp_path: Path) -> None:
    btcv = dataset_from_conf(ROOT / "conf", "btcv", tmp_path)  # as `segbench data fetch btcv` reads it
    with pytest.raises(ConfigError, match=r"(?s)Synapse.*1\. Create a Synapse account.*segbench data fetch btcv --source"):
        fetch(btcv)
    seg, image = load("seg_total.nii.gz")
    for folder, name in (("img", "img0001.nii.gz"), ("label", "label0001.nii.gz")):
        (tmp_path / "RawData" / "Training" / folder).mkdir(parents=True, exist_ok=True)
        nib.save(nib.Nifti1Image(seg, image.affine), tmp_path / "RawData" / "Training" / folder / name)
    fetch(btcv, source=tmp_path / "RawData")
    assert (btcv.reference_dir / "label0001.nii.gz").is_file() and (btcv.image_dir / "img0001.nii.gz").is_file()


def test_archive_download_checks_the_md5_and_ingests(tmp_path: Path, setup_params: Params) -> None:
    spleen = _relocated(setup_params, "msd_spleen", tmp_path)
    seg, image = load("seg_total.nii.gz")
    staged = tmp_path / "staged" / "Task09_Spleen"
    for folder in ("imagesTr", "labelsTr"):
        (staged / folder).mkdir(parents=True)
        nib.save(nib.Nifti1Image((seg == 1).astype(np.uint8), image.affine), staged / folder / "spleen_2.nii.gz")
        (staged / folder / "._spleen_2.nii.gz").write_bytes(b"resource fork")
    archive = tmp_path / "Task09_Spleen.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(staged, arcname="Task09_Spleen")
    with pytest.raises(ValueError, match="410d4a301da4e5b2f6f86ec3ddba524e"):
        fetch(spleen, source=archive)  # not the official archive: its md5 differs from the published one
    fetch(dataclasses.replace(spleen, download={**spleen.download, "md5": hashlib.md5(archive.read_bytes()).hexdigest()}), source=archive)
    assert sorted(p.name for p in spleen.reference_dir.iterdir()) == ["spleen_2.nii.gz"]


def test_totalsegmentator_ingest_composes_the_schema_from_masks(tmp_path: Path, setup_params: Params) -> None:
    dataset = _relocated(setup_params, "totalsegmentator", tmp_path)
    seg, image = load("seg_total.nii.gz")
    case = tmp_path / "download" / "s0001"
    (case / "segmentations").mkdir(parents=True)
    nib.save(image, case / "ct.nii.gz")
    for label, name in classes("totalsegmentator_total").items():
        nib.save(nib.Nifti1Image((seg == label).astype(np.uint8), image.affine), case / "segmentations" / f"{name}.nii.gz")
    (tmp_path / "download" / "meta.csv").write_text("image_id;age\ns0001;50\n", encoding="utf-8")
    fetch(dataset, source=tmp_path / "download")
    labels = np.asarray(nib.load(dataset.reference_dir / "s0001.nii.gz").dataobj)
    total = {n: i for i, n in classes("totalsegmentator_total").items()}
    for name, label in dataset.labels.items():
        assert np.array_equal(labels == label, seg == total[name]), name
    assert (dataset.reference_dir.parent / "meta.csv").is_file()
