"""The predict stage: run a model adapter as a subprocess, then bring its outputs onto the dataset.

The harness never imports a model's code or torch (docs/methodology.md#2-model-kinds). It writes the case list, runs the
model's command in the model's own environment, and post-processes every native output:
labels remapped by canonical structure name onto the dataset schema, and the label map resampled by
affine onto the reference grid when the model wrote another grid. Final files appear atomically in
``predictions/<dataset>/<model>/<case>.nii.gz``; a case whose file already exists is not run again,
so an interrupted predict resumes where it stopped.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import nibabel as nib
import numpy as np

from segbench.base.io import remove_partial_files, save_label_map_atomic, write_json_atomic
from segbench.base.schema import ConfigError
from segbench.datasets.cases import case_ids, data_version, reference_path
from segbench.datasets.schema import DatasetConfig
from segbench.models import container, intake
from segbench.models.layouts import INPUT_LAYOUTS, OUTPUT_READERS, find_output
from segbench.models.schema import ModelConfig
from segbench.models.structures import compose
from segbench.models.weights import PUBLISHABLE, weights_status
from segbench.models.weights import weights_dir as default_weights_dir
from segbench.scoring.geometry import GeometryError, check_same_grid, resample_to_reference
from segbench.scoring.labelmaps import load_nifti

log = logging.getLogger(__name__)

#: scripts segbench ships for models without a command-line tool; run inside the model's environment
ADAPTERS_DIR = Path(__file__).resolve().parent / "entrypoints"
#: written first into a predictions folder: which inputs its files were made from (see _start_or_resume)
INPUTS_STAMP = ".inputs.json"


class ModelRunError(RuntimeError):
    """The model's command failed or wrote something the harness cannot use."""


def native_to_dataset(model: ModelConfig, dataset: DatasetConfig) -> dict[int, int]:
    """Map each native label id of ``model`` to the dataset id of the structure it belongs to.

    By canonical name, through :func:`segbench.models.structures.compose`: a native structure that
    is the dataset structure, or one of its parts (``kidney_left`` -> KiTS ``kidney``), takes that
    structure's id; structures the dataset does not score map to background.
    """
    composition = compose(model.label_map.values(), dataset.labels, where=f"model {model.name!r} on dataset {dataset.name!r}")
    target = {part: dataset.labels[structure] for structure, parts in composition.items() for part in parts or ()}
    return {native: target.get(name, 0) for native, name in model.label_map.items()}


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


