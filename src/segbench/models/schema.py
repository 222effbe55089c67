"""The models section's schema: a ``model:``, ``interactive_model:`` or ``predictions:`` entry (its kind, environment,
command or image, input and output) checked into a ``ModelConfig``, and the container spec its ``image:`` block
becomes. What runs a model (``runner.py``, ``container.py``, ``simulated.py``) imports these; nothing here imports
them back, so checking a configuration loads no model code (docs/architecture.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from segbench.base.schema import ConfigError, require

ENVIRONMENT_TYPES = ("harness", "venv", "conda", "container")
#: "interactive": a promptable model run step by step on box and click prompts (segbench interact, docs/interactive.md);
#: "predictions": a folder of prediction files made elsewhere, verified and staged without running anything (``predictions:``)
MODEL_KINDS = ("inference", "simulated", "interactive", "predictions")
MODEL_INPUTS = ("images", "reference_labels")
#: "dataset": the command runs once over the staged input folder; "case": once per case ({case} placeholder).
INVOCATIONS = ("dataset", "case")
#: how a model's input folder is laid out (``layouts.INPUT_LAYOUTS``, by name)
INPUT_LAYOUT_NAMES = ("flat", "nnunet", "moose")
#: how a model's output files are read (``layouts.OUTPUT_READERS``, by name)
OUTPUT_FORMATS = ("multilabel", "mask_folder")
#: the CVPR 2025 evaluation script's command and mounts
CHALLENGE_COMMAND = ("/bin/bash", "-c", "sh predict.sh")
CHALLENGE_INPUTS = "/workspace/inputs"
CHALLENGE_OUTPUTS = "/workspace/outputs"
#: the user a container runs as unless its model or the organiser says otherwise: nobody:nogroup
UNPRIVILEGED_USER = "65534:65534"


@dataclass(frozen=True)
class ContainerSpec:
    """How a model's image is run: its command, where it reads and writes, and its limits (a model's config)."""

    command: tuple[str, ...] = CHALLENGE_COMMAND
    inputs_mount: str = CHALLENGE_INPUTS
    outputs_mount: str = CHALLENGE_OUTPUTS
    memory: str = "8g"
    cpus: float = 2.0
    pids_limit: int = 1024
    shm_size: str = "1g"  # /dev/shm: PyTorch data loaders (nnU-Net) need more than the runtime's 64 MB default
    variables: Mapping[str, str] = field(default_factory=dict)
    #: further host folders, mounted read-only: (host path, path inside), e.g. weights an image does not carry
    mounts: tuple[tuple[str, str], ...] = ()
    #: ``uid:gid`` the command runs as (nobody); None: the image's own user, root for most images (an organiser's choice)
    user: str | None = UNPRIVILEGED_USER
    #: caps on what one call leaves in its outputs folder: total bytes and number of entries (files, folders, links)
    max_output_bytes: int = 2 << 30
    max_output_files: int = 1000


def pinned_reference(reference: str) -> bool:
    """Whether an image reference names its content (``name@sha256:<64 hex>``) rather than a tag that can move."""
    _, _, digest = reference.partition("@sha256:")
    return len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


@dataclass(frozen=True)
class ModelConfig:
    """A model adapter: the command run in its own environment and how to read its outputs."""

    name: str
    title: str
    kind: str
    environment: dict[str, Any]
    command: tuple[str, ...]
    input: str
    input_layout: str
    invocation: str
    output: str
    output_format: str
    label_map: dict[int, str]
    trained_on: tuple[str, ...]
    weights: dict[str, Any] | None
    licence: str
    device: str
    version: str
    #: imaging modality the model segments (CT, MR); predict refuses a dataset of another modality
    modality: str
    #: spot check of the predict stage: regions whose mean Dice over the first ``cases`` is below ``floor`` are flagged
    spot_check: dict[str, float]
    #: the model's container image (the ``image:`` block), run isolated instead of a host command: per case or dataset, or per step
    image: ModelImage | None = None
    #: kind ``predictions``: the folder of prediction files the predict stage verifies and stages, and for which dataset
    source: PredictionsSource | None = None

    @property
    def is_simulated(self) -> bool:
        return self.kind == "simulated"

    @property
    def is_interactive(self) -> bool:
        return self.kind == "interactive"


@dataclass(frozen=True)
class PredictionsSource:
    """A ``predictions`` model's folder (docs/guide.md#i-have-predictions): files made elsewhere for one dataset's cases,
    found by the model's ``output`` pattern; a case without a file is a case the model lacks (stats ``coverage``)."""

    dataset: str
    path: Path


