"""What a configuration says about scoring, without the engine: the regions, the metric names and which way each is
better, the metric-definition and lesion profiles by name, and the lesion-wise setting.

The engine's modules import these (``engine.py``, ``profiles.py``, ``instances.py``, ``lesionwise.py``); the
configuration imports only this module, so checking ``params.yaml`` loads neither numba nor numpy. The profile
names here and the engine's profiles agree (tests/config/test_schemas.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from segbench.base.metrics import DETECTION, REGION, directions, names

#: the metrics of each region, then those of a detection region (``segbench.base.metrics.TABLE``)
METRICS: tuple[str, ...] = names(REGION)
DETECTION_METRICS: tuple[str, ...] = names(DETECTION)
HIGHER_IS_BETTER: dict[str, bool] = directions([*METRICS, *DETECTION_METRICS])
#: the metric-definition profiles (``profiles.PROFILES``) by name; ``scoring.profile`` defaults to the first
PROFILE_NAMES: tuple[str, ...] = ("segauge", "deepmind", "meshmetrics", "monai")
DEFAULT_PROFILE = "segauge"
#: the lesion profiles (``instances.LESION_PROFILES``) by name
LESION_PROFILE_NAMES: tuple[str, ...] = ("panoptica", "panoptica_merge", "brats", "brats2023")


@dataclass(frozen=True)
class Region:
    """A structure scored from a label map: the union of ``labels``."""

    name: str
    labels: tuple[int, ...]
    nsd_tolerance_mm: float
    detection: bool = False


@dataclass(frozen=True)
class LesionSetting:
    """What the score stage measures lesion by lesion: the structures (a name and its label ids; instances are the
    connected components of their union), the lesion profile, the further profiles of the matching-rule
    sensitivity, and the volume cuts (mL) of the recall-by-size strata."""

    structures: tuple[Region, ...]
    profile: str
    extra_profiles: tuple[str, ...] = ()
    strata_ml: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in (self.profile, *self.extra_profiles):
            if name not in LESION_PROFILE_NAMES:
                raise ValueError(f"unknown lesion profile {name!r}; known: {sorted(LESION_PROFILE_NAMES)}")
        if list(self.strata_ml) != sorted(set(self.strata_ml)) or not all(math.isfinite(v) and v > 0 for v in self.strata_ml):
            raise ValueError(f"lesion strata_ml must be increasing positive volumes (mL), got {list(self.strata_ml)}")

    @property
    def profiles(self) -> tuple[str, ...]:
        """The lesion profile first, then the sensitivity profiles, each once."""
        return tuple(dict.fromkeys([self.profile, *self.extra_profiles]))


def lesion_structures(labels: Mapping[str, int], names: Sequence[str]) -> tuple[Region, ...]:
    """The lesion structures among ``names`` that the dataset's label schema has (each one label id; others are not
    this dataset's lesions and are skipped)."""
    return tuple(Region(name, (int(labels[name]),), 0.0) for name in names if name in labels)
