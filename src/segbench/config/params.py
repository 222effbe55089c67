"""The pipeline's parameters: composed by Hydra from ``conf/`` into ``params.yaml``, validated here.

DVC's Hydra integration writes ``params.yaml`` when an experiment is run with ``-S`` overrides;
``dvc repro`` only reads it. Everything downstream receives these validated objects, never raw
dictionaries, so an unknown dataset, model or structure fails at this boundary with a clear message.

Each section is checked by its schema beside the module that owns it (``datasets/schema.py`` ...); this module
composes them into ``Params``, checks what spans sections and holds Hydra's composition. It imports no engine, so
a stage does not depend on one through it; the statistics settings are checked in ``config/stats_settings.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from segbench.assembly.calibration_schema import CalibrationConfig, parse_calibration
from segbench.base.schema import ConfigError
from segbench.datasets.schema import DatasetConfig, parse_dataset
from segbench.interactive.schema import InteractiveDatasetConfig, parse_interactive_dataset
from segbench.models.schema import ModelConfig, parse_model, parse_predictions
from segbench.models.structures import StructureError, unknown_names
from segbench.models.structures import compose as compose_structures
from segbench.published.schema import PublishedConfig, parse_published
from segbench.scoring.settings import DEFAULT_PROFILE, PROFILE_NAMES, LesionSetting, lesion_structures

#: ``missing_predictions`` when params.yaml has none: the leaderboard's default coverage policy (segbench.stats.missing_cases)
DEFAULT_COVERAGE = "own_cases"
#: conf/config.yaml's key that DVC's own composition (``dvc exp run -S``) resolves by validating the whole composition
#: (``${segbench.validate:}``, segbench.config.validation); params.yaml records ``validated: true``
VALIDATED_KEY = "validated"

T = TypeVar("T")


@dataclass(frozen=True)
class Params:
    """Everything ``dvc repro`` runs on: datasets x models, published sets, interactive runs, scoring and statistics settings."""

    datasets: dict[str, DatasetConfig]
    models: dict[str, ModelConfig]
    published: dict[str, PublishedConfig]
    interactive_datasets: dict[str, InteractiveDatasetConfig]
    interactive_models: dict[str, ModelConfig]
    #: the ``stats:`` block as composed; ``segbench.config.stats_settings`` checks it and builds the engine's settings
    stats: dict[str, Any]
    scoring: dict[str, Any]
    calibration: CalibrationConfig | None = None
    #: what the leaderboard does with a model lacking predictions for some cases (segbench.stats.missing_cases)
    missing_predictions: str = DEFAULT_COVERAGE

    def dataset(self, name: str) -> DatasetConfig:
        return _named(self.datasets, name, "dataset")

    def lesion_setting(self, dataset: str) -> LesionSetting | None:
        """What the score stage measures lesion by lesion on ``dataset`` (``scoring.lesions``); None when the dataset
        has none of the lesion structures or the block is absent."""
        return _lesion_setting(self.scoring, self.dataset(dataset))

    def published_set(self, name: str) -> PublishedConfig:
        return _named(self.published, name, "published set")

    def model(self, name: str) -> ModelConfig:
        return _named(self.models, name, "model")

    def interactive_dataset(self, name: str) -> InteractiveDatasetConfig:
        return _named(self.interactive_datasets, name, "interactive dataset")

    def interactive_model(self, name: str) -> ModelConfig:
        return _named(self.interactive_models, name, "interactive model")


def _named(configs: dict[str, T], name: str, what: str) -> T:
    if name not in configs:
        raise ConfigError(f"unknown {what} {name!r}; params.yaml has {sorted(configs)}")
    return configs[name]


def parse_params(raw: dict[str, Any], root: Path) -> Params:
    """Validate a composed parameter dictionary, each section by its schema and then across sections (names, label
    vocabularies, models x datasets); paths are resolved against ``root``. The statistics settings are checked by
    ``segbench.config.stats_settings``."""
    for key in ("dataset", "model"):
        if not isinstance(raw.get(key), dict) or not raw[key]:
            raise ConfigError(f"params: {key!r} must map at least one name to its config")
    datasets = {name: parse_dataset(name, spec, root) for name, spec in raw["dataset"].items()}
    models = {name: parse_model(name, spec) for name, spec in raw["model"].items()}
    predictions = {name: parse_predictions(name, spec, root) for name, spec in (raw.get("predictions") or {}).items()}
    if clash := sorted(set(models) & set(predictions)):
        raise ConfigError(f"params: {clash} named both under model and under predictions")
    for model in predictions.values():
        assert model.source is not None
        if model.source.dataset not in datasets:
            raise ConfigError(f"predictions {model.name!r}: dataset {model.source.dataset!r} is not selected; params.yaml has {sorted(datasets)}")
    models = {**models, **predictions}
    for kind, configs in (("dataset", {n: d.labels for n, d in datasets.items()}), ("model", {n: m.label_map.values() for n, m in models.items()})):
        for name, labels in configs.items():
            if unknown := unknown_names(labels):
                raise ConfigError(f"{kind} {name!r}: labels name structures outside the canonical vocabulary: {', '.join(unknown)}")
    for model in models.values():
        for dataset in datasets.values():
            unknown = sorted(set(model.label_map.values()) - set(dataset.labels))
            if unknown and model.kind == "simulated":
                raise ConfigError(f"model {model.name!r} labels {unknown} that dataset {dataset.name!r} does not have ({sorted(dataset.labels)})")
            try:
                compose_structures(model.label_map.values(), dataset.labels, where=f"model {model.name!r} on dataset {dataset.name!r}")
            except StructureError as exc:
                raise ConfigError(str(exc)) from exc
    published = {name: parse_published(name, spec, root) for name, spec in (raw.get("published") or {}).items()}
    interactive_datasets = {name: parse_interactive_dataset(name, spec, root) for name, spec in (raw.get("interactive_dataset") or {}).items()}
    interactive_models = {name: parse_model(name, spec) for name, spec in (raw.get("interactive_model") or {}).items()}
    for section, section_models, interactive in (("model", models, False), ("interactive_model", interactive_models, True)):
        for model in section_models.values():
            if model.is_interactive != interactive or (model.kind == "predictions") != (model.source is not None):
                raise ConfigError(
                    f"params: {section} {model.name!r} is of kind {model.kind!r}; "
                    + (
                        "interactive models go under interactive_model"
                        if model.is_interactive
                        else "a folder of predictions goes under predictions (conf/predictions/)"
                        if model.kind == "predictions"
                        else "interactive_model takes kind 'interactive' only"
                    )
                )
    names = [*datasets, *published, *interactive_datasets]
    if clash := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"params: {clash} named more than once among datasets, published sets and interactive datasets")
    scoring = dict(raw.get("scoring", {}))
    if str(scoring.get("profile", DEFAULT_PROFILE)) not in PROFILE_NAMES:
        raise ConfigError(f"params: scoring.profile {scoring['profile']!r} is not a metric-definition profile; known: {sorted(PROFILE_NAMES)}")
    others = scoring.get("sensitivity_profiles") or []
    if not isinstance(others, list) or any(str(name) not in PROFILE_NAMES for name in others):
        raise ConfigError(f"params: scoring.sensitivity_profiles {others!r} must be a list of metric-definition profiles; known: {sorted(PROFILE_NAMES)}")
    for dataset in datasets.values():
        _lesion_setting(scoring, dataset)
    return Params(
        datasets=datasets,
        models=models,
        published=published,
        interactive_datasets=interactive_datasets,
        interactive_models=interactive_models,
        stats=raw.get("stats") or {},
        scoring=scoring,
        calibration=parse_calibration(raw["calibration"], root) if raw.get("calibration") else None,
        missing_predictions=str(raw.get("missing_predictions", DEFAULT_COVERAGE)),
    )


def _lesion_setting(scoring: dict[str, Any], dataset: DatasetConfig) -> LesionSetting | None:
    """``scoring.lesions`` (structures, profile, sensitivity_profiles, strata_ml) for one dataset, checked."""
    raw = scoring.get("lesions")
    if not raw:
        return None
    where = "params: scoring.lesions"
    if unknown := sorted(set(raw) - {"structures", "profile", "sensitivity_profiles", "strata_ml"}):
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: profile, sensitivity_profiles, strata_ml, structures")
    names = raw.get("structures") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}.structures must be a list of label names, got {names!r}")
    structures = lesion_structures(dataset.labels, names)
    if not structures:
        return None
    try:
        return LesionSetting(
            structures,
            str(raw.get("profile", "brats")),
            tuple(str(n) for n in raw.get("sensitivity_profiles") or ()),
            tuple(float(v) for v in raw.get("strata_ml") or ()),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def load_params(path: Path = Path("params.yaml")) -> Params:
    """Read and validate ``params.yaml``; relative paths inside it are relative to its folder."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: not found (compose it with `dvc exp run` or `segbench params --write`)")
    with path.open(encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    return parse_params(raw, path.resolve().parent)


def resolved(cfg: Any) -> dict[str, Any]:
    """A composition as plain data, without the validation key (resolving it would validate)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != VALIDATED_KEY]), resolve=True)  # type: ignore[return-value]


def compose_conf(conf_dir: Path, overrides: list[str]) -> Any:
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
        node = OmegaConf.select(compose_conf(conf_dir, overrides), parent)
    except ConfigError:
        return None
    return sorted(str(k) for k in node) if isinstance(node, DictConfig) else None


def _one_line(exc: BaseException) -> str:
    """Hydra's message on one line, without its config search path listing."""
    text = str(exc).split("Config search path:")[0]
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def dataset_from_conf(conf_dir: Path, name: str, root: Path) -> DatasetConfig:
    """One dataset's validated config straight from ``conf/dataset/<name>.yaml``, whatever params.yaml selects, for
    setup commands (``segbench data fetch``); only the dataset is validated (the experiment's models may not apply)."""
    return parse_dataset(name, resolved(compose_conf(Path(conf_dir), [f"dataset={name}"]))["dataset"][name], root)


def model_from_conf(conf_dir: Path, name: str) -> ModelConfig:
    """One model's validated config straight from ``conf/model/<name>.yaml`` (for ``segbench env create``)."""
    return parse_model(name, resolved(compose_conf(Path(conf_dir), [f"model={name}"]))["model"][name])