def model_command(model: ModelConfig, substitutions: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The model's command line with placeholders filled, wrapped for its environment, and its extra
    environment variables (``environment.variables``, placeholders filled too)."""
    try:
        argv = [part.format(**substitutions) for part in model.command]
        variables = {k: str(v).format(**substitutions) for k, v in model.environment.get("variables", {}).items()}
    except KeyError as exc:
        raise ConfigError(f"model {model.name!r}: unknown placeholder {exc} in command; known {sorted(substitutions)}") from exc
    env = model.environment
    kind = env["type"]
    if kind == "harness":
        return argv, variables
    if kind == "venv":
        return [str(Path(env["path"]).resolve() / "bin" / argv[0]), *argv[1:]], variables
    if kind == "conda":
        return ["conda", "run", "--no-capture-output", "-n", str(env["name"]), *argv], variables
    raise ModelRunError(f"model {model.name!r}: a container model runs through its image (segbench.models.container), not a host command")


def image_path(dataset: DatasetConfig, case_id: str) -> Path:
    """The input image of ``case_id`` (``image_dir`` / ``image_pattern``)."""
    assert dataset.image_dir is not None
    return dataset.image_dir / dataset.image_pattern.format(case=case_id)


def stage_inputs(model: ModelConfig, dataset: DatasetConfig, cases: list[str], staging: Path) -> Path:
    """The folder the model reads: the reference labels (simulated models), or the cases' images
    linked into the model's ``input_layout`` under ``staging`` (only the cases still to predict)."""
    if model.input == "reference_labels":
        return dataset.reference_dir
    if dataset.image_dir is None or not dataset.image_dir.is_dir():
        raise ConfigError(
            f"model {model.name!r} needs images but dataset {dataset.name!r} has none here "
            f"(image_dir={dataset.image_dir}); real inference runs on a GPU machine with the images downloaded (docs/guide.md, Real models)"
        )
    folder = staging / "in"
    for case_id in cases:
        image = image_path(dataset, case_id)
        if not image.exists():
            raise ConfigError(f"dataset {dataset.name!r}, case {case_id}: image {image} does not exist")
        INPUT_LAYOUTS[model.input_layout](case_id, image, folder)
    return folder


def postprocess(case_id: str, native_output: Path, target: Path, model: ModelConfig, dataset: DatasetConfig) -> None:
    """Bring one native output (file or mask folder) onto the dataset schema and reference grid, atomically."""
    mapping = native_to_dataset(model, dataset)
    reference = reference_path(dataset, case_id)
    reference_image = cast(nib.Nifti1Image, nib.load(reference))  # header only: the grid to compare against
    if native_output.is_file() and model.output_format == "multilabel" and all(k == v for k, v in mapping.items()):
        try:  # already in the dataset schema: if it is on the reference grid, move it without decoding
            check_same_grid(case_id, reference, reference_image, native_output, cast(nib.Nifti1Image, nib.load(native_output)))
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(native_output, target)  # label values are validated against the schema when scored
            return
        except GeometryError:
            pass
    try:
        native, native_image = OUTPUT_READERS[model.output_format](native_output, model.label_map)
    except ValueError as exc:
        raise ModelRunError(f"model {model.name!r}, case {case_id}: {exc}") from exc
    try:
        check_same_grid(case_id, reference, reference_image, native_output, native_image)
        on_grid = True
    except GeometryError as difference:
        on_grid = False
        log.info("%s; resampling by affine onto the reference grid", difference)
    labels = remap_labels(native, mapping, native_output)  # validates the label values
    if not on_grid:
        labels = np.asarray(resample_to_reference(nib.Nifti1Image(labels, native_image.affine), reference_image).dataobj)
    save_label_map_atomic(target, labels, reference_image)


def applicability(model: ModelConfig, dataset: DatasetConfig) -> tuple[dict[str, dict], dict[str, dict]]:
    """Per dataset structure and per scored region: does this model segment it?

    Structures: ``{"status": "segmented" | "not_applicable", "from": [model structures]}``.
    Regions: ``{"status": "scored" | "not_applicable", "reason": str | None}``; a region is not
    applicable when a structure it needs (one not in the region's ``optional`` list) is not segmented.
    """
    composition = compose(model.label_map.values(), dataset.labels, where=f"model {model.name!r} on dataset {dataset.name!r}")
    structures = {name: {"status": "not_applicable" if parts is None else "segmented", "from": list(parts or ())} for name, parts in composition.items()}
    ids = {v: k for k, v in dataset.labels.items()}
    regions: dict[str, dict[str, Any]] = {}
    for region in dataset.regions:
        needed = [ids[label] for label in region.labels if ids[label] not in dataset.region_optional.get(region.name, ())]
        missing = [name for name in needed if composition[name] is None]
        if missing or not any(composition[ids[label]] for label in region.labels):
            missing = missing or [ids[label] for label in region.labels]
            regions[region.name] = {"status": "not_applicable", "reason": f"model does not segment {missing}"}
        else:
            regions[region.name] = {"status": "scored", "reason": None}
    return structures, regions


def _dice(reference: np.ndarray, prediction: np.ndarray) -> float | None:
    total = int(reference.sum()) + int(prediction.sum())
    return None if not reference.any() else 2.0 * int(np.logical_and(reference, prediction).sum()) / total


def spot_check(model: ModelConfig, dataset: DatasetConfig, out_dir: Path, cases: list[str], regions: dict[str, dict]) -> None:
    """Flag scored regions whose mean Dice over the first ``spot_check.cases`` predicted cases is below
    ``spot_check.floor``: a wrong label mapping must never be published as a model's zero.

    Updates ``regions`` in place: ``status`` becomes ``flagged`` with ``spot_check_dice`` and a reason.
    """
    checked = [c for c in cases if (out_dir / f"{c}.nii.gz").is_file()][: model.spot_check["cases"]]  # type: ignore[index]  # an int (models/schema.py)
    dice: dict[str, list[float]] = {name: [] for name, r in regions.items() if r["status"] == "scored"}
    for case_id in checked:
        reference, _ = load_nifti(reference_path(dataset, case_id))
        prediction, _ = load_nifti(out_dir / f"{case_id}.nii.gz")
        for region in dataset.regions:
            if region.name in dice:
                value = _dice(np.isin(reference, region.labels), np.isin(prediction, region.labels))
                if value is not None:
                    dice[region.name].append(value)
    for name, values in dice.items():
        mean = float(np.mean(values)) if values else None
        regions[name]["spot_check_dice"] = mean
        if mean is not None and mean < model.spot_check["floor"]:
            regions[name].update(status="flagged", reason=f"mean Dice {mean:.3f} over {len(values)} case(s) < floor {model.spot_check['floor']}")
            log.warning("model %s on %s: region %s flagged and excluded: %s", model.name, dataset.name, name, regions[name]["reason"])


def inputs_fingerprint(model: ModelConfig, dataset: DatasetConfig, folder: str | None = None) -> str:
    """Hash of what a model's predictions depend on besides the images: its config, the dataset's config, the data bundle
    version, the adapter code (its syntax trees: layout and comments aside) and, for a ``predictions`` model, ``folder``
    (its files' digest). Paths are left out (a moved checkout is the same)."""
    code = hashlib.sha256()
    for source in sorted(Path(__file__).resolve().parent.rglob("*.py")):  # the code's syntax tree: a reformatting or a comment is no new code
        code.update(ast.dump(ast.parse(source.read_bytes(), str(source))).encode())
    if model.image is not None:  # the image is its sha256 or reference, wherever its archive lies
        model = dataclasses.replace(model, image=dataclasses.replace(model.image, archive=None))
    model = dataclasses.replace(model, source=None)  # its files are ``folder``, wherever they lie
    configs = {
        kind: {k: v for k, v in dataclasses.asdict(config).items() if not isinstance(v, Path)} for kind, config in (("model", model), ("dataset", dataset))
    }
    payload = json.dumps({**configs, "data": data_version(), "code": code.hexdigest(), **({"folder": folder} if folder else {})}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def folder_digest(folder: Path) -> dict[str, Any]:
    """The sha256 of a predictions folder's files (relative names and contents; a symlink by its name and target, never
    followed) and their count: the manifest's record of which files a ``predictions`` model was scored from."""
    if not folder.is_dir() or folder.is_symlink():
        raise ConfigError(f"predictions folder {folder}: not a folder (a symlinked folder is refused: point path at the folder itself)")
    digest, count = hashlib.sha256(), 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            path = Path(root) / name
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            if path.is_symlink():
                digest.update(b"link:" + os.readlink(path).encode())
            else:
                with path.open("rb") as stream:
                    digest.update(hashlib.file_digest(stream, "sha256").digest())
                count += 1
    return {"sha256": digest.hexdigest(), "files": count}


def stage_predictions(dataset: DatasetConfig, model: ModelConfig, cases: list[str], staging: Path, out_dir: Path, **_: object) -> None:
    """The predict stage of a ``predictions`` model (an :data:`Executor`): run nothing; each case's file in the folder
    (``output`` pattern) is checked as untrusted (inside the folder, no symlink on the way, NIfTI header against the
    reference grid: :func:`check_container_output`), copied and brought onto the dataset schema and grid like a model's
    native output. A case without a file gets none; a refused file is recorded (the case counts as missing)."""
    assert model.source is not None
    folder = model.source.path
    refused = {}
    for case_id in cases:
        try:
            native = find_output(model.output, case_id, folder, folder, model.name)
        except ValueError as exc:
            raise ModelRunError(str(exc)) from exc
        if native is None:
            continue
        try:
            check_container_output(native, folder, cast(nib.Nifti1Image, nib.load(reference_path(dataset, case_id))).shape, model.output_format)
        except intake.IntakeError as exc:
            log.warning("predictions %s, case %s: file refused: %s (the case counts as missing)", model.name, case_id, exc)
            refused[case_id] = str(exc)
            continue
        copy = staging / "copy" / native.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if native.is_dir() else shutil.copyfile)(native, copy)
        postprocess(case_id, copy, out_dir / f"{case_id}.nii.gz", model, dataset)
        shutil.rmtree(copy) if copy.is_dir() else copy.unlink(missing_ok=True)
    if refused:
        write_json_atomic(staging / REFUSED_FILE, refused)


def _start_or_resume(out_dir: Path, fingerprint: str) -> None:
    """Keep predictions made from the same inputs (an interrupted run resumes); otherwise start over."""
    stamp = out_dir / INPUTS_STAMP
    if out_dir.exists():
        recorded = json.loads(stamp.read_text(encoding="utf-8")).get("fingerprint") if stamp.is_file() else None
        if recorded != fingerprint:
            log.info("%s: made from other inputs (model, dataset, data or adapter code changed): starting over", out_dir)
            shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for leftover in remove_partial_files(out_dir):
        log.info("%s: removed %s, left by an interrupted write", out_dir, leftover.name)
    write_json_atomic(stamp, {"fingerprint": fingerprint})


def _run(argv: list[str], variables: dict[str, str], model: ModelConfig, what: str) -> None:
    log.info("running %s%s on %s: %s", "SIMULATED model " if model.is_simulated else "", model.name, what, shlex.join(argv))
    result = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL, env={**os.environ, **variables})
    if result.returncode != 0:
        raise ModelRunError(f"model {model.name!r} exited with status {result.returncode} on {what}: {shlex.join(argv)}")


