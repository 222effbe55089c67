"""The pipeline's parameters: composed by Hydra from ``conf/`` into ``params.yaml``, validated here.

DVC's Hydra integration writes ``params.yaml`` when an experiment is run with ``-S`` overrides;
``dvc repro`` only reads it. Everything downstream receives these validated objects, never raw
dictionaries, so an unknown dataset, model or structure fails at this boundary with a clear message.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from segbench.interactive.protocol import NSD_PROFILE, PROTOCOL_VERSION, TIME_LIMIT_CLOCKS, Scoring
from segbench.scoring import DEFAULT_PROFILE, PROFILES, Region
from segbench.scoring.lesionwise import LesionSetting, lesion_structures

if TYPE_CHECKING:
    from segbench.models.container import ContainerSpec

ENVIRONMENT_TYPES = ("harness", "venv", "conda", "container")
#: "interactive": a promptable model run step by step on box and click prompts (segbench interact, docs/interactive.md);
#: "predictions": a folder of prediction files made elsewhere, verified and staged without running anything (``predictions:``)
MODEL_KINDS = ("inference", "simulated", "interactive", "predictions")
MODEL_INPUTS = ("images", "reference_labels")
#: "dataset": the command runs once over the staged input folder; "case": once per case ({case} placeholder).
INVOCATIONS = ("dataset", "case")


class ConfigError(ValueError):
    """A parameter file that names something unknown or is missing a required field."""


@dataclass(frozen=True)
class DatasetConfig:
    """A dataset: where its reference label maps live, its label schema and scored regions."""

    name: str
    title: str
    reference_dir: Path
    image_dir: Path | None
    file_pattern: str
    labels: dict[str, int]
    regions: tuple[Region, ...]
    #: per region, the structures a model may leave unsegmented and still be scored on the region
    region_optional: dict[str, tuple[str, ...]]
    image_pattern: str
    modality: str
    download: dict[str, Any] | None
    metadata_file: Path | None
    metadata_format: str | None
    metadata_fields: tuple[str, ...]
    subgroups: tuple[str, ...]
    cluster_field: str | None  # the metadata field whose values cluster the cases (docs/methodology.md#516-clustered-data)
    cases: tuple[str, ...] | None
    licence: str
    citation: str

    def region_labels(self) -> set[int]:
        """Every label id the schema knows, background included."""
        return {0, *self.labels.values()}


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
        from segbench.models.container import pinned_reference

        return self.archive is not None or pinned_reference(str(self.reference))


PUBLISHED_FORMATS = ("touchstone", "segauge_results", "cvpr25_metrics", "challenger_csv", "generic_csv", "nnunet_summary")
#: the ``options:`` each published format takes (docs/published.md); any other key is an error
PUBLISHED_OPTIONS: dict[str, tuple[str, ...]] = {
    "touchstone": ("files", "duplicates", "one_sided_missing"),
    "segauge_results": (),
    "cvpr25_metrics": ("protocol_version", "nsd_profile"),
    "challenger_csv": ("columns", "structure", "na_value", "duplicates"),
    "generic_csv": ("columns", "structure", "metric_columns", "na_value", "duplicates"),
    "nnunet_summary": ("models", "labels", "file_ending"),
}


@dataclass(frozen=True)
class PublishedConfig:
    """A published set of per-case scores (no masks), imported as one MLflow run per model."""

    name: str
    title: str
    format: str
    path: Path
    evaluated_on: str
    metadata_file: Path | None
    source: str
    metrics: dict[str, bool]
    subgroups: tuple[str, ...]
    cluster_field: str | None  # the metadata field whose values cluster the cases (docs/methodology.md#516-clustered-data)
    trained_on: dict[str, tuple[str, ...]]
    licence: str
    citation: str
    case_alignment: str | None  # the case alignment of the source's own significance maps, when it states one
    #: the metadata CSV joined to the cases (``published.join_metadata``'s path, sep, key, case_key), or None (a
    #: Touchstone folder's metaTotalSeg.csv when it has one); ``{}`` for ``metadata: none`` (not even that)
    metadata: dict[str, Any] | None = None
    #: the format's options, validated and completed with their defaults (``_published_options``)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InteractiveDatasetConfig:
    """A dataset for promptable models: images and reference label maps turned into challenge npz cases."""

    name: str
    title: str
    #: the folder holding every source (the cases stage's DVC dependency)
    data_dir: Path
    #: (case id, image: NIfTI file or DICOM series folder, reference label map) on the same grid
    sources: tuple[tuple[str, Path, Path], ...]
    #: structure name -> label id in the references; those present in a case become its classes
    structures: dict[str, int]
    #: "manual" or "pseudo" (a model's output standing in for a manual annotation)
    reference: str
    note: str
    seed: int
    seconds_per_class: float
    #: the clock the time limit runs on (segbench.interactive.protocol.TIME_LIMIT_CLOCKS)
    time_limit_clock: str
    #: the protocol version and NSD's definition the runs are scored under (segbench.interactive.protocol.Scoring)
    scoring: Scoring
    licence: str
    citation: str


@dataclass(frozen=True)
class CalibrationConfig:
    """The calibration audit (calibration/dvc.yaml, docs/methodology.md "Calibration audit"): simulated models of known
    quality on every reference label map of ``dataset``, and how the audit redraws cases from them."""

    dataset: str
    #: the dataset whose label maps are the population (``calibration.population``: composed from conf/dataset/ on its
    #: own, so the audit does not depend on which datasets an experiment selects)
    population: DatasetConfig
    #: model name -> the simulated model's options (``python -m segbench.models.simulated`` flags), in order
    models: dict[str, tuple[str, ...]]
    #: models of equal true quality (same error distribution, different seeds): every pair among them is a true null
    equal: tuple[str, ...]
    structures: tuple[str, ...]
    metrics: dict[str, bool]
    n_cases: tuple[int, ...]
    draws: int
    #: the Wilcoxon map's type-I error and power come from the first this many draws (its exact test runs pair by pair)
    wilcoxon_draws: int
    n_resamples: int
    seed: int
    workers: int
    #: published real models' scores audited beside the simulated ones (``calibration.real``), by source name
    real: dict[str, RealPopulationConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class RealPopulationConfig:
    """A published set audited as populations (``segbench.stats.calibration.ranked_populations``): per structure, the
    models at ``ranks`` of the mean of its first metric, the first two made equal; ``draws`` samples per n."""

    source: PublishedConfig
    ranks: tuple[int, ...]
    draws: int
    wilcoxon_draws: int


@dataclass(frozen=True)
class Params:
    """Everything ``dvc repro`` runs on: datasets x models, scoring, statistics and tracking settings."""

    datasets: dict[str, DatasetConfig]
    models: dict[str, ModelConfig]
    published: dict[str, PublishedConfig]
    interactive_datasets: dict[str, InteractiveDatasetConfig]
    interactive_models: dict[str, ModelConfig]
    stats: dict[str, Any]
    scoring: dict[str, Any]
    tracking: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)
    calibration: CalibrationConfig | None = None
    #: what the leaderboard does with a model lacking predictions for some cases (segbench.stats.coverage)
    missing_predictions: str = "own_cases"

    def dataset(self, name: str) -> DatasetConfig:
        if name not in self.datasets:
            raise ConfigError(f"unknown dataset {name!r}; params.yaml has {sorted(self.datasets)}")
        return self.datasets[name]

    def lesion_setting(self, dataset: str) -> LesionSetting | None:
        """What the score stage measures lesion by lesion on ``dataset`` (``scoring.lesions``); None when the dataset
        has none of the lesion structures or the block is absent."""
        return _lesion_setting(self.scoring, self.dataset(dataset))

    def published_set(self, name: str) -> PublishedConfig:
        if name not in self.published:
            raise ConfigError(f"unknown published set {name!r}; params.yaml has {sorted(self.published)}")
        return self.published[name]

    def model(self, name: str) -> ModelConfig:
        if name not in self.models:
            raise ConfigError(f"unknown model {name!r}; params.yaml has {sorted(self.models)}")
        return self.models[name]

    def interactive_dataset(self, name: str) -> InteractiveDatasetConfig:
        if name not in self.interactive_datasets:
            raise ConfigError(f"unknown interactive dataset {name!r}; params.yaml has {sorted(self.interactive_datasets)}")
        return self.interactive_datasets[name]

    def interactive_model(self, name: str) -> ModelConfig:
        if name not in self.interactive_models:
            raise ConfigError(f"unknown interactive model {name!r}; params.yaml has {sorted(self.interactive_models)}")
        return self.interactive_models[name]


def _require(section: dict[str, Any], key: str, where: str) -> Any:
    if key not in section:
        raise ConfigError(f"{where}: missing required field {key!r}")
    return section[key]


def _dataset(name: str, raw: dict[str, Any], root: Path) -> DatasetConfig:
    where = f"dataset {name!r}"
    labels = {str(k): int(v) for k, v in _require(raw, "labels", where).items()}
    regions = []
    region_optional = {}
    for region_name, spec in _require(raw, "regions", where).items():
        unknown = [s for s in spec["structures"] if s not in labels]
        if unknown:
            raise ConfigError(f"{where}: region {region_name!r} names unknown structures {unknown}; schema has {sorted(labels)}")
        optional = tuple(spec.get("optional", ()))
        if not set(optional) <= set(spec["structures"]):
            raise ConfigError(f"{where}: region {region_name!r}: optional {list(optional)} must be among its structures {spec['structures']}")
        region_optional[region_name] = optional
        regions.append(
            Region(
                name=region_name,
                labels=tuple(sorted(labels[s] for s in spec["structures"])),
                nsd_tolerance_mm=float(spec.get("nsd_tolerance_mm", 2.0)),
                detection=bool(spec.get("detection", False)),
            )
        )
    cases = raw.get("cases")
    image_dir = raw.get("image_dir")
    metadata_file = raw.get("metadata_file")
    return DatasetConfig(
        name=name,
        title=str(raw.get("title", name)),
        reference_dir=root / _require(raw, "reference_dir", where),
        image_dir=root / image_dir if image_dir else None,
        file_pattern=str(raw.get("file_pattern", "{case}.nii.gz")),
        labels=labels,
        regions=tuple(regions),
        region_optional=region_optional,
        image_pattern=str(raw.get("image_pattern", "{case}.nii.gz")),
        modality=str(raw.get("modality", "CT")),
        download=raw.get("download"),
        metadata_file=root / metadata_file if metadata_file else None,
        metadata_format=raw.get("metadata_format"),
        metadata_fields=tuple(raw.get("metadata_fields", ())),
        subgroups=tuple(raw.get("subgroups", ())),
        cluster_field=_cluster_field(raw.get("cluster_field"), where),
        cases=tuple(str(c) for c in cases) if cases else None,
        licence=str(raw.get("licence", "")),
        citation=str(raw.get("citation", "")),
    )


#: the keys of a ``predictions:`` entry (conf/predictions/, docs/guide.md#i-have-predictions)
PREDICTIONS_KEYS = ("title", "dataset", "path", "output", "output_format", "label_map", "trained_on", "licence", "version", "modality",
                    "spot_check")


def _predictions_model(name: str, raw: dict[str, Any], root: Path) -> ModelConfig:
    """A ``predictions:`` entry: a folder of prediction files for one dataset, as a model of kind ``predictions`` that runs
    nothing (the predict stage verifies and stages its files: segbench.models.runner.stage_predictions)."""
    where = f"predictions {name!r}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must map {', '.join(PREDICTIONS_KEYS)} to values, got {raw!r}")
    if unknown := sorted(set(raw) - set(PREDICTIONS_KEYS)):
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {', '.join(PREDICTIONS_KEYS)}")
    path = Path(str(_require(raw, "path", where)))
    model = _model(name, {**{k: v for k, v in raw.items() if k not in ("dataset", "path")}, "kind": "inference",
                          "environment": {"type": "harness"}, "command": []})
    return replace(model, kind="predictions", source=PredictionsSource(str(_require(raw, "dataset", where)), path if path.is_absolute() else root / path))


def _model(name: str, raw: dict[str, Any]) -> ModelConfig:
    where = f"model {name!r}"
    kind = str(_require(raw, "kind", where))
    if kind not in MODEL_KINDS:
        raise ConfigError(f"{where}: kind must be one of {MODEL_KINDS}, got {kind!r}")
    image = _model_image(raw["image"], where) if "image" in raw else None
    if image is not None and kind == "simulated":
        raise ConfigError(f"{where}: a simulated model has no image")
    environment = dict(raw.get("environment") or {"type": "container"}) if image else dict(_require(raw, "environment", where))
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
        raise ConfigError(f"{where}: input reference_labels is for simulated models (error models of the reference); "
                          f"a model of kind {kind!r} is scored against the reference labels, so it cannot read them: use input: images")
    invocation = str(raw.get("invocation", "dataset"))
    if invocation not in INVOCATIONS:
        raise ConfigError(f"{where}: invocation must be one of {INVOCATIONS}, got {invocation!r}")
    from segbench.models.layouts import INPUT_LAYOUTS, OUTPUT_READERS

    input_layout = str(raw.get("input_layout", "flat"))
    if input_layout not in INPUT_LAYOUTS:
        raise ConfigError(f"{where}: input_layout must be one of {sorted(INPUT_LAYOUTS)}, got {input_layout!r}")
    output_format = str(raw.get("output_format", "multilabel"))
    if output_format not in OUTPUT_READERS:
        raise ConfigError(f"{where}: output_format must be one of {sorted(OUTPUT_READERS)}, got {output_format!r}")
    spot_check = {"floor": 0.1, "cases": 5, **dict(raw.get("spot_check") or {})}
    # an interactive model labels the classes of its prompts: it has no label map of its own
    label_map = (raw.get("label_map") or {}) if kind == "interactive" else _require(raw, "label_map", where)
    return ModelConfig(
        name=name,
        title=str(raw.get("title", name)),
        kind=kind,
        environment=environment,
        command=image.spec.command if image else tuple(str(c) for c in _require(raw, "command", where)),
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


IMAGE_KEYS = ("archive", "sha256", "reference", "command", "inputs", "outputs", "memory", "cpus", "pids_limit", "shm_size", "mounts", "variables",
              "timeout_s", "user", "max_output_bytes", "max_output_files")


def _model_image(raw: Any, where: str) -> ModelImage:
    """The ``image:`` block: ``archive`` with its ``sha256``, or a ``reference``; command, mounts and limits default to the
    challenge's (segbench.models.container.ContainerSpec). ``mounts`` (host folder -> path inside, read-only) and
    ``variables`` take the command's placeholders."""
    from segbench.models.container import ContainerSpec

    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: image must be a mapping with {IMAGE_KEYS}, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(IMAGE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: image has unknown key(s) {unknown}; known {IMAGE_KEYS}")
    if ("archive" in raw) == ("reference" in raw):
        raise ConfigError(f"{where}: image needs either archive (a docker save file, with its sha256) or reference (name:tag or name@sha256:...)")
    sha256 = None
    if "archive" in raw:
        sha256 = str(_require(raw, "sha256", f"{where} image")).removeprefix("sha256:")
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


def _published(name: str, raw: dict[str, Any], root: Path) -> PublishedConfig:
    where = f"published set {name!r}"
    fmt = str(_require(raw, "format", where))
    if fmt not in PUBLISHED_FORMATS:
        raise ConfigError(f"{where}: format must be one of {PUBLISHED_FORMATS}, got {fmt!r}")
    metadata_file = raw.get("metadata_file")
    if metadata_file and raw.get("metadata"):
        raise ConfigError(f"{where}: give either metadata_file (a segauge clinical JSON) or metadata (a CSV), not both")
    metrics = {str(k): bool(v) for k, v in _require(raw, "metrics", where).items()}
    return PublishedConfig(
        name=name,
        title=str(raw.get("title", name)),
        format=fmt,
        path=root / _require(raw, "path", where),
        evaluated_on=str(_require(raw, "evaluated_on", where)),
        metadata_file=root / metadata_file if metadata_file else None,
        source=str(_require(raw, "source", where)),
        metrics=metrics,
        subgroups=tuple(raw.get("subgroups", ())),
        cluster_field=_cluster_field(raw.get("cluster_field"), where),
        trained_on={str(m): tuple(d) for m, d in (raw.get("trained_on") or {}).items()},
        licence=str(raw.get("licence", "")),
        citation=str(raw.get("citation", "")),
        case_alignment=_case_alignment(raw.get("case_alignment"), where),
        metadata=_published_metadata(raw.get("metadata"), root, where),
        options=_published_options(fmt, raw.get("options") or {}, metrics, where),
    )


def _published_metadata(value: Any, root: Path, where: str) -> dict[str, Any] | None:
    """A published set's ``metadata: {path, sep, key, case_key}`` checked (docs/published.md); None without one (the
    Touchstone reader then joins its folder's metaTotalSeg.csv when the folder has one); ``metadata: none`` is ``{}``:
    no metadata, whatever the folder holds."""
    import re

    if value is None:
        return None
    if value == "none":
        return {}
    at = f"{where}: metadata"
    if not isinstance(value, dict) or not isinstance(value.get("path"), str) or not isinstance(value.get("key"), str):
        raise ConfigError(f"{at}: expected none or {{path, key, sep (default ','), case_key (optional)}}, got {value!r}")
    if unknown := sorted(set(value) - {"path", "sep", "key", "case_key"}):
        raise ConfigError(f"{at}: unknown key(s) {unknown}; it takes path, sep, key and case_key")
    case_key = value.get("case_key")
    if case_key is not None:
        try:
            if not isinstance(case_key, str) or re.compile(case_key).groups > 1:
                raise ConfigError(f"{at}.case_key: {case_key!r} must be a regular expression with at most one group")
        except re.error as exc:
            raise ConfigError(f"{at}.case_key: {case_key!r} is not a regular expression ({exc})") from exc
    return {"path": root / value["path"], "sep": str(value.get("sep", ",")), "key": value["key"], "case_key": case_key}


def _published_options(fmt: str, options: Any, metrics: dict[str, bool], where: str) -> dict[str, Any]:
    """A published format's ``options:`` checked against ``PUBLISHED_OPTIONS`` and turned into the reader's arguments.

    challengeR's and the generic CSV both become ``columns`` (role -> column; ``structure`` None when one fixed
    ``structure`` names every row), ``metric_columns`` (metric -> column) and ``na_value`` (metric -> the value of
    a failed case); nnU-Net's become ``models`` (name -> summary.json under ``path``), ``labels`` (label key ->
    structure) and ``file_ending``.
    """
    from segbench.published import CHALLENGER_COLUMNS, NNUNET_METRICS, TOUCHSTONE_FILES

    at = f"{where}: options"
    if not isinstance(options, dict):
        raise ConfigError(f"{at}: expected a mapping, got {options!r}")
    unknown = sorted(set(options) - set(PUBLISHED_OPTIONS[fmt]))
    if unknown:
        raise ConfigError(f"{at}: {unknown} not options of format {fmt!r}; it takes {list(PUBLISHED_OPTIONS[fmt]) or 'none'}")
    if fmt == "nnunet_summary":
        if unknown := sorted(set(metrics) - set(NNUNET_METRICS)):
            raise ConfigError(f"{where}: metrics {unknown} are not in an nnU-Net summary.json; it has {sorted(NNUNET_METRICS)}")
        models = _names(options.get("models"), f"{at}.models", "model name to its summary.json (relative to path)")
        if bad := [f for f in models.values() if Path(f).is_absolute() or ".." in Path(f).parts]:
            raise ConfigError(f"{at}.models: {bad} must be relative paths under the set's path (the import stage's dependency)")
        labels = _names(options.get("labels"), f"{at}.labels", "nnU-Net label key to a structure name")
        if len(set(labels.values())) < len(labels):
            raise ConfigError(f"{at}.labels: two labels name the same structure: {labels}")
        return {"models": models, "labels": labels, "file_ending": str(options.get("file_ending", ".nii.gz"))}
    if fmt == "cvpr25_metrics":  # the challenge version the tables were computed under (default: the final one)
        try:
            return {"scoring": Scoring(str(options.get("protocol_version", PROTOCOL_VERSION)), str(options.get("nsd_profile", NSD_PROFILE)))}
        except ValueError as exc:
            raise ConfigError(f"{at}: {exc}") from None
    policies = _policies(options, at)
    if fmt == "touchstone":
        files = _names(options.get("files", TOUCHSTONE_FILES), f"{at}.files", "metric to its file in each model folder")
        if set(files) != set(metrics) or len(files) < 2:
            raise ConfigError(f"{at}.files: metrics {sorted(files)} must be the set's metrics {sorted(metrics)} (two or more files)")
        return {"files": files, **policies}
    if fmt not in ("challenger_csv", "generic_csv"):
        return {}
    columns = _names(options.get("columns", {}), f"{at}.columns", "role to a column name", allow_empty=True)
    if fmt == "challenger_csv":
        if len(metrics) != 1:
            raise ConfigError(f"{where}: a challengeR table holds one metric; metrics must name exactly one, got {sorted(metrics)}")
        roles = ("case", "model", "structure", "value")
        columns = {**CHALLENGER_COLUMNS, **columns}
        metric_columns = {next(iter(metrics)): columns.pop("value", "value")}
    else:
        roles = ("case", "model", "structure")
        metric_columns = {m: str(c) for m, c in (options.get("metric_columns") or {}).items()}
        if unknown := sorted(set(metric_columns) - set(metrics)):
            raise ConfigError(f"{at}.metric_columns: {unknown} are not among the set's metrics {sorted(metrics)}")
        metric_columns = {m: metric_columns.get(m, m) for m in metrics}
    if unknown := sorted(set(columns) - set(roles)):
        raise ConfigError(f"{at}.columns: unknown role(s) {unknown}; roles are {list(roles)}")
    fixed = options.get("structure")
    if fixed is not None:
        if "structure" in options.get("columns", {}):
            raise ConfigError(f"{at}: give either columns.structure (a column) or structure (one fixed name), not both")
        columns["structure"] = None
    missing = [r for r in ("case", "model", "structure") if r not in columns]
    if missing:
        raise ConfigError(f"{at}.columns: missing role(s) {missing} (structure may instead be one fixed `structure: <name>`)")
    na_value = options.get("na_value") or {}
    if not isinstance(na_value, dict) or not set(na_value) <= set(metrics) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in na_value.values()):
        raise ConfigError(f"{at}.na_value: expected metric -> finite number for metrics among {sorted(metrics)}, got {na_value!r}")
    return {"columns": {r: columns[r] for r in ("case", "model", "structure")}, "structure": None if fixed is None else str(fixed),
            "metric_columns": metric_columns, "na_value": {m: float(v) for m, v in na_value.items()},
            "duplicates": policies["duplicates"]}


