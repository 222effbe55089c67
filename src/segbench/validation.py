"""The whole composition checked: DVC's Hydra validation resolver and ``compose_params`` (``segbench params``).

Beyond ``config.parse_params``, the statistics settings (``stats_settings``, by the engine's rules) and the
configured case ids of each dataset whose label maps are on disk: a typo fails while composing, before any stage
runs or any output is removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segbench.config import ConfigError, compose_conf, parse_params, resolved
from segbench.datasets.cases import case_ids
from segbench.stats_settings import stats_settings

#: the resolver conf/config.yaml's ``validated`` key calls (``${segbench.validate:}``; hydra_plugins/ registers it
#: inside DVC's own composition): a typo fails there, before any stage runs or any output is removed
VALIDATE_RESOLVER = "segbench.validate"


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