@dataclass(frozen=True)
class ModelImage:
    """A model's image and how each call of it is run (command, mounts, limits, variables).

    Either a ``docker save`` ``archive`` pinned by its ``sha256`` (loaded by segbench), or a registry ``reference``
    (pulled by ``segbench env create``), pinned when it names its digest (``name@sha256:...``).
    """

    archive: Path | None
    sha256: str | None
    spec: ContainerSpec
    reference: str | None = None
    #: bound of one container call of the predict stage (an interactive step is bound by its time limit instead)
    timeout_s: float = 3600.0

    @property
    def pinned(self) -> bool:
        return self.archive is not None or pinned_reference(str(self.reference))


#: the keys of a ``predictions:`` entry (conf/predictions/, docs/guide.md#i-have-predictions)
PREDICTIONS_KEYS = ("title", "dataset", "path", "output", "output_format", "label_map", "trained_on", "licence", "version", "modality", "spot_check")


def parse_predictions(name: str, raw: dict[str, Any], root: Path) -> ModelConfig:
    """A ``predictions:`` entry: a folder of prediction files for one dataset, as a model of kind ``predictions`` that runs
    nothing (the predict stage verifies and stages its files: segbench.models.runner.stage_predictions)."""
    where = f"predictions {name!r}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must map {', '.join(PREDICTIONS_KEYS)} to values, got {raw!r}")
    if unknown := sorted(set(raw) - set(PREDICTIONS_KEYS)):
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {', '.join(PREDICTIONS_KEYS)}")
    path = Path(str(require(raw, "path", where)))
    config = parse_model(
        name, {**{k: v for k, v in raw.items() if k not in ("dataset", "path")}, "kind": "inference", "environment": {"type": "harness"}, "command": []}
    )
    return replace(config, kind="predictions", source=PredictionsSource(str(require(raw, "dataset", where)), path if path.is_absolute() else root / path))


def parse_model(name: str, raw: dict[str, Any]) -> ModelConfig:
    """A ``model:`` or ``interactive_model:`` entry checked: its kind, environment or image, input, invocation and output."""
    where = f"model {name!r}"
    kind = str(require(raw, "kind", where))
    if kind not in MODEL_KINDS:
        raise ConfigError(f"{where}: kind must be one of {MODEL_KINDS}, got {kind!r}")
    image = parse_image(raw["image"], where) if "image" in raw else None
    if image is not None and kind == "simulated":
        raise ConfigError(f"{where}: a simulated model has no image")
    environment = dict(raw.get("environment") or {"type": "container"}) if image else dict(require(raw, "environment", where))
    if image is not None and environment.get("type") != "container":
        raise ConfigError(f"{where}: a model with an image: block has environment.type container, got {environment.get('type')!r}")
    if image is None and environment.get("type") == "container":
        raise ConfigError(f"{where}: environment.type container needs an image: block (archive and sha256, or reference; docs/guide.md#real-models)")
    if environment.get("type") not in ENVIRONMENT_TYPES:
        raise ConfigError(f"{where}: environment.type must be one of {ENVIRONMENT_TYPES}, got {environment.get('type')!r}")
    model_input = str(raw.get("input", "images"))
    if model_input not in MODEL_INPUTS:
        raise ConfigError(f"{where}: input must be one of {MODEL_INPUTS}, got {model_input!r}")
    if model_input == "reference_labels" and kind != "simulated":
        # the reference is the answer: a model handed it scores itself against its own input
        raise ConfigError(
            f"{where}: input reference_labels is for simulated models (error models of the reference); "
            f"a model of kind {kind!r} is scored against the reference labels, so it cannot read them: use input: images"
        )
    invocation = str(raw.get("invocation", "dataset"))
    if invocation not in INVOCATIONS:
        raise ConfigError(f"{where}: invocation must be one of {INVOCATIONS}, got {invocation!r}")
    input_layout = str(raw.get("input_layout", "flat"))
    if input_layout not in INPUT_LAYOUT_NAMES:
        raise ConfigError(f"{where}: input_layout must be one of {sorted(INPUT_LAYOUT_NAMES)}, got {input_layout!r}")
    output_format = str(raw.get("output_format", "multilabel"))
    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"{where}: output_format must be one of {sorted(OUTPUT_FORMATS)}, got {output_format!r}")
    spot_check = {"floor": 0.1, "cases": 5, **dict(raw.get("spot_check") or {})}
    # an interactive model labels the classes of its prompts: it has no label map of its own
    label_map = (raw.get("label_map") or {}) if kind == "interactive" else require(raw, "label_map", where)
    return ModelConfig(
        name=name,
        title=str(raw.get("title", name)),
        kind=kind,
        environment=environment,
        command=image.spec.command if image else tuple(str(c) for c in require(raw, "command", where)),
        input=model_input,
        input_layout=input_layout,
        invocation=invocation,
        output=str(raw.get("output", "{case}.nii.gz")),
        output_format=output_format,
        label_map={int(k): str(v) for k, v in label_map.items()},
        trained_on=tuple(raw.get("trained_on", ())),
        weights=raw.get("weights"),
        licence=str(raw.get("licence", "")),
        device=str(raw.get("device", "cpu")),
        version=str(raw.get("version", "")),
        modality=str(raw.get("modality", "CT")),
        spot_check={"floor": float(spot_check["floor"]), "cases": int(spot_check["cases"])},
        image=image,
    )


