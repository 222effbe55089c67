"""What every section's schema shares: the error a bad parameter raises and the small checks several sections make.

Each section of ``params.yaml`` has its schema (a dataclass and its validator) beside the module that owns it
(``datasets/schema.py``, ``models/schema.py``, ``published/schema.py``, ``interactive/schema.py``,
``assembly/calibration_schema.py``); ``config/params.py`` composes them. Schemas import nothing heavy, so checking a composition
(``segbench params``, DVC's Hydra validation) loads no engine.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A parameter file that names something unknown or is missing a required field."""


def require(section: dict[str, Any], key: str, where: str) -> Any:
    """``section[key]``, or ConfigError naming ``where`` and the missing field."""
    if key not in section:
        raise ConfigError(f"{where}: missing required field {key!r}")
    return section[key]


def cluster_field(value: Any, where: str) -> str | None:
    """The metadata field clustering a set's cases, or None; its presence in the rows is checked by the statistics."""
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{where}: cluster_field must be a metadata field name, got {value!r}")
    return value
