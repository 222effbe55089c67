"""The interactive section's schema: an ``interactive_dataset:`` entry (its cases, structures, reference kind, time
limit) and the protocol's names a configuration chooses among (versions, NSD definitions, clocks), without the
protocol's arrays: ``protocol.py`` and ``cases.py`` import them from here (docs/interactive.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segbench.base.schema import ConfigError, require

#: whether a dataset's reference is a manual annotation or a model's output standing in for one
REFERENCE_KINDS = ("manual", "pseudo")
#: how a pseudo-reference is named in every table, record and log line
PSEUDO_LABEL = "PSEUDO-REFERENCE"
#: a reference kind as every table, record, run and page names it
REFERENCE_LABELS = {"manual": "manual", "pseudo": PSEUDO_LABEL}
#: the click steps after the box step
CLICK_STEPS = 5

#: the challenge's scoring rules by version, named by the date of the change to its evaluation script (CVPR25_iter_eval.py,
#: github.com/JunMa11/CVPR-MedSegFMCompetition); the box and click rules are the final script's under both
PROTOCOL_VERSIONS: dict[str, str] = {
    "2025-03-25": "DSC_AUC and NSD_AUC over the 5 click steps at x = 0..4 (maximum 4); the rule of the final script",
    "2025-03-04": "DSC_AUC and NSD_AUC over every step the case has: the box step and 5 clicks at x = 0..5 (maximum 5), "
    "the 5 clicks alone for a case without boxes",
}
PROTOCOL_VERSION = "2025-03-25"
#: NSD's definitions by segbench's metric profile (docs/scoring.md): the challenge's (its SurfaceDice.py is DeepMind's
#: surface-distance: surfels of the 2x2x2 neighbourhood codes, area-weighted) and segbench's engine
NSD_DEFINITIONS: dict[str, str] = {
    "deepmind": "deepmind_surfel_area_weighted (the challenge's SurfaceDice.py)",
    "segauge": "segauge_marching_cubes_area_weighted_exact_distance (segbench's engine)",
}
NSD_PROFILE = "deepmind"

#: the clocks a case's time limit runs on: ``wall``, the challenge's (seconds on the clock: right on a machine the
#: evaluation has to itself), and ``cpu``, the CPU seconds (user + system) of the model's processes: what the model
#: itself spent, hardly moved by other jobs (a CPU run on a shared machine, such as CI; the harness makes OpenMP threads
#: wait passively, as spinning would be charged to the model). docs/interactive.md#time-limit
TIME_LIMIT_CLOCKS: tuple[str, ...] = ("wall", "cpu")


@dataclass(frozen=True)
class Scoring:
    """How a run's numbers are computed: the protocol version (its AUC rule) and NSD's definition (a metric profile)."""

    version: str = PROTOCOL_VERSION
    nsd_profile: str = NSD_PROFILE

    def __post_init__(self) -> None:
        if self.version not in PROTOCOL_VERSIONS:
            raise ValueError(f"protocol_version must be one of {', '.join(PROTOCOL_VERSIONS)}, got {self.version!r}")
        if self.nsd_profile not in NSD_DEFINITIONS:
            raise ValueError(f"nsd_profile must be one of {', '.join(NSD_DEFINITIONS)}, got {self.nsd_profile!r}")

    @property
    def label(self) -> str:
        """The scoring convention a score row states (its ``metric_profile``)."""
        return f"cvpr25_interactive {self.version} (NSD: {NSD_DEFINITIONS[self.nsd_profile]})"

    @property
    def auc_max(self) -> float:
        """The largest AUC a case can reach: 1 per unit step."""
        return float(CLICK_STEPS - 1 if self.version == "2025-03-25" else CLICK_STEPS)


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
    #: the clock the time limit runs on (TIME_LIMIT_CLOCKS)
    time_limit_clock: str
    #: the protocol version and NSD's definition the runs are scored under (Scoring)
    scoring: Scoring
    licence: str
    citation: str


def parse_interactive_dataset(name: str, raw: dict[str, Any], root: Path) -> InteractiveDatasetConfig:
    """An ``interactive_dataset:`` entry checked: its cases under ``data_dir``, its structures, time limit and scoring."""
    where = f"interactive dataset {name!r}"
    reference = str(require(raw, "reference", where))
    if reference not in REFERENCE_KINDS:
        raise ConfigError(f"{where}: reference must be one of {REFERENCE_KINDS}, got {reference!r}")
    cases = require(raw, "cases", where)
    if not isinstance(cases, dict) or not cases:
        raise ConfigError(f"{where}: cases must map at least one case id to its image and labels")
    data_dir = root / require(raw, "data_dir", where)
    sources = []
    for case_id, entry in cases.items():
        if not isinstance(entry, dict) or "image" not in entry or "labels" not in entry:
            raise ConfigError(f"{where}: case {case_id!r} needs 'image' and 'labels'")
        sources.append((str(case_id), root / entry["image"], root / entry["labels"]))
        outside = [entry[k] for k in ("image", "labels") if not (root / entry[k]).resolve().is_relative_to(data_dir.resolve())]
        if outside:
            raise ConfigError(f"{where}: case {case_id!r}: {outside} not under data_dir {raw['data_dir']!r} (the stage's dependency)")
    structures = require(raw, "structures", where)
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