def _policies(options: dict[str, Any], at: str) -> dict[str, str]:
    """The import policies of ``options`` (docs/published.md), checked; both default to ``error``."""
    from segbench.published import DUPLICATE_POLICIES, ONE_SIDED_POLICIES

    chosen = {"duplicates": options.get("duplicates", "error"), "one_sided_missing": options.get("one_sided_missing", "error")}
    for key, allowed in (("duplicates", DUPLICATE_POLICIES), ("one_sided_missing", ONE_SIDED_POLICIES)):
        if chosen[key] not in allowed:
            raise ConfigError(f"{at}.{key}: must be one of {allowed}, got {chosen[key]!r}")
    return chosen


def _names(value: Any, where: str, what: str, allow_empty: bool = False) -> dict[str, str]:
    """A config mapping of strings (YAML may give int keys, e.g. nnU-Net label 1), or ConfigError."""
    if not isinstance(value, dict) or not (value or allow_empty) or not all(isinstance(v, str) and v for v in value.values()):
        raise ConfigError(f"{where}: expected a mapping of {what}, got {value!r}")
    return {str(k): v for k, v in value.items()}


def _interactive_dataset(name: str, raw: dict[str, Any], root: Path) -> InteractiveDatasetConfig:
    from segbench.interactive.cases import REFERENCE_KINDS

    where = f"interactive dataset {name!r}"
    reference = str(_require(raw, "reference", where))
    if reference not in REFERENCE_KINDS:
        raise ConfigError(f"{where}: reference must be one of {REFERENCE_KINDS}, got {reference!r}")
    cases = _require(raw, "cases", where)
    if not isinstance(cases, dict) or not cases:
        raise ConfigError(f"{where}: cases must map at least one case id to its image and labels")
    data_dir = root / _require(raw, "data_dir", where)
    sources = []
    for case_id, entry in cases.items():
        if not isinstance(entry, dict) or "image" not in entry or "labels" not in entry:
            raise ConfigError(f"{where}: case {case_id!r} needs 'image' and 'labels'")
        sources.append((str(case_id), root / entry["image"], root / entry["labels"]))
        outside = [entry[k] for k in ("image", "labels") if not (root / entry[k]).resolve().is_relative_to(data_dir.resolve())]
        if outside:
            raise ConfigError(f"{where}: case {case_id!r}: {outside} not under data_dir {raw['data_dir']!r} (the stage's dependency)")
    structures = _require(raw, "structures", where)
    if not isinstance(structures, dict) or not structures:
        raise ConfigError(f"{where}: structures must map at least one name to its label id")
    seconds = float(raw.get("seconds_per_class", 90.0))
    if seconds <= 0:
        raise ConfigError(f"{where}: seconds_per_class must be positive, got {seconds}")
    clock = str(raw.get("time_limit_clock", "wall"))
    if clock not in TIME_LIMIT_CLOCKS:
        raise ConfigError(f"{where}: time_limit_clock must be one of {', '.join(TIME_LIMIT_CLOCKS)}, got {clock!r}")
    try:
        scoring = Scoring(str(raw.get("protocol_version", PROTOCOL_VERSION)), str(raw.get("nsd_profile", NSD_PROFILE)))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return InteractiveDatasetConfig(
        name=name,
        title=str(raw.get("title", name)),
        data_dir=data_dir,
        sources=tuple(sorted(sources)),
        structures={str(k): int(v) for k, v in structures.items()},
        reference=reference,
        note=str(raw.get("note", "")),
        seed=int(raw.get("seed", 2025)),
        seconds_per_class=seconds,
        time_limit_clock=clock,
        scoring=scoring,
        licence=str(raw.get("licence", "")),
        citation=str(raw.get("citation", "")),
    )


