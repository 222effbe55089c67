"""The whole composition checked: DVC's Hydra validation resolver and ``compose_params`` (``segbench params``).

Beyond ``config.parse_params``, the statistics settings (``stats_settings``, by the engine's rules) and the
configured case ids of each dataset whose label maps are on disk: a typo fails while composing, before any stage
runs or any output is removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segbench.config.params import ConfigError, compose_conf, parse_params, resolved
from segbench.config.stats_settings import stats_settings
from segbench.datasets.cases import case_ids

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
    for model in params.models.values():
        if model.source is not None:
            check_predictions_folder(model.name, model.source.path, Path.cwd())
    population = params.calibration.population if params.calibration else None
    for dataset in [*params.datasets.values(), *([population] if population else [])]:
        if dataset.cases is not None and dataset.reference_dir.is_dir():  # before `dvc pull` there is nothing to check against
            case_ids(dataset)
    return True


def check_predictions_folder(name: str, path: Path, root: Path) -> None:
    """A predictions model's folder (docs/guide.md#i-have-predictions) inside the project ``root`` and there, or pending a
    `dvc pull` of its ``.dvc`` file: a folder elsewhere would be recorded in dvc.lock by a path no clone has, so no one
    could reproduce the run; ConfigError saying so with the two commands that bring it in, at composition (in seconds),
    not in the stage."""
    root, folder = root.resolve(), path.resolve()
    inside = folder.is_relative_to(root)
    relative = folder.relative_to(root).as_posix() if inside else f"userdata/{name}"
    source = path if not inside else "YOUR_FOLDER"
    commands = (
        f"`cp -r {source} {relative}` then `dvc add {relative}` (from another DVC repository: "
        f"`dvc import <repo> <path> -o {relative}`), and path: {relative} in conf/predictions/{name}.yaml"
    )
    if not inside:
        raise ConfigError(
            f"predictions {name!r}: path {path} is outside the project {root}: dvc.lock would record a path no clone "
            f"has, so no one could reproduce the run; bring it in, tracked by DVC: {commands}"
        )
    if folder.is_dir() or Path(f"{folder}.dvc").is_file():  # a DVC-tracked folder not pulled yet: `dvc pull` brings it
        return
    if _made_by_a_stage(Path(relative), root):  # a pipeline's own stage makes it (realmodel/: the shipped outputs' cases)
        return
    what = "is not a folder" if folder.exists() else "does not exist"
    raise ConfigError(f"predictions {name!r}: path {relative} {what} (conf/predictions/{name}.yaml); bring the prediction files in, tracked by DVC: {commands}")


def _made_by_a_stage(relative: Path, root: Path) -> bool:
    """Whether a stage of the project's pipelines writes the folder ``relative``, read relative to the project ``root`` or
    to a pipeline's own folder (a pipeline whose params file lies there, as realmodel/'s, reads its paths from there):
    such a folder is missing until ``dvc repro`` makes it, which is no error."""
    import yaml

    for dvcfile in [root / "dvc.yaml", *sorted(root.glob("*/dvc.yaml"))]:
        base = dvcfile.parent
        candidate = (base / relative).resolve()
        try:
            stages = (yaml.safe_load(dvcfile.read_text(encoding="utf-8")) or {}).get("stages") or {}
        except (OSError, yaml.YAMLError):
            continue
        for stage in stages.values():
            body = stage.get("do", stage) if isinstance(stage, dict) else {}
            wdir = (base / str(body.get("wdir", "."))).resolve()
            for out in body.get("outs") or []:
                out_path = out if isinstance(out, str) else next(iter(out), "")
                if out_path and "${" not in out_path and candidate.is_relative_to((wdir / out_path).resolve()):
                    return True
    return False


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