def predict_cases(dataset: DatasetConfig, model: ModelConfig, cases: list[str], staging: Path, out_dir: Path, *, device: str, weights_dir: Path | None) -> None:
    """Run the model's command on ``cases`` with its inputs and native outputs under the empty folder ``staging``,
    then bring each native output into ``out_dir/<case>.nii.gz`` (a case the model wrote nothing for gets no file)."""
    cases_file = staging / "cases.txt"
    cases_file.write_text("\n".join(cases) + "\n", encoding="utf-8")
    input_dir = stage_inputs(model, dataset, cases, staging).resolve()
    output_dir = (staging / "out").resolve()
    output_dir.mkdir()
    substitutions = {
        "python": sys.executable,
        "input_dir": str(input_dir),
        "output_dir": str(output_dir),
        "cases_file": str(cases_file.resolve()),
        "device": device,
        "device_gpu": device.replace("cuda", "gpu"),  # TotalSegmentator's spelling: gpu, gpu:N, cpu
        "weights_dir": str((weights_dir or default_weights_dir(model)).resolve()),
        "adapters_dir": str(ADAPTERS_DIR),
    }
    folders = dict.fromkeys(cases, output_dir)
    if model.image is not None:
        folders = _predict_in_container(model, cases, input_dir, output_dir, device, Path(substitutions["weights_dir"]))
    elif model.invocation == "case":
        for case_id in cases:
            _run(*model_command(model, {**substitutions, "case": case_id}), model, f"case {case_id}")
    else:
        _run(*model_command(model, substitutions), model, f"{len(cases)} case(s)")
    refused = {}
    for case_id in cases:
        try:
            native = find_output(model.output, case_id, input_dir, folders[case_id], model.name)
        except ValueError as exc:
            raise ModelRunError(str(exc)) from exc
        if native is None:
            continue
        if model.image is not None:  # a container's outputs are untrusted: checked before a voxel is read
            try:
                check_container_output(native, folders[case_id], cast(nib.Nifti1Image, nib.load(reference_path(dataset, case_id))).shape, model.output_format)
            except intake.IntakeError as exc:
                log.warning("model %s, case %s: output refused: %s (the case counts as missing)", model.name, case_id, exc)
                refused[case_id] = str(exc)
                continue
        postprocess(case_id, native, out_dir / f"{case_id}.nii.gz", model, dataset)
    if refused:
        write_json_atomic(staging / REFUSED_FILE, refused)