def _case_alignment(value: Any, where: str) -> str | None:
    """The published set's stated case alignment (docs/methodology.md#513-case-alignment), checked."""
    from .stats.settings import CASE_ALIGNMENTS

    if value is not None and value not in CASE_ALIGNMENTS:
        raise ConfigError(f"{where}: case_alignment must be one of {CASE_ALIGNMENTS}, got {value!r}")
    return value


def _cluster_field(value: Any, where: str) -> str | None:
    """The metadata field clustering a set's cases, or None; its presence in the rows is checked by the statistics."""
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{where}: cluster_field must be a metadata field name, got {value!r}")
    return value


def _stats(raw: Any) -> dict[str, Any]:
    """The statistics settings (docs/methodology.md#51-settings), checked by the engine's own rules when the parameters
    are composed or read, not first at the compare stage after every score is recomputed."""
    from segbench.stats.settings import StatsSettings

    if not isinstance(raw, dict):
        raise ConfigError(f"params: stats must map settings to values, got {raw!r}")
    known = sorted(StatsSettings.__dataclass_fields__)
    if unknown := sorted(set(raw) - set(known)):
        raise ConfigError(f"params: unknown stats setting(s) {unknown}; settings are {', '.join(known)}")
    try:
        StatsSettings(**raw)
    except ValueError as exc:
        raise ConfigError(f"params: {str(exc).replace('StatsSettings.', 'stats.', 1)}") from exc
    return dict(raw)


