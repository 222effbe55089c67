"""The whole composition checked, the statistics settings included: DVC's Hydra validation and ``compose_params``.

``config.py`` checks every section but the statistics (their rules are the engine's, in ``segbench.stats``, which
the configuration does not import so that no stage depends on the engine through it). This module adds them: the
``stats:`` block, ``missing_predictions`` and each published set's ``case_alignment``, checked by the engine's own
rules when the parameters are composed (``segbench params``, ``dvc exp run -S``) and again where a stage builds its
``StatsSettings`` (``stats_settings``), not first at the compare stage after every score is recomputed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segbench.config import ConfigError, Params, compose_conf, parse_params, resolved
from segbench.datasets.cases import case_ids
from segbench.stats.coverage import COVERAGE_POLICIES
from segbench.stats.settings import CASE_ALIGNMENTS, StatsSettings

#: the resolver conf/config.yaml's ``validated`` key calls (``${segbench.validate:}``; hydra_plugins/ registers it
#: inside DVC's own composition): a typo fails there, before any stage runs or any output is removed
VALIDATE_RESOLVER = "segbench.validate"


def stats_settings(params: Params) -> StatsSettings:
    """The statistics settings of ``params`` (docs/methodology.md#51-settings), with ``missing_predictions`` and the
    published sets' case alignments checked against the engine's policies; ConfigError names what is wrong."""
    raw = params.stats
    if not isinstance(raw, dict):
        raise ConfigError(f"params: stats must map settings to values, got {raw!r}")
    known = sorted(StatsSettings.__dataclass_fields__)
    if unknown := sorted(set(raw) - set(known)):
        raise ConfigError(f"params: unknown stats setting(s) {unknown}; settings are {', '.join(known)}")
    try:
        settings = StatsSettings(**raw)
    except ValueError as exc:
        raise ConfigError(f"params: {str(exc).replace('StatsSettings.', 'stats.', 1)}") from exc
    real = params.calibration.real.values() if params.calibration else ()
    for source in [*params.published.values(), *(population.source for population in real)]:
        if source.case_alignment is not None and source.case_alignment not in CASE_ALIGNMENTS:
            raise ConfigError(f"published set {source.name!r}: case_alignment must be one of {CASE_ALIGNMENTS}, got {source.case_alignment!r}")
    if params.missing_predictions not in COVERAGE_POLICIES:
        raise ConfigError(f"params: missing_predictions {params.missing_predictions!r} is not a coverage policy; known: {', '.join(COVERAGE_POLICIES)}")
    return settings


def register_validation() -> None:
    """Register the ``${segbench.validate:}`` resolver (idempotent): it validates the composition it is part of."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(VALIDATE_RESOLVER):
        OmegaConf.register_new_resolver(VALIDATE_RESOLVER, _validate_composition)


def _validate_composition(*, _root_: Any) -> bool:
    """The resolver: every other key of the composition through ``parse_params`` and ``stats_settings``, and the
    configured case ids of each dataset whose label maps are on disk (a wrong id fails here, not first in the predict
    stage); ConfigError names what is wrong."""
    params = parse_params(resolved(_root_), Path.cwd())
    stats_settings(params)
    population = params.calibration.population if params.calibration else None
    for dataset in [*params.datasets.values(), *([population] if population else [])]:
        if dataset.cases is not None and dataset.reference_dir.is_dir():  # before `dvc pull` there is nothing to check against
            case_ids(dataset)
    return True


def compose_params(conf_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra exactly as DVC does for ``dvc exp run -S``: validated, or ConfigError."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    register_validation()
    cfg = compose_conf(Path(conf_dir), overrides or [])
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except InterpolationResolutionError as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ConfigError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None