def check_container_output(native: Path, folder: Path, reference_shape: tuple[int, ...], output_format: str) -> None:
    """Refuse a container's native output (segbench.models.intake) unless it lies inside ``folder`` with no symlink on the
    way and every NIfTI of it passes :func:`segbench.models.intake.check_nifti_output` against the reference grid."""
    relative = Path(os.path.relpath(native, folder))
    if relative.parts[0] == os.pardir:
        raise intake.IntakeError(f"{native}: outside the outputs folder {folder}; refused unread")
    for depth in range(1, len(relative.parts)):  # the folders on the way: real folders, never symlinks
        step = folder.joinpath(*relative.parts[:depth])
        if step.is_symlink() or not step.is_dir():
            raise intake.IntakeError(f"{step}: a symlink or not a folder on the way to {native}; refused unread")
    if output_format == "mask_folder":
        mode = os.lstat(native).st_mode
        if not stat.S_ISDIR(mode):
            raise intake.IntakeError(f"{native}: not a real folder of masks; refused unread")
        files = sorted(native.glob("*.nii.gz"))
    else:
        files = [native]
    for file in files:
        intake.check_nifti_output(file, reference_shape)


def _predict_in_container(model: ModelConfig, cases: list[str], input_dir: Path, output_dir: Path, device: str, weights_dir: Path) -> dict[str, Path]:
    """Run the model's image isolated (segbench.models.container.run): once per case (invocation ``case``, each into its own
    empty folder under ``output_dir``) or once for all; returns each case's output folder.

    Placeholders of the image's command and variables: ``{input_dir}`` / ``{output_dir}`` are the mounts inside,
    ``{case}`` (invocation ``case``), ``{device}`` / ``{device_gpu}`` (cpu, or cuda / gpu: the GPU the container is given
    is its only one); mount sources also take ``{weights_dir}`` (the host's).
    """
    assert model.image is not None
    runtime = container.Runtime.from_environment()
    image = container.ready_image(runtime, model.image)
    _materialise_links(input_dir)
    gpu = device.startswith("cuda")
    values = {
        "input_dir": model.image.spec.inputs_mount,
        "output_dir": model.image.spec.outputs_mount,
        "device": "cuda" if gpu else "cpu",
        "device_gpu": "gpu" if gpu else "cpu",
        "weights_dir": str(weights_dir),
    }
    calls = (
        [(f"case {c}", [c], output_dir / c, {**values, "case": c}) for c in cases]
        if model.invocation == "case"
        else [(f"{len(cases)} case(s)", cases, output_dir, values)]
    )
    folders = {}
    for what, group, folder, filled in calls:
        spec = container.with_values(model.image.spec, filled)
        log.info("running %s in its image %s on %s: %s", model.name, image[:19], what, shlex.join(spec.command))
        result = container.run(runtime, image, spec, input_dir, folder, model.image.timeout_s, device=device, name_prefix=f"segbench-{model.name}")
        if not result.ok:
            raise ModelRunError(f"model {model.name!r} on {what}: {result.reason}\n{result.log.strip()[-2000:]}")
        folders.update(dict.fromkeys(group, folder))
    return folders