def parse_params(raw: dict[str, Any], root: Path) -> Params:
    """Validate a composed parameter dictionary; paths are resolved against ``root``."""
    for key in ("dataset", "model"):
        if not isinstance(raw.get(key), dict) or not raw[key]:
            raise ConfigError(f"params: {key!r} must map at least one name to its config")
    datasets = {name: _dataset(name, spec, root) for name, spec in raw["dataset"].items()}
    models = {name: _model(name, spec) for name, spec in raw["model"].items()}
    predictions = {name: _predictions_model(name, spec, root) for name, spec in (raw.get("predictions") or {}).items()}
    if clash := sorted(set(models) & set(predictions)):
        raise ConfigError(f"params: {clash} named both under model and under predictions")
    for model in predictions.values():
        assert model.source is not None
        if model.source.dataset not in datasets:
            raise ConfigError(f"predictions {model.name!r}: dataset {model.source.dataset!r} is not selected; params.yaml has {sorted(datasets)}")
    models = {**models, **predictions}
    from segbench.models.structures import StructureError, compose, unknown_names

    for kind, configs in (("dataset", {n: d.labels for n, d in datasets.items()}), ("model", {n: m.label_map.values() for n, m in models.items()})):
        for name, labels in configs.items():
            if unknown := unknown_names(labels):
                raise ConfigError(f"{kind} {name!r}: labels name structures outside the canonical vocabulary: {', '.join(unknown)}")
    for model in models.values():
        for dataset in datasets.values():
            unknown = sorted(set(model.label_map.values()) - set(dataset.labels))
            if unknown and model.kind == "simulated":
                raise ConfigError(
                    f"model {model.name!r} labels {unknown} that dataset {dataset.name!r} does not have ({sorted(dataset.labels)})"
                )
            try:
                compose(model.label_map.values(), dataset.labels, where=f"model {model.name!r} on dataset {dataset.name!r}")
            except StructureError as exc:
                raise ConfigError(str(exc)) from exc
    published = {name: _published(name, spec, root) for name, spec in (raw.get("published") or {}).items()}
    interactive_datasets = {name: _interactive_dataset(name, spec, root) for name, spec in (raw.get("interactive_dataset") or {}).items()}
    interactive_models = {name: _model(name, spec) for name, spec in (raw.get("interactive_model") or {}).items()}
    for section, configs, interactive in (("model", models, False), ("interactive_model", interactive_models, True)):
        for model in configs.values():
            if model.is_interactive != interactive or (model.kind == "predictions") != (model.source is not None):
                raise ConfigError(
                    f"params: {section} {model.name!r} is of kind {model.kind!r}; "
                    + ("interactive models go under interactive_model" if model.is_interactive else
                       "a folder of predictions goes under predictions (conf/predictions/)" if model.kind == "predictions" else
                       "interactive_model takes kind 'interactive' only")
                )
    names = [*datasets, *published, *interactive_datasets]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(f"params: {clash} named more than once among datasets, published sets and interactive datasets")
    scoring = dict(raw.get("scoring", {}))
    if str(scoring.get("profile", DEFAULT_PROFILE)) not in PROFILES:
        raise ConfigError(f"params: scoring.profile {scoring['profile']!r} is not a metric-definition profile; known: {sorted(PROFILES)}")
    others = scoring.get("sensitivity_profiles") or []
    if not isinstance(others, list) or any(str(name) not in PROFILES for name in others):
        raise ConfigError(f"params: scoring.sensitivity_profiles {others!r} must be a list of metric-definition profiles; known: {sorted(PROFILES)}")
    for dataset in datasets.values():
        _lesion_setting(scoring, dataset)
    from segbench.stats.coverage import COVERAGE_POLICIES, DEFAULT_COVERAGE

    missing_predictions = str(raw.get("missing_predictions", DEFAULT_COVERAGE))
    if missing_predictions not in COVERAGE_POLICIES:
        raise ConfigError(f"params: missing_predictions {missing_predictions!r} is not a coverage policy; known: {', '.join(COVERAGE_POLICIES)}")
    return Params(
        datasets=datasets,
        models=models,
        published=published,
        interactive_datasets=interactive_datasets,
        interactive_models=interactive_models,
        stats=_stats(raw.get("stats") or {}),
        scoring=scoring,
        tracking=dict(raw.get("tracking", {})),
        raw=raw,
        calibration=_calibration(raw["calibration"], root) if raw.get("calibration") else None,
        missing_predictions=missing_predictions,
    )


