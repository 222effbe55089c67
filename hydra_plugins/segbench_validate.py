"""Loaded by DVC before it composes conf/ for ``dvc exp run -S`` (its ``hydra.plugins_path``, default the repo root).

Hydra imports every module of the ``hydra_plugins`` namespace. This one hooks segbench's checks into DVC's own
composition, so a typo fails before any stage runs and names the valid values:

- it registers the ``${segbench.validate:}`` resolver of conf/config.yaml: the whole composition through
  ``segbench.config.params.parse_params`` and ``segbench.config.stats_settings`` (settings, ranges, models x
  datasets, configured case ids);
- and, last on Hydra's config search path, a config source that answers for a config no other source has in one of
  conf/'s groups (``-S 'model=[sim_dilate_1m]'``): Hydra's own message for a list item names neither the group's
  configs nor anything but its search path, this one lists them (``segbench.config.params.unknown_config``).
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.errors import MissingConfigException
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

from segbench.config.params import unknown_config
from segbench.config.validation import register_validation

register_validation()

SCHEME = "segbench-unknown"


class UnknownConfigSource(ConfigSource):
    """The last config source of the search path: it holds no config, it reports one that is missing from a group."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def load_config(self, config_path: str) -> ConfigResult:
        message = unknown_config(Path(self.path), config_path)
        raise MissingConfigException(message or f"Could not load '{config_path}'", missing_cfg_file=config_path)

    def is_group(self, config_path: str) -> bool:
        return False

    def is_config(self, config_path: str) -> bool:
        return unknown_config(Path(self.path), config_path) is not None

    def available(self) -> bool:
        return Path(self.path).is_dir()

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        return []


class UnknownConfigSearchPath(SearchPathPlugin):
    """Puts ``UnknownConfigSource`` on the primary config folder (DVC's conf/) after its file source."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        main = next((e.path for e in search_path.get_path() if e.provider == "main"), None)
        if main is not None and "://" not in main.removeprefix("file://"):  # a folder (DVC's config_dir), not a module
            search_path.append("segbench", f"{SCHEME}://{main.removeprefix('file://')}")
