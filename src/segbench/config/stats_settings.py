"""The statistics settings of ``params.yaml`` (docs/methodology.md#51-settings), checked by the engine's own rules.

``config/params.py`` checks every section but the statistics: their rules are the engine's (``segbench.stats``), which the
configuration does not import, so that no stage depends on the engine through it. A stage that analyses builds its
``StatsSettings`` here, and DVC's validation (``config/validation.py``) checks them when the parameters are composed, not
first at the compare stage after every score is recomputed.
"""

from __future__ import annotations

from segbench.config.params import ConfigError, Params
from segbench.stats.missing_cases import COVERAGE_POLICIES
from segbench.stats.settings import CASE_ALIGNMENTS, StatsSettings


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