def _lesion_setting(scoring: dict[str, Any], dataset: DatasetConfig) -> LesionSetting | None:
    """``scoring.lesions`` (structures, profile, sensitivity_profiles, strata_ml) for one dataset, checked."""
    raw = scoring.get("lesions")
    if not raw:
        return None
    where = "params: scoring.lesions"
    unknown = sorted(set(raw) - {"structures", "profile", "sensitivity_profiles", "strata_ml"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: profile, sensitivity_profiles, strata_ml, structures")
    names = raw.get("structures") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}.structures must be a list of label names, got {names!r}")
    structures = lesion_structures(dataset.labels, names)
    if not structures:
        return None
    try:
        return LesionSetting(structures, str(raw.get("profile", "brats")), tuple(str(n) for n in raw.get("sensitivity_profiles") or ()),
                             tuple(float(v) for v in raw.get("strata_ml") or ()))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _calibration(raw: dict[str, Any], root: Path) -> CalibrationConfig:
    """Validate the ``calibration:`` block: its own population dataset (composed into ``calibration.population`` whatever
    datasets the experiment selects), simulated-model options the simulator accepts, sane sizes."""
    from segbench.models.simulated import build_parser
    from segbench.scoring import HIGHER_IS_BETTER

    where = "params: calibration"
    dataset = str(_require(raw, "dataset", where))
    population = dict(_require(raw, "population", where))
    if dataset not in population:
        raise ConfigError(f"{where}.dataset {dataset!r} is not in {where}.population ({sorted(population)})")
    datasets = {dataset: _dataset(dataset, population[dataset], root)}
    models = {}
    for name, options in dict(_require(raw, "models", where)).items():
        argv = tuple(arg for key, value in dict(options).items() for arg in (f"--{key.replace('_', '-')}", str(value)))
        parser = build_parser()
        parser.exit_on_error = False
        try:
            parser.parse_args(["--input", ".", "--output", ".", "--cases", ".", *argv])
        except (argparse.ArgumentError, SystemExit) as exc:
            raise ConfigError(f"{where}.models.{name}: options {dict(options)} are not simulated-model options ({exc})") from exc
        models[str(name)] = argv
    equal = tuple(str(m) for m in _require(raw, "equal", where))
    if len(equal) < 2 or not set(equal) <= set(models):
        raise ConfigError(f"{where}.equal must name at least two of its models {sorted(models)}, got {list(equal)}")
    regions = {r.name for r in datasets[dataset].regions}
    structures = tuple(str(s) for s in _require(raw, "structures", where))
    if not structures or not set(structures) <= regions:
        raise ConfigError(f"{where}.structures {list(structures)} must be regions of dataset {dataset!r} ({sorted(regions)})")
    metrics = [str(m) for m in _require(raw, "metrics", where)]
    if not metrics or not set(metrics) <= set(HIGHER_IS_BETTER):
        raise ConfigError(f"{where}.metrics {metrics} must be scored metrics ({sorted(HIGHER_IS_BETTER)})")
    sizes = {}
    for key in ("draws", "wilcoxon_draws", "n_resamples", "workers"):
        sizes[key] = _require(raw, key, where)
        if isinstance(sizes[key], bool) or not isinstance(sizes[key], int) or sizes[key] < 1:
            raise ConfigError(f"{where}.{key} must be a positive integer, got {sizes[key]!r}")
    n_cases = tuple(_require(raw, "n_cases", where))
    if not n_cases or any(isinstance(n, bool) or not isinstance(n, int) or n < 3 for n in n_cases):
        raise ConfigError(f"{where}.n_cases must list integers >= 3, got {list(n_cases)}")
    seed = _require(raw, "seed", where)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"{where}.seed must be an integer >= 0, got {seed!r}")
    return CalibrationConfig(dataset=dataset, population=datasets[dataset], models=models, equal=equal, structures=structures,
                             metrics={m: HIGHER_IS_BETTER[m] for m in metrics}, n_cases=n_cases, seed=seed, **sizes,
                             real=_real_populations(raw.get("real") or {}, raw.get("published") or {}, root, where))