def _materialise_links(folder: Path) -> None:
    """Replace the staged inputs' symlinks (their targets are not mounted in a container) by hard links, or copies across filesystems."""
    for path in sorted(Path(folder).rglob("*")):
        if path.is_symlink():
            target = path.resolve(strict=True)
            path.unlink()
            try:
                os.link(target, path)
            except OSError:
                shutil.copyfile(target, path)


def _shown_path(path: Path) -> str:
    """``path`` relative to the project when inside it (a manifest is an output: no machine's absolute path in it)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name


#: the staging folder's record of the container outputs refused unread: {case: one-line reason}
REFUSED_FILE = "refused.json"

#: runs the cases still to predict: (dataset, model, cases, empty staging folder, predictions folder, device=, weights_dir=)
Executor = Callable[..., None]


def predict(
    dataset: DatasetConfig,
    model: ModelConfig,
    out_dir: Path,
    *,
    device: str = "cpu",
    weights_dir: Path | None = None,
    allow_unverified_weights: bool = False,
    executor: Executor | None = None,
) -> dict:
    """Run ``model`` on every case of ``dataset`` not yet predicted; returns the manifest it writes.

    ``executor`` runs the cases still to predict: :func:`predict_cases` here and now by default; a cluster executor
    (:mod:`segbench.models.slurm`) must leave the same files in ``out_dir``. Refuses to run a real model whose
    weights are not verified against their pin unless ``allow_unverified_weights``; the manifest's
    ``weights.status`` records what was used.
    """
    if not model.is_simulated and model.modality != dataset.modality:
        raise ModelRunError(f"model {model.name!r} segments {model.modality} images; dataset {dataset.name!r} is {dataset.modality}")
    cases = case_ids(dataset)
    weights = weights_status(model)
    if model.image is not None and not model.image.pinned and not allow_unverified_weights:
        raise ModelRunError(
            f"model {model.name!r}: image {model.image.reference} is not pinned by digest (name@sha256:...; "
            "docs/guide.md#real-models); pin it or pass --allow-unverified-weights (results are then marked unpublishable)"
        )
    if weights["status"] not in PUBLISHABLE and not allow_unverified_weights:
        raise ModelRunError(
            f"model {model.name!r}: weights are {weights['status']} ({model.weights.get('pin')}, {weights['file']}); "  # type: ignore[union-attr]  # unpinned images stopped above
            "pin and fetch them (docs/guide.md, Real models) or pass --allow-unverified-weights (results are then marked unpublishable)"
        )
    folder = folder_digest(model.source.path) if model.source is not None else None
    _start_or_resume(out_dir, inputs_fingerprint(model, dataset, folder["sha256"] if folder else None))
    todo = [c for c in cases if not (out_dir / f"{c}.nii.gz").is_file()]
    refused: dict[str, str] = {}
    staging = out_dir.parent / f".{out_dir.name}.staging"
    if todo:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        run = stage_predictions if model.source is not None else executor or predict_cases
        run(dataset, model, todo, staging, out_dir, device=device, weights_dir=weights_dir)
        if (staging / REFUSED_FILE).is_file():
            refused = json.loads((staging / REFUSED_FILE).read_text(encoding="utf-8"))
        shutil.rmtree(staging, ignore_errors=True)
    missing = [c for c in cases if not (out_dir / f"{c}.nii.gz").is_file()]
    if missing:
        log.warning(
            "%s has no prediction for %d of %d case(s): %s (the leaderboard applies missing_predictions: docs/methodology.md#41-coverage)",
            model.name,
            len(missing),
            len(cases),
            ", ".join(missing),
        )
    structures, regions = applicability(model, dataset)
    if not model.is_simulated:
        spot_check(model, dataset, out_dir, cases, regions)
    manifest = {
        "dataset": dataset.name,
        "model": model.name,
        "kind": model.kind,
        "cases": cases,
        "missing": missing,
        **({"refused": refused} if refused else {}),
        "structures": structures,
        "regions": regions,
        "weights": {**weights, "publishable": weights["status"] in PUBLISHABLE},
        **({"source": {"path": _shown_path(model.source.path), **folder}} if model.source is not None and folder else {}),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "manifest.json", manifest)
    return manifest
