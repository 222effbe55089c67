"""The configuration's light names agree with the code they name: each schema lists by name what an engine or a model
runner defines (profiles, layouts, output readers, the coverage default), so that checking params.yaml loads neither."""

from __future__ import annotations

from segbench.config import params as config
from segbench.models import layouts
from segbench.models.schema import INPUT_LAYOUT_NAMES, OUTPUT_FORMATS
from segbench.scoring import instances, profiles
from segbench.scoring.settings import DEFAULT_PROFILE, LESION_PROFILE_NAMES, PROFILE_NAMES
from segbench.stats.missing_cases import DEFAULT_COVERAGE


def test_profile_names_are_the_engines_profiles() -> None:
    assert PROFILE_NAMES == tuple(profiles.PROFILES) and DEFAULT_PROFILE in PROFILE_NAMES
    assert LESION_PROFILE_NAMES == tuple(instances.LESION_PROFILES)


def test_layout_and_output_format_names_are_the_runners() -> None:
    assert INPUT_LAYOUT_NAMES == tuple(layouts.INPUT_LAYOUTS)
    assert OUTPUT_FORMATS == tuple(layouts.OUTPUT_READERS)


def test_the_default_coverage_policy_is_the_statistics_default() -> None:
    assert config.DEFAULT_COVERAGE == DEFAULT_COVERAGE