def _real_populations(raw: Any, published: Any, root: Path, where: str) -> dict[str, RealPopulationConfig]:
    """``calibration.real``: per published set of ``calibration.published`` (composed from conf/published/ on its own),
    the ranks of the models it audits (at least 3 distinct, from 1) and its draws."""
    if not isinstance(raw, dict) or not isinstance(published, dict):
        raise ConfigError(f"{where}.real and {where}.published must be mappings, got {raw!r} and {type(published).__name__}")
    out = {}
    for name, spec in raw.items():
        at = f"{where}.real.{name}"
        if name not in published:
            raise ConfigError(f"{at}: not a published set of {where}.published ({sorted(published)})")
        if not isinstance(spec, dict) or set(spec) != {"ranks", "draws", "wilcoxon_draws"}:
            raise ConfigError(f"{at}: expected {{ranks, draws, wilcoxon_draws}}, got {spec!r}")
        ranks = spec["ranks"]
        if (not isinstance(ranks, list) or len(ranks) < 3 or len(set(ranks)) != len(ranks)
                or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in ranks)):
            raise ConfigError(f"{at}.ranks must list at least 3 distinct integers >= 1 (the first two: the equal pair), got {ranks!r}")
        for key in ("draws", "wilcoxon_draws"):
            if isinstance(spec[key], bool) or not isinstance(spec[key], int) or spec[key] < 1:
                raise ConfigError(f"{at}.{key} must be a positive integer, got {spec[key]!r}")
        out[str(name)] = RealPopulationConfig(_published(str(name), published[name], root), tuple(ranks), spec["draws"], spec["wilcoxon_draws"])
    return out