IMAGE_KEYS = (
    "archive",
    "sha256",
    "reference",
    "command",
    "inputs",
    "outputs",
    "memory",
    "cpus",
    "pids_limit",
    "shm_size",
    "mounts",
    "variables",
    "timeout_s",
    "user",
    "max_output_bytes",
    "max_output_files",
)


def parse_image(raw: Any, where: str) -> ModelImage:
    """The ``image:`` block: ``archive`` with its ``sha256``, or a ``reference``; command, mounts and limits default to the
    challenge's (ContainerSpec). ``mounts`` (host folder -> path inside, read-only) and
    ``variables`` take the command's placeholders."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: image must be a mapping with {IMAGE_KEYS}, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(IMAGE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: image has unknown key(s) {unknown}; known {IMAGE_KEYS}")
    if ("archive" in raw) == ("reference" in raw):
        raise ConfigError(f"{where}: image needs either archive (a docker save file, with its sha256) or reference (name:tag or name@sha256:...)")
    sha256 = None
    if "archive" in raw:
        sha256 = str(require(raw, "sha256", f"{where} image")).removeprefix("sha256:")
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ConfigError(f"{where}: image.sha256 must be 64 lowercase hex digits (the archive's sha256), got {raw['sha256']!r}")
    for key in ("mounts", "variables"):
        if not isinstance(raw.get(key, {}), dict):
            raise ConfigError(f"{where}: image.{key} must be a mapping, got {type(raw[key]).__name__}")
    default = ContainerSpec()
    command = raw.get("command", default.command)
    spec = ContainerSpec(
        command=tuple(str(c) for c in command) if isinstance(command, list | tuple) else ("/bin/bash", "-c", str(command)),
        inputs_mount=str(raw.get("inputs", default.inputs_mount)),
        outputs_mount=str(raw.get("outputs", default.outputs_mount)),
        memory=str(raw.get("memory", default.memory)),
        cpus=float(raw.get("cpus", default.cpus)),
        pids_limit=int(raw.get("pids_limit", default.pids_limit)),
        shm_size=str(raw.get("shm_size", default.shm_size)),
        variables={str(k): str(v) for k, v in (raw.get("variables") or {}).items()},
        mounts=tuple((str(host), str(inside)) for host, inside in (raw.get("mounts") or {}).items()),
        user=None if raw.get("user", default.user) is None else str(raw.get("user", default.user)),
        max_output_bytes=int(raw.get("max_output_bytes", default.max_output_bytes)),
        max_output_files=int(raw.get("max_output_files", default.max_output_files)),
    )
    archive = Path(str(raw["archive"])) if "archive" in raw else None
    return ModelImage(archive, sha256, spec, str(raw["reference"]) if "reference" in raw else None, float(raw.get("timeout_s", 3600.0)))


def image_model(name: str, image: dict[str, Any], title: str | None = None) -> ModelConfig:
    """An interactive model that is nothing but its image (a challenge submission): ``image`` is validated as a model
    config's ``image:`` block is (archive, sha256, and optionally command, mounts and limits)."""
    return parse_model(
        name,
        {
            "kind": "interactive",
            "title": title or name,
            "image": image,
            "weights": None,
            "version": f"sha256:{str(image.get('sha256', '')).removeprefix('sha256:')[:12]}",
        },
    )


def simulated_parser() -> argparse.ArgumentParser:
    """The options of a simulated model (``python -m segbench.models.simulated``), which ``calibration.models`` also takes."""
    parser = argparse.ArgumentParser(
        prog="python -m segbench.models.simulated",
        description="SIMULATED model: writes predictions by applying seeded errors to reference label maps.",
    )
    parser.add_argument("--input", type=Path, required=True, help="folder of reference label maps <case>.nii.gz")
    parser.add_argument("--output", type=Path, required=True, help="folder to write <case>.nii.gz predictions")
    parser.add_argument("--cases", type=Path, required=True, help="text file, one case id per line")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--boundary-mm", type=float, default=0.0, help="boundary displacement in mm (negative: inward)")
    parser.add_argument("--jitter", type=float, default=0.25, help="relative per-case jitter of the displacement")
    parser.add_argument("--shift-mm", type=float, default=0.0, help="rigid translation in mm, random direction")
    parser.add_argument("--miss-lesion-prob", type=float, default=0.0)
    parser.add_argument("--blob-prob", type=float, default=0.0)
    parser.add_argument("--blob-radius-mm", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1, help="cases processed in parallel")
    return parser
