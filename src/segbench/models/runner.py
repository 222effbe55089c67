"""The predict stage: run a model adapter as a subprocess, then bring its outputs onto the dataset.

The harness never imports a model's code or torch (SPEC §1). It writes the case list, runs the
model's command in the model's own environment, and post-processes every native output:
labels remapped by canonical structure name onto the dataset schema, and the label map resampled by
affine onto the reference grid when the model wrote another grid. Final files appear atomically in
``predictions/<dataset>/<model>/<case>.nii.gz``; a case whose file already exists is not run again,
so an interrupted predict resumes where it stopped.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np

from segbench.config import ConfigError, DatasetConfig, ModelConfig
from segbench.datasets import case_ids, reference_path
from segbench.io import save_label_map_atomic, write_json_atomic
from segbench.scoring.geometry import GeometryError, check_same_grid, resample_to_reference
from segbench.scoring.labelmaps import load_nifti

log = logging.getLogger(__name__)


class ModelRunError(RuntimeError):
    """The model's command failed or wrote something the harness cannot use."""


def native_to_dataset(model: ModelConfig, dataset: DatasetConfig) -> dict[int, int]:
    """Map each native label id of ``model`` to the dataset's id for the same structure name.

    Structures the dataset does not score map to background.
    """
    return {native: dataset.labels.get(name, 0) for native, name in model.label_map.items()}


def label_values(labels: np.ndarray) -> list[int]:
    """The distinct values of an integer label map (a histogram, far faster than np.unique on volumes)."""
    low, high = int(labels.min()), int(labels.max())
    if low < 0:
        return sorted(int(v) for v in np.unique(labels))
    return np.flatnonzero(np.bincount(labels.ravel(order="K"), minlength=high + 1)).tolist()


def remap_labels(native: np.ndarray, mapping: dict[int, int], source: Path) -> np.ndarray:
    """Apply ``mapping`` to a label map with a lookup table; unknown native labels are an error."""
    present = label_values(native)
    unknown = [v for v in present if v != 0 and v not in mapping]
    if unknown:
        raise ModelRunError(f"{source}: label values {unknown} are not in the model's label_map")
    table = np.zeros(max(present) + 1, dtype=np.uint8)
    for native_id, dataset_id in mapping.items():
        if native_id < table.size:
            table[native_id] = dataset_id
    return table[native]


def model_command(model: ModelConfig, substitutions: dict[str, str]) -> list[str]:
    """The model's command line with placeholders filled, wrapped for its environment."""
    try:
        argv = [part.format(**substitutions) for part in model.command]
    except KeyError as exc:
        raise ConfigError(f"model {model.name!r}: unknown placeholder {exc} in command; known {sorted(substitutions)}") from exc
    env = model.environment
    kind = env["type"]
    if kind == "harness":
        return argv
    if kind == "venv":
        return [str(Path(env["path"]) / "bin" / argv[0]), *argv[1:]]
    if kind == "conda":
        return ["conda", "run", "--no-capture-output", "-n", str(env["name"]), *argv]
    # container: mount the staging and input folders at the same paths inside the container
    mounts = [arg for p in (substitutions["input_dir"], substitutions["output_dir"], substitutions["weights_dir"]) for arg in ("-v", f"{p}:{p}")]
    gpus = ["--gpus", "all"] if substitutions["device"].startswith("cuda") else []
    return [str(env.get("engine", "docker")), "run", "--rm", "--ipc=host", *gpus, *mounts, str(env["image"]), *argv]


def _input_dir(model: ModelConfig, dataset: DatasetConfig) -> Path:
    if model.input == "reference_labels":
        return dataset.reference_dir
    if dataset.image_dir is None or not dataset.image_dir.is_dir():
        raise ConfigError(
            f"model {model.name!r} needs images but dataset {dataset.name!r} has none here "
            f"(image_dir={dataset.image_dir}); real inference runs on a GPU machine with the images downloaded (README)"
        )
    return dataset.image_dir


def postprocess(case_id: str, native_file: Path, target: Path, model: ModelConfig, dataset: DatasetConfig) -> None:
    """Bring one native output onto the dataset schema and reference grid, atomically."""
    mapping = native_to_dataset(model, dataset)
    reference = reference_path(dataset, case_id)
    native, native_image = load_nifti(native_file)
    reference_image = nib.load(reference)  # header only: the grid to compare against
    try:
        check_same_grid(case_id, reference, reference_image, native_file, native_image)
        on_grid = True
    except GeometryError as difference:
        on_grid = False
        log.info("%s; resampling by affine onto the reference grid", difference)
    if on_grid and all(k == v for k, v in mapping.items()):
        remap_labels(native, mapping, native_file)  # validates the label values
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(native_file, target)
        return
    if not on_grid:
        native_image = resample_to_reference(native_image, reference_image)
        native = np.asarray(native_image.dataobj)
    save_label_map_atomic(target, remap_labels(native, mapping, native_file), reference_image)


def predict(dataset: DatasetConfig, model: ModelConfig, out_dir: Path, *, device: str = "cpu", weights_dir: Path | None = None) -> dict:
    """Run ``model`` on every case of ``dataset`` not yet predicted; returns the manifest it writes."""
    cases = case_ids(dataset)
    todo = [c for c in cases if not (out_dir / f"{c}.nii.gz").is_file()]
    staging = out_dir.parent / f".{out_dir.name}.staging"
    if todo:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        cases_file = staging / "cases.txt"
        cases_file.write_text("\n".join(todo) + "\n", encoding="utf-8")
        substitutions = {
            "python": sys.executable,
            "input_dir": str(_input_dir(model, dataset).resolve()),
            "output_dir": str((staging / "out").resolve()),
            "cases_file": str(cases_file.resolve()),
            "device": device,
            "weights_dir": str((weights_dir or Path("models") / model.name).resolve()),
        }
        (staging / "out").mkdir()
        argv = model_command(model, substitutions)
        log.info("running %s%s on %d case(s): %s", "SIMULATED model " if model.is_simulated else "", model.name, len(todo), shlex.join(argv))
        result = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise ModelRunError(f"model {model.name!r} exited with status {result.returncode}: {shlex.join(argv)}")
        for case_id in todo:
            native_file = staging / "out" / model.output.format(case=case_id)
            if native_file.is_file():
                postprocess(case_id, native_file, out_dir / f"{case_id}.nii.gz", model, dataset)
        shutil.rmtree(staging, ignore_errors=True)
    missing = [c for c in cases if not (out_dir / f"{c}.nii.gz").is_file()]
    if missing:
        log.warning("%s produced no prediction for %d case(s): %s (scored as worst case)", model.name, len(missing), ", ".join(missing))
    manifest = {"dataset": dataset.name, "model": model.name, "kind": model.kind, "cases": cases, "missing": missing}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "manifest.json", manifest)
    return manifest