def load_params(path: Path = Path("params.yaml")) -> Params:
    """Read and validate ``params.yaml``; relative paths inside it are relative to its folder."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: not found (compose it with `dvc exp run` or `segbench params --write`)")
    with path.open(encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    return parse_params(raw, path.resolve().parent)


#: conf/config.yaml's key that DVC's own composition (``dvc exp run -S``) resolves by validating the whole composition
#: (``${segbench.validate:}``; the resolver comes from hydra_plugins/, which DVC loads first): a typo fails there, before
#: any stage runs or any output is removed, and params.yaml records ``validated: true``
VALIDATED_KEY = "validated"
VALIDATE_RESOLVER = "segbench.validate"


def register_validation() -> None:
    """Register the ``${segbench.validate:}`` resolver (idempotent): it validates the composition it is part of."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(VALIDATE_RESOLVER):
        OmegaConf.register_new_resolver(VALIDATE_RESOLVER, _validate_composition)


def _validate_composition(*, _root_: Any) -> bool:
    """The resolver: every other key of the composition through ``parse_params``, and the configured case ids of each
    dataset whose label maps are on disk (a wrong id fails here, not first in the predict stage); ConfigError names
    what is wrong."""
    from segbench.datasets import case_ids

    params = parse_params(_resolved(_root_), Path.cwd())
    population = params.calibration.population if params.calibration else None
    for dataset in [*params.datasets.values(), *([population] if population else [])]:
        if dataset.cases is not None and dataset.reference_dir.is_dir():  # before `dvc pull` there is nothing to check against
            case_ids(dataset)
    return True


def _resolved(cfg: Any) -> dict[str, Any]:
    """A composition as plain data, without the validation key (resolving it would validate)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != VALIDATED_KEY]), resolve=True)  # type: ignore[return-value]


def compose_params(conf_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra exactly as DVC does for ``dvc exp run -S``: validated, or ConfigError."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    register_validation()
    cfg = _compose(Path(conf_dir), overrides or [])
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except InterpolationResolutionError as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ConfigError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None


def _compose(conf_dir: Path, overrides: list[str]) -> Any:
    """Hydra's composition, unresolved; an unknown config name or key, or a malformed override, is one-line ConfigError."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base=None):
            return compose(config_name="config", overrides=overrides)
    except MissingConfigException as exc:
        raise ConfigError(unknown_config(conf_dir, str(exc.missing_cfg_file)) or _one_line(exc)) from exc
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_unknown_key(conf_dir, overrides, str(exc)) or _one_line(exc)) from exc


def unknown_config(conf_dir: Path, config_path: str) -> str | None:
    """For a config Hydra cannot find (``model/sim_dilate_1m``): the message naming the group's configs, or None when
    ``config_path`` is no group's (``hydra_plugins/`` raises it from inside DVC's composition too)."""
    group, _, name = config_path.rpartition("/")
    if not group or not (conf_dir / group).is_dir():
        return None
    known = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
    return f"unknown {group} {name!r}; {conf_dir / group}/ has: {', '.join(known)}"


def _unknown_key(conf_dir: Path, overrides: list[str], message: str) -> str | None:
    """For Hydra's "Could not override 'a.b'": the message naming the keys ``a`` has, or None."""
    prefix = "Could not override '"
    key = message.removeprefix(prefix).partition("'")[0] if message.startswith(prefix) else ""
    parent = key.rpartition(".")[0]
    if not parent:
        return None
    known = _keys(conf_dir, [o for o in overrides if not o.lstrip("+~").startswith(f"{key}=")], parent)
    return f"unknown key {key!r}; {parent} has: {', '.join(known)}" if known else None


def _keys(conf_dir: Path, overrides: list[str], parent: str) -> list[str] | None:
    """The keys under ``parent`` (dotted) of a composition, or None if it cannot be composed or is no mapping there."""
    from omegaconf import DictConfig, OmegaConf

    try:
        node = OmegaConf.select(_compose(conf_dir, overrides), parent)
    except ConfigError:
        return None
    return sorted(str(k) for k in node) if isinstance(node, DictConfig) else None


def _one_line(exc: BaseException) -> str:
    """Hydra's message on one line, without its config search path listing."""
    text = str(exc).split("Config search path:")[0]
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def dataset_from_conf(conf_dir: Path, name: str, root: Path) -> DatasetConfig:
    """One dataset's validated config straight from ``conf/dataset/<name>.yaml``, whatever params.yaml selects.

    For setup commands (``segbench data fetch``) that act on a dataset before any experiment uses it; only the
    dataset is validated (the experiment's models may not apply to it).
    """
    return _dataset(name, _resolved(_compose(Path(conf_dir), [f"dataset={name}"]))["dataset"][name], root)


def image_model(name: str, image: dict[str, Any], title: str | None = None) -> ModelConfig:
    """An interactive model that is nothing but its image (a challenge submission): ``image`` is validated as a model
    config's ``image:`` block is (archive, sha256, and optionally command, mounts and limits)."""
    return _model(name, {"kind": "interactive", "title": title or name, "image": image, "weights": None,
                         "version": f"sha256:{str(image.get('sha256', '')).removeprefix('sha256:')[:12]}"})


def model_from_conf(conf_dir: Path, name: str) -> ModelConfig:
    """One model's validated config straight from ``conf/model/<name>.yaml`` (for ``segbench env create``)."""
    return _model(name, _resolved(_compose(Path(conf_dir), [f"model={name}"]))["model"][name])
